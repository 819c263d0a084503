"""Export a COMMITTED snapshot to a backup target as a self-contained bundle (issue 19).

    check names, the target (its bucket created if missing), the snapshot (COMMITTED),
    and an existing bundle of that name (the same snapshot: done already; another:
    Conflict) -- before any change
    -> pin the snapshot for the export's lease (EXPORT_PIN_LEASE), renewed while it runs:
       it cannot be dropped, GC keeps its files; a killed export's pin expires within a lease
    -> plan: every file the snapshot references, with its size and source tag (S3
       ETag or local mtime); a file an earlier bundle of the collection listed with the
       same key, size and tag, whose data file is in the target, need not be read at the
       source (its data file is checked in the target, below)
    -> run: every other file is hashed (SHA-256) and, when the target lacks that
       content, streamed into data/{sha[:2]}/{sha}, checked on the way (the data file
       appears only complete and with that SHA-256); a data file of the target is trusted
       never by name and size, only when its data tag (size + ETag or mtime, from the one
       listing) is the one the last bundle recorded when its content was checked or
       written, else once its content was read and checked: one damaged in place is
       copied again from the source (repaired), so a bundle never lists a bad one
    -> write bundle.json, then the commit marker (the bundle exists from then on)
    -> unpin; record what was done in etcd ({root}/backup/exports/...)

One unit (~520 lines): the export's steps share the run's pin lease, plan,
progress and throttle; the helpers below are the export's own.

Resumable and idempotent: a re-run after a kill reuses every data file already in the
target (content-addressed) and writes the same bundle. Throttled by the same shared
rate limit as copy jobs (seglake.throttle), per export run, under the store-wide limit
shared by all copy work when one is set (throttle.set_store_limit).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

from seglake.meta import codec
from seglake import runners
from seglake import faults, limits, manifest
from seglake.errors import NotFound, SeglakeError, StateError, ValidationError
from seglake.lifecycle import snapshot as snapshots
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import bundle as bundles
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.snapshots import COMMITTED
from seglake.names import validate_name
from seglake.progress import human_bytes
from seglake.storage import Store, layout
from seglake import throttle as throttles
from seglake.throttle import check_rates, human_rate

log = logging.getLogger("seglake.backup")
EXPORT_PIN_LEASE = 600.0   # an export's pin expires this long after its last renewal (every lease / 4)
MADE_BY_SCHEDULE = "retention schedule"   # bundle.json `made_by` of the schedule's exports
SWEEP_WAIT = 7200.0      # how long an export waits for a sweep of its target to end
UNIT_FILES = 32          # files per pool task, at most


def source_tag(info) -> str:
    """What identifies one version of a source file cheaply: its S3 ETag, else its mtime."""
    etag = getattr(info, "etag", "")
    return f"etag:{etag}" if etag else f"mtime:{info.mtime:.6f}"


class PinLease:
    """While an export runs: renew its pin every `lease / 4` seconds from a background
    thread, to `lease` seconds after the renewal. A killed export renews nothing: its pin
    expires within one lease. `lost` says why the pin is gone (released, expired);
    `check()` raises then. Transient etcd errors are retried at the next renewal."""

    def __init__(self, meta: Meta, pin_id: int, lease: float = EXPORT_PIN_LEASE):
        self.meta, self.pin_id, self.lease = meta, pin_id, lease
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"export-pin-{pin_id}", daemon=True)

    def renew(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        try:
            self.meta.snapshots.extend_hold(self.pin_id, now + self.lease)
        except NotFound as e:
            self.lost = f"the export's pin {self.pin_id} is gone ({e}); the snapshot may be dropped"

    def _run(self) -> None:
        while not self._stop.wait(self.lease / 4) and self.lost is None:
            try:
                self.renew()
            except SeglakeError:
                continue   # etcd unavailable for a moment: the next renewal retries

    def check(self) -> None:
        if self.lost:
            raise SeglakeError(self.lost)

    def __enter__(self) -> "PinLease":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _unpin(meta: Meta, pin_id: int) -> None:
    try:
        snapshots.unpin(meta, pin_id)
    except NotFound:
        pass


def _ensure_bucket(target: Store) -> None:
    """An S3 target's bucket, created when it does not exist (as the store's own is):
    before any work, so a missing bucket is never found half way."""
    ensure = getattr(target, "ensure_bucket", None)
    if ensure is not None:
        ensure()


class _Progress:
    def __init__(self, total_files: int, total_bytes: int, say):
        self.lock = threading.Lock()
        self.files = self.read = self.copied = self.copied_files = self.deduped = 0
        self.total_files, self.total_bytes, self.say = total_files, total_bytes, say
        self.first: float | None = None
        self.last_line = 0.0

    def chunk(self, n: int, copied: bool) -> None:
        with self.lock:
            self.first = self.first or time.time()
            if copied:
                self.copied += n
            else:
                self.read += n

    def unchanged(self, n: int) -> None:
        """`n` files found in the target without any read (counted as not copied)."""
        with self.lock:
            self.files += n
            self.deduped += n

    def file_done(self, copied: bool) -> None:
        with self.lock:
            self.files += 1
            self.copied_files += copied
            self.deduped += not copied
            now = time.time()
            if now - self.last_line >= 5 or self.files == self.total_files:
                self.last_line = now
                el = max(1e-9, now - (self.first or now))
                self.say(f"export: {self.files}/{self.total_files} files checked, {human_bytes(self.copied)} copied "
                         f"({human_bytes(self.copied / el)}/s), {self.deduped} already in the target")


def export(meta: Meta, store: Store, target: Store, collection: str, snapshot: str, *, bundle: str | None = None,
           db: str = DEFAULT_DB, threads: int = 8, max_bytes_per_second: float = 0,
           max_requests_per_second: float = 0, by: str = "", collection_id: int | None = None,
           schedule: bool = False, say=log.warning) -> dict:
    """Export (or finish exporting) snapshot `snapshot` of `collection` as bundle `bundle`
    (default: the snapshot's name). Returns the report. `schedule`: the retention
    schedule's export (the bundle says so: `made_by`, and only such a bundle is the
    schedule's to prune; a hand export of a schedule's snapshot is the operator's)."""
    bundle = snapshot if bundle is None else bundle
    bundles.check_names(db, collection, bundle)
    validate_name("snapshot", snapshot)
    threads = int(limits.check("copy_threads", "threads", threads))
    bps, rps = check_rates(max_bytes_per_second, max_requests_per_second)
    if target.uri == store.uri:
        raise ValidationError("the backup target is the store itself; export to another store")
    rec, _ = snapshots.resolve(meta, collection, snapshot, db=db, collection_id=collection_id)
    if rec.state != COMMITTED:
        raise StateError(f"snapshot {snapshot!r} is {rec.state}; only a COMMITTED snapshot can be exported")
    started = time.time()
    _ensure_bucket(target)
    done = bundles.existing(target, db, collection, bundle)
    if done is not None:
        if not bundles.same_snapshot(done, rec.snapshot_id, rec.collection_id, archive.site_id(meta)):
            bundles.refuse_other(done, db, collection, bundle)
        report = {**bundles.summary(done), "state": "committed", "already": True, "copied_files": 0,
                  "copied_bytes": 0, "target": target.uri}
        _record(meta, db, collection, bundle, report, rec.collection_id)
        return report

    pin = snapshots.pin(meta, collection, snapshot, EXPORT_PIN_LEASE, db=db, collection_id=rec.collection_id,
                        by=f"export {bundle}{' by ' + by if by else ''}")
    _release_dead_pin(meta, db, collection, bundle, pin["pin_id"])
    token = uuid.uuid4().hex[:16]
    _record(meta, db, collection, bundle, {"state": "running", "snapshot": snapshot, "snapshot_id": rec.snapshot_id,
                                           "target": target.uri, "started_at": started, "pin_id": pin["pin_id"]},
            rec.collection_id)
    try:
        with PinLease(meta, pin["pin_id"]) as lease:
            report = _export(meta, store, target, rec, db, collection, bundle, threads, bps, rps, token, started,
                             say, schedule, lease)
    except BaseException as e:
        _record(meta, db, collection, bundle, {"state": "failed", "snapshot": snapshot, "target": target.uri,
                                               "started_at": started, "finished_at": time.time(),
                                               "error": str(e)[:2000]}, rec.collection_id)
        raise
    finally:
        _unpin(meta, pin["pin_id"])
        meta.kv.delete(meta.keys.backup_throttle(token))
        faults.point("export.after_unpin")
    _record(meta, db, collection, bundle, report, rec.collection_id)
    return report


def _export(meta, store, target, rec, db, collection, bundle, threads, bps, rps, token, started, say,
            schedule=False, lease: PinLease | None = None) -> dict:
    doc = snapshots.read_metadata(store, rec)
    entries = [e for _, es in snapshots.read_entries(store, rec, doc) for e in es]
    sizes: dict[str, int] = {}
    for e in entries:
        for path, size in manifest.entry_files(e):
            sizes[path] = size
    described = _describe(store, rec.collection_id, sizes)
    files: dict[str, dict] = {}
    for path, size in sizes.items():
        info = described.get(path)
        if info is None:
            try:
                info = store.head(path)
            except NotFound:
                raise SeglakeError(f"snapshot {rec.name!r} references {path}, which is missing from the store") from None
        if info.size != size:
            raise SeglakeError(f"snapshot {rec.name!r} references {path} with {size} bytes; the store holds "
                               f"{info.size}: the file changed or is damaged, nothing exported")
        files[path] = {"size": size, "tag": source_tag(info)}

    known = bundles.known_files(target, db, collection)
    from seglake.lifecycle.backup import prune
    mark = prune.sweep_mark(target)                         # read before the running check, both before the listing
    quiet = None if prune.sweep_running(target) else mark   # not None: no sweep ran during the listing below
    listed = bundles.blob_tags(target)                       # sha -> (size, data tag) as listed now
    present = {sha: size for sha, (size, _) in listed.items()}
    vouched = {}                  # path -> sha256 an earlier bundle lists for this key, size and tag
    recorded = {}                 # sha -> the data tag its content was last checked or written with
    for path, f in files.items():
        sha, tag = known.get((path, f["size"], f["tag"]), (None, ""))
        if sha is not None and present.get(sha) == f["size"]:
            vouched[path] = sha
            if tag:
                recorded[sha] = tag
    say(f"export {db}.{collection}/{bundle}: snapshot {rec.name!r} ({len(files)} files, "
        f"{human_bytes(sum(f['size'] for f in files.values()))}); {len(vouched)} files unchanged since an earlier "
        f"bundle (their data files checked in the target), {len(files) - len(vouched)} to read; rate limit "
        f"{human_rate(bps, 'B/s')}, {human_rate(rps, 'req/s')}")
    throttle = throttles.for_run(meta, meta.keys.backup_throttle(token), bps, rps)
    prog = _Progress(len(files), sum(f["size"] for f in files.values()), say)
    present_lock, inflight = threading.Lock(), set()
    good: dict[str, bool] = {}    # sha256 -> the target's data file holds exactly that content
    counts = {"reused": 0, "repaired": 0, "checked_bytes": 0}

    def unchanged(sha: str, size: int) -> bool:
        """The data file is listed with the data tag the last bundle recorded when its
        content was checked or written: no rewrite since."""
        return recorded.get(sha) is not None and listed.get(sha) == (size, recorded[sha])

    def target_holds(sha: str, size: int) -> bool:
        """The target's data file `sha` has that content: unchanged since an export checked
        or wrote it, else read and checked (once per export and sha)."""
        with present_lock:
            if sha in good:
                return good[sha]
            if unchanged(sha, size):
                good[sha] = True
                return True
        try:
            throttle.acquire(0, 1)
            got, n = bundles.sha256_of(target, layout.bundle_blob(sha), on_chunk=lambda c: throttle.acquire(c, 0))
        except NotFound:
            got, n = "", -1
        with present_lock:
            counts["checked_bytes"] += max(n, 0)
            good[sha] = ok = (got, n) == (sha, size)
            if not ok and present.pop(sha, None) is not None:
                counts["repaired"] += 1   # listed by name and size, but damaged: copied again below
        return ok

    def one(path: str) -> None:
        if lease is not None:
            lease.check()
        size = files[path]["size"]
        sha = vouched.get(path)
        if sha is not None and target_holds(sha, size):
            files[path]["sha256"] = sha   # the source unread: an earlier bundle vouches, the content is checked
            with present_lock:
                counts["reused"] += 1
            prog.file_done(False)
            return
        data = spool = None
        if size <= bundles.SMALL:   # one read: hash the bytes in hand, write them if the target lacks them
            data = bundles.read_small(store, path, size)
            sha, n = manifest.sha256(data), len(data)
            prog.chunk(n, False)
        else:                       # one read too: hashed into a private spool the copy is written from
            spool, sha, n = bundles.spool_hashed(store, path, on_chunk=lambda c: prog.chunk(c, False))
        try:
            if n != size:
                raise SeglakeError(f"{path}: read {n} bytes, the snapshot lists {size}")
            copied = copy_one(path, size, sha, data, spool)
        finally:
            if spool is not None:
                spool.close()
        prog.file_done(copied)
        faults.point("export.after_file")

    def copy_one(path: str, size: int, sha: str, data: bytes | None, spool) -> bool:
        """The file's content (`data`, or the spool holding it) into data/{sha}, unless the
        target holds that content already (another file's copy, or checked there). True
        when it was copied. The written data file's listing (size, mtime) is kept: its
        data tag, without a lookup per file afterwards."""
        files[path]["sha256"] = sha
        with present_lock:   # equal contents are copied once (another thread's copy failing fails the export)
            there = sha in inflight or good.get(sha, False)
            listed = not there and present.get(sha) == size
            inflight.add(sha)
        if listed:           # in the target by name and size: trusted once its content is checked
            there = target_holds(sha, size)
        if not there:
            throttle.acquire(0, 1)

            def chunk(c: int) -> None:
                prog.chunk(c, True)
                throttle.acquire(c, 0)
            if data is not None:
                chunk(len(data))
                info = target.put(layout.bundle_blob(sha), data)
            else:   # from the spool, hashed again on the way: the data file appears only with that SHA-256
                info = bundles.copy_verified_from(spool, path, target, layout.bundle_blob(sha), sha, size,
                                                  on_chunk=chunk)
            with present_lock:
                present[sha] = size
                good[sha] = True
                written[sha] = info
        return not there

    def run_units(paths: list[str]) -> None:
        """A unit of the pool: a few files, one after another (a pool task per file cost
        more than a small file's copy)."""
        for path in paths:
            one(path)

    written: dict = {}            # sha256 -> ObjectInfo of the data file this export wrote
    todo = []
    for path, f in files.items():   # the common case of an incremental export: no read, no task
        sha = vouched.get(path)
        if sha is not None and unchanged(sha, f["size"]):
            f["sha256"], good[sha] = sha, True
            counts["reused"] += 1
        else:
            todo.append(path)
    prog.unchanged(len(files) - len(todo))
    threads = runners.io_threads(threads, store, target)
    per_unit = max(1, min(UNIT_FILES, len(todo) // (4 * threads)))   # >= 4 units per thread to balance
    units = [todo[i:i + per_unit] for i in range(0, len(todo), per_unit)]
    with target.durable_batch():
        for _ in runners.run_inline(run_units, units, workers=threads):
            pass
    reused = counts["reused"]
    # the data tag each data file's content was checked (listed before it was read) or
    # written with (listed after): the next export trusts it while the tag is unchanged
    after = _data_tags(target, written)
    for f in files.values():
        now = (after if f["sha256"] in written else listed).get(f["sha256"])
        if now is not None and now[0] == f["size"]:
            f["data_tag"] = now[1]

    totals = {"segments": len(entries), "rows": sum(e["num_rows"] for e in entries), "files": len(files),
              "bytes": sum(f["size"] for f in files.values()), "unique_blobs": len({f["sha256"] for f in files.values()})}
    out_doc = {
        "format": bundles.FORMAT, "version": bundles.VERSION, "bundle": bundle, "uid": uuid.uuid4().hex,
        "created_at": time.time(),
        "source": {"db": db, "collection": collection, "collection_id": rec.collection_id,
                   "snapshot": rec.name, "snapshot_id": rec.snapshot_id, "owner": rec.owner,
                   "consistent_ts": rec.consistent_ts,
                   "committed_at": rec.committed_at, "description": rec.description,
                   "max_ts": max([e["dml_ts"] for e in entries] + [rec.consistent_ts]),
                   "site": archive.site_id(meta),   # whose WAL archive (if any) continues this bundle
                   "positions": rec.positions},     # where each vchannel's log continues it (None: not recorded)
        "snapshot": {k: doc[k] for k in ("collection", "partition_ids", "index_build_ids", "totals")},
        "segments": entries, "files": files, "totals": totals,
    }
    if schedule:
        out_doc["made_by"] = MADE_BY_SCHEDULE
    raw = bundles.write_doc(target, out_doc)
    restored = _ensure_present(store, target, files, say, quiet)
    out_doc = _commit(target, out_doc, raw)
    finished = time.time()
    el = max(1e-9, finished - (prog.first or finished))
    report = {**bundles.summary(out_doc), "state": "committed", "already": False, "target": target.uri,
              "copied_files": prog.copied_files, "copied_bytes": prog.copied, "read_bytes": prog.read,
              "reused_files": reused, "deduplicated_files": prog.deduped - reused, "started_at": started,
              "checked_bytes": counts["checked_bytes"], "repaired_files": counts["repaired"],
              "copied_again": restored,
              "finished_at": finished, "seconds": round(finished - started, 3),
              "copy_rate_bytes_per_second": round(prog.copied / el, 1), "throttle": throttle.report()}
    say(f"export {db}.{collection}/{bundle}: committed; {prog.copied_files} files ({human_bytes(prog.copied)}) "
        f"copied, {prog.deduped} already in the target, {report['seconds']} s")
    return report


def _data_tags(target: Store, written: dict) -> dict[str, tuple[int, str]]:
    """{sha256: (size, data tag)} of these data files ({sha256: ObjectInfo the write
    returned}), as a listing describes them: the store's describe (S3: listing pages,
    with the ETag), else what the write returned when it is what a listing says (the
    local store: size and mtime of the file written, which its rename keeps), else a head."""
    keys = {layout.bundle_blob(sha): sha for sha in written}
    described = target.describe(keys) if keys else {}
    as_listed = getattr(target, "put_info_as_listed", False)
    out = {}
    for key, sha in keys.items():
        try:
            o = described.get(key) or (hasattr(target, "listed_one") and target.listed_one(key)) \
                or (as_listed and written[sha]) or target.head(key)
        except NotFound:
            continue
        out[sha] = (o.size, bundles.data_tag(o))
    return out


def _ensure_present(store: Store, target: Store, files: dict[str, dict], say, quiet: bytes | None = None) -> int:
    """Right before the commit marker (bundle.json already written): wait while a sweep of
    the target runs, then check every data file the bundle lists is there and copy back
    any that is not (a sweep that ran before our bundle.json existed). Returns how many.
    `quiet`: the sweep mark read before the export listed the target, when no sweep was
    running then; if it is still the mark now (no sweep started since, none runs), every
    data file the export found listed or wrote is there -- only a sweep deletes data
    files -- and the target is not listed again."""
    from seglake.lifecycle.backup import prune

    deadline = time.time() + SWEEP_WAIT
    while prune.sweep_running(target):
        quiet = None      # a sweep ran after the listing: list again
        if time.time() > deadline:
            raise SeglakeError(f"a sweep of the backup target has held its lock for over {SWEEP_WAIT:g} s; "
                               f"the bundle is not committed (re-run the export once it ends)")
        time.sleep(1.0)
    if quiet is not None and prune.sweep_mark(target) == quiet:
        return 0
    have = bundles.blobs(target)
    missing = {f["sha256"]: path for path, f in files.items() if have.get(f["sha256"]) != f["size"]}
    for sha, path in missing.items():
        bundles.copy_verified(store, path, target, layout.bundle_blob(sha), sha, files[path]["size"])
    if missing:
        say(f"export: {len(missing)} data files were swept from the target during the export; copied again")
    return len(missing)


def _commit(target: Store, doc: dict, raw: bytes, tries: int = 5) -> dict:
    """Write the commit marker of bundle.json `raw`, then read the bundle back. Another
    export of the same bundle (an overlapping schedule run, a hand export) may have written
    its own bundle.json (its own uid) after ours: then the marker names a document that is
    not there. Commit the one that is, when it is of the same snapshot and every data file
    it lists is in the target; the last marker written is so checked. Returns the committed
    document."""
    import msgspec

    src = doc["source"]
    db, collection, bundle = src["db"], src["collection"], doc["bundle"]
    for _ in range(tries):
        marker = bundles.write_marker(target, doc, raw)
        try:
            if _reads_back(target, db, collection, bundle, raw, marker):
                return doc   # the very bytes this run wrote and the marker naming them: nothing to re-check
            return bundles.read(target, db, collection, bundle)
        except bundles.BundleError as e:
            err = e
        try:
            cur_raw = target.get(layout.bundle_doc(db, collection, bundle))
            cur = bundles.check(msgspec.json.decode(cur_raw), f"bundle {db}.{collection}/{bundle}")
        except (NotFound, msgspec.DecodeError, bundles.BundleError):
            raise err from None
        if cur_raw == raw or not bundles.same_snapshot(cur, src["snapshot_id"], src["collection_id"], src.get("site")):
            raise err
        have = bundles.blobs(target)
        if any(have.get(f["sha256"]) != f["size"] for f in cur["files"].values()):
            raise err
        doc, raw = cur, cur_raw
    raise SeglakeError(f"bundle {db}.{collection}/{bundle}: its bundle.json kept changing under the commit "
                       f"(other exports of it); not committed, re-run the export")


def _reads_back(target: Store, db: str, collection: str, bundle: str, raw: bytes, marker: dict) -> bool:
    """True when the target holds exactly the bundle.json `raw` this run wrote and the
    commit marker naming its SHA-256 and size: the bundle is this run's document, built
    here (its decode and check on read-back would only repeat what was written). False
    otherwise (another export's document or marker: read and checked in full)."""
    try:
        got = codec.loads(target.get(layout.bundle_commit(db, collection, bundle)))
        ours = isinstance(got, dict) and (got.get("sha256"), got.get("size")) == (marker["sha256"], marker["size"])
        return ours and target.get(layout.bundle_doc(db, collection, bundle)) == raw
    except (NotFound, ValueError):
        return False


def _describe(store: Store, collection_id: int, sizes: dict[str, int]) -> dict:
    """{key: Listed or ObjectInfo} for the snapshot's files, by listings where the store
    has no cheaper answer (the local store: one walk of the collection's directories and
    of each index build's, instead of a lookup per file). Keys left out are looked up."""
    out = dict(store.describe(sizes))
    if len(sizes) - len(out) < 256:
        return out
    prefixes = set(layout.collection_prefixes(collection_id))
    prefixes |= {"/".join(k.split("/")[:2]) + "/" for k in sizes if k.startswith(layout.INDEX_FILES + "/")}
    for prefix in sorted(prefixes):
        for o in store.list(prefix):
            if o.key in sizes and o.key not in out:
                out[o.key] = o
    return out


def _release_dead_pin(meta: Meta, db: str, collection: str, bundle: str, mine: int) -> None:
    """An earlier export of this bundle that never finished (killed) left its pin for up
    to EXPORT_PIN_LEASE: this run holds its own now, so that one goes (were it still alive,
    it only loses the pin once this run's ends; its bundle is the same)."""
    kv = meta.kv.get(meta.keys.backup_export(db, collection, bundle))
    if kv is None:
        return
    try:
        d = codec.loads(kv.value, kv.key)
        old, running = d.get("pin_id"), d.get("state") == "running"
    except (ValueError, AttributeError):
        return   # damaged: its pin is left to expire by itself (never released on a guess)
    if type(old) is int and old != mine and running:
        try:
            snapshots.unpin(meta, old)
        except NotFound:
            pass


def _record(meta: Meta, db: str, collection: str, bundle: str, report: dict, collection_id: int | None = None) -> None:
    """What this store knows of an export (the operator page and /metrics read these),
    with the id of the collection it was taken from: a name may be taken again by a new
    collection, whose backups are not its dropped namesake's."""
    doc = {k: v for k, v in report.items() if k not in ("throttle",)}
    ids = {} if collection_id is None else {"collection_id": collection_id}
    meta.kv.put(meta.keys.backup_export(db, collection, bundle),
                json.dumps({"db": db, "collection": collection, "bundle": bundle, **ids, **doc}))


def list_exports(meta: Meta) -> list[dict]:
    return codec.readable(meta.kv.range(meta.keys.backup_exports_prefix()))
