"""Snapshots of a collection: create (two-phase), drop, list, describe, and the
reference index garbage collection must respect.

    (absent) --begin--> PENDING --capture, write attempt's manifests + metadata, commit--> COMMITTED
    COMMITTED --drop (no pins)--> DELETING --remove manifests, metadata--> (absent)
    PENDING (no heartbeat for snapshot_pending_timeout) --GC claim--> DELETING --> (absent)

- begin: validates, notes the etcd revision of the request, writes PENDING (create-if-
  absent on the name) with a first heartbeat. While PENDING, GC skips the collection.
  A create retried by the same owner resumes its record.
- alive: every writer (inline, Spark driver) and the DAG's wait refresh the heartbeat
  (KeepAlive); GC reclaims only a PENDING record whose heartbeat is older than its
  timeout, by a guarded PENDING -> DELETING that must win BEFORE any file is removed.
- capture: every Flushed segment at ONE etcd revision at or after the request, so every
  segment flushed before the snapshot was requested, by any process, is in it.
- write: each attempt (a fresh id) writes its own manifests and metadata JSON under its
  own names (layout.snapshot_attempt_*); racing attempts never share a file.
- commit: PENDING -> COMMITTED naming the winning attempt's metadata (and its sha256),
  one compare-guarded txn; a loser (other attempt, GC's claim) gets SnapshotLost and its
  files are orphans for GC.
- read: the metadata is checked against the record (sha256, format, counts) and every
  manifest against the metadata (sha256, record count, version): fail closed, naming it.
- drop: COMMITTED -> DELETING -> manifests, metadata removed -> record removed;
  resumable from DELETING; refused while a restore job pins the snapshot.
- address: by collection name, also after the collection was dropped (the record keeps
  its name; the metadata keeps schema and partitions), or by collection id.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import msgspec

from seglake import faults, manifest
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError
from seglake.meta import Meta
from seglake.meta.catalog import CREATED, DEFAULT_DB
from seglake.meta.kv import KeyValue, retry_on_conflict
from seglake.meta.segments import FLUSHED, Segment
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING, SnapshotRecord
from seglake.names import validate_name
from seglake.progress import utc_time
from seglake.storage import Store, layout
from seglake import limits

SEGMENTS_PER_MANIFEST = 2000
METADATA_FORMAT = "seglake.snapshot.v2"
HEARTBEAT_INTERVAL = 10.0    # seconds between a writer's heartbeats
MIN_PENDING_TIMEOUT = 60.0   # GC never reclaims a PENDING create on less silence than this


class SnapshotLost(StateError):
    """This writer lost its snapshot: another attempt committed it, or GC reclaimed it as
    abandoned. Nothing of this attempt was committed; its files are orphans for GC.
    (Not a Conflict: re-reading and retrying cannot win it back.)"""


def _validate_ttl(ttl: float | None) -> float | None:
    if ttl is None:
        return None
    ttl = limits.check("snapshot_ttl", "snapshot ttl (seconds)", ttl)  # finite, in range: NaN never "no TTL"
    return ttl or None  # 0 means no TTL


def begin(meta: Meta, collection: str, name: str, description: str = "", *, db: str = DEFAULT_DB,
          ttl: float | None = None, owner: str = "", now: float | None = None) -> SnapshotRecord:
    """Validate and write the PENDING record (with its first heartbeat). Idempotent for
    the same non-empty owner: a re-run resumes its record and clears a recorded failure."""
    validate_name("collection", collection)
    validate_name("snapshot", name)
    validate_name("db", db)
    ttl = _validate_ttl(ttl)
    if not isinstance(description, str) or len(description) > 1024:
        raise ValidationError("snapshot description must be a string of at most 1024 characters")
    coll = meta.catalog.get_by_name(collection, db)
    if coll.state != CREATED:
        raise StateError(f"collection {collection!r} is {coll.state}; snapshots need a live collection")
    now = time.time() if now is None else now
    existing = meta.snapshots.find(coll.collection_id, name)
    if existing is not None:
        if owner and existing.owner == owner and existing.state in (PENDING, COMMITTED):
            return _resume(meta, existing, now)  # our own create, re-run after a crash
        raise Conflict(f"snapshot {name!r} already exists for collection {collection!r} ({existing.state})")
    rec = SnapshotRecord(
        snapshot_id=meta.ids.allocate(), collection_id=coll.collection_id, collection_name=coll.name,
        db=coll.db, name=name, state=PENDING, created_at=now, description=description, owner=owner,
        expires_at=now + ttl if ttl else None, partitions=len(coll.partitions),
        requested_revision=meta.kv.revision())  # every flush that finished before this is <= it
    return meta.snapshots.create_pending(rec)


def _resume(meta: Meta, rec: SnapshotRecord, now: float) -> SnapshotRecord:
    """Our own PENDING record again: clear a final failure, beat, return it as it is now."""
    if rec.state != PENDING:
        return rec

    def clear_failed() -> None:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
        if cur.snapshot_id == rec.snapshot_id and cur.state == PENDING and cur.failed:
            meta.snapshots.update(kv, cur.replace(failed=False))
    retry_on_conflict(clear_failed, f"resume snapshot {rec.name!r}")
    return meta.snapshots.heartbeat(rec, now, "begin")


# -- heartbeat ----------------------------------------------------------------------------
class KeepAlive:
    """While a writer works: refresh the PENDING record's heartbeat every `interval`
    seconds from a background thread. `check()` raises SnapshotLost once the record is
    no longer this writer's to commit (claimed by GC, dropped, replaced). Transient etcd
    errors are retried at the next beat."""

    def __init__(self, meta: Meta, rec: SnapshotRecord, by: str, interval: float | None = None):
        self.meta, self.rec, self.by = meta, rec, by
        self.interval = HEARTBEAT_INTERVAL if interval is None else interval
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"snapshot-alive-{rec.snapshot_id}", daemon=True)

    def beat(self) -> None:
        try:
            cur = self.meta.snapshots.heartbeat(self.rec, time.time(), self.by)
        except StateError as e:
            self.lost = str(e)
            return
        if cur.state != PENDING:
            self._stop.set()  # committed: nothing left to keep alive

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and self.lost is None:
            try:
                self.beat()
            except SeglakeError:
                continue  # etcd unavailable for a moment: the next beat retries

    def check(self) -> None:
        if self.lost:
            raise SnapshotLost(self.lost)

    def __enter__(self) -> "KeepAlive":
        self.beat()
        self.check()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def keep_alive_status(meta: Meta, collection_id: int, name: str, snapshot_id: int, *, by: str = "",
                      now: float | None = None) -> tuple[str, str]:
    """The DAG's wait: success once COMMITTED, error once it never will be, otherwise
    refresh the heartbeat (the create is alive while its run waits, e.g. for a Spark
    slot) and keep waiting."""
    try:
        rec, _ = meta.snapshots.get(collection_id, name)
    except NotFound:
        return "error", f"snapshot {name!r} no longer exists (reclaimed as abandoned, or dropped)"
    if rec.snapshot_id != snapshot_id:
        return "error", f"snapshot {name!r} was replaced (id {snapshot_id} -> {rec.snapshot_id})"
    if rec.state == COMMITTED:
        return "success", f"snapshot {name!r} is COMMITTED: {rec.segments} segments, {rec.rows} rows"
    if rec.state != PENDING:
        return "error", f"snapshot {name!r} is {rec.state}: {rec.error or 'dropped'}"
    if rec.failed:
        return "error", f"snapshot {name!r} failed while PENDING: {rec.error}"
    try:
        meta.snapshots.heartbeat(rec, time.time() if now is None else now, by)
    except StateError as e:
        return "error", str(e)
    last = f"; last attempt failed: {rec.error}" if rec.error else ""
    return "waiting", f"snapshot {name!r} is PENDING (heartbeat refreshed){last}"


# -- capture --------------------------------------------------------------------------------
class _Head(msgspec.Struct):
    """The fields capture filters on; msgspec skips the rest of the record cheaply."""

    state: str
    dml_ts: int = 0


_HEAD = msgspec.json.Decoder(_Head)


def capture_raw(meta: Meta, rec: SnapshotRecord) -> tuple[list[bytes], int, int]:
    """(encoded segment records, consistent_ts, revision): every Flushed segment read at
    ONE etcd revision no older than the request, so nothing flushed before the snapshot
    was requested is missed, whichever process flushed it and whatever its clock said.
    consistent_ts bounds every captured dml_ts. Records stay encoded so workers can
    decode them in parallel."""
    revision = meta.kv.revision()
    if revision < rec.requested_revision:
        raise StateError(f"etcd revision {revision} is older than the snapshot request "
                         f"({rec.requested_revision}): wrong etcd cluster?")
    out, newest = [], 0
    for kv in meta.kv.range(meta.keys.segments_prefix(rec.collection_id), revision=revision):
        head = _HEAD.decode(kv.value)
        if head.state == FLUSHED:
            out.append(kv.value)
            newest = max(newest, head.dml_ts)
    return out, max(meta.tso.now(), newest), revision


def capture(meta: Meta, rec: SnapshotRecord) -> tuple[list[Segment], int, int]:
    """capture_raw, decoded."""
    raws, ts, revision = capture_raw(meta, rec)
    dec = msgspec.json.Decoder(Segment)
    return [dec.decode(r) for r in raws], ts, revision


def group(segments: list, per_file: int = SEGMENTS_PER_MANIFEST) -> list[list]:
    if isinstance(per_file, bool) or not isinstance(per_file, int) or per_file < 1:
        raise ValidationError(f"segments per manifest must be an integer >= 1, got {per_file!r}")
    return [segments[i:i + per_file] for i in range(0, len(segments), per_file)] or [[]]


# -- write ----------------------------------------------------------------------------------
@dataclass
class ManifestWritten:
    n: int
    key: str
    size: int
    sha256: str
    segments: int
    rows: int
    bytes: int
    files: int
    segment_ids: list[int] = field(default_factory=list)
    partition_ids: list[int] = field(default_factory=list)
    build_ids: list[int] = field(default_factory=list)


def write_manifest(store: Store, rec: SnapshotRecord, attempt: int, n: int,
                   segments: Iterable[Segment]) -> ManifestWritten:
    """Write manifest `n` of one attempt (its own key, atomic put; a re-run rewrites it)."""
    segments = list(segments)
    entries = [manifest.segment_entry(s) for s in segments]
    key = layout.snapshot_attempt_manifest(rec.collection_id, rec.snapshot_id, attempt, n)
    w = manifest.write(store, key, entries, {"seglake.snapshot_id": str(rec.snapshot_id),
                                             "seglake.attempt": str(attempt)})
    files = [f for e in entries for f in manifest.entry_files(e)]
    return ManifestWritten(
        n=n, key=key, size=w.size, sha256=w.sha256, segments=w.records, rows=sum(s.num_rows for s in segments),
        bytes=sum(size for _, size in files), files=len(files),
        segment_ids=[s.segment_id for s in segments],
        partition_ids=sorted({s.partition_id for s in segments}),
        build_ids=sorted({f.build_id for s in segments for f in s.index_files}))


def write_raw_group(store: Store, rec: SnapshotRecord, attempt: int, n: int, raws: list[bytes]) -> ManifestWritten:
    """Decode encoded segment records and write manifest `n` (worker / executor side)."""
    dec = msgspec.json.Decoder(Segment)
    return write_manifest(store, rec, attempt, n, [dec.decode(r) for r in raws])


def write_manifest_groups(groups: Iterable[tuple[int, list[bytes]]], rec_json: dict, attempt: int,
                          settings_env: dict) -> Iterable[ManifestWritten]:
    """Executor side of the Spark engine: (n, encoded segment records) groups -> manifests.
    Opens its own store from the settings environment the driver handed over."""
    from seglake.config import Settings
    from seglake.storage import open_store

    store = open_store(Settings.load(env=settings_env))
    rec = msgspec.convert(rec_json, SnapshotRecord)
    for n, raws in groups:
        yield write_raw_group(store, rec, attempt, n, raws)


def collection_doc(meta: Meta, collection_id: int) -> dict:
    """The collection as a snapshot's metadata describes it."""
    coll = meta.catalog.get(collection_id)
    return {"collection_id": coll.collection_id, "name": coll.name, "db": coll.db,
            "schema": coll.schema.to_json(), "shards": coll.shards, "vchannels": list(coll.vchannels),
            "partitions": [{"partition_id": p.partition_id, "name": p.name} for p in coll.partitions]}


