"""Capture Milvus collections into seglake bundles (issue 29 Deliver 2; format:
docs/MILVUS_BUNDLE.md).

    check names, rates, the target URI -- before anything
    -> plan (read-only on Milvus): one etcd revision R; at R, every named collection's
       catalog (schema, partitions, shards, indexes, Flushed segments and their logs;
       seglake.milvus.catalog); one listing per collection prefix of Milvus's bucket
       (size + ETag of every object a segment names: a missing one fails the plan)
       -- an unknown collection, an unreachable etcd or an unreadable bucket fails here,
       before the target is touched
    -> units: every file an earlier committed bundle of the same collection does not
       vouch for (same key, size and ETag, its data file still in the target with the
       tag that bundle recorded) is read once from the bucket (GET), hashed, checked by
       content (insert / delete logs: the binlog magic, the descriptor's ids against the
       key, the Parquet payloads' rows against the log's entries) and, when the target
       lacks that content, written to data/{sha256} (it appears only complete and with
       that SHA-256); run inline by the project's one pool (seglake.runners) or on
       Spark's executors (spark/jobs/milvus_capture.py), throttled by seglake.throttle
       (per run, under the store-wide limit)
    -> per collection: bundle.json, every data file checked present, the commit marker
       (the bundle exists from then on): the export's commit (export._commit)

Strictly read-only on Milvus: its etcd is read with range reads at one revision, its
bucket with LIST and GET (ReadOnlyBucket has no other method). Resumable: a re-run after a
kill reuses every data file already in the target (content-addressed, content checked)
and commits; a committed bundle of that name and collection is reported as done.

Consistency: the capture holds Milvus's flushed-only view at revision R (segments in state
Flushed then). Flush the collection through Milvus's public API before the capture to
include everything acknowledged until then; rows and deletes acknowledged after the
last Flush (Growing segments, delete buffers) are not in it.
"""

from __future__ import annotations

import logging
import time
import uuid

from seglake import limits, manifest, runners
from seglake.errors import Conflict, NotFound, SeglakeError, Unavailable, ValidationError
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.milvus import binlog, catalog
from seglake.milvus.etcdmeta import MilvusMeta
from seglake.names import validate_name
from seglake.progress import human_bytes
from seglake.storage import layout
from seglake import throttle as throttles
from seglake.throttle import check_rates

log = logging.getLogger("seglake.milvus")
KIND = "milvus"
UNIT_FILES = 32
LIST_THREADS = 4              # a plan lists the prefixes of a collection (and of its index builds) this many at once


IN_MEMORY_MAX = 32 << 20      # a file up to this size is read into memory (hashed, parsed, written from there)
MEMORY_BUDGET = 256 << 20     # at most this many bytes of such files in memory at once, per process


class _Budget:
    """Bytes held in memory by the files being captured: a reader waits while the budget is spent."""

    def __init__(self, limit: int):
        import threading
        self.limit, self.used, self.cond = limit, 0, threading.Condition()

    def take(self, n: int) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.used == 0 or self.used + n <= self.limit)
            self.used += n

    def give(self, n: int) -> None:
        with self.cond:
            self.used -= n
            self.cond.notify_all()


_BUDGET = _Budget(MEMORY_BUDGET)


class CaptureError(SeglakeError):
    """Milvus's catalog or bucket cannot be captured (missing object, unreadable, changed)."""


class ReadOnlyBucket:
    """Milvus's bucket, as a capture may touch it: LIST and GET only (no write method)."""

    def __init__(self, store):
        self._store = store
        self.uri = store.uri

    def list_described(self, prefix: str):
        return self._store.list_described(prefix)

    def open_read(self, key: str):
        return self._store.open_read(key)

    def read_upto(self, key: str, n: int) -> bytes:
        return self._store.read_upto(key, n)

    def head(self, key: str):
        return self._store.head(key)


