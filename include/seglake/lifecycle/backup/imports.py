"""Import a bundle from a backup target as a COMMITTED snapshot of this store, and restore
from a bundle -- issue 19 item 3.

A restore from a bundle (lifecycle/backup/bundle_restore.py) does NOT import: it is the
normal restore with a bundle as its source, each byte copied once, no snapshot left
behind. The import below files a bundle as a snapshot of this store (to keep it here, or
to restore it many times):

    read the bundle (commit marker, SHA-256 of bundle.json, format, segments <-> files,
    every number in range: bundle.check)
    -> check, before anything is written: every timestamp in the bundle is at most
       max_clock_skew ahead of this store's clock, and every data file the bundle lists has
       its size, SHA-256 and (a log) row count (verify's units): a damaged, missing,
       swapped or forged bundle is refused with no etcd key and no store file written
    -> the import record {root}/backup/imports/{bundle uid}: the ids this import uses (a
       fresh collection id, snapshot id, and new partition, segment and index build ids,
       so nothing collides with this store's own), created once (compare: absent); a
       re-run under the same names reads it and resumes with the same ids; an import
       under other names takes over a record that failed (its snapshot failed, is gone,
       or has had no heartbeat for MIN_PENDING_TIMEOUT; with no snapshot made yet, the
       record is that old): it removes that import's snapshot and files first; a running
       or completed one is refused, naming it
    -> a PENDING snapshot record of that collection id (GC skips a collection with a
       PENDING snapshot, so the files copied next are never collected half way), kept
       alive by heartbeats while the files are copied
    -> every file from data/{sha256} in the target to its key under the new ids, its
       SHA-256 and size checked on arrival (a file already there with that content is kept);
       a data file that changed since the check is refused and the import takes back
       what it wrote (files, snapshot, import record): nothing is left behind
    -> the TSO moved past the bundle's newest timestamp (rows written later are newer)
    -> manifests and metadata, then PENDING -> COMMITTED (snapshot.finish)

The imported snapshot belongs to a collection that is not in the catalog, like the
snapshot of a dropped collection: `snapshot_restore` restores it by name (or by
collection id), GC keeps every file it references, pins and drop work as for any other.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import msgspec

from seglake import runners
from seglake import faults, limits, manifest
from seglake.errors import ClockSkewError, Conflict, CorruptRecord, NotFound, SeglakeError
from seglake.lifecycle import restore as restores
from seglake.lifecycle import snapshot as snapshots
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.meta import Meta, codec
from seglake.meta.catalog import DEFAULT_DB, shard_of, vchannel_names
from seglake.meta.kv import Delete, Put, absent, unchanged
from seglake.meta.segments import IndexFile
from seglake.meta.snapshots import COMMITTED, PENDING, SnapshotRecord
from seglake.names import validate_name
from seglake.progress import human_bytes
from seglake.storage import Store, layout
from seglake import throttle as throttles
from seglake.throttle import check_rates

log = logging.getLogger("seglake.backup")


def import_bundle(meta: Meta, store: Store, target: Store, collection: str, bundle: str, *,
                  db: str = DEFAULT_DB, as_collection: str | None = None, snapshot: str | None = None,
                  threads: int = 8, max_bytes_per_second: float = 0, max_requests_per_second: float = 0,
                  say=log.warning) -> dict:
    """Import bundle `bundle` of `db`.`collection` as snapshot `snapshot` (default: the
    bundle's) of collection `as_collection` (default: the bundle's collection name).
    Returns {collection, collection_id, snapshot, snapshot_id, copied_files, ...}."""
    bundles.check_names(db, collection, bundle)
    name = collection if as_collection is None else validate_name("collection", as_collection)
    threads = int(limits.check("copy_threads", "threads", threads))
    bps, rps = check_rates(max_bytes_per_second, max_requests_per_second)
    # held: a retention prune of the target leaves this bundle while it is imported
    with holds.held(target, db, collection, bundle, by=f"import as {db}.{name}", say=say):
        return _import(meta, store, target, collection, bundle, db, name, snapshot, threads, bps, rps, say)


def _import(meta, store, target, collection, bundle, db, name, snapshot, threads, bps, rps, say) -> dict:
    doc = bundles.seglake_only(bundles.read(target, db, collection, bundle), f"bundle {db}.{collection}/{bundle}")
    # the run's rate limit (its etcd clock exists only while the import runs, and only when limited)
    throttle = throttles.for_run(meta, meta.keys.backup_throttle(f"import-{doc['uid']}-{uuid.uuid4().hex[:8]}"),
                                 bps, rps)
    try:
        return _check_and_import(meta, store, target, doc, collection, bundle, db, name, snapshot, threads,
                                 throttle, say)
    finally:
        if throttle.limited:
            meta.kv.delete(throttle.key)


def _check_and_import(meta, store, target, doc, collection, bundle, db, name, snapshot, threads, throttle,
                      say) -> dict:
    where = f"bundle {db}.{collection}/{bundle}"
    snap = doc["source"]["snapshot"] if snapshot is None else validate_name("snapshot", snapshot)
    newest = _check_clock(meta, doc, where)
    plan = _current_plan(meta, doc)
    # an import whose snapshot still exists is done (answered below without a read); one whose
    # snapshot was dropped since (its record still says "imported") is imported again, and
    # checked before it writes like the first time (its files may be gone, the bundle changed)
    if plan is None or _imported_snapshot(meta, plan) is None:
        if plan is not None:
            _check_takeover(meta, plan, db, name, snap, doc)   # fail fast, before reading the data
        # (read under this run's limits kept in this process: a refused import writes no etcd key)
        _check_data_files(target, doc, where, threads, throttle.local())
        bundles.check_totals(doc, where)
    plan = _import_record(meta, store, doc, db, name, snap)
    cid, sid = plan["collection_id"], plan["snapshot_id"]
    rec = meta.snapshots.find(cid, snap)
    if rec is not None and rec.state == COMMITTED:
        return _done(meta, plan, rec, copied_files=0, copied_bytes=0)
    if rec is None:
        rec = meta.snapshots.create_pending(SnapshotRecord(
            snapshot_id=sid, collection_id=cid, collection_name=name, db=db, name=snap, state=PENDING,
            created_at=time.time(), description=doc["source"].get("description", ""),
            owner=f"import:{doc['uid']}", partitions=len(doc["snapshot"]["collection"]["partitions"]),
            requested_revision=meta.kv.revision()))
    elif rec.snapshot_id != sid or rec.state != PENDING:
        raise Conflict(f"snapshot {snap!r} of imported collection id {cid} is {rec.state} (id {rec.snapshot_id}); "
                       f"not this import's")
    coll_doc, segs = _remap(doc, plan, name, db)
    copies = _copies(doc, plan)
    attempt = meta.ids.allocate()
    stats = {"copied_files": 0, "copied_bytes": 0, "kept_files": 0}
    lock = threading.Lock()
    say(f"import {db}.{collection}/{bundle} as {db}.{name}/{snap}: {len(copies)} files, "
        f"{human_bytes(sum(c[2] for c in copies))}")
    try:
        with snapshots.KeepAlive(meta, rec, f"import attempt {attempt}") as alive:
            def one(item) -> None:
                dst, sha, size = item
                alive.check()
                if bundles.has_content(store, dst, sha, size):
                    with lock:
                        stats["kept_files"] += 1
                    return
                throttle.acquire(0, 1)
                try:
                    bundles.copy_verified(target, layout.bundle_blob(sha), store, dst, sha, size,
                                          on_chunk=lambda c: throttle.acquire(c, 0))
                except NotFound:
                    raise bundles.BundleError(f"bundle {db}.{collection}/{bundle}: data file {sha} "
                                              f"(for {dst}) is missing from the backup target") from None
                with lock:
                    stats["copied_files"] += 1
                    stats["copied_bytes"] += size
                faults.point("import.after_file")

            with store.durable_batch():
                for _ in runners.run_inline(one, copies, workers=runners.io_threads(threads, target, store)):
                    pass
            meta.tso.advance_past(newest)
            written = [snapshots.write_manifest(store, rec, attempt, n, g)
                       for n, g in enumerate(snapshots.group(segs))]
            alive.check()
            rec = snapshots.finish(meta, store, rec, attempt, written, int(doc["source"]["consistent_ts"]),
                                   meta.kv.revision(), collection=coll_doc)
    except snapshots.SnapshotLost:
        raise
    except bundles.BundleError:   # the bundle changed since the check: take back what was written
        _discard(meta, store, plan, rec, [c[0] for c in copies], remove_record=True)
        raise
    except Exception as e:        # a crash or an outage: kept, so that a re-run resumes it
        snapshots.record_failure(meta, rec, f"{type(e).__name__}: {e}")
        _set_state(meta, plan, "failed")
        raise
    say(f"import {db}.{name}/{snap}: committed; {stats['copied_files']} files ({human_bytes(stats['copied_bytes'])}) "
        f"copied, {stats['kept_files']} already there")
    return _done(meta, plan, rec, **stats)


def _entry_segments(doc: dict) -> list:
    return [manifest.entry_to_segment(e) for e in doc["segments"]]


def _check_clock(meta: Meta, doc: dict, where: str) -> int:
    """The newest timestamp anywhere in the bundle, refused (naming it) when it leads this
    process's clock by more than max_clock_skew -- the bound every timestamp of this
    store keeps (seglake.meta.alloc): an import moves the TSO past it, so a bundle from
    the future would stop every writer of the store (and one near 2**63, forever)."""
    stamps = [("max_ts", doc["source"]["max_ts"]), ("consistent_ts", doc["source"]["consistent_ts"]),
              ("snapshot.collection.created_ts", doc["snapshot"]["collection"].get("created_ts", 0))]
    for e in doc["segments"]:
        sid = e["segment_id"]
        stamps += [(f"segment {sid} {k}", e.get(k, 0)) for k in ("start_ts", "dml_ts", "created_ts")]
        for fl in [*e["binlogs"], {"logs": e["deltalogs"]}, *e["statslogs"]]:
            for x in fl["logs"]:
                stamps += [(f"segment {sid} log {x['log_id']} {k}", x[k]) for k in ("ts_from", "ts_to")]
    what, newest = max(stamps, key=lambda s: s[1])
    try:
        meta.tso.check_ahead(newest, f"{what} {newest}")   # advance_past's own rule, no etcd call
    except ClockSkewError as e:
        raise bundles.BundleError(f"{where}: {what} {newest} is ahead of this store's clock: forged, or from a "
                                  f"cluster whose clock is wrong (or raise max_clock_skew); nothing imported "
                                  f"({e})") from None
    return newest


def _check_data_files(target: Store, doc: dict, where: str, threads: int, throttle=None) -> None:
    """Every data file the bundle lists: present, its size, its SHA-256, a log's row
    count -- read in full before the import writes anything (verify's own check)."""
    from seglake.lifecycle.backup import verify

    problems = verify.check_units(target, verify.units_of(doc), threads, throttle)
    if problems:
        listed = "; ".join(f"{p['file']} ({p['data']}): {p['problem']}" for p in problems[:5])
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise bundles.BundleError(f"{where}: {len(problems)} bad data files, nothing imported: {listed}{more}")


def _current_plan(meta: Meta, doc: dict) -> dict | None:
    """The import record of this bundle, None if none (read only)."""
    kv = meta.kv.get(meta.keys.backup_import(doc["uid"]))
    return None if kv is None else _read_plan(kv)


def _read_plan(kv) -> dict:
    """An import record as _new_plan wrote it, else CorruptRecord naming it: a takeover
    judged on a damaged one (a snapshot id of "7" never matches) would discard the files of
    an import that is running."""
    plan = codec.loads(kv.value, kv.key)
    for f in ("collection_id", "snapshot_id"):
        codec.number(plan, f, kv.key, lo=1, hi=limits.ID_MAX, whole=True)
    if not all(isinstance(plan.get(f), str) for f in ("uid", "bundle", "db", "collection", "snapshot", "state")):
        raise CorruptRecord(f"corrupt record at {kv.key!r}: a name or its state is not text")
    return plan


def _check_takeover(meta: Meta, plan: dict, db: str, name: str, snap: str, doc: dict) -> bool:
    """Whether an import under (db, name, snap) may take the place of the recorded one:
    False when it is the same import (resume it); True when the recorded one failed (its
    snapshot is gone, failed, or silent for MIN_PENDING_TIMEOUT); Conflict, naming it,
    when it completed or is running, or was of another document under the same uid."""
    if plan.get("doc_sha256") not in (None, document_digest(doc)):   # records older than this check have none
        raise Conflict(f"bundle {doc['bundle']!r} (uid {doc['uid']}): an import of ANOTHER bundle document with "
                       f"this uid is recorded (as snapshot {plan['snapshot']!r} of {plan['db']}.{plan['collection']}); "
                       f"a uid names one bundle, so one of them is a forged or edited copy: nothing imported")
    if (plan["db"], plan["collection"], plan["snapshot"]) == (db, name, snap):
        return False
    as_ = f"snapshot {plan['snapshot']!r} of {plan['db']}.{plan['collection']}"
    rec = meta.snapshots.find(plan["collection_id"], plan["snapshot"])
    if rec is not None and rec.snapshot_id != plan["snapshot_id"]:
        rec = None
    if rec is None and plan.get("state") == "imported":
        return True     # imported, and its snapshot dropped since: nothing left to restore from
    if plan.get("state") == "imported" or (rec is not None and rec.state == COMMITTED):
        raise Conflict(f"bundle {doc['bundle']!r} (uid {doc['uid']}) was already imported as {as_}; "
                       f"restore from that one")
    if rec is None and plan.get("state") == "importing":
        # an import that wrote its record and has not made its PENDING snapshot yet is
        # running (a few etcd operations later it has one): taking it over then discarded
        # the live import's snapshot and files mid-copy (attack s24). A record that stays so
        # is an import killed in between: taken over once as old as a silent PENDING one
        since = time.time() - max(float(plan.get("created_at") or 0), float(plan.get("resumed_at") or 0))
        if since < snapshots.MIN_PENDING_TIMEOUT:
            raise Conflict(f"bundle {doc['bundle']!r} (uid {doc['uid']}) is being imported as {as_} right now "
                           f"(its record was written {since:.0f} s ago, its snapshot not yet); wait for it, or "
                           f"retry under another name once it failed or {snapshots.MIN_PENDING_TIMEOUT:g} s "
                           f"passed")
        return True
    if rec is None or rec.state != PENDING or rec.failed:
        return True
    silent = time.time() - meta.snapshots.last_beat(rec)[0]
    if plan.get("state") == "failed" or silent >= snapshots.MIN_PENDING_TIMEOUT:
        return True
    raise Conflict(f"bundle {doc['bundle']!r} (uid {doc['uid']}) is being imported as {as_} right now "
                   f"({f'heartbeat {silent:.0f} s ago' if silent >= 0 else 'its heartbeat unreadable: counted as alive'}); wait for it, or retry under another name once it "
                   f"failed or has been silent for {snapshots.MIN_PENDING_TIMEOUT:g} s")


def _imported_snapshot(meta: Meta, plan: dict):
    """The snapshot a completed import (record "imported") made, if it still exists; None
    for an import not completed, or whose snapshot was dropped since."""
    if plan.get("state") != "imported":
        return None
    rec = meta.snapshots.find(plan["collection_id"], plan["snapshot"])
    return rec if rec is not None and rec.snapshot_id == plan["snapshot_id"] else None


def _set_state(meta: Meta, plan: dict, state: str) -> None:
    """Mark this import's record (best effort, compare: still this import's ids)."""
    key = meta.keys.backup_import(plan["uid"])
    try:
        kv = meta.kv.get(key)
        cur = _read_plan(kv) if kv is not None else None
        if cur is not None and cur["snapshot_id"] == plan["snapshot_id"] and cur.get("state") != state:
            meta.kv.txn([unchanged(kv)], [Put(key, json.dumps({**cur, "state": state}))])
    except SeglakeError:
        pass


def _discard(meta: Meta, store: Store, plan: dict, rec: SnapshotRecord | None, keys: list[str], *,
             remove_record: bool) -> None:
    """Take back what an import wrote: its files (keys under its own fresh ids: nobody
    else's), its snapshot (manifests, metadata, record), and with `remove_record` its
    import record (compare: still this import's). Best effort: what is left of a
    discarded import is an abandoned PENDING snapshot, which GC reclaims."""
    try:
        store.delete_many(keys)
        if rec is not None:
            snapshots.purge(meta, store, rec)
        if remove_record:
            key = meta.keys.backup_import(plan["uid"])
            kv = meta.kv.get(key)
            if kv is not None and _read_plan(kv)["snapshot_id"] == plan["snapshot_id"]:
                meta.kv.txn([unchanged(kv)], [Delete(key)])
    except SeglakeError as e:
        log.warning("import of bundle %s: could not remove everything it wrote (%s); GC reclaims the rest",
                    plan["bundle"], e)


def _copies(doc: dict, plan: dict) -> list[tuple[str, str, int]]:
    """(store key under the plan's ids, sha256, size) of every file the import writes."""
    _, segs = _remap(doc, plan, plan["collection"], plan["db"])
    out = []
    for old, new in zip(_entry_segments(doc), segs):
        for src, dst in zip(layout.segment_files(old), layout.segment_files(new)):
            f = doc["files"][src.key]
            out.append((dst.key, f["sha256"], f["size"]))
    return out


def _take_over(meta: Meta, store: Store, old: dict, doc: dict) -> None:
    """Remove what the failed import `old` wrote (its record is already replaced)."""
    rec = meta.snapshots.find(old["collection_id"], old["snapshot"])
    if rec is not None and rec.snapshot_id != old["snapshot_id"]:
        rec = None
    _discard(meta, store, old, rec, [c[0] for c in _copies(doc, old)], remove_record=False)


def _import_record(meta: Meta, store: Store, doc: dict, db: str, name: str, snap: str) -> dict:
    """The ids of this bundle's import: created once (compare absent), then read; a
    failed import under other names is replaced (compare unchanged), then removed."""
    key = meta.keys.backup_import(doc["uid"])
    kv = meta.kv.get(key)
    if kv is not None and _check_takeover(meta, _read_plan(kv), db, name, snap, doc):
        old = _read_plan(kv)
        _check_name_free(meta, db, name, snap)
        plan = _new_plan(meta, doc, db, name, snap)
        meta.kv.txn([unchanged(kv)], [Put(key, json.dumps(plan))],
                    reason=f"the import record of bundle {doc['bundle']!r} changed; retry")
        _take_over(meta, store, old, doc)
        return plan
    if kv is None:
        _check_name_free(meta, db, name, snap)
        plan = _new_plan(meta, doc, db, name, snap)
        try:
            meta.kv.txn([absent(key)], [Put(key, json.dumps(plan))])
            return plan
        except Conflict:
            kv = meta.kv.get(key)   # a concurrent import of the same bundle won: use its ids
    plan = _read_plan(kv)
    if _check_takeover(meta, plan, db, name, snap, doc):
        raise Conflict(f"bundle {doc['bundle']!r} (uid {doc['uid']}): another import took its record meanwhile; "
                       f"retry")
    if plan.get("state") == "failed" or (plan.get("state") == "imported" and _imported_snapshot(meta, plan) is None):
        # resumed (or imported again: its snapshot was dropped): running again (another name may not take it over now)
        plan = {**plan, "state": "importing", "resumed_at": time.time()}
        meta.kv.txn([unchanged(kv)], [Put(key, json.dumps(plan))],
                    reason=f"the import record of bundle {doc['bundle']!r} changed; retry")
    return plan


def _check_name_free(meta: Meta, db: str, name: str, snap: str) -> None:
    """One snapshot per (collection name, db, name): restore finds it by name."""
    for r in meta.snapshots.list():
        if (r.collection_name, r.db, r.name) == (name, db, snap):
            raise Conflict(f"a snapshot {snap!r} of a collection named {name!r} already exists in db {db!r} "
                           f"(collection id {r.collection_id}); import as another collection or snapshot name")


def _new_plan(meta: Meta, doc: dict, db: str, name: str, snap: str) -> dict:
    """Fresh ids for an import of `doc` as (db, name, snap)."""
    parts = doc["snapshot"]["collection"]["partitions"]
    builds = sorted({x.build_id for s in _entry_segments(doc) for x in s.index_files})
    n = len(parts) + len(doc["segments"]) + len(builds)
    return {"uid": doc["uid"], "bundle": doc["bundle"], "source": doc["source"], "db": db, "collection": name,
            "snapshot": snap, "collection_id": meta.ids.allocate(), "snapshot_id": meta.ids.allocate(),
            "id_base": meta.ids.allocate(max(1, n)), "state": "importing", "created_at": time.time(),
            "doc_sha256": document_digest(doc)}


def document_digest(doc: dict) -> str:
    """The SHA-256 of a bundle document's content (key order fixed): a resumed import must
    be of the same document its ids were allocated for."""
    return manifest.sha256(msgspec.json.encode(doc, order="sorted"))


def _remap(doc: dict, plan: dict, name: str, db: str) -> tuple[dict, list]:
    """(the collection part of the imported snapshot's metadata, the segments under the
    import's ids: partitions, segments, index builds, and vchannels of its collection id)."""
    c = doc["snapshot"]["collection"]
    cid, base = plan["collection_id"], plan["id_base"]
    parts = {p["partition_id"]: base + i for i, p in enumerate(c["partitions"])}
    segs = _entry_segments(doc)
    seg_ids = {s.segment_id: base + len(parts) + i for i, s in enumerate(segs)}
    builds = sorted({x.build_id for s in segs for x in s.index_files})
    build_ids = {b: base + len(parts) + len(segs) + i for i, b in enumerate(builds)}
    vch = vchannel_names(cid, c["shards"])
    coll_doc = {**c, "collection_id": cid, "name": name, "db": db, "vchannels": list(vch),
                "partitions": [{"partition_id": parts[p["partition_id"]], "name": p["name"]} for p in c["partitions"]]}
    names = {p["partition_id"]: p["name"] for p in c["partitions"]}
    out = [s.replace(collection_id=cid, partition_id=parts[s.partition_id], segment_id=seg_ids[s.segment_id],
                     channel=vch[shard_of(s.channel)], delta_partitions=restores.copied_delta_partitions(s, names),
                     index_files=tuple(IndexFile(build_ids[x.build_id], x.version, x.name, x.size)
                                       for x in s.index_files))
           for s in segs]
    return coll_doc, out


def _done(meta: Meta, plan: dict, rec: SnapshotRecord, **stats) -> dict:
    key = meta.keys.backup_import(plan["uid"])
    kv = meta.kv.get(key)
    if kv is not None and _read_plan(kv).get("state") != "imported":
        try:
            meta.kv.txn([unchanged(kv)], [Put(key, json.dumps({**plan, "state": "imported",
                                                               "imported_at": time.time()}))])
        except Conflict:
            pass   # another driver of the same import marked it
    return {"collection": plan["collection"], "db": plan["db"], "collection_id": plan["collection_id"],
            "snapshot": rec.name, "snapshot_id": rec.snapshot_id, "rows": rec.rows, "segments": rec.segments,
            "files": rec.files, "bytes": rec.bytes, "bundle": plan["bundle"], "uid": plan["uid"], **stats}


def list_imports(meta: Meta) -> list[dict]:
    return codec.readable(meta.kv.range(meta.keys.backup_imports_prefix()), _read_plan)