def _metadata(meta: Meta, rec: SnapshotRecord, attempt: int, written: list[ManifestWritten],
              consistent_ts: int, revision: int, collection: dict | None = None) -> tuple[dict, dict]:
    """(metadata JSON document, totals). Checks the attempt's manifests are complete.
    `collection`: the collection part (default: read from the catalog)."""
    written = sorted(written, key=lambda w: w.n)
    prefix = layout.snapshot_attempt_prefix(rec.collection_id, rec.snapshot_id, attempt)
    if [w.n for w in written] != list(range(len(written))) or not written or \
            any(not w.key.startswith(prefix) for w in written):
        raise SeglakeError(f"snapshot {rec.name!r}: attempt {attempt} wrote manifests "
                           f"{[w.n for w in written]}, not one complete set under {prefix}")
    totals = {k: sum(getattr(w, k) for w in written) for k in ("segments", "rows", "bytes", "files")}
    doc = {
        "format": METADATA_FORMAT, "snapshot_id": rec.snapshot_id, "attempt": attempt, "name": rec.name,
        "description": rec.description, "created_at": rec.created_at, "consistent_ts": consistent_ts,
        "revision": revision, "requested_revision": rec.requested_revision,
        "collection": collection if collection is not None else collection_doc(meta, rec.collection_id),
        "manifests": [{"key": w.key, "records": w.segments, "size": w.size, "sha256": w.sha256} for w in written],
        "segment_count": totals["segments"],
        "segment_ids": sorted(i for w in written for i in w.segment_ids),
        "partition_ids": sorted({i for w in written for i in w.partition_ids}),
        "index_build_ids": sorted({i for w in written for i in w.build_ids}),
        "totals": totals,
    }
    return doc, totals


