"""Restore a COMMITTED snapshot into a new collection, through a copy-segment job.

    validate -> create target collection (create-if-absent on the name)
             -> register target segments as Importing (ids pre-allocated, contiguous)
             -> ONE txn: copy job (Pending) + pin on the snapshot, guarded by the
                snapshot record being unchanged (still COMMITTED) and the job absent
             -> job id; the copy-job steps (lifecycle/copyjob.py) do the rest.

Each target segment record is the source record with target ids, state Importing and
`source` naming where its files come from: it is both the copy plan and, once Flushed,
the restored metadata. Resumable: a restore re-run by the same owner picks up the target
collection it created (its properties name the job id and the id block). All-or-nothing:
if the final transaction loses (snapshot dropped meanwhile), the target is rolled back.
"""

from __future__ import annotations

import time

from seglake.errors import Conflict, NotFound, StateError
from seglake.lifecycle import snapshot as snapshots
from seglake.meta import Meta
from seglake.meta.catalog import CREATED, DEFAULT_DB
from seglake.meta.codec import encode_struct
from seglake.meta.copyjobs import JOB_PENDING, CopyJob
from seglake.meta.kv import Put, absent, unchanged
from seglake.meta.segments import IMPORTING
from seglake.meta.snapshots import COMMITTED
from seglake.names import validate_name
from seglake.storage import Store, layout
from seglake import limits


def restore(meta: Meta, store: Store, collection: str, snapshot: str, target: str, *,
            db: str = DEFAULT_DB, timeout: float = 3600.0, owner: str = "", now: float | None = None) -> int:
    """Create the target and its Pending copy job; returns the job id."""
    for kind, name in (("collection", collection), ("snapshot", snapshot), ("collection", target), ("db", db)):
        validate_name(kind, name)
    timeout = limits.check("restore_timeout", "restore timeout (seconds)", timeout)  # finite, in range
    rec, _ = snapshots.resolve(meta, collection, snapshot, db=db)  # also once the source is dropped
    if rec.state != COMMITTED:
        raise StateError(f"snapshot {snapshot!r} is {rec.state}; only a COMMITTED snapshot can be restored")

    coll = _existing_target(meta, target, db, owner)
    if coll is None:
        doc = snapshots.read_metadata(store, rec)
        segs = snapshots.read_segments(store, rec)  # fails before any write if a manifest is bad
        job_id = meta.ids.allocate()
        base = meta.ids.allocate(max(1, len(segs)))
        part_names = [p["name"] for p in doc["collection"]["partitions"]]
        coll = meta.catalog.create(
            target, doc["collection"]["schema"], db=db, partitions=part_names, shards=doc["collection"]["shards"],
            properties={"restore_job_id": job_id, "restore_owner": owner, "restore_id_base": base,
                        "restored_from": {"collection": collection, "snapshot": snapshot,
                                          "snapshot_id": rec.snapshot_id}})
    else:
        segs = snapshots.read_segments(store, rec)
    job_id = coll.properties["restore_job_id"]
    base = coll.properties["restore_id_base"]
    existing = _job_if_any(meta, job_id)
    if existing is not None:
        return existing.job_id  # a re-run after the job was created: nothing left to do here

    source_parts = {p["partition_id"]: p["name"]
                    for p in snapshots.read_metadata(store, rec)["collection"]["partitions"]}
    target_parts = {p.name: p.partition_id for p in coll.partitions}
    segs = sorted(segs, key=lambda s: (s.partition_id, s.segment_id))
    targets = []
    for i, s in enumerate(segs):
        targets.append(s.replace(
            segment_id=base + i, collection_id=coll.collection_id,
            partition_id=target_parts[source_parts[s.partition_id]],
            channel=coll.vchannels[i % len(coll.vchannels)], state=IMPORTING, dropped_at=None,
            source={"collection_id": s.collection_id, "partition_id": s.partition_id, "segment_id": s.segment_id}))
    meta.segments.save(targets)  # Importing: invisible to queries, referenced for GC

    now = time.time() if now is None else now
    job = CopyJob(
        job_id=job_id, state=JOB_PENDING, db=db, source_collection_id=rec.collection_id,
        source_collection=collection, snapshot=snapshot, snapshot_id=rec.snapshot_id,
        target_collection_id=coll.collection_id, target_collection=target, total_segments=len(targets),
        total_files=sum(t.file_count() for t in targets), total_bytes=sum(t.total_size() for t in targets),
        created_at=now, timeout_at=now + timeout, owner=owner)
    snap, snap_kv = meta.snapshots.get(rec.collection_id, snapshot)
    job_key = meta.keys.copy_job(job_id)
    try:
        if snap.state != COMMITTED or snap.snapshot_id != rec.snapshot_id:
            raise StateError(f"snapshot {snapshot!r} is {snap.state}; only a COMMITTED snapshot can be restored")
        meta.kv.txn([unchanged(snap_kv), absent(job_key)],
                    [Put(job_key, encode_struct(job)),
                     Put(snap_kv.key, encode_struct(snap.replace(pins=(*snap.pins, job_id))))],
                    reason=f"snapshot {snapshot!r} changed while the restore was being set up")
    except (Conflict, StateError):
        rollback_target(meta, coll.collection_id, f"restore of {snapshot!r} could not start")
        raise
    return job_id


def _existing_target(meta: Meta, target: str, db: str, owner: str):
    try:
        coll = meta.catalog.get_by_name(target, db)
    except NotFound:
        return None
    if owner and coll.properties.get("restore_owner") == owner and coll.state == CREATED:
        return coll  # our own restore, re-run after a crash
    raise Conflict(f"collection {target!r} already exists in db {db!r}")


def _job_if_any(meta: Meta, job_id: int):
    try:
        return meta.copyjobs.get(job_id)[0]
    except NotFound:
        return None


def rollback_target(meta: Meta, collection_id: int, reason: str, now: float | None = None) -> None:
    """All-or-nothing: every target segment Dropped, the target collection removed (its
    name freed; records and files stay for GC)."""
    now = time.time() if now is None else now
    refs = [s.ref for s in meta.segments.list(collection_id)]
    meta.segments.transition(refs, "Dropped", now=now)
    meta.catalog.remove(collection_id, reason)


def source_and_target_files(target_seg) -> list[tuple[str, str, int]]:
    """(source key, target key, size) for every file of an Importing target segment."""
    src = target_seg.source
    sources = layout.segment_files(target_seg, collection_id=src["collection_id"],
                                   partition_id=src["partition_id"], segment_id=src["segment_id"])
    return [(s.key, t.key, t.size) for s, t in zip(sources, layout.segment_files(target_seg), strict=True)]
