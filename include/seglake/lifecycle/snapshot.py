"""Snapshots of a collection: create (two-phase), drop, list, describe, and the
reference index garbage collection must respect.

    (absent) --begin--> PENDING --capture, write manifests + metadata, commit--> COMMITTED
    COMMITTED --drop (no pins)--> DELETING --remove manifests, metadata--> (absent)
    PENDING (stale or failed) --GC after snapshot_pending_timeout--> (absent)

- begin: validates, then writes PENDING (create-if-absent on the name). While PENDING,
  GC skips the whole collection. A create retried by the same owner resumes its record.
- capture: the Flushed segments at ONE etcd revision whose data is not newer than the
  snapshot timestamp: the snapshot is consistent at (consistent_ts, revision).
- write: manifests (Avro, many segments per file) and metadata JSON; idempotent
  (same keys, atomic puts), so a re-run after a crash just rewrites them.
- commit: PENDING -> COMMITTED with location and totals, one compare-guarded txn.
- drop: COMMITTED -> DELETING -> manifests, metadata removed -> record removed;
  resumable from DELETING; refused while a restore job pins the snapshot.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

import msgspec

from seglake import faults, manifest
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError
from seglake.meta import Meta
from seglake.meta.catalog import CREATED, DEFAULT_DB
from seglake.meta.segments import FLUSHED, Segment
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING, SnapshotRecord
from seglake.names import validate_name
from seglake.storage import Store, layout
from seglake import limits

SEGMENTS_PER_MANIFEST = 2000
METADATA_FORMAT = "seglake.snapshot.v1"


def _validate_ttl(ttl: float | None) -> float | None:
    if ttl is None:
        return None
    ttl = limits.check("snapshot_ttl", "snapshot ttl (seconds)", ttl)  # finite, in range: NaN never "no TTL"
    return ttl or None  # 0 means no TTL


def begin(meta: Meta, collection: str, name: str, description: str = "", *, db: str = DEFAULT_DB,
          ttl: float | None = None, owner: str = "", now: float | None = None) -> SnapshotRecord:
    """Validate and write the PENDING record. Idempotent for the same non-empty owner."""
    validate_name("collection", collection)
    validate_name("snapshot", name)
    validate_name("db", db)
    ttl = _validate_ttl(ttl)
    if not isinstance(description, str) or len(description) > 1024:
        raise ValidationError("snapshot description must be a string of at most 1024 characters")
    coll = meta.catalog.get_by_name(collection, db)
    if coll.state != CREATED:
        raise StateError(f"collection {collection!r} is {coll.state}; snapshots need a live collection")
    existing = meta.snapshots.find(coll.collection_id, name)
    if existing is not None:
        if owner and existing.owner == owner and existing.state in (PENDING, COMMITTED):
            return existing  # our own create, re-run after a crash
        raise Conflict(f"snapshot {name!r} already exists for collection {collection!r} ({existing.state})")
    now = time.time() if now is None else now
    rec = SnapshotRecord(
        snapshot_id=meta.ids.allocate(), collection_id=coll.collection_id, collection_name=coll.name,
        db=coll.db, name=name, state=PENDING, created_at=now, description=description, owner=owner,
        expires_at=now + ttl if ttl else None, partitions=len(coll.partitions))
    return meta.snapshots.create_pending(rec)


class _Head(msgspec.Struct):
    """The fields capture filters on; msgspec skips the rest of the record cheaply."""

    state: str
    dml_ts: int = 0


_HEAD = msgspec.json.Decoder(_Head)


def capture_raw(meta: Meta, rec: SnapshotRecord) -> tuple[list[bytes], int, int]:
    """(encoded segment records, consistent_ts, revision): the Flushed segments read at
    ONE etcd revision whose data is not newer than a timestamp taken before that
    revision. Records stay encoded so workers can decode them in parallel."""
    ts = meta.tso.now()
    revision = meta.kv.revision()
    out = []
    for kv in meta.kv.range(meta.keys.segments_prefix(rec.collection_id), revision=revision):
        head = _HEAD.decode(kv.value)
        if head.state == FLUSHED and head.dml_ts <= ts:
            out.append(kv.value)
    return out, ts, revision


def capture(meta: Meta, rec: SnapshotRecord) -> tuple[list[Segment], int, int]:
    """capture_raw, decoded."""
    raws, ts, revision = capture_raw(meta, rec)
    dec = msgspec.json.Decoder(Segment)
    return [dec.decode(r) for r in raws], ts, revision


def group(segments: list, per_file: int = SEGMENTS_PER_MANIFEST) -> list[list]:
    if per_file < 1:
        raise ValidationError("segments per manifest must be >= 1")
    return [segments[i:i + per_file] for i in range(0, len(segments), per_file)] or [[]]


@dataclass
class ManifestWritten:
    n: int
    key: str
    size: int
    segments: int
    rows: int
    bytes: int
    files: int
    segment_ids: list[int] = field(default_factory=list)
    partition_ids: list[int] = field(default_factory=list)
    build_ids: list[int] = field(default_factory=list)


def write_manifest(store: Store, rec: SnapshotRecord, n: int, segments: Iterable[Segment]) -> ManifestWritten:
    """Write manifest file `n` of a snapshot (idempotent: same key, atomic put)."""
    segments = list(segments)
    entries = [manifest.segment_entry(s) for s in segments]
    key = layout.snapshot_manifest(rec.collection_id, rec.snapshot_id, n)
    size = manifest.write(store, key, entries, {"seglake.snapshot_id": str(rec.snapshot_id)})
    files = [f for e in entries for f in manifest.entry_files(e)]
    return ManifestWritten(
        n=n, key=key, size=size, segments=len(segments), rows=sum(s.num_rows for s in segments),
        bytes=sum(size for _, size in files), files=len(files),
        segment_ids=[s.segment_id for s in segments],
        partition_ids=sorted({s.partition_id for s in segments}),
        build_ids=sorted({f.build_id for s in segments for f in s.index_files}))


def write_raw_group(store: Store, rec: SnapshotRecord, n: int, raws: list[bytes]) -> ManifestWritten:
    """Decode encoded segment records and write manifest `n` (worker / executor side)."""
    dec = msgspec.json.Decoder(Segment)
    return write_manifest(store, rec, n, [dec.decode(r) for r in raws])


def write_manifest_groups(groups: Iterable[tuple[int, list[bytes]]], rec_json: dict,
                          settings_env: dict) -> Iterable[ManifestWritten]:
    """Executor side of the Spark engine: (n, encoded segment records) groups -> manifests.
    Opens its own store from the settings environment the driver handed over."""
    from seglake.config import Settings
    from seglake.storage import open_store

    store = open_store(Settings.load(env=settings_env))
    rec = msgspec.convert(rec_json, SnapshotRecord)
    for n, raws in groups:
        yield write_raw_group(store, rec, n, raws)


def finish(meta: Meta, store: Store, rec: SnapshotRecord, written: list[ManifestWritten],
           consistent_ts: int, revision: int, now: float | None = None) -> SnapshotRecord:
    """Write the metadata JSON, then commit PENDING -> COMMITTED in one guarded txn."""
    cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
    if cur.snapshot_id != rec.snapshot_id:
        raise Conflict(f"snapshot {rec.name!r} was replaced while it was being written")
    if cur.state == COMMITTED:
        return cur
    if cur.state != PENDING:
        raise StateError(f"snapshot {rec.name!r} is {cur.state}; cannot commit")
    coll = meta.catalog.get(rec.collection_id)
    written = sorted(written, key=lambda w: w.n)
    totals = {k: sum(getattr(w, k) for w in written) for k in ("segments", "rows", "bytes", "files")}
    now = time.time() if now is None else now
    doc = {
        "format": METADATA_FORMAT, "snapshot_id": rec.snapshot_id, "name": rec.name,
        "description": rec.description, "created_at": rec.created_at, "consistent_ts": consistent_ts,
        "revision": revision,
        "collection": {"collection_id": coll.collection_id, "name": coll.name, "db": coll.db,
                       "schema": coll.schema.to_json(), "shards": coll.shards,
                       "vchannels": list(coll.vchannels),
                       "partitions": [{"partition_id": p.partition_id, "name": p.name} for p in coll.partitions]},
        "manifests": [{"key": w.key, "segments": w.segments, "size": w.size} for w in written],
        "segment_ids": sorted(i for w in written for i in w.segment_ids),
        "partition_ids": sorted({i for w in written for i in w.partition_ids}),
        "index_build_ids": sorted({i for w in written for i in w.build_ids}),
        "totals": totals,
    }
    location = layout.snapshot_metadata(rec.collection_id, rec.snapshot_id)
    store.put(location, json.dumps(doc, separators=(",", ":")).encode())
    faults.point("snapshot.before_commit")
    return meta.snapshots.update(kv, cur.replace(
        state=COMMITTED, location=location, committed_at=now, consistent_ts=consistent_ts, revision=revision,
        manifests=len(written), partitions=len(coll.partitions), error=None, **totals))


def record_failure(meta: Meta, rec: SnapshotRecord, reason: str) -> None:
    """Note why a PENDING create failed (the sensor reports it); best effort."""
    try:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
        if cur.snapshot_id == rec.snapshot_id and cur.state == PENDING:
            meta.snapshots.update(kv, cur.replace(error=reason[:2000]))
    except SeglakeError:
        pass


PARALLEL_MIN_SEGMENTS = 8000


def write_all(meta: Meta, store: Store, rec: SnapshotRecord, per_file: int = SEGMENTS_PER_MANIFEST,
              workers: int | None = None) -> SnapshotRecord:
    """The inline engine: capture, write every manifest, finish. Large captures write
    their manifests from a small pool of worker processes (spawned: no fork of the
    gRPC client), one group per task; small ones stay in this process."""
    try:
        raws, ts, revision = capture_raw(meta, rec)
        groups = group(raws, per_file)
        workers = workers if workers is not None else min(4, os.cpu_count() or 1)
        if workers > 1 and len(raws) >= PARALLEL_MIN_SEGMENTS and len(groups) > 1:
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(min(workers, len(groups)), mp_context=ctx) as pool:
                futures = [pool.submit(write_raw_group, store, rec, n, g) for n, g in enumerate(groups)]
                written = [f.result() for f in futures]
        else:
            written = [write_raw_group(store, rec, n, g) for n, g in enumerate(groups)]
        faults.point("snapshot.after_manifests")
        return finish(meta, store, rec, written, ts, revision)
    except Exception as e:
        record_failure(meta, rec, f"{type(e).__name__}: {e}")
        raise


def create(meta: Meta, store: Store, collection: str, name: str, description: str = "", *,
           db: str = DEFAULT_DB, ttl: float | None = None, owner: str = "",
           per_file: int = SEGMENTS_PER_MANIFEST) -> SnapshotRecord:
    """Two-phase create, inline. Returns the COMMITTED record."""
    rec = begin(meta, collection, name, description, db=db, ttl=ttl, owner=owner)
    if rec.state == COMMITTED:
        return rec
    return write_all(meta, store, rec, per_file)


# -- drop ---------------------------------------------------------------------------------
def snapshot_files(store: Store, rec: SnapshotRecord) -> list[str]:
    """Every object that belongs to the snapshot record (manifests, metadata)."""
    keys = [o.key for o in store.list(layout.snapshot_manifests_prefix(rec.collection_id, rec.snapshot_id))]
    keys.append(layout.snapshot_metadata(rec.collection_id, rec.snapshot_id))
    return keys


def remove_files_and_record(meta: Meta, store: Store, rec: SnapshotRecord) -> int:
    """Delete a DELETING (or stale PENDING) snapshot's files, then its record. Resumable."""
    keys = snapshot_files(store, rec)
    errors = store.delete_many(keys)
    if errors:
        raise SeglakeError(f"could not delete {len(errors)} snapshot files, first: {errors[0].key}: {errors[0].error}")
    try:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
    except NotFound:
        return len(keys)
    if cur.snapshot_id == rec.snapshot_id:
        meta.snapshots.remove(kv)
    return len(keys)