def finish(meta: Meta, store: Store, rec: SnapshotRecord, attempt: int, written: list[ManifestWritten],
           consistent_ts: int, revision: int, now: float | None = None,
           collection: dict | None = None) -> SnapshotRecord:
    """Write this attempt's metadata JSON (durable first), then commit PENDING ->
    COMMITTED naming it, in one txn guarded by the record as read. Idempotent for the
    attempt that won; SnapshotLost for any other writer. `collection`: as in _metadata
    (an imported snapshot's collection is not in the catalog)."""
    _ours_to_commit(meta, rec, attempt)
    doc, totals = _metadata(meta, rec, attempt, written, consistent_ts, revision, collection)
    raw = json.dumps(doc, separators=(",", ":")).encode()
    location = layout.snapshot_attempt_metadata(rec.collection_id, rec.snapshot_id, attempt)
    store.put(location, raw)
    faults.point("snapshot.before_commit")
    now = time.time() if now is None else now

    def commit() -> SnapshotRecord:
        cur, kv = _ours_to_commit(meta, rec, attempt)
        if cur.state == COMMITTED:
            return cur
        return meta.snapshots.commit(kv, cur.replace(
            state=COMMITTED, location=location, committed_at=now, consistent_ts=consistent_ts,
            revision=revision, manifests=len(written), partitions=len(doc["collection"]["partitions"]),
            error=None, failed=False, attempt=attempt, metadata_sha256=manifest.sha256(raw), **totals))
    return retry_on_conflict(commit, f"commit snapshot {rec.name!r}")


