"""Write buffers of the flusher: one growing segment's rows and deletes, and the seal
policies that decide when it is sealed.

- A SegmentBuffer holds the Arrow batches of ONE growing segment (one vchannel and
  partition) with their ticks (the rows' timestamps), and the checkpoint position
  (`start`) that a replay must begin at to rebuild it.
- A DeleteBuffer holds a vchannel's deletes (pk, ts, partition) until the next sync.
- Seal policies (checked only at time-tick boundaries): rows, buffered bytes, age since
  the first row, idle time since the last row -- both measured in TICKS, the one global
  clock (so data ages across flusher runs: the next run seals what is old enough,
  however small) -- or an explicit Flush.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from seglake.errors import ValidationError

ROWS, BYTES, AGE, IDLE, FLUSH = "rows", "bytes", "age", "idle", "flush"


@dataclass(frozen=True)
class SealPolicy:
    rows: int
    bytes: int
    age: float      # seconds since the first row
    idle: float     # seconds since the last row

    @classmethod
    def from_settings(cls, s) -> "SealPolicy":
        return cls(s.flush_seal_rows, s.flush_seal_bytes, s.flush_seal_age, s.flush_seal_idle).validate()

    def validate(self) -> "SealPolicy":
        """Every bound finite and in range; refused before any side effect."""
        for k, lo, hi in (("rows", 1, 100_000_000), ("bytes", 1024, 1 << 40)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValidationError(f"config key 'flush_seal_{k}': must be an integer in [{lo}, {hi}], got {v!r}")
        for k, lo, hi in (("age", 0.0, 30 * 86400.0), ("idle", 0.0, 30 * 86400.0)):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise ValidationError(f"config key 'flush_seal_{k}': must be a finite duration in [{lo}, {hi}] s, got {v!r}")
        return self


@dataclass
class SegmentBuffer:
    """The rows of ONE growing segment (one vchannel and partition), each batch with its
    time tick (the rows' timestamp), and the checkpoint position (`start`) a replay must
    begin at to rebuild it. Ages are measured in ticks (the data's age in the log), so a
    segment ages across flusher runs."""

    segment_id: int
    collection_id: int
    partition_id: int
    vchannel: str
    start: tuple | None          # Checkpoint a replay must start from, None = log start
    batches: list[pa.RecordBatch] = field(default_factory=list)
    ticks: list[int] = field(default_factory=list)   # one per batch
    stamps: list[int] = field(default_factory=list)  # one per batch: its rows' timestamp (the tick, or an upsert's call's)
    rows: int = 0
    bytes: int = 0
    first_tt: int = 0
    last_tt: int = 0
    sealed: str | None = None    # the policy that sealed it
    record_rev: int = 0          # mod revision of the Growing record (guards the commit)

    def add_rows(self, batch: pa.RecordBatch, tt: int, ts: int | None = None) -> None:
        """Rows of the message at tick `tt`, stamped `ts` (an upsert's call timestamp, at or
        below the tick) or else the tick."""
        if not self.rows:
            self.first_tt = tt
        self.batches.append(batch)
        self.ticks.append(tt)
        self.stamps.append(ts or tt)
        self.rows += batch.num_rows
        self.bytes += batch.nbytes
        self.last_tt = max(self.last_tt, tt)

    def row_ts(self) -> np.ndarray:
        """Each row's timestamp (its message's tick, or its upsert call's), int64."""
        return np.repeat(np.array(self.stamps, dtype=np.int64), [b.num_rows for b in self.batches])

    def seal_reason(self, policy: SealPolicy, now_tt: int) -> str | None:
        """Which policy seals this segment at tick `now_tt` (None: keep growing)."""
        if not self.rows:
            return None
        if self.rows >= policy.rows:
            return ROWS
        if self.bytes >= policy.bytes:
            return BYTES
        return _age_reason(policy, self.first_tt, self.last_tt, now_tt)

    def table(self, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=schema)


def _age_reason(policy: SealPolicy, first_tt: int, last_tt: int, now_tt: int) -> str | None:
    from seglake.meta.alloc import physical_ms

    now = physical_ms(now_tt)
    if now - physical_ms(first_tt) >= policy.age * 1000:
        return AGE
    if now - physical_ms(last_tt) >= policy.idle * 1000:
        return IDLE
    return None


@dataclass
class DeleteBuffer:
    """The deletes of one vchannel since its last sync, in tick order: (pk, ts,
    partition scope; 0 = every partition). They ride in the delta log of the next
    segment synced on the vchannel, or of a 0-row L0 segment (visibility reads every
    delta log of the collection, so where a delete is stored does not matter)."""

    start: tuple | None
    pks: list[np.ndarray] = field(default_factory=list)
    ts: list[np.ndarray] = field(default_factory=list)
    parts: list[np.ndarray] = field(default_factory=list)
    first_tt: int = 0
    last_tt: int = 0

    def add(self, pks: np.ndarray, tt: int, partition_id: int, ts: int | None = None) -> None:
        """Deletes of the message at tick `tt`, stamped `ts` (default: tt; an upsert's
        implied delete: its call's timestamp, at or below tt)."""
        if not self.count:
            self.first_tt = tt
        self.last_tt = tt
        self.pks.append(pks.astype(np.int64))
        self.ts.append(np.full(len(pks), tt if ts is None else ts, dtype=np.int64))
        self.parts.append(np.full(len(pks), partition_id, dtype=np.int64))

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.pks)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.concatenate(self.pks), np.concatenate(self.ts), np.concatenate(self.parts)

    def due(self, policy: SealPolicy, now_tt: int) -> bool:
        return bool(self.count) and _age_reason(policy, self.first_tt, self.last_tt, now_tt) is not None