def drop(meta: Meta, store: Store, collection: str, name: str, *, db: str = DEFAULT_DB) -> dict:
    validate_name("collection", collection)
    validate_name("snapshot", name)
    coll = meta.catalog.get_by_name(collection, db)
    return drop_by_id(meta, store, coll.collection_id, name)


def drop_by_id(meta: Meta, store: Store, collection_id: int, name: str) -> dict:
    rec, kv = meta.snapshots.get(collection_id, name)
    if rec.state == PENDING:
        raise StateError(f"snapshot {name!r} is PENDING (being created); it cannot be dropped. Wait for it "
                         "to commit, or for GC to clear it after snapshot_pending_timeout")
    if rec.state == COMMITTED:
        if rec.pins:
            raise Conflict(f"snapshot {name!r} is being read by restore job(s) "
                           f"{', '.join(map(str, rec.pins))}; drop it after they finish")
        rec = meta.snapshots.update(kv, rec.replace(state=DELETING),
                                    reason=f"snapshot {name!r} changed while dropping; retry")
    faults.point("snapshot.drop_after_deleting")
    removed = remove_files_and_record(meta, store, rec)
    return {"snapshot": name, "collection_id": collection_id, "files_removed": removed}


# -- list / describe ----------------------------------------------------------------------
def info(rec: SnapshotRecord) -> dict:
    return {"name": rec.name, "collection": rec.collection_name, "collection_id": rec.collection_id,
            "db": rec.db, "snapshot_id": rec.snapshot_id, "state": rec.state,
            "created_at": rec.created_at, "committed_at": rec.committed_at, "expires_at": rec.expires_at,
            "segments": rec.segments, "rows": rec.rows, "bytes": rec.bytes, "files": rec.files,
            "partitions": rec.partitions, "location": rec.location, "consistent_ts": rec.consistent_ts,
            "description": rec.description, "pins": list(rec.pins), "error": rec.error}