def _ours_to_commit(meta: Meta, rec: SnapshotRecord, attempt: int) -> tuple[SnapshotRecord, KeyValue]:
    """The record, if this attempt may still commit it (PENDING) or already did."""
    try:
        cur, kv = meta.snapshots._ours(rec)
    except StateError as e:
        raise SnapshotLost(f"{e}; attempt {attempt} committed nothing") from None
    if cur.state == COMMITTED and cur.attempt != attempt:
        raise SnapshotLost(f"snapshot {rec.name!r} was committed by attempt {cur.attempt}; attempt {attempt} "
                           "lost the race and committed nothing")
    if cur.state not in (PENDING, COMMITTED):
        raise StateError(f"snapshot {rec.name!r} is {cur.state}; cannot commit")
    return cur, kv


def record_failure(meta: Meta, rec: SnapshotRecord, reason: str, *, final: bool = False) -> None:
    """Note why a PENDING create failed; `final` (the create gave up) makes the waiting
    sensor fail at once. Best effort."""
    try:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
        if cur.snapshot_id == rec.snapshot_id and cur.state == PENDING:
            meta.snapshots.update(kv, cur.replace(error=reason[:2000], failed=cur.failed or final))
    except SeglakeError:
        pass


PARALLEL_MIN_SEGMENTS = 8000
GroupWriter = Callable[[int, list[tuple[int, list[bytes]]], KeepAlive], list[ManifestWritten]]


def write_attempt(meta: Meta, store: Store, rec: SnapshotRecord, write_groups: GroupWriter,
                  per_file: int = SEGMENTS_PER_MANIFEST) -> SnapshotRecord:
    """One write attempt with a fresh id, kept alive by heartbeats: capture, write the
    manifest groups (`write_groups(attempt, groups, alive)`: inline, pool or Spark),
    finish. A failure is noted on the record; a lost race is raised as SnapshotLost."""
    attempt = meta.ids.allocate()
    try:
        with KeepAlive(meta, rec, f"attempt {attempt}") as alive:
            raws, ts, revision = capture_raw(meta, rec)
            written = write_groups(attempt, list(enumerate(group(raws, per_file))), alive)
            faults.point("snapshot.after_manifests")
            alive.check()
            return finish(meta, store, rec, attempt, written, ts, revision)
    except SnapshotLost:
        raise
    except Exception as e:
        record_failure(meta, rec, f"{type(e).__name__}: {e}")
        raise


