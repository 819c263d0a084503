"""Write buffers of the flusher: one growing segment's rows and deletes, and the seal
policies that decide when it is sealed.

- A SegmentBuffer holds the Arrow batches of ONE growing segment (one vchannel and
  partition), the deletes that target its rows, its first/last row time tick and the
  checkpoint position (`start`) that a replay must begin at to rebuild it.
- Seal policies (checked only at time-tick boundaries, so rows sharing a time tick,
  e.g. a committed transaction, always land in one segment): rows, buffered bytes, age
  since the first row, idle time since the last row, or an explicit Flush.
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
    segment_id: int
    collection_id: int
    partition_id: int
    vchannel: str
    start: tuple | None          # (MessageId, time tick) a replay must start from, None = log start
    opened_at: float             # clock seconds
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    bytes: int = 0
    first_tt: int = 0
    last_tt: int = 0
    last_write: float = 0.0
    del_pks: list[np.ndarray] = field(default_factory=list)
    del_ts: list[np.ndarray] = field(default_factory=list)
    sealed: str | None = None    # the policy that sealed it
    record_rev: int = 0          # mod revision of the Growing record (guards the commit)
    _pks: np.ndarray | None = None

    def add_rows(self, batch: pa.RecordBatch, tt: int, now: float) -> None:
        if not self.rows:
            self.first_tt = tt
        self.batches.append(batch)
        self.rows += batch.num_rows
        self.bytes += batch.nbytes
        self.last_tt = max(self.last_tt, tt)
        self.last_write = now
        self._pks = None

    def pks(self, pk_name: str) -> np.ndarray:
        if self._pks is None:
            cols = [b.column(pk_name).to_numpy(zero_copy_only=False) for b in self.batches]
            self._pks = np.concatenate(cols) if cols else np.array([], dtype=np.int64)
        return self._pks

    def add_deletes(self, pks: np.ndarray, tt: int) -> None:
        if len(pks):
            self.del_pks.append(pks.astype(np.int64))
            self.del_ts.append(np.full(len(pks), tt, dtype=np.uint64))

    @property
    def deletes(self) -> int:
        return sum(len(p) for p in self.del_pks)

    def seal_reason(self, policy: SealPolicy, now: float) -> str | None:
        """Which policy seals this segment now (None: keep growing)."""
        if not self.rows:
            return None
        if self.rows >= policy.rows:
            return ROWS
        if self.bytes >= policy.bytes:
            return BYTES
        if now - self.opened_at >= policy.age:
            return AGE
        if now - self.last_write >= policy.idle:
            return IDLE
        return None

    def table(self, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=schema)


@dataclass
class DeltaBuffer:
    """Deletes aimed at rows of an already-Flushed segment, waiting for their delta log."""

    segment_id: int
    partition_id: int
    start: tuple | None
    pks: list[np.ndarray] = field(default_factory=list)
    ts: list[np.ndarray] = field(default_factory=list)

    def add(self, pks: np.ndarray, tt: int) -> None:
        self.pks.append(pks.astype(np.int64))
        self.ts.append(np.full(len(pks), tt, dtype=np.uint64))

    @property
    def count(self) -> int:
        return sum(len(p) for p in self.pks)
