"""Write one attempt of a create: its own manifests and metadata (never shared with a
racing attempt), then commit PENDING -> COMMITTED in one guarded txn; inline (the one
inline runner, worker processes for large captures) or from the Spark job."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import msgspec

from seglake import faults, manifest, runners
from seglake.errors import SeglakeError, StateError
from seglake.meta import Meta
from seglake.meta.kv import KeyValue, retry_on_conflict
from seglake.meta.segments import Segment
from seglake.meta.snapshots import COMMITTED, PENDING, SnapshotRecord
from seglake.storage import Store, layout
from seglake.lifecycle.snapshot.alive import KeepAlive
from seglake.lifecycle.snapshot.collect import capture_raw, group, positions as log_positions
from seglake.lifecycle.snapshot.common import METADATA_FORMAT, SEGMENTS_PER_MANIFEST, SnapshotLost


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
    from seglake.storage import open_store

    store = open_store(runners.worker_settings(settings_env))
    rec = msgspec.convert(rec_json, SnapshotRecord)
    for n, raws in groups:
        yield write_raw_group(store, rec, attempt, n, raws)


def collection_doc(meta: Meta, collection_id: int) -> dict:
    """The collection as a snapshot's metadata describes it (`created_ts`: when it was
    created, so that a restore of its database to an earlier instant from a backup target
    alone knows it did not exist then)."""
    coll = meta.catalog.get(collection_id)
    return {"collection_id": coll.collection_id, "name": coll.name, "db": coll.db, "created_ts": coll.created_ts,
            "schema": coll.schema.to_json(), "shards": coll.shards, "vchannels": list(coll.vchannels),
            "partitions": [{"partition_id": p.partition_id, "name": p.name} for p in coll.partitions]}


def _metadata(meta: Meta, rec: SnapshotRecord, attempt: int, written: list[ManifestWritten],
              consistent_ts: int, revision: int, collection: dict | None = None,
              positions: dict | None = None) -> tuple[dict, dict]:
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
    if positions is not None:
        doc["positions"] = positions
    return doc, totals


def finish(meta: Meta, store: Store, rec: SnapshotRecord, attempt: int, written: list[ManifestWritten],
           consistent_ts: int, revision: int, now: float | None = None,
           collection: dict | None = None, positions: dict | None = None) -> SnapshotRecord:
    """Write this attempt's metadata JSON (durable first), then commit PENDING ->
    COMMITTED naming it, in one txn guarded by the record as read. Idempotent for the
    attempt that won; SnapshotLost for any other writer. `collection`: as in _metadata
    (an imported snapshot's collection is not in the catalog). `positions`: where each
    vchannel's log stood at the capture (collect.positions; None for an import)."""
    _ours_to_commit(meta, rec, attempt)
    doc, totals = _metadata(meta, rec, attempt, written, consistent_ts, revision, collection, positions)
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
            error=None, failed=False, attempt=attempt, metadata_sha256=manifest.sha256(raw), positions=positions,
            **totals))
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
            where = log_positions(meta, rec.collection_id, revision, raws)
            written = write_groups(attempt, list(enumerate(group(raws, per_file))), alive)
            faults.point("snapshot.after_manifests")
            alive.check()
            return finish(meta, store, rec, attempt, written, ts, revision, positions=where)
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
        big = workers > 1 and sum(len(g) for _, g in groups) >= PARALLEL_MIN_SEGMENTS and len(groups) > 1
        units = [(store, rec, attempt, n, g) for n, g in groups]
        return list(runners.run_inline(_write_unit, units, workers=workers if big else 1, pool="process",
                                       before_each=alive.check))   # (serially: stop early once lost)
    return write_attempt(meta, store, rec, write_groups, per_file)


def _write_unit(unit: tuple) -> ManifestWritten:
    """One manifest group, in a worker process or here."""
    return write_raw_group(*unit)