def write_all(meta: Meta, store: Store, rec: SnapshotRecord, per_file: int = SEGMENTS_PER_MANIFEST,
              workers: int | None = None) -> SnapshotRecord:
    """The inline engine. Large captures write their manifests from a small pool of
    worker processes (spawned: no fork of the gRPC client), one group per task; small
    ones stay in this process."""
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)

    def write_groups(attempt: int, groups: list, alive: KeepAlive) -> list[ManifestWritten]:
        if workers > 1 and sum(len(g) for _, g in groups) >= PARALLEL_MIN_SEGMENTS and len(groups) > 1:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(min(workers, len(groups)), mp_context=ctx) as pool:
                futures = [pool.submit(write_raw_group, store, rec, attempt, n, g) for n, g in groups]
                return [f.result() for f in futures]
        out = []
        for n, g in groups:
            alive.check()  # stop early once lost
            out.append(write_raw_group(store, rec, attempt, n, g))
        return out
    return write_attempt(meta, store, rec, write_groups, per_file)


def create(meta: Meta, store: Store, collection: str, name: str, description: str = "", *,
           db: str = DEFAULT_DB, ttl: float | None = None, owner: str = "",
           per_file: int = SEGMENTS_PER_MANIFEST) -> SnapshotRecord:
    """Two-phase create, inline. Returns the COMMITTED record."""
    rec = begin(meta, collection, name, description, db=db, ttl=ttl, owner=owner)
    if rec.state == COMMITTED:
        return rec
    return write_all(meta, store, rec, per_file)


# -- drop / reclaim ---------------------------------------------------------------------------


def snapshot_files(store: Store, rec: SnapshotRecord) -> list[str]:
    """Every object of the snapshot: every attempt's manifests and metadata (and the
    pre-attempt layout's), whoever won. Only keys that rebuild exactly from the layout's
    builders for this snapshot id count; anything else under its prefixes is left alone."""
    c, sid = rec.collection_id, rec.snapshot_id
    keys = {o.key for prefix in (layout.snapshot_manifests_prefix(c, sid), layout.snapshot_metadata_prefix(c, sid))
            for o in store.list(prefix) if layout.is_snapshot_file(c, sid, o.key)}
    legacy = layout.snapshot_metadata(c, sid)
    keys.update(k for k in (legacy, rec.location) if k and layout.is_snapshot_file(c, sid, k) and store.exists(k))
    return sorted(keys)


def remove_files_and_record(meta: Meta, store: Store, rec: SnapshotRecord) -> int:
    """Delete a DELETING snapshot's files, then its record. Resumable. Refuses any other
    state: a PENDING create is reclaimed only through reclaim_abandoned's claim."""
    try:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
    except NotFound:
        return 0
    if cur.snapshot_id != rec.snapshot_id:
        return 0
    if cur.state != DELETING:
        raise StateError(f"snapshot {rec.name!r} is {cur.state}; only a DELETING snapshot's files are removed")
    keys = snapshot_files(store, cur)
    errors = store.delete_many(keys)
    if errors:
        raise SeglakeError(f"could not delete {len(errors)} snapshot files, first: {errors[0].key}: {errors[0].error}")
    try:
        meta.snapshots.remove(kv, cur)
    except Conflict:
        now_rec = meta.snapshots.find(rec.collection_id, rec.name)
        if now_rec is not None and now_rec.snapshot_id == rec.snapshot_id:
            raise
        # a concurrent remover (a second GC, a resumed drop) finished first
    return len(keys)


