"""Restore a COMMITTED snapshot into a new collection, through a copy-segment job.

    validate -> read the snapshot (metadata + manifests), before anything is written
             -> target collection, state Importing (create-if-absent on the name), or the
                Importing target of the SAME restore (same source, snapshot, target): resume
             -> claim the target for this attempt (a token in its record, CAS)
             -> register target segments as Importing (ids pre-allocated, contiguous)
             -> ONE txn: copy job (Pending) + pin on the snapshot, guarded by the snapshot
                record (still the same COMMITTED snapshot), the job absent and our claim
             -> job id; the copy-job steps (lifecycle/copyjob/) do the rest.

Each target segment record is the source record with target ids, state Importing and
`source` naming where its files come from: it is both the copy plan and, once Flushed,
the restored metadata. The target stays Importing (unusable, snapshots refused) until
the job's last step flips it Created in one transaction.

The source is a RestoreSource: a snapshot of this store (pinned by the job) or a bundle
in a backup target (lifecycle/backup/bundle_restore.py: held in the target
by the job, its files copied straight from the target, each byte once).

Resumable: a restore re-run with the same source, snapshot and target (any owner, e.g.
a re-triggered DAG run) continues the same job. A second driver that finds the job
already created converges on it. All-or-nothing: any failure after the target exists
rolls it back -- only if this attempt still holds the claim and no job was created --
and says so; a driver whose claim was taken reports RestoreRaceLost and touches nothing.
"""

from __future__ import annotations

import time
import uuid

from seglake import faults, limits
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError
from seglake.lifecycle.snapshot import read as snapshots   # resolve, read_metadata, read_segments
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB, DROPPING as COLL_DROPPING, IMPORTING, Collection
from seglake.meta.codec import decode, encode, encode_struct
from seglake.meta.copyjobs import JOB_PENDING, CopyJob
from seglake.meta.kv import CAS_ATTEMPTS, KeyValue, Put, absent, unchanged
from seglake.meta.segments import IMPORTING as SEG_IMPORTING
from seglake.meta.snapshots import COMMITTED
from seglake.names import validate_name
from seglake.storage import Store
from seglake.runners import ENGINES
from seglake.throttle import check_rates
from seglake.lifecycle.copyjob.target import rollback_target
# after a restore: the target's rows against its source's (lifecycle/compare.py)
from seglake.lifecycle.compare import (RestoreDiffers, check_restored, compare_differs, compare_table,  # noqa: F401
                                       compare_target, compare_with_snapshot, judge, rows_differing)


class RestoreRaceLost(Conflict):
    """Another driver of the same restore claimed the target (or finished it) first;
    this driver left everything as the winner has it."""


class SnapshotDropped(StateError):
    """The snapshot was dropped (or replaced) while the restore was being set up."""


def restore(meta: Meta, store: Store, collection: str, snapshot: str, target: str, *,
            db: str = DEFAULT_DB, timeout: float = 3600.0, owner: str = "", engine: str = "auto",
            now: float | None = None, max_bytes_per_second: float = 0, max_requests_per_second: float = 0,
            collection_id: int | None = None, origin: dict | None = None) -> int:
    """Create (or resume) the Importing target and its Pending copy job; returns the job id.
    max_bytes_per_second / max_requests_per_second: the copy's rate limit, shared by every
    runner of the job (seglake.throttle; 0 = none). collection_id: which collection named
    `collection` (needed only when several dropped or imported ones share the name).
    origin: the DAG run that asked, {"dag_id": ..., "run_id": ...}, kept on the job."""
    validate_name("collection", collection)
    validate_name("snapshot", snapshot)
    timeout, bps, rps = check_request(target, db, timeout, owner, engine, max_bytes_per_second,
                                      max_requests_per_second, origin)
    rec, _ = snapshots.resolve(meta, collection, snapshot, db=db, collection_id=collection_id)  # also dropped
    if rec.state != COMMITTED:
        raise StateError(f"snapshot {snapshot!r} is {rec.state}; only a COMMITTED snapshot can be restored")
    source = SnapshotSource(meta, store, rec, collection, snapshot)
    return set_up(meta, store, source, target, db=db, timeout=timeout, owner=owner, engine=engine, now=now,
                  max_bytes_per_second=bps, max_requests_per_second=rps, origin=origin)