def list_snapshots(meta: Meta, collection: str | None = None, *, db: str = DEFAULT_DB,
                   include_all: bool = False) -> list[dict]:
    """Usable (COMMITTED) snapshots, or every record with include_all."""
    cid = meta.catalog.get_by_name(collection, db).collection_id if collection else None
    return [info(r) for r in meta.snapshots.list(cid) if include_all or r.state == COMMITTED]


def read_metadata(store: Store, rec: SnapshotRecord) -> dict:
    if not rec.location:
        raise StateError(f"snapshot {rec.name!r} is {rec.state}; it has no metadata yet")
    try:
        return json.loads(store.get(rec.location))
    except NotFound:
        raise manifest.ManifestError(f"snapshot metadata {rec.location} is missing") from None
    except ValueError as e:
        raise manifest.ManifestError(f"snapshot metadata {rec.location} is unreadable: {e}") from None


def describe(meta: Meta, store: Store, collection: str, name: str, *, db: str = DEFAULT_DB) -> dict:
    validate_name("snapshot", name)
    coll = meta.catalog.get_by_name(collection, db)
    rec, _ = meta.snapshots.get(coll.collection_id, name)
    out = info(rec)
    if rec.state == COMMITTED:
        doc = read_metadata(store, rec)
        out["partition_names"] = [p["name"] for p in doc["collection"]["partitions"]]
        out["manifests"] = doc["manifests"]
        out["index_build_ids"] = doc["index_build_ids"]
    return out