def reclaim_abandoned(meta: Meta, store: Store, rec: SnapshotRecord, timeout: float,
                      now: float | None = None) -> bool:
    """GC's stale-PENDING cleanup: claim PENDING -> DELETING if no writer has beaten for
    `timeout` seconds (at least MIN_PENDING_TIMEOUT), and only then delete the files and
    the record. False, touching nothing, when the create is alive, committed or gone."""
    now = time.time() if now is None else now
    for what, v in (("snapshot_pending_timeout", timeout), ("now", now)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValidationError(f"{what} must be a finite non-negative number of seconds, got {v!r}")
    claimed = meta.snapshots.claim_abandoned(rec, max(float(timeout), MIN_PENDING_TIMEOUT), now)
    if claimed is None:
        return False
    faults.point("snapshot.reclaim_after_claim")
    remove_files_and_record(meta, store, claimed)
    return True


def purge(meta: Meta, store: Store, rec: SnapshotRecord) -> int:
    """Demo reset / test cleanup only: whatever its state, DELETING (guarded), then files
    and record. A writer still at work loses its commit (SnapshotLost)."""
    def to_deleting() -> SnapshotRecord | None:
        try:
            cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
        except NotFound:
            return None
        if cur.snapshot_id != rec.snapshot_id or cur.state == DELETING:
            return cur
        return meta.snapshots.update(kv, cur.replace(state=DELETING))
    cur = retry_on_conflict(to_deleting, f"purge snapshot {rec.name!r}")
    return 0 if cur is None or cur.snapshot_id != rec.snapshot_id else remove_files_and_record(meta, store, cur)


def resolve(meta: Meta, collection: str, name: str, *, db: str = DEFAULT_DB,
            collection_id: int | None = None) -> tuple[SnapshotRecord, KeyValue]:
    """The snapshot `name` of collection `collection`, also once that collection was
    dropped (its name freed or even taken again): the live collection's snapshot first,
    else the one snapshot record that names that collection. Several dropped
    collections with that name and snapshot: pass collection_id."""
    validate_name("collection", collection)
    validate_name("snapshot", name)
    validate_name("db", db)
    if collection_id is not None:
        rec, kv = meta.snapshots.get(collection_id, name)
        if (rec.collection_name, rec.db) != (collection, db):
            raise NotFound(f"snapshot {name!r} of collection id {collection_id} belongs to "
                           f"{rec.db}.{rec.collection_name}, not {db}.{collection}")
        return rec, kv
    try:
        coll = meta.catalog.get_by_name(collection, db)
        return meta.snapshots.get(coll.collection_id, name)
    except NotFound:
        pass
    ids = sorted({r.collection_id for r in meta.snapshots.list()
                  if (r.collection_name, r.db, r.name) == (collection, db, name)})
    if not ids:
        raise NotFound(f"snapshot {name!r} not found for collection {collection!r} in db {db!r}")
    if len(ids) > 1:
        raise Conflict(f"snapshot {name!r} exists for {len(ids)} dropped collections named {collection!r} "
                       f"(collection ids {', '.join(map(str, ids))}); pass the collection id")
    return meta.snapshots.get(ids[0], name)


def drop(meta: Meta, store: Store, collection: str, name: str, *, db: str = DEFAULT_DB,
         collection_id: int | None = None) -> dict:
    rec, _ = resolve(meta, collection, name, db=db, collection_id=collection_id)
    return drop_by_id(meta, store, rec.collection_id, name)


def drop_by_id(meta: Meta, store: Store, collection_id: int, name: str, *, now: float | None = None) -> dict:
    rec, kv = meta.snapshots.get(collection_id, name)
    if rec.state == PENDING:
        raise StateError(f"snapshot {name!r} is PENDING (being created); it cannot be dropped. Wait for it "
                         "to commit, or for GC to reclaim it once its writer stopped (snapshot_pending_timeout)")
    if rec.state == COMMITTED:
        if by := rec.pinned_by(time.time() if now is None else min(now, time.time())):   # pins: wall clock
            raise Conflict(f"snapshot {name!r} is pinned ({', '.join(by)}): drop it after the jobs finish "
                           f"and the pins are removed (`seglake snapshots unpin`) or expire")
        rec = meta.snapshots.update(kv, rec.replace(state=DELETING),
                                    reason=f"snapshot {name!r} changed while dropping; retry")
    faults.point("snapshot.drop_after_deleting")
    removed = remove_files_and_record(meta, store, rec)
    return {"snapshot": name, "collection_id": collection_id, "files_removed": removed}


# -- list / describe / read -----------------------------------------------------------------
def info(rec: SnapshotRecord) -> dict:
    return {"name": rec.name, "collection": rec.collection_name, "collection_id": rec.collection_id,
            "db": rec.db, "snapshot_id": rec.snapshot_id, "state": rec.state,
            "created_at": rec.created_at, "committed_at": rec.committed_at, "expires_at": rec.expires_at,
            "segments": rec.segments, "rows": rec.rows, "bytes": rec.bytes, "files": rec.files,
            "partitions": rec.partitions, "location": rec.location, "consistent_ts": rec.consistent_ts,
            "description": rec.description, "pins": list(rec.pins),
            "holds": [{"pin_id": p, "expires_at": exp} for p, exp in rec.holds], "error": rec.error}


# -- operators' pins (Milvus 3.0's pin_snapshot_data / unpin_snapshot_data) ------------------
def pin(meta: Meta, collection: str, name: str, ttl: float, *, db: str = DEFAULT_DB, by: str = "",
        collection_id: int | None = None, now: float | None = None) -> dict:
    """Pin a COMMITTED snapshot for `ttl` seconds (1 s .. 365 days): it cannot be dropped
    (nor expire), so GC keeps every file it references; returns the pin (its `pin_id` is
    what unpin takes). Checked before any change; the pin vanishes by itself at expiry."""
    ttl = limits.check("pin_ttl", "pin ttl (seconds)", ttl)
    if not isinstance(by, str) or len(by) > 256 or not by.isprintable():
        raise ValidationError("pin 'by' must be printable text of at most 256 characters")
    rec, _ = resolve(meta, collection, name, db=db, collection_id=collection_id)
    now = time.time() if now is None else now
    if rec.expires_at is not None and rec.expires_at <= now:
        raise StateError(f"snapshot {name!r} expired at {utc_time(rec.expires_at)} (its TTL); GC removes it: "
                         f"an expired snapshot cannot be pinned")
    pin_id = meta.ids.allocate()
    meta.snapshots.hold(rec.collection_id, rec.name, pin_id, now + ttl, now, by=by)
    return meta.snapshots.pin_record(pin_id) or {"pin_id": pin_id}


def unpin(meta: Meta, pin_id: int) -> dict:
    """Remove pin `pin_id`; NotFound (one sentence) for an unknown or expired-and-removed id."""
    if isinstance(pin_id, bool) or not isinstance(pin_id, int) or pin_id <= 0:
        raise ValidationError(f"pin id must be a positive integer, got {pin_id!r}")
    return meta.snapshots.release(pin_id)


def list_pins(meta: Meta, collection: str | None = None, *, db: str = DEFAULT_DB,
              now: float | None = None) -> list[dict]:
    """Unexpired pins (of one collection by name, or all), oldest first."""
    now = time.time() if now is None else now
    cid = None
    if collection is not None:
        validate_name("collection", collection)
        try:   # the live collection of that name: its pins, not a dropped namesake's
            cid = meta.catalog.get_by_name(collection, db).collection_id
        except NotFound:
            pass
    out = [d for d in meta.snapshots.pin_records() if d["expires_at"] > now
           and (collection is None or (d["collection_id"] == cid if cid is not None
                                       else (d["collection"] == collection and d["db"] == db)))]
    return sorted(out, key=lambda d: (d["created_at"], d["pin_id"]))


def list_snapshots(meta: Meta, collection: str | None = None, *, db: str = DEFAULT_DB,
                   include_all: bool = False) -> list[dict]:
    """Usable (COMMITTED) snapshots, or every record with include_all; by collection
    name, including the snapshots of dropped collections of that name."""
    if collection is not None:
        validate_name("collection", collection)
        validate_name("db", db)
    return [info(r) for r in meta.snapshots.list()
            if (collection is None or (r.collection_name, r.db) == (collection, db))
            and (include_all or r.state == COMMITTED)]


def read_metadata(store: Store, rec: SnapshotRecord) -> dict:
    """The committed metadata JSON, checked against the record (sha256, format, snapshot
    id, segment count) and internally (manifests of the committed attempt only, record
    counts adding up). ManifestError naming the file otherwise."""
    if not rec.location:
        raise StateError(f"snapshot {rec.name!r} is {rec.state}; it has no metadata yet")
    loc = rec.location
    try:
        raw = store.get(loc)
    except NotFound:
        raise manifest.ManifestError(f"snapshot metadata {loc} is missing") from None
    if rec.metadata_sha256 is None or manifest.sha256(raw) != rec.metadata_sha256:
        raise manifest.ManifestError(f"snapshot metadata {loc} does not match the checksum its record holds "
                                     f"({len(raw)} bytes): truncated, altered or of an older format")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise manifest.ManifestError(f"snapshot metadata {loc} is unreadable: {e}") from None
    return _check_metadata(doc, rec, loc)


def _check_metadata(doc, rec: SnapshotRecord, loc: str) -> dict:
    def bad(why: str):
        return manifest.ManifestError(f"snapshot metadata {loc} {why}")

    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt != METADATA_FORMAT:
        raise bad(f"has unknown format {fmt!r}; this seglake reads {METADATA_FORMAT}")
    if doc.get("snapshot_id") != rec.snapshot_id:
        raise bad(f"belongs to snapshot id {doc.get('snapshot_id')!r}, not {rec.snapshot_id}")
    ms, count, attempt = doc.get("manifests"), doc.get("segment_count"), doc.get("attempt")
    if not isinstance(ms, list) or not _is_count(count) or not _is_count(attempt):
        raise bad("has no valid manifest list, segment_count or attempt")
    if not ms:
        raise bad(f"lists no manifests, but the snapshot has {count} segments" if count else "lists no manifests")
    prefix = layout.snapshot_attempt_prefix(rec.collection_id, rec.snapshot_id, attempt)
    for m in ms:
        if not (isinstance(m, dict) and isinstance(m.get("key"), str) and m["key"].startswith(prefix)
                and _is_count(m.get("records")) and isinstance(m.get("sha256"), str)):
            raise bad(f"lists an invalid manifest entry {m!r} (attempt {attempt})")
    listed = sum(m["records"] for m in ms)
    if listed != count or (rec.state == COMMITTED and count != rec.segments):
        raise bad(f"lists manifests holding {listed} segments, but records {count} (etcd: {rec.segments})")
    return doc


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_entries(store: Store, rec: SnapshotRecord, doc: dict | None = None) -> Iterator[tuple[str, list[dict]]]:
    """(manifest key, verified entries) of every manifest of a COMMITTED snapshot."""
    doc = read_metadata(store, rec) if doc is None else doc
    for m in doc["manifests"]:
        yield m["key"], read_manifest(store, rec, m)


def read_manifest(store: Store, rec: SnapshotRecord, m: dict) -> list[dict]:
    """One manifest listed in the metadata, verified against what the metadata says."""
    return manifest.read(store, m["key"], records=m["records"], sha256_hex=m["sha256"],
                         snapshot_id=rec.snapshot_id)


def describe(meta: Meta, store: Store, collection: str, name: str, *, db: str = DEFAULT_DB,
             collection_id: int | None = None) -> dict:
    """The record, and for a COMMITTED snapshot its metadata with every manifest verified."""
    rec, _ = resolve(meta, collection, name, db=db, collection_id=collection_id)
    out = info(rec)
    if rec.state == COMMITTED:
        doc = read_metadata(store, rec)
        for _ in read_entries(store, rec, doc):
            pass
        out["partition_names"] = [p["name"] for p in doc["collection"]["partitions"]]
        out["manifests"] = doc["manifests"]
        out["index_build_ids"] = doc["index_build_ids"]
        out["collection_dropped"] = _collection_gone(meta, rec)
    return out


def _collection_gone(meta: Meta, rec: SnapshotRecord) -> bool:
    try:
        return meta.catalog.get(rec.collection_id).state != CREATED
    except NotFound:
        return True


def read_segments(store: Store, rec: SnapshotRecord) -> list[Segment]:
    """The segment records a COMMITTED snapshot captured (restore reads these), verified."""
    return [manifest.entry_to_segment(e) for _, entries in read_entries(store, rec) for e in entries]


# -- reference index ------------------------------------------------------------------------
class RefIndex:
    """Every file and segment id that snapshots reference, loaded completely or not at all:
    THE reference index (GC's inline and Spark marks, snapshot drop and tests all read
    snapshots through own_refs / manifest_refs below).

    COMMITTED snapshots contribute their verified manifests' files; any missing,
    truncated, altered or unknown-version metadata or manifest raises (GC fails closed).
    DELETING ones contribute what is still readable (they are being released; one
    reclaimed while PENDING never had metadata). PENDING snapshots block their whole
    collection (`blocked_collections`): GC must skip it.
    """

    def __init__(self):
        self.files: set[str] = set()
        self.segments: set[tuple[int, int]] = set()  # (collection_id, segment_id)
        self.blocked_collections: set[int] = set()
        self.own_files: set[str] = set()  # committed manifests + metadata of live snapshot records
        self.snapshots: list[SnapshotRecord] = []

    def __contains__(self, path: str) -> bool:
        return path in self.files

    @classmethod
    def of(cls, store: Store, records: Iterable[SnapshotRecord]) -> "RefIndex":
        """What these snapshot records reference."""
        idx = cls()
        for rec in records:
            idx.snapshots.append(rec)
            if rec.state == PENDING:
                idx.blocked_collections.add(rec.collection_id)
            own, manifests = own_refs(store, rec)
            idx.own_files.update(own)
            for m in manifests:
                files, segs = manifest_refs(store, rec, m)
                idx.files |= files
                idx.segments |= segs
        return idx

    @classmethod
    def load(cls, meta: Meta, store: Store) -> "RefIndex":
        """What every snapshot record in etcd references."""
        return cls.of(store, list(meta.snapshots.list()))


def own_refs(store: Store, rec: SnapshotRecord) -> tuple[list[str], list[dict]]:
    """(the record's own files: metadata + manifests, the manifests to read) of one
    snapshot record. A COMMITTED snapshot's unreadable metadata raises (fail closed); a
    DELETING one's contributes nothing; a PENDING one blocks its collection instead."""
    if rec.state == PENDING or (rec.state == DELETING and not rec.location):
        return [], []
    try:
        doc = read_metadata(store, rec)
    except manifest.ManifestError:
        if rec.state == DELETING:
            return [], []
        raise
    return [rec.location] + [m["key"] for m in doc["manifests"]], list(doc["manifests"])


def manifest_refs(store: Store, rec: SnapshotRecord, m: dict) -> tuple[set[str], set[tuple[int, int]]]:
    """(files, (collection, segment) ids) one verified manifest references; a DELETING
    snapshot's unreadable manifest contributes nothing, a COMMITTED one's raises."""
    try:
        entries = read_manifest(store, rec, m)
    except manifest.ManifestError:
        if rec.state == DELETING:
            return set(), set()
        raise
    files, segs = set(), set()
    for e in entries:
        segs.add((e["collection_id"], e["segment_id"]))
        files.update(layout.normalize_key(p) for p, _ in manifest.entry_files(e))
    return files, segs