def check_request(target: str, db: str, timeout: float, owner: str, engine: str, max_bytes_per_second: float,
                  max_requests_per_second: float, origin: dict | None) -> tuple[float, float, float]:
    """The checks every restore makes before anything is written; (timeout, bytes/s, requests/s)."""
    if origin is not None and not (isinstance(origin, dict) and set(origin) == {"dag_id", "run_id"}
                                   and all(isinstance(v, str) and 0 < len(v) <= 250 for v in origin.values())):
        raise ValidationError(f"restore origin must be {{'dag_id': str, 'run_id': str}}, got {origin!r}")
    validate_name("collection", target)
    validate_name("db", db)
    timeout = limits.check("restore_timeout", "restore timeout (seconds)", timeout)  # finite, in range
    bps, rps = check_rates(max_bytes_per_second, max_requests_per_second)
    if engine not in ENGINES:
        raise ValidationError(f"restore engine must be one of {ENGINES}, got {engine!r}")
    if not isinstance(owner, str):
        raise ValidationError("restore owner must be a string")
    return timeout, bps, rps


class RestoreSource:
    """What a restore copies from (the copy job's source): a COMMITTED snapshot of this
    store (SnapshotSource) or a bundle in a backup target (lifecycle/backup/bundle_restore).
    `identity`: recorded on the target (restored_from); a re-run with the same identity
    resumes. `job_fields`: the CopyJob fields that name the source."""

    identity: dict
    job_fields: dict
    what: str            # for messages: "snapshot 's1' of 'demo'"
    remap_builds = False     # index build ids of another etcd root: fresh ones here

    def read(self) -> tuple[dict, list, dict[int, set[int]]]:
        """(metadata {"collection": {schema, partitions, shards}}, the source's segment
        records (its own ids), {segment id: partition ids its delta logs hold} for
        segments without delta_partitions): read before anything is written."""
        raise NotImplementedError

    def create_job(self, meta: Meta, job: CopyJob, claim: KeyValue) -> int:
        """ONE txn creating the job, guarded by the job absent and our claim, with what
        keeps the source alive while it is copied (a pin, a hold)."""
        raise NotImplementedError

    def check_alive(self, meta: Meta, target: str, err: Exception, rolled_back: bool) -> None:
        """After a failure: raise SnapshotDropped if the source went meanwhile."""


class SnapshotSource(RestoreSource):
    def __init__(self, meta: Meta, store: Store, rec, collection: str, snapshot: str):
        self.store, self.rec = store, rec
        self.identity = {"collection": collection, "collection_id": rec.collection_id, "snapshot": snapshot,
                         "snapshot_id": rec.snapshot_id}
        self.job_fields = {"source_collection_id": rec.collection_id, "source_collection": collection,
                           "snapshot": snapshot, "snapshot_id": rec.snapshot_id}
        self.what = f"snapshot {snapshot!r} of {collection!r}"

    def read(self):
        doc = snapshots.read_metadata(self.store, self.rec)
        segs = snapshots.read_segments(self.store, self.rec)
        return doc, segs, _unnamed_delta_ids(self.store, segs, doc)

    def create_job(self, meta, job, claim):
        return _create_job(meta, job, claim)

    def check_alive(self, meta, target, err, rolled_back):
        _raise_if_snapshot_gone(meta, self.rec, target, err, rolled_back=rolled_back)


def set_up(meta: Meta, store: Store, source: RestoreSource, target: str, *, db: str, timeout: float, owner: str,
           engine: str, now: float | None, max_bytes_per_second: float, max_requests_per_second: float,
           origin: dict | None) -> int:
    """The restore's writes (module doc), for any source; the arguments are checked."""
    found = _existing_target(meta, target, db, source.identity)
    if found is not None and found.properties.get("restore_job_id") is not None:
        job = _job_if_any(meta, found.properties["restore_job_id"])
        if job is not None and job.target_collection_id == found.collection_id:
            return job.job_id  # already set up (or finished): converge
    try:  # everything the target needs is read before anything is written
        doc, segs, held = source.read()
    except SeglakeError as e:
        source.check_alive(meta, target, e, rolled_back=False)
        raise

    builds = sorted({x.build_id for s in segs for x in s.index_files}) if source.remap_builds else []
    token = uuid.uuid4().hex
    if found is None:
        coll = _create_target(meta, target, db, doc, len(segs) + len(builds), source.identity, owner, token)
        if coll is None:  # the name was taken meanwhile: by the same restore (resume it) or not
            return set_up(meta, store, source, target, db=db, timeout=timeout, owner=owner, engine=engine,
                          now=now, max_bytes_per_second=max_bytes_per_second,
                          max_requests_per_second=max_requests_per_second, origin=origin)
    else:
        coll = found
    claim = _claim(meta, coll.collection_id, token)
    coll = Collection.from_json(decode(claim.value, claim.key))
    job_id = coll.properties["restore_job_id"]
    try:
        targets = _target_segments(meta, coll, doc, segs, held, bundle=source.job_fields.get("bundle"),
                                   builds=builds)
        meta.segments.save(targets)  # Importing: invisible to queries, referenced for GC
        now = time.time() if now is None else now
        job = CopyJob(
            job_id=job_id, state=JOB_PENDING, db=db, **source.job_fields,
            target_collection_id=coll.collection_id, target_collection=target, total_segments=len(targets),
            total_files=sum(t.file_count() for t in targets), total_bytes=sum(t.total_size() for t in targets),
            created_at=now, timeout_at=now + timeout, owner=owner, engine=engine,
            max_bytes_per_second=max_bytes_per_second, max_requests_per_second=max_requests_per_second,
            origin=origin)
        return source.create_job(meta, job, claim)
    except Exception as e:  # noqa: BLE001 - every failure after the target exists is handled here
        return _after_failure(meta, source, coll, claim, target, e)


