"""Id and timestamp allocation, both monotonic across restarts.

- IdAllocator: reserves blocks of ids with a compare-and-swap on `{root}/alloc/id`
  (value = the next unreserved id). A process hands out ids from its block; an unused
  remainder is simply skipped, never reissued.
- TSO: hybrid timestamps `physical_ms << 18 | logical`, ordered across every process
  sharing the root (like Milvus's TSO, without a TSO server). `{root}/alloc/tso` holds
  the global high-water mark: an upper bound on the physical part of every timestamp
  ever issued. An allocator reserves a window [lo, hi) by CAS (lo = max(mark, wall),
  persisted hi = lo + window) and issues timestamps inside it, but only while its
  reservation is still the newest: each `now()` confirms that with one linearizable
  read of the key's revision. If anyone reserved since, it reserves a new window above
  theirs. So a timestamp issued after another one returned (any process) is larger,
  a restarted or new allocator starts above everything issued, and a wall clock that
  goes backwards only stalls the physical part (the logical part counts on).
  Cost: one etcd read per timestamp, plus a CAS per window of wall time; allocators
  taking turns faster than the window run ahead of the wall clock by a window a turn.
"""

from __future__ import annotations

import threading
import time

from seglake.errors import Conflict
from seglake.meta.kv import KV, KeyValue, Put, absent, unchanged

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
TSO_WINDOW_MS = 250  # small: allocators taking turns faster than this push the mark ahead by it
FIRST_ID = 1


def compose_ts(physical_ms: int, logical: int = 0) -> int:
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def ts_seconds(ts: int) -> float:
    return physical_ms(ts) / 1000.0


def _cas_advance(kv: KV, key: str, advance) -> tuple[int, int]:
    """Atomically replace integer value `cur` by `advance(cur)`; return (cur, new)."""
    for _ in range(100):
        cur_kv = kv.get(key)
        cur = int(cur_kv.value) if cur_kv else None
        new = advance(cur)
        guard = unchanged(cur_kv) if cur_kv else absent(key)
        try:
            kv.txn([guard], [Put(key, str(new))])
            return (cur if cur is not None else 0), new
        except Conflict:
            continue
    raise Conflict(f"could not advance {key} after 100 attempts")


class IdAllocator:
    def __init__(self, kv: KV, key: str, block_size: int = 10000):
        self.kv, self.key, self.block_size = kv, key, block_size
        self._next = self._end = 0
        self._lock = threading.Lock()

    def allocate(self, n: int = 1) -> int:
        """First id of a fresh contiguous range of `n` ids."""
        if n < 1:
            raise ValueError("allocate at least one id")
        with self._lock:
            if self._end - self._next < n:
                size = max(n, self.block_size)
                cur, new = _cas_advance(self.kv, self.key, lambda c: (c or FIRST_ID) + size)
                self._next, self._end = new - size, new
            first = self._next
            self._next += n
            return first


class TSO:
    def __init__(self, kv: KV, key: str, clock=time.time, window_ms: int = TSO_WINDOW_MS):
        self.kv, self.key, self.clock, self.window_ms = kv, key, clock, window_ms
        self._lock = threading.Lock()
        self._physical = self._logical = 0
        self._hi = 0   # end (exclusive) of this allocator's reserved window
        self._rev = 0  # mod_revision of the key written by that reservation (0: none)

    def _reserve(self, cur: KeyValue | None) -> int:
        """CAS a new window above the global mark (and the wall clock); its first ts."""
        while True:
            mark = int(cur.value) if cur else 0
            lo = max(mark, int(self.clock() * 1000), self._hi)
            hi = lo + self.window_ms
            try:
                self._rev = self.kv.txn([unchanged(cur) if cur else absent(self.key)],
                                        [Put(self.key, str(hi))])
            except Conflict:  # another allocator reserved meanwhile: go above it
                cur = self.kv.get(self.key)
                continue
            self._hi, self._physical, self._logical = hi, lo, 0
            return compose_ts(lo)

    def now(self) -> int:
        """A hybrid timestamp larger than every timestamp any allocator on this key
        issued before this call began."""
        with self._lock:
            cur = self.kv.get(self.key)  # linearizable: is our window still the newest?
            if cur is None or cur.mod_revision != self._rev:
                return self._reserve(cur)
            physical, logical = int(self.clock() * 1000), 0
            if physical <= self._physical:  # same ms, or the clock went back
                physical, logical = self._physical, self._logical + 1
                if logical > LOGICAL_MASK:
                    physical, logical = physical + 1, 0
            if physical >= self._hi:
                return self._reserve(cur)
            self._physical, self._logical = physical, logical
            return compose_ts(physical, logical)

    def reserve(self, count: int, above: int = 0) -> int:
        """The first of `count` consecutive timestamps, all > `above` and issued to no
        one else (consumed one by one from this allocator's window: each now() is one
        linearizable read, see the module docstring)."""
        with self._lock:
            pass
        first = self.now()
        if first <= above:
            self.advance_past(above)
            first = self.now()
        last = first
        for _ in range(count - 1):
            last = self.now()
        return last - count + 1 if last - first >= count - 1 else first

    def advance_past(self, ts: int) -> None:
        """Every timestamp issued after this returns (any allocator) is > ts: the mark
        moves above ts's physical part by CAS, which also ends every window reserved
        before (each now() checks the key's revision)."""
        _cas_advance(self.kv, self.key, lambda c: max(c or 0, physical_ms(ts) + 1))