def read_segments(store: Store, rec: SnapshotRecord) -> list[Segment]:
    """The segment records a COMMITTED snapshot captured (restore reads these)."""
    doc = read_metadata(store, rec)
    return [manifest.entry_to_segment(e) for m in doc["manifests"] for e in manifest.read(store, m["key"])]


# -- reference index ------------------------------------------------------------------------
class RefIndex:
    """Every file and segment id that snapshots reference, loaded completely or not at all.

    COMMITTED and DELETING snapshots contribute their manifests' files (a DELETING one may
    already have lost some manifests: those are being released). PENDING snapshots block
    their whole collection (`blocked_collections`): GC must skip it. Any unreadable
    metadata or manifest raises: GC fails closed.
    """

    def __init__(self):
        self.files: set[str] = set()
        self.segments: set[tuple[int, int]] = set()  # (collection_id, segment_id)
        self.blocked_collections: set[int] = set()
        self.own_files: set[str] = set()  # manifests + metadata of live snapshot records
        self.snapshots: list[SnapshotRecord] = []

    def __contains__(self, path: str) -> bool:
        return path in self.files

    @classmethod
    def load(cls, meta: Meta, store: Store) -> "RefIndex":
        idx = cls()
        for rec in meta.snapshots.list():
            idx.snapshots.append(rec)
            if rec.state == PENDING:
                idx.blocked_collections.add(rec.collection_id)
                continue
            try:
                doc = read_metadata(store, rec)
            except manifest.ManifestError:
                if rec.state == DELETING:
                    continue
                raise
            idx.own_files.add(rec.location)
            for m in doc["manifests"]:
                idx.own_files.add(m["key"])
                try:
                    entries = manifest.read(store, m["key"])
                except manifest.ManifestError:
                    if rec.state == DELETING:
                        continue
                    raise
                for e in entries:
                    idx.segments.add((e["collection_id"], e["segment_id"]))
                    idx.files.update(layout.normalize_key(p) for p, _ in manifest.entry_files(e))
        return idx