def check_target(meta: Meta, target: str, db: str, identity: dict) -> None:
    """Conflict when `target` is taken by anything but this same restore (identity: its
    `restored_from`, or a part of it): what the restore's first step would refuse."""
    _existing_target(meta, target, db, identity)


def _existing_target(meta: Meta, target: str, db: str, identity: dict) -> Collection | None:
    """The target of this same restore (resume), None if the name is free; else Conflict
    naming what holds the name and how to continue it."""
    try:
        coll = meta.catalog.get_by_name(target, db)
    except NotFound:
        return None
    props = coll.properties
    job_id = props.get("restore_job_id")
    same = all(props.get("restored_from", {}).get(k) == v for k, v in identity.items())
    if job_id is not None and same and coll.state == IMPORTING:
        return coll  # our restore, re-run after a crash or re-triggered: resume it
    if job_id is not None and same:
        job = _job_if_any(meta, job_id)
        if job is not None and job.target_collection_id == coll.collection_id:
            return coll  # finished by this same restore: a re-trigger changes nothing
    if coll.state == COLL_DROPPING:   # whatever made it: its name is free once the drop ends
        raise Conflict(f"collection {target!r} already exists in db {db!r}: it is being dropped (Dropping until "
                       f"the flushers release its vchannels: wal_flush, or `seglake collections drop {target} "
                       f"--wait --yes`); re-run once it is Dropped, or choose another target name")
    if job_id is None:
        raise Conflict(f"collection {target!r} already exists in db {db!r}")
    src = props.get("restored_from", {})
    what, again = _restored_from(src)
    how = (f"re-trigger {again}, target={target!r} or run copy_segment_job with "
           f"job_id={job_id}" if coll.state == IMPORTING else "choose another target name")
    raise Conflict(f"collection {target!r} already exists in db {db!r}: it is the {coll.state} target of "
                   f"restore job {job_id} ({what}); {how}")


def _restored_from(src: dict) -> tuple[str, str]:
    """(what a target was restored from, the run that continues it), from its
    `restored_from`: a snapshot, an instant (a restore to a time, from a snapshot or the
    collection's creation), an undrop, or a bundle."""
    coll, snap = src.get("collection"), src.get("snapshot")
    if src.get("as_of") is not None:
        from seglake.lifecycle.pitr.instants import describe

        start = (f"from snapshot {snap!r}" if snap else f"from bundle {src['bundle']!r}" if src.get("bundle")
                 else "from its creation")
        if src.get("undrop"):
            return (f"the undrop of {coll!r}, {start}", f"collection_undrop with collection={coll!r}")
        at = describe(int(src["as_of"]))
        return (f"a restore of {coll!r} as of {at}, {start}",
                f"snapshot_restore with collection={coll!r}, as_of={at.split(' ')[0]!r}")
    if snap is None and src.get("bundle"):
        return (f"bundle {src.get('bundle')!r} of {coll!r}", f"snapshot_restore_external with collection={coll!r}, "
                f"bundle={src.get('bundle')!r}")
    return (f"snapshot {snap!r} of {coll!r}", f"snapshot_restore with collection={coll!r}, snapshot={snap!r}")


