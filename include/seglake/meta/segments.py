"""Segment records: one etcd key per segment, saved and updated in batches.

    Growing -> Sealed -> Flushed -> Dropped
    Importing (target of a copy) -> Flushed | Dropped
    any live state -> Dropped   (record kept, with dropped_at, until GC reclaims files)

File paths are not stored: `storage.layout.segment_files()` derives every key from the
ids recorded here, so a record and its files cannot disagree on naming.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Iterator

from seglake.errors import Conflict, NotFound, StateError
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Delete, Put, batched, unchanged

if TYPE_CHECKING:
    from seglake.meta import Meta

GROWING, SEALED, FLUSHED, IMPORTING, DROPPED = "Growing", "Sealed", "Flushed", "Importing", "Dropped"
SEGMENT_TRANSITIONS = {
    GROWING: {SEALED, DROPPED},
    SEALED: {FLUSHED, DROPPED},
    FLUSHED: {DROPPED},
    IMPORTING: {FLUSHED, DROPPED},
    DROPPED: set(),
}
CAS_BATCH = 64  # segments per compare-guarded transaction (64 compares + 64 puts)


@dataclass(frozen=True)
class Binlog:
    """One log file: insert binlog (per field), delta log or stats log."""

    log_id: int
    size: int
    entries: int
    ts_from: int = 0
    ts_to: int = 0

    def to_json(self) -> list:
        return [self.log_id, self.size, self.entries, self.ts_from, self.ts_to]

    @classmethod
    def from_json(cls, d: list) -> "Binlog":
        return cls(*d)


@dataclass(frozen=True)
class IndexFile:
    build_id: int
    version: int
    name: str
    size: int

    def to_json(self) -> list:
        return [self.build_id, self.version, self.name, self.size]

    @classmethod
    def from_json(cls, d: list) -> "IndexFile":
        return cls(*d)


@dataclass(frozen=True)
class Segment:
    segment_id: int
    collection_id: int
    partition_id: int
    channel: str
    state: str
    num_rows: int = 0
    level: str = "L1"
    binlogs: dict[int, tuple[Binlog, ...]] = field(default_factory=dict)    # field_id -> logs
    deltalogs: tuple[Binlog, ...] = ()
    statslogs: dict[int, tuple[Binlog, ...]] = field(default_factory=dict)  # field_id -> logs
    index_files: tuple[IndexFile, ...] = ()
    start_ts: int = 0        # start position on the channel
    dml_ts: int = 0          # position up to which the segment holds data
    created_ts: int = 0
    dropped_at: float | None = None   # unix seconds
    source: dict | None = None        # copy target: {"collection_id", "partition_id", "segment_id"}

    @property
    def ref(self) -> tuple[int, int, int]:
        return self.collection_id, self.partition_id, self.segment_id

    def total_size(self) -> int:
        n = sum(b.size for logs in self.binlogs.values() for b in logs)
        n += sum(b.size for b in self.deltalogs)
        n += sum(b.size for logs in self.statslogs.values() for b in logs)
        return n + sum(f.size for f in self.index_files)

    def file_count(self) -> int:
        return (sum(len(v) for v in self.binlogs.values()) + len(self.deltalogs)
                + sum(len(v) for v in self.statslogs.values()) + len(self.index_files))

    def to_json(self) -> dict:
        d = {
            "segment_id": self.segment_id, "collection_id": self.collection_id,
            "partition_id": self.partition_id, "channel": self.channel, "state": self.state,
            "num_rows": self.num_rows, "level": self.level,
            "binlogs": {str(k): [b.to_json() for b in v] for k, v in self.binlogs.items()},
            "deltalogs": [b.to_json() for b in self.deltalogs],
            "statslogs": {str(k): [b.to_json() for b in v] for k, v in self.statslogs.items()},
            "index_files": [f.to_json() for f in self.index_files],
            "start_ts": self.start_ts, "dml_ts": self.dml_ts, "created_ts": self.created_ts,
        }
        if self.dropped_at is not None:
            d["dropped_at"] = self.dropped_at
        if self.source is not None:
            d["source"] = self.source
        return d

    @classmethod
    def from_json(cls, d: dict) -> "Segment":
        return cls(
            segment_id=d["segment_id"], collection_id=d["collection_id"],
            partition_id=d["partition_id"], channel=d["channel"], state=d["state"],
            num_rows=d["num_rows"], level=d.get("level", "L1"),
            binlogs={int(k): tuple(Binlog.from_json(b) for b in v) for k, v in d["binlogs"].items()},
            deltalogs=tuple(Binlog.from_json(b) for b in d["deltalogs"]),
            statslogs={int(k): tuple(Binlog.from_json(b) for b in v) for k, v in d["statslogs"].items()},
            index_files=tuple(IndexFile.from_json(f) for f in d["index_files"]),
            start_ts=d.get("start_ts", 0), dml_ts=d.get("dml_ts", 0), created_ts=d.get("created_ts", 0),
            dropped_at=d.get("dropped_at"), source=d.get("source"),
        )


class Segments:
    def __init__(self, meta: "Meta"):
        self.kv = meta.kv
        self.keys = meta.keys

    def key(self, seg: Segment) -> str:
        return self.keys.segment(seg.collection_id, seg.partition_id, seg.segment_id)

    def save(self, segments: Iterable[Segment]) -> int:
        """Upsert records in chunked transactions (128 ops / 1.4 MB each). Returns count."""
        return self._count_write(Put(self.key(s), encode(s.to_json())) for s in segments)

    def _count_write(self, ops: Iterable) -> int:
        n = 0
        for batch in batched(ops, 4096):
            self.kv.write(batch)
            n += len(batch)
        return n

    def get(self, collection_id: int, partition_id: int, segment_id: int) -> Segment:
        kv = self.kv.get(self.keys.segment(collection_id, partition_id, segment_id))
        if kv is None:
            raise NotFound(f"segment {segment_id} not found in collection {collection_id}")
        return Segment.from_json(decode(kv.value, kv.key))

    def list(self, collection_id: int | None = None, partition_id: int | None = None,
             states: Iterable[str] | None = None, page_size: int = 1000) -> Iterator[Segment]:
        """Paged, consistent read of the records under a collection (or all)."""
        wanted = set(states) if states else None
        for kv in self.kv.range(self.keys.segments_prefix(collection_id, partition_id), page_size=page_size):
            seg = Segment.from_json(decode(kv.value, kv.key))
            if wanted is None or seg.state in wanted:
                yield seg

    def transition(self, refs: Iterable[tuple[int, int, int]], to_state: str,
                   changes: dict | None = None, now: float | None = None) -> int:
        """Move segments to `to_state` in compare-guarded batches. Idempotent: a segment
        already in `to_state` is left alone; a disallowed transition raises StateError
        before anything in its batch is written. Returns how many records changed."""
        changed = 0
        for batch in batched(refs, CAS_BATCH):
            for _attempt in range(20):
                try:
                    changed += self._transition_batch(batch, to_state, changes, now)
                    break
                except Conflict:
                    continue  # someone else wrote one of them: re-read and re-check
            else:
                raise Conflict(f"could not move {len(batch)} segments to {to_state}: persistent contention")
        return changed

    def _transition_batch(self, batch, to_state, changes, now) -> int:
        compares, ops = [], []
        for c, p, s in batch:
            key = self.keys.segment(c, p, s)
            kv = self.kv.get(key)
            if kv is None:
                raise NotFound(f"segment {s} not found in collection {c}")
            seg = Segment.from_json(decode(kv.value, key))
            if seg.state == to_state:
                continue
            if to_state not in SEGMENT_TRANSITIONS[seg.state]:
                raise StateError(f"segment {s}: {seg.state} -> {to_state} not allowed")
            extra = dict(changes or {})
            if to_state == DROPPED:
                extra.setdefault("dropped_at", now)
            new = replace(seg, state=to_state, **extra)
            compares.append(unchanged(kv))
            ops.append(Put(key, encode(new.to_json())))
        if ops:
            self.kv.txn(compares, ops)
        return len(ops)

    def delete(self, refs: Iterable[tuple[int, int, int]]) -> int:
        return self._count_write(Delete(self.keys.segment(c, p, s)) for c, p, s in refs)