def open_bucket(settings, bucket: str, root_path: str = "") -> ReadOnlyBucket:
    """Milvus's bucket (s3://bucket/root_path) with the milvus_s3_* credentials (config
    keys: environment or SEGLAKE_CONFIG), or a local directory (`bucket` an absolute path:
    Milvus's local storage)."""
    if bucket.startswith("/"):
        if not local_path_ok(bucket):
            raise ValidationError(f"Milvus local storage {bucket!r}: an absolute path of segments of letters, "
                                  f"digits, '.', '_' or '-' (no '.' or '..' segment)")
        from seglake.storage.local import LocalStore
        import os
        sub = (root_path or "").strip("/")
        path = os.path.join(bucket, sub) if sub else bucket
        if not os.path.isdir(path):   # LocalStore would make it: never write into Milvus's storage
            raise ValidationError(f"Milvus local storage {path!r} is not a directory"
                                  + (f" (--bucket {bucket!r}, its root {root_path!r})" if path != bucket else ""))
        return ReadOnlyBucket(LocalStore(path))
    if not layout_bucket_ok(bucket):
        raise ValidationError(f"--bucket {bucket!r} is not an S3 bucket name (3-63 lowercase letters, digits, "
                              f"'.' or '-') nor an absolute local path")
    from seglake.storage.s3 import S3Store
    uri = f"s3://{bucket}/{root_path.strip('/')}" if root_path.strip("/") else f"s3://{bucket}"
    return ReadOnlyBucket(S3Store(uri, endpoint=settings.milvus_s3_endpoint, region=settings.milvus_s3_region,
                                  access_key=settings.milvus_s3_access_key,
                                  secret_key=settings.milvus_s3_secret_key,
                                  max_pool=max(32, settings.copy_threads)))