def _create_target(meta: Meta, target: str, db: str, doc: dict, n_ids: int, identity: dict,
                   owner: str, token: str) -> Collection | None:
    """The Importing target (create-if-absent); None when someone else took the name.
    `n_ids`: the contiguous ids its segments (and remapped index builds) take."""
    job_id = meta.ids.allocate()
    base = meta.ids.allocate(max(1, n_ids))
    c = doc["collection"]
    try:
        return meta.catalog.create(
            target, c["schema"], db=db, partitions=[p["name"] for p in c["partitions"]], shards=c["shards"],
            state=IMPORTING,
            properties={"restore_job_id": job_id, "restore_owner": owner, "restore_id_base": base,
                        "restore_attempt": token, "restored_from": identity})
    except Conflict:
        return None


def _claim(meta: Meta, collection_id: int, token: str) -> KeyValue:
    """Write this attempt's token into the target (CAS); the returned revision guards
    every later write of this attempt, so a driver whose claim was taken cannot act."""
    key = meta.keys.collection(collection_id)
    for _ in range(CAS_ATTEMPTS):
        kv = meta.kv.get(key)
        if kv is None:
            raise RestoreRaceLost(f"restore target id {collection_id} vanished while being claimed")
        coll = Collection.from_json(decode(kv.value, key))
        if coll.state != IMPORTING and coll.properties.get("restore_attempt") != token:
            raise RestoreRaceLost(f"restore target {coll.name!r} is {coll.state}: another driver got there first")
        if coll.properties.get("restore_attempt") == token:
            return kv
        new = Collection(**{**coll.__dict__, "properties": {**coll.properties, "restore_attempt": token}})
        try:
            meta.kv.txn([unchanged(kv)], [Put(key, encode(new.to_json()))])
        except Conflict:
            continue
    raise Conflict(f"could not claim restore target id {collection_id}: persistent contention")


def _unnamed_delta_ids(store: Store, segs: list, doc: dict) -> dict[int, set[int]]:
    """{segment id: the partition ids its delta logs hold} for the snapshot's segments
    whose record does not name them (written before the flusher recorded
    delta_partitions): read from the logs, so their copies name exactly those ids."""
    from seglake.runners import run_inline
    from seglake.visibility import delta_partition_ids

    need = [s for s in segs if s.deltalogs and s.delta_partitions is None]
    return dict(zip((s.segment_id for s in need),
                    run_inline(lambda s: delta_partition_ids(store, s), need, workers=8)))


def _target_segments(meta: Meta, coll: Collection, doc: dict, segs: list, held: dict[int, set[int]],
                     bundle: dict | None = None, builds: list[int] = ()) -> list:
    """Target records: source shard i -> target shard i (same shard count: the schema),
    so a delete or insert sent through the WAL lands where its pk's rows are. `source`
    names the file's source segment (in a bundle: its ids there, marked with the
    bundle's uid: they belong to another etcd root). `builds`: index build ids mapped to
    the ids after the segments' (a bundle's)."""
    from seglake.meta.catalog import shard_of
    from seglake.meta.segments import IndexFile

    base = coll.properties["restore_id_base"]
    build_ids = {b: base + len(segs) + i for i, b in enumerate(builds)}

    def index_files(s):
        if not build_ids:
            return s.index_files
        return tuple(IndexFile(build_ids[x.build_id], x.version, x.name, x.size) for x in s.index_files)

    source_parts = {p["partition_id"]: p["name"] for p in doc["collection"]["partitions"]}
    target_parts = {p.name: p.partition_id for p in coll.partitions}
    out = []
    for i, s in enumerate(sorted(segs, key=lambda s: (s.partition_id, s.segment_id))):
        out.append(s.replace(
            segment_id=base + i, collection_id=coll.collection_id,
            partition_id=target_parts[source_parts[s.partition_id]],
            channel=coll.vchannels[shard_of(s.channel)], state=SEG_IMPORTING, dropped_at=None,
            source={"collection_id": s.collection_id, "partition_id": s.partition_id, "segment_id": s.segment_id,
                    **({"bundle": bundle["uid"]} if bundle else {}),
                    **({"builds": sorted([build_ids[x.build_id], x.build_id] for x in s.index_files)}
                       if build_ids and s.index_files else {})},
            delta_partitions=copied_delta_partitions(s, source_parts, held.get(s.segment_id)),
            index_files=index_files(s)))
    return out


