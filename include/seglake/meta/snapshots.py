"""Snapshot records in etcd: one small key per snapshot; the segment list lives in
object storage (manifests + metadata JSON, see lifecycle/snapshot.py).

    (absent) --begin--> PENDING --commit--> COMMITTED --drop--> DELETING --> (absent)
    PENDING (stale, or failed) --GC--> (absent)

Every change is one transaction compared on the record's mod revision. `pins` lists the
copy jobs reading a COMMITTED snapshot; a pinned snapshot cannot start DELETING.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import msgspec

from seglake.errors import NotFound, StateError
from seglake.meta.codec import decode_struct, encode_struct
from seglake.meta.kv import Delete, KeyValue, Put, absent, retry_on_conflict, unchanged

if TYPE_CHECKING:
    from seglake.meta import Meta

PENDING, COMMITTED, DELETING = "PENDING", "COMMITTED", "DELETING"
SNAPSHOT_TRANSITIONS = {PENDING: {COMMITTED}, COMMITTED: {DELETING}, DELETING: set()}


class SnapshotRecord(msgspec.Struct, frozen=True, kw_only=True):
    snapshot_id: int
    collection_id: int
    collection_name: str
    db: str
    name: str
    state: str
    created_at: float                 # unix seconds, when PENDING was written
    description: str = ""
    owner: str = ""                   # who may resume a PENDING create (a DAG run id)
    expires_at: float | None = None   # TTL; None lives until dropped
    consistent_ts: int = 0            # hybrid timestamp the captured segment set is consistent at
    revision: int = 0                 # etcd revision the segment records were read at
    location: str | None = None       # metadata JSON key, set at commit
    committed_at: float | None = None
    segments: int = 0
    rows: int = 0
    bytes: int = 0
    files: int = 0
    partitions: int = 0
    manifests: int = 0
    pins: tuple[int, ...] = ()        # copy jobs reading this snapshot
    error: str | None = None          # last failure of a PENDING create

    def replace(self, **changes) -> "SnapshotRecord":
        return msgspec.structs.replace(self, **changes)

    def to_json(self) -> dict:
        return msgspec.to_builtins(self)


class Snapshots:
    def __init__(self, meta: "Meta"):
        self.kv = meta.kv
        self.keys = meta.keys

    def key(self, collection_id: int, name: str) -> str:
        return self.keys.snapshot(collection_id, name)

    def get(self, collection_id: int, name: str) -> tuple[SnapshotRecord, KeyValue]:
        kv = self.kv.get(self.key(collection_id, name))
        if kv is None:
            raise NotFound(f"snapshot {name!r} not found in collection id {collection_id}")
        return decode_struct(kv.value, SnapshotRecord, kv.key), kv

    def find(self, collection_id: int, name: str) -> SnapshotRecord | None:
        try:
            return self.get(collection_id, name)[0]
        except NotFound:
            return None

    def create_pending(self, rec: SnapshotRecord) -> SnapshotRecord:
        """Create-if-absent on (collection, name): of two concurrent creates one wins."""
        key = self.key(rec.collection_id, rec.name)
        self.kv.txn([absent(key)], [Put(key, encode_struct(rec))],
                    reason=f"snapshot {rec.name!r} already exists for collection {rec.collection_name!r}")
        return rec

    def update(self, read: KeyValue, new: SnapshotRecord, reason: str | None = None) -> SnapshotRecord:
        """Replace the record read as `read`; Conflict if anyone changed it since."""
        self.kv.txn([unchanged(read)], [Put(read.key, encode_struct(new))], reason=reason)
        return new

    def transition(self, collection_id: int, name: str, to_state: str, **changes) -> SnapshotRecord:
        rec, kv = self.get(collection_id, name)
        if rec.state == to_state:
            return rec
        if to_state not in SNAPSHOT_TRANSITIONS[rec.state]:
            raise StateError(f"snapshot {name!r} is {rec.state}; {rec.state} -> {to_state} is not allowed")
        return self.update(kv, rec.replace(state=to_state, **changes))

    def remove(self, read: KeyValue) -> None:
        self.kv.txn([unchanged(read)], [Delete(read.key)])

    def list(self, collection_id: int | None = None) -> Iterator[SnapshotRecord]:
        for kv in self.kv.range(self.keys.snapshots_prefix(collection_id)):
            yield decode_struct(kv.value, SnapshotRecord, kv.key)

    def pin(self, collection_id: int, name: str, job_id: int) -> SnapshotRecord:
        """Mark a COMMITTED snapshot as read by a copy job (idempotent)."""
        def attempt() -> SnapshotRecord:
            rec, kv = self.get(collection_id, name)
            if rec.state != COMMITTED:
                raise StateError(f"snapshot {name!r} is {rec.state}; only a COMMITTED snapshot can be restored")
            if job_id in rec.pins:
                return rec
            return self.update(kv, rec.replace(pins=(*rec.pins, job_id)))
        return retry_on_conflict(attempt, f"pin snapshot {name!r}")

    def unpin(self, collection_id: int, name: str, job_id: int) -> None:
        """Idempotent: a missing snapshot or a job that holds no pin is fine."""
        def attempt() -> None:
            try:
                rec, kv = self.get(collection_id, name)
            except NotFound:
                return
            if job_id in rec.pins:
                self.update(kv, rec.replace(pins=tuple(p for p in rec.pins if p != job_id)))
        retry_on_conflict(attempt, f"unpin snapshot {name!r}")