def layout_bucket_ok(bucket: str) -> bool:
    import re
    return bool(re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", bucket))


def local_path_ok(bucket: str) -> bool:
    """An absolute local path (Milvus's local storage): segments as check_root's, no '..'
    nor '.' (not '/' itself, nor a path that means another one)."""
    try:
        return bucket.startswith("/") and bool(check_root("path", bucket[1:])) and \
            not ({".", ".."} & set(bucket[1:].split("/")))
    except ValidationError:
        return False


def check_root(name: str, value: str) -> str:
    import re
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*", value) \
            or ".." in value.split("/"):
        raise ValidationError(f"{name} {value!r}: path segments of letters, digits, '.', '_' or '-' joined by '/'")
    return value


# -- plan ------------------------------------------------------------------------------------
def plan(kv, bucket: ReadOnlyBucket, etcd_root: str, collections: list[str], *, db: str = "default",
         source: dict | None = None) -> dict:
    """What a capture of `collections` of database `db` (all of its collections when the
    list is empty) holds, read from Milvus at one etcd revision: {revision, version,
    collections: [{catalog, files}]}. Read-only; raises before anything is written."""
    check_root("etcd root", etcd_root)
    validate_name("db", db)
    for c in collections:
        validate_name("collection", c)
    try:
        revision = kv.revision()
    except Unavailable as e:   # say whose etcd: seglake's own is a different one
        raise Unavailable(f"Milvus's etcd is unreachable ({e})") from None
    from seglake.milvus import check_version
    version = check_version(catalog.milvus_version(kv, etcd_root, revision), f"etcd root {etcd_root!r}", "captured")
    meta = MilvusMeta(kv, etcd_root, revision)
    dbs = catalog.databases(meta)
    if db not in dbs.values():
        raise NotFound(f"Milvus (etcd root {etcd_root!r}) has no database {db!r}; it has {sorted(dbs.values())}")
    infos = catalog.collection_infos(meta)
    in_db = [c for c in infos if dbs.get(c["db_id"]) == db]
    # the whole database: the collections it has, not one Milvus is still creating or is
    # dropping (a dropped collection stays Dropping until its data is collected: hours)
    live = {c["name"] for c in in_db if catalog.created(c)}
    names = list(dict.fromkeys(collections)) or sorted(live)
    skipped = [] if collections else sorted({c["name"] for c in in_db} - live)
    if not names:
        raise NotFound(f"Milvus database {db!r} (etcd root {etcd_root!r}) has no collections"
                       + (f" (being created or dropped: {', '.join(skipped)})" if skipped else ""))
    cats = [catalog.read(meta, db, n, dbs, infos) for n in names]   # every name resolved before any listing
    out = []
    for cat in cats:
        out.append({"catalog": cat, "files": _files(bucket, cat)})
    planned = {"revision": revision, "version": version,
               "etcd_root": etcd_root, "db": db, "collections": out, "skipped": skipped, **(source or {})}
    for c in out:
        _check_catalog(planned, c)
    return planned


def _check_catalog(planned: dict, c: dict) -> None:
    """The bundle document the catalog would make, checked now (bundledoc.check: per
    segment every field's logs, their entries against the segment's rows, partitions,
    channels, keys) with a stand-in SHA-256 per file: a catalog whose records contradict
    each other is refused before any file is read or written, not after every data file
    was copied into the target."""
    import hashlib

    coll = c["catalog"]["collection"]
    stand_in = {k: {"size": f["size"], "tag": f["tag"], "sha256": hashlib.sha256(k.encode()).hexdigest()}
                for k, f in c["files"].items()}
    try:
        document(planned, c["catalog"], stand_in, "plan")
    except bundles.BundleError as e:
        raise CaptureError(f"Milvus collection {coll['db']}.{coll['name']} (etcd root {planned['etcd_root']!r}, "
                           f"revision {planned['revision']}): its catalog cannot make a bundle: "
                           f"{str(e).split(': ', 1)[-1]}; nothing captured") from None


def _files(bucket: ReadOnlyBucket, cat: dict) -> dict[str, dict]:
    """{relative key: {size, tag, check}} of every object the catalog's segments name, from
    one listing per collection prefix (and per index build): a named object the bucket
    does not hold fails the plan."""
    cid = cat["collection"]["collection_id"]
    want: dict[str, dict | None] = {}
    builds = set()
    types = binlog.field_types(cat["collection"]["schema"]["fields"])
    for s in cat["segments"]:
        ids = {"collection_id": cid, "partition_id": s["partition_id"], "segment_id": s["segment_id"]}
        for fl in s["binlogs"]:
            for x in fl["logs"]:
                want[x["path"]] = {"kind": "insert", "field_id": fl["field_id"], "entries": x["entries"], **ids,
                                   **types.get(fl["field_id"], {})}
        for fl in s["deltalogs"]:
            for x in fl["logs"]:
                want[x["path"]] = {"kind": "delete", "field_id": None, "entries": x["entries"], **ids}
        for fl in s["statslogs"]:
            for x in fl["logs"]:
                want[x["path"]] = None
        for ix in s["indexes"]:
            builds.add(ix["build_id"])
            for p in ix["files"]:
                want[p] = None
    prefixes = [f"insert_log/{cid}/", f"delta_log/{cid}/", f"stats_log/{cid}/"]
    prefixes += [f"index_files/{b}/" for b in sorted(builds)]

    def list_one(prefix: str) -> list:
        try:
            return [o for o in bucket.list_described(prefix) if o.key in want]
        except NotFound:
            return []
        except SeglakeError as e:
            raise CaptureError(f"Milvus's bucket {bucket.uri} cannot be listed ({prefix}): {e}"
                               + _keys_hint(str(e))) from None

    # the prefixes listed at once by the project's pool (a LIST is a round trip; each
    # prefix's pages in order); the first failing prefix, in this order, is the error
    listed = {o.key: o for objs in runners.run_inline(list_one, prefixes, workers=LIST_THREADS) for o in objs}
    missing = sorted(set(want) - set(listed))
    if missing:
        raise CaptureError(f"Milvus collection {cat['collection']['db']}.{cat['collection']['name']}: "
                           f"{len(missing)} objects its Flushed segments name are not in the bucket "
                           f"{bucket.uri} (e.g. {missing[0]}): wrong --bucket/--milvus-root, or removed by "
                           f"Milvus's GC; nothing captured")
    return {k: {"size": listed[k].size, "tag": exports.source_tag(listed[k]), "check": want[k]}
            for k in sorted(want)}


# -- run -------------------------------------------------------------------------------------
def capture(kv, bucket: ReadOnlyBucket, target, etcd_root: str, collections: list[str], *, bundle: str,
            db: str = "default", threads: int = 8, max_bytes_per_second: float = 0,
            max_requests_per_second: float = 0, meta=None, schedule: bool = False,
            source: dict | None = None, runner=None, say=log.warning) -> list[dict]:
    """Capture `collections` (all of database `db` when empty) as bundle `bundle` of each.
    `meta`: seglake's catalog, for the throttle's clock (required when a rate is set).
    `source`: {"bucket", "root_path"} of Milvus's storage, recorded in the bundles.
    `runner(units) -> results`: where the units run (default: inline, run_inline; the
    Spark job spark/jobs/milvus_capture.py passes its executors).
    Returns one report per collection."""
    validate_name("bundle", bundle)
    threads = int(limits.check("copy_threads", "threads", threads))
    bps, rps = check_rates(max_bytes_per_second, max_requests_per_second)
    if (bps or rps) and meta is None:
        raise ValidationError("a rate limit needs seglake's etcd (the throttle's clock)")
    started = time.time()
    planned = plan(kv, bucket, etcd_root, collections, db=db, source=source)
    if planned["skipped"]:
        say(f"milvus capture {db}: left out, being created or dropped in Milvus at etcd revision "
            f"{planned['revision']}: {', '.join(planned['skipped'])}")
    exports._ensure_bucket(target)
    token = uuid.uuid4().hex[:16]
    throttle = (throttles.for_run(meta, meta.keys.backup_throttle(token), bps, rps) if meta is not None
                else throttles.Throttle(None, "", 0, 0))
    listed = bundles.blob_tags(target)
    reports = []
    try:
        for c in planned["collections"]:
            coll = c["catalog"]["collection"]
            reports.append(_capture_one(planned, c, bucket, target, bundle, threads, throttle, listed, started,
                                        schedule, say, runner, suspect(meta, coll["db"], coll["name"])))
            if meta is not None:
                record(meta, reports[-1], planned)
    finally:
        if meta is not None:
            meta.kv.delete(meta.keys.backup_throttle(token))
    return reports


ALL = "all"


def suspect(meta, db: str, collection: str) -> set[str] | str:
    """The data files (SHA-256) a failed verification of one of the collection's bundles
    found bad (ALL when the record names only some of them): an incremental capture checks
    their content instead of trusting their unchanged tag (a file damaged in place keeps its
    size, mtime and ETag), and writes them again from Milvus's bucket."""
    if meta is None:
        return set()
    from seglake.lifecycle.backup import verify as verifies

    out: set[str] = set()
    for v in verifies.list_verifications(meta):
        if v.get("db") != db or v.get("collection") != collection or v.get("ok"):
            continue
        probs = v.get("problems") or []
        if not isinstance(probs, list) or int(v.get("problem_count") or 0) > len(probs):
            return ALL
        for p in probs:
            data = p.get("data") if isinstance(p, dict) else None
            if not (isinstance(data, str) and data.startswith("data/")):
                return ALL   # bundle.json or an unknown problem: trust no tag
            out.add(data.rsplit("/", 1)[-1])
    return out


def record(meta, report: dict, planned: dict) -> None:
    """What seglake's etcd knows of a committed capture (the operator page lists these):
    {root}/milvus/captures/{db}/{collection}/{bundle}."""
    import json

    key = meta.keys.milvus_capture(report["db"], report["collection"], report["bundle"])
    if (report.get("already") or planned.get("only_new")) and meta.kv.get(key) is not None:
        return   # the run that committed it recorded what it copied
    doc = {k: v for k, v in report.items() if k != "throttle"}
    doc.update({"kind": KIND, "etcd_root": planned["etcd_root"], "bucket": planned.get("bucket", ""),
                "root_path": planned.get("root_path", ""), "recorded_at": time.time()})
    meta.kv.put(key, json.dumps(doc))


def list_captures(meta) -> list[dict]:
    """Every capture recorded in seglake's etcd (record), newest first."""
    from seglake.meta import codec

    def when(d: dict) -> float:
        try:
            return codec.moment(d, "finished_at" if d.get("finished_at") else "created_at")
        except ValueError:
            return 0.0   # a damaged time sorts last (it was a ValueError out of the page)

    out = [d for d in codec.readable(meta.kv.range(meta.keys.milvus_captures_prefix())) if isinstance(d, dict)]
    return sorted(out, key=lambda d: -when(d))


def copy_file(bucket, target, item: dict, throttle=None) -> dict:
    """One file of a capture (a unit's step, on any runner): when an earlier bundle vouches
    for its content (`vouched`), the target's data file is checked (read, SHA-256) and the
    source is not read; else the object is read once (GET), hashed, checked by content
    (binlogs: magic, descriptor ids, rows == entries) and written to data/{sha256} unless
    the target holds that content already (checked). Returns what happened."""
    import io

    acquire = throttle.acquire if throttle is not None else (lambda n, r=1: 0.0)
    path, size = item["path"], item["size"]
    out = {"path": path, "sha256": "", "copied": False, "read": 0, "checked": 0, "repaired": False, "info": None}

    def holds(sha: str) -> bool:
        try:
            acquire(0, 1)
            got, n = bundles.sha256_of(target, layout.bundle_blob(sha), on_chunk=lambda ch: acquire(ch, 0))
        except NotFound:
            return False
        out["checked"] += n
        return (got, n) == (sha, size)

    if item.get("vouched"):
        if holds(item["vouched"]):
            out["sha256"] = item["vouched"]
            return out
        out["repaired"] = True          # listed by an earlier bundle, damaged or gone here: read again
    acquire(0, 1)
    spool = data = None
    held = size if size <= IN_MEMORY_MAX else 0
    if held:
        _BUDGET.take(held)
    try:
        if held:
            data = bucket.read_upto(path, size + 1)   # one GET, at most one byte more than listed
            acquire(len(data), 0)
            sha, n, reader = manifest.sha256(data), len(data), io.BytesIO(data)
        else:
            spool, sha, n = bundles.spool_hashed(bucket, path, on_chunk=lambda ch: acquire(ch, 0))
            reader = spool
        out["read"] = n
        if n != size:
            raise CaptureError(f"{bucket.uri}/{path}: read {n} bytes, its listing said {size}: the object "
                               f"changed during the capture; nothing committed, re-run")
        chk = item.get("check")
        if chk is not None:
            bad = binlog.check(reader, n, buf=data, **chk)
            if bad:
                raise CaptureError(f"{bucket.uri}/{path}: {'; '.join(bad)}; nothing committed")
        out["sha256"] = sha
        try:
            there = target.head(layout.bundle_blob(sha)).size == size and holds(sha)
        except NotFound:
            there = False
        if not there:
            acquire(size, 1)
            if data is not None:
                out["info"] = target.put(layout.bundle_blob(sha), data)
            else:
                out["info"] = bundles.copy_verified_from(spool, path, target, layout.bundle_blob(sha), sha, size)
            out["copied"] = True
    finally:
        if spool is not None:
            spool.close()
        if held:
            _BUDGET.give(held)
    return out


def copy_unit(bucket, target, items: list[dict], throttle=None, batch=None) -> list[dict]:
    """A unit: a few files, one after another (copy_file), durable when it returns, or
    (`batch`: the caller's open durable batch, target.current_batch()) when that batch ends."""
    with target.joined_batch(batch):
        return [copy_file(bucket, target, it, throttle) for it in items]


def run_inline(bucket, target, units: list[list[dict]], threads: int, throttle) -> list[dict]:
    """The inline runner: the project's one bounded pool (seglake.runners). Every unit
    joins one durable batch of the run: each directory the run wrote into (data/ and its
    fan-out directories) is fsynced once, in parallel, when every unit is done and before
    anything names the files (each file's data is fsynced before its rename, as always)."""
    with target.durable_batch():
        batch = target.current_batch()
        return [r for rs in runners.run_inline(lambda u: copy_unit(bucket, target, u, throttle, batch), units,
                                               workers=threads)
                for r in rs]


def _capture_one(planned, c, bucket, target, bundle, threads, throttle, listed, started, schedule, say,
                 runner=None, bad: set[str] | str = frozenset()) -> dict:
    cat, files = c["catalog"], c["files"]
    coll = cat["collection"]
    db, name, cid = coll["db"], coll["name"], coll["collection_id"]
    bundles.check_names(db, name, bundle)
    done = bundles.existing(target, db, name, bundle)
    if done is not None:
        src = done["source"]
        if done.get("kind") != KIND or src.get("collection_id") != cid:
            what = (f"Milvus collection id {src.get('collection_id')}" if done.get("kind") == KIND
                    else "a seglake snapshot")
            raise Conflict(f"bundle {db}.{name}/{bundle} already exists in the backup target for {what}; "
                           f"choose another bundle name")
        say(f"milvus capture {db}.{name}/{bundle}: already committed, nothing copied")
        return {**bundles.summary(done), "state": "committed", "already": True, "copied_files": 0,
                "copied_bytes": 0, "read_bytes": 0, "target": target.uri}
    known = bundles.known_files(target, db, name)
    out_files: dict[str, dict] = {}
    todo: list[dict] = []
    reused = 0
    for path, f in files.items():
        out_files[path] = {"size": f["size"], "tag": f["tag"]}
        sha, tag = known.get((path, f["size"], f["tag"]), (None, ""))
        if sha is not None and listed.get(sha) == (f["size"], tag) and tag and not (bad == ALL or sha in bad):
            out_files[path]["sha256"] = sha       # the data file unchanged since a bundle checked or wrote it
            reused += 1
            continue
        todo.append({"path": path, "size": f["size"], "check": f["check"],
                     "vouched": sha if sha is not None and listed.get(sha, (None,))[0] == f["size"] else None})
    say(f"milvus capture {db}.{name}/{bundle}: {len(cat['segments'])} Flushed segments, {len(files)} files "
        f"({human_bytes(sum(f['size'] for f in files.values()))}) at etcd revision {planned['revision']}; "
        f"{reused} unchanged since an earlier bundle, {len(todo)} to check or read")
    per_unit = max(1, min(UNIT_FILES, len(todo) // (4 * threads)))
    units = [todo[i:i + per_unit] for i in range(0, len(todo), per_unit)]
    results = (runner or (lambda us: run_inline(bucket, target, us, threads, throttle)))(units)
    if sorted(r["path"] for r in results) != sorted(it["path"] for it in todo):
        raise CaptureError(f"milvus capture {db}.{name}/{bundle}: the runner returned {len(results)} results for "
                           f"{len(todo)} files; nothing committed")
    written = {}
    for r in results:
        out_files[r["path"]]["sha256"] = r["sha256"]
        if r["info"] is not None:
            written[r["sha256"]] = r["info"]
    after = exports._data_tags(target, written)
    for f in out_files.values():
        now = (after if f["sha256"] in written else listed).get(f["sha256"])
        if now is not None and now[0] == f["size"]:
            f["data_tag"] = now[1]
    listed.update(after)          # the next collection of this run sees them as checked
    counts = {"copied_files": sum(r["copied"] for r in results),
              "copied": sum(out_files[r["path"]]["size"] for r in results if r["copied"]),
              "read": sum(r["read"] for r in results), "checked": sum(r["checked"] for r in results),
              "repaired": sum(r["repaired"] for r in results)}

    doc = document(planned, cat, out_files, bundle, schedule)
    raw = bundles.write_doc(target, doc)
    exports._ensure_present(bucket, target, out_files, say)
    doc = exports._commit(target, doc, raw)
    finished = time.time()
    report = {**bundles.summary(doc), "state": "committed", "already": False, "target": target.uri,
              "etcd_revision": planned["revision"], "milvus_version": planned["version"],
              "copied_files": counts["copied_files"], "copied_bytes": counts["copied"],
              "read_bytes": counts["read"], "reused_files": len(files) - counts["copied_files"],
              "checked_bytes": counts["checked"], "repaired_files": counts["repaired"],
              "started_at": started, "finished_at": finished, "seconds": round(finished - started, 3),
              "throttle": throttle.report() if throttle is not None else {}}
    say(f"milvus capture {db}.{name}/{bundle}: committed; {counts['copied_files']} files "
        f"({human_bytes(counts['copied'])}) copied, {len(files) - counts['copied_files']} already in the target")
    return report


def document(planned: dict, cat: dict, files: dict, bundle: str, schedule: bool = False) -> dict:
    """The bundle document (kind "milvus") of one captured collection."""
    coll = cat["collection"]
    segs = cat["segments"]
    logs = [x for s in segs for fl in s["binlogs"] + s["deltalogs"] for x in fl["logs"]]
    cps = [v for v in cat["checkpoints"].values()]
    totals = {"segments": len(segs), "rows": sum(s["num_rows"] for s in segs),
              "deleted_entries": sum(x["entries"] for s in segs for fl in s["deltalogs"] for x in fl["logs"]),
              "files": len(files), "bytes": sum(f["size"] for f in files.values()),
              "unique_blobs": len({f["sha256"] for f in files.values()})}
    doc = {
        "format": bundles.FORMAT, "version": bundles.VERSION, "kind": KIND, "bundle": bundle,
        "uid": uuid.uuid4().hex, "created_at": time.time(),
        "source": {"kind": KIND, "milvus_version": planned["version"], "etcd_root": planned["etcd_root"],
                   "bucket": planned.get("bucket", ""), "root_path": planned.get("root_path", ""),
                   "db": coll["db"], "db_id": coll["db_id"], "collection": coll["name"],
                   "collection_id": coll["collection_id"], "snapshot": None, "snapshot_id": None,
                   "etcd_revision": planned["revision"], "consistent_ts": min(cps) if cps else 0,
                   "max_ts": max([x["ts_to"] for x in logs] + [0]), "committed_at": time.time()},
        "snapshot": {"collection": coll, "indexes": cat["indexes"], "checkpoints": cat["checkpoints"],
                     "totals": totals},
        "segments": segs, "files": files, "totals": totals,
    }
    if schedule:
        doc["made_by"] = exports.MADE_BY_SCHEDULE
    from seglake.milvus import bundledoc
    return bundledoc.check(doc, f"bundle {coll['db']}.{coll['name']}/{bundle}")


# -- requests (CLI and DAG) ---------------------------------------------------------------------
def check_request(milvus_etcd: str, milvus_root: str, bucket: str, bucket_root: str, collections,
                  bundle: str, db: str = "default", all_collections: bool = False) -> dict:
    """A capture request checked whole before anything is opened: the etcd endpoints, the
    roots, the bucket, every collection name, the bundle and database names; `collections`
    a list or a comma-separated string; none named only with all_collections."""
    from seglake.names import parse_endpoints

    parse_endpoints("milvus etcd", milvus_etcd)
    check_root("Milvus etcd root", milvus_root)
    if bucket_root:
        check_root("Milvus bucket root", bucket_root)
    if not (isinstance(bucket, str) and (layout_bucket_ok(bucket) or local_path_ok(bucket))):
        raise ValidationError(f"Milvus bucket {bucket!r}: an S3 bucket name (3-63 lowercase letters, digits, '.' "
                              f"or '-') or an absolute local path (Milvus's local storage)")
    if isinstance(collections, str):
        collections = [c.strip() for c in collections.split(",") if c.strip()]
    names = [validate_name("collection", c) for c in collections]
    if not names and not all_collections:
        raise ValidationError("name the Milvus collections to capture, or ask for every collection of the "
                              "database (--all / all_collections)")
    if names and all_collections:
        raise ValidationError("name collections or ask for all of them, not both")
    validate_name("bundle", bundle)
    validate_name("db", db)
    return {"milvus_etcd": milvus_etcd, "milvus_root": milvus_root, "bucket": bucket, "bucket_root": bucket_root,
            "collections": names, "bundle": bundle, "db": db}


def run_request(req: dict, settings, target, *, meta=None, max_bytes_per_second: float = 0,
                max_requests_per_second: float = 0, schedule: bool = False, say=log.warning) -> list[dict]:
    """A checked request (check_request) run: Milvus's etcd and bucket opened read-only,
    the capture run into `target`."""
    from seglake.meta.kv import KV

    bucket = open_bucket(settings, req["bucket"], req["bucket_root"])
    with KV(req["milvus_etcd"], timeout=settings.etcd_timeout) as kv:
        return capture(kv, bucket, target, req["milvus_root"], req["collections"], bundle=req["bundle"],
                       db=req["db"], threads=settings.copy_threads, meta=meta,
                       max_bytes_per_second=max_bytes_per_second, max_requests_per_second=max_requests_per_second,
                       schedule=schedule, source={"bucket": req["bucket"], "root_path": req["bucket_root"]},
                       say=say)


# -- the Spark engine ---------------------------------------------------------------------------
def capture_partition(units, settings_env: dict, bucket_name: str, bucket_root: str, backup_uri: str | None,
                      throttle_key: str = "", bps: float = 0, rps: float = 0):
    """Executor side (spark/jobs/milvus_capture.py): rebuild the settings the driver handed
    over, open Milvus's bucket read-only and the target, run the partition's units under
    the run's shared throttle (its clock in seglake's etcd, when a rate is set)."""
    settings = runners.worker_settings(settings_env)
    bucket = open_bucket(settings, bucket_name, bucket_root)
    target = bundles.open_target(settings, backup_uri)
    meta = throttle = None
    if throttle_key and (bps or rps):
        from seglake.meta import Meta
        meta = Meta.from_settings(settings)
        throttle = throttles.for_run(meta, throttle_key, bps, rps)
    try:
        for unit in units:
            yield from copy_unit(bucket, target, unit, throttle)
    finally:
        if meta is not None:
            meta.close()


def spark_runner(spark, settings_env: dict, bucket_name: str, bucket_root: str, backup_uri: str | None,
                 throttle_key: str = "", bps: float = 0, rps: float = 0):
    """runner(units) -> results: the units spread over Spark's executors."""
    def run(units: list[list[dict]]) -> list[dict]:
        if not units:
            return []
        sc = spark.sparkContext
        n = max(1, min(sc.defaultParallelism, len(units)))
        return (sc.parallelize(units, n)
                  .mapPartitions(lambda it: capture_partition(it, settings_env, bucket_name, bucket_root, backup_uri,
                                                              throttle_key, bps, rps))
                  .collect())
    return run


def resolve(req: dict, settings, engine: str = "auto", say=log.warning) -> dict:
    """The DAG's first step: the request planned (read-only on Milvus: names resolved,
    objects listed; a bad request fails here) and the engine chosen by its bytes
    (seglake.runners.choose, kind "copy"). The collections are the resolved names."""
    from seglake.meta.kv import KV

    bucket = open_bucket(settings, req["bucket"], req["bucket_root"])
    with KV(req["milvus_etcd"], timeout=settings.etcd_timeout) as kv:
        planned = plan(kv, bucket, req["milvus_root"], req["collections"], db=req["db"])
    names = [c["catalog"]["collection"]["name"] for c in planned["collections"]]
    size = sum(f["size"] for c in planned["collections"] for f in c["files"].values())
    chosen = runners.choose("copy", engine, size, settings)
    say(f"milvus capture {req['db']}.{{{','.join(names)}}}/{req['bundle']}: {size} bytes at etcd revision "
        f"{planned['revision']} -> {chosen}")
    return {"engine": chosen, "bytes": size, "request": {**req, "collections": names}}


def committed(target, req: dict, reports: list | None = None, meta=None) -> list[dict]:
    """The committed bundle of each collection of a request, read back (the reports of the
    run that made them when given): fails naming a collection whose bundle is missing.
    `meta`: each one not recorded yet in seglake's etcd is recorded (a capture on Spark)."""
    done = {r["collection"]: r for r in reports or []}
    out = []
    for name in req["collections"]:
        doc = bundles.read(target, req["db"], name, req["bundle"])
        if doc.get("kind") != KIND:
            raise CaptureError(f"bundle {req['db']}.{name}/{req['bundle']} is not a Milvus capture")
        r = done.get(name, {})
        out.append({**bundles.summary(doc), "state": "committed", "copied_files": r.get("copied_files"),
                    "copied_bytes": r.get("copied_bytes"), "already": r.get("already")})
        if meta is not None:
            src = doc["source"]
            record(meta, {**out[-1], "target": target.uri, "milvus_version": src.get("milvus_version"),
                          "etcd_revision": src.get("etcd_revision"), "finished_at": src.get("committed_at")},
                   {"etcd_root": src.get("etcd_root"), "bucket": src.get("bucket"),
                    "root_path": src.get("root_path"), "only_new": True})
    return out


def _keys_hint(error: str) -> str:
    """Where the Milvus bucket's endpoint and keys come from, when the error is about them
    (boto's 'Unable to locate credentials' names no setting)."""
    words = ("credentials", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403")
    if not any(w in error for w in words):
        return ""
    return ("; the Milvus bucket's endpoint and keys are the config keys milvus_s3_endpoint, milvus_s3_access_key "
            "and milvus_s3_secret_key (SEGLAKE_MILVUS_S3_ENDPOINT / _ACCESS_KEY / _SECRET_KEY; in Airflow the "
            "connection seglake_milvus; for make milvus-up: source .dev/milvus/env)")
