"""Pending queue: messages ready for the consumer, in delivery order, with a size
bound the scanner uses for backpressure (stop reading the log while it is full)."""

from __future__ import annotations

from collections import deque

from seglake.wal.message import Message


class PendingQueue:
    def __init__(self, max_len: int = 16) -> None:
        self._q: deque[Message] = deque()
        self.max_len = max_len
        self.bytes = 0

    def add(self, msgs: list[Message]) -> None:
        for m in msgs:
            self._q.append(m)
            self.bytes += m.estimate_size()

    def full(self) -> bool:
        return len(self._q) > self.max_len

    def peek(self) -> Message | None:
        return self._q[0] if self._q else None

    def pop(self) -> Message:
        m = self._q.popleft()
        self.bytes -= m.estimate_size()
        return m

    def __len__(self) -> int:
        return len(self._q)
