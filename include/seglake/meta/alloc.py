"""Id and timestamp allocation, both monotonic across restarts.

- IdAllocator: reserves blocks of ids with a compare-and-swap on `{root}/alloc/id`
  (value = the next unreserved id). A process hands out ids from its block; an unused
  remainder is simply skipped, never reissued.
- TSO: hybrid timestamps `physical_ms << 18 | logical`. The persisted value at
  `{root}/alloc/tso` is an upper bound (a window 3 s ahead) on every physical part ever
  issued; a restarted allocator starts above it, so timestamps never go backwards even
  if the wall clock does.
"""

from __future__ import annotations

import threading
import time

from seglake.errors import Conflict
from seglake.meta.kv import KV, Put, absent, unchanged

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
TSO_WINDOW_MS = 3000
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
    def __init__(self, kv: KV, key: str, clock=time.time):
        self.kv, self.key, self.clock = kv, key, clock
        self._lock = threading.Lock()
        self._physical = 0
        self._logical = 0
        self._window = 0  # persisted upper bound of physical
        saved = kv.get(key)
        self._physical = int(saved.value) + 1 if saved else 0

    def _extend_window(self, physical: int) -> None:
        _, new = _cas_advance(self.kv, self.key, lambda c: max(c or 0, physical) + TSO_WINDOW_MS)
        self._window = new
        # another process may have pushed the window: never issue below its start
        self._physical = max(self._physical, new - TSO_WINDOW_MS)

    def now(self) -> int:
        """A hybrid timestamp strictly greater than any this key has issued before."""
        with self._lock:
            wall = int(self.clock() * 1000)
            if wall > self._physical:
                self._physical, self._logical = wall, 0
            else:
                self._logical += 1
                if self._logical > LOGICAL_MASK:
                    self._physical, self._logical = self._physical + 1, 0
            if self._physical >= self._window:
                self._extend_window(self._physical)
            return compose_ts(self._physical, self._logical)
