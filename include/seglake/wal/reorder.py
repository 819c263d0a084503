"""Reorder buffer: holds messages until a time tick confirms them, releases them in
time-tick order.

- push(m): refused (counted as `late`) when m.time_tick < the last released tick, and
  (counted as `duplicates`) when its message id is already buffered.
- pop_until(tt): every buffered message with time_tick <= tt, sorted by (time tick, id);
  the last released tick becomes tt.
"""

from __future__ import annotations

import heapq

from seglake.wal.message import Message


class ReorderBuffer:
    def __init__(self) -> None:
        self._heap: list[tuple[int, object, int, Message]] = []
        self._ids: set = set()
        self._seq = 0
        self.last_pop_tt = 0
        self.bytes = 0
        self.late = 0
        self.duplicates = 0

    def push(self, m: Message) -> bool:
        """True when buffered; False when dropped (late or duplicate, counted)."""
        if m.time_tick < self.last_pop_tt:
            self.late += 1
            return False
        if m.id in self._ids:
            self.duplicates += 1
            return False
        self._seq += 1
        heapq.heappush(self._heap, (m.time_tick, m.id, self._seq, m))
        self._ids.add(m.id)
        self.bytes += m.estimate_size()
        return True

    def pop_until(self, tt: int) -> list[Message]:
        out = []
        while self._heap and self._heap[0][0] <= tt:
            m = heapq.heappop(self._heap)[3]
            self._ids.discard(m.id)
            self.bytes -= m.estimate_size()
            out.append(m)
        self.last_pop_tt = max(self.last_pop_tt, tt)
        return out

    def __len__(self) -> int:
        return len(self._heap)