def copied_delta_partitions(seg, source_partitions: dict[int, str], held: set[int] | None = None
                            ) -> dict[int, str]:
    """The delta_partitions of `seg`'s copy in another collection (seglake.visibility):
    the source's own map if it has one (the flusher records the ids it wrote; a copy's
    ids were written further upstream: kept as is, for any number of hops). Without one
    (a segment flushed before the map existed), the ids its delta logs hold (`held`,
    read from them), named by the source collection -- or, unread (a bundle made before
    the map existed), every partition of it. {} without delta logs.
    An id `held` has that is not a partition of the source collection was written by
    yet another collection (a copy snapshotted before copies recorded the map): refused,
    naming it, before anything is written."""
    if not seg.deltalogs:
        return {}
    if seg.delta_partitions is not None:
        return dict(seg.delta_partitions)
    if held is None:
        return dict(source_partitions)
    from seglake.visibility import PartitionUnmapped

    unknown = sorted(held - set(source_partitions))
    if unknown:
        raise PartitionUnmapped(
            f"segment {seg.segment_id}: its delta logs hold partition ids {unknown}, which are not partitions of "
            f"its collection ({sorted(source_partitions)}): it is a copy made before copies recorded "
            f"delta_partitions, captured by a snapshot that could not name them; take a new snapshot of the "
            f"collection (it names them) and restore that")
    return {i: source_partitions[i] for i in sorted(held)}


def _create_job(meta: Meta, job: CopyJob, claim: KeyValue) -> int:
    """ONE txn: the job + the pin, guarded by the snapshot (same id, COMMITTED), the job
    absent and our claim. A concurrent pin by another restore only changes the snapshot's
    revision: re-read and try again."""
    job_key = meta.keys.copy_job(job.job_id)
    for _ in range(CAS_ATTEMPTS):
        try:
            snap, snap_kv = meta.snapshots.get(job.source_collection_id, job.snapshot)
        except NotFound:
            raise SnapshotDropped(f"snapshot {job.snapshot!r} was dropped") from None
        if snap.state != COMMITTED or snap.snapshot_id != job.snapshot_id:
            raise SnapshotDropped(f"snapshot {job.snapshot!r} is {snap.state}"
                                  + ("" if snap.snapshot_id == job.snapshot_id else " (replaced)"))
        faults.point("restore.before_job_txn")
        try:
            meta.kv.txn([unchanged(snap_kv), absent(job_key), unchanged(claim)],
                        [Put(job_key, encode_struct(job)),
                         Put(snap_kv.key, encode_struct(snap.replace(pins=(*snap.pins, job.job_id))))],
                        reason=f"restore job {job.job_id} could not be created")
            return job.job_id
        except Conflict:
            if meta.kv.get(job_key) is not None or meta.kv.get(claim.key) != claim:
                raise  # not the snapshot's revision: decided by _after_failure
    raise Conflict(f"snapshot {job.snapshot!r}: persistent contention while pinning it")


def _after_failure(meta: Meta, source: RestoreSource, coll: Collection, claim: KeyValue, target: str,
                   err: Exception) -> int:
    """A failure after the target exists: converge on a job someone created, report a lost
    claim, or roll back what this attempt holds and re-raise (saying if the snapshot went)."""
    job_id = coll.properties["restore_job_id"]
    job = _job_if_any(meta, job_id)
    if job is not None and job.target_collection_id == coll.collection_id:
        return job_id  # a second driver of the same restore created it: the restore is set up
    if meta.kv.get(claim.key) != claim:
        raise RestoreRaceLost(f"restore into {target!r}: another driver of the same restore holds the target "
                              f"now; this one left it alone ({type(err).__name__}: {err})") from err
    try:
        rollback_target(meta, coll.collection_id, f"restore of {source.what} failed: {err}",
                        guard=[unchanged(claim), absent(meta.keys.copy_job(job_id))])
    except Conflict:
        return _after_failure(meta, source, coll, claim, target, err)  # decided meanwhile: re-read
    source.check_alive(meta, target, err, rolled_back=True)
    raise err


def _raise_if_snapshot_gone(meta: Meta, rec, target: str, err: Exception, rolled_back: bool) -> None:
    cur = meta.snapshots.find(rec.collection_id, rec.name)
    if cur is not None and cur.state == COMMITTED and cur.snapshot_id == rec.snapshot_id:
        return
    done = f"; target {target!r} rolled back" if rolled_back else ""
    raise SnapshotDropped(f"snapshot {rec.name!r} of collection {rec.collection_name!r} was dropped while the "
                          f"restore was being set up{done} ({type(err).__name__}: {err})") from err


def _job_if_any(meta: Meta, job_id: int):
    try:
        return meta.copyjobs.get(job_id)[0]
    except NotFound:
        return None
