"""The scanner adaptor: what a consumer of a pchannel sees.

    log fragments --read--> reorder buffer --(TimeTick tt)--> pop tt' <= tt sorted
        --> txn buffer --> [vchannel filter] --> pending queue --> consumer

Rules (scanner_adaptor.go):
- reads the committed log from a message id (inclusive) or the beginning, fragment by
  fragment (a damaged fragment raises CorruptFragment naming it);
- a TimeTick is never filtered: it releases the reorder buffer up to its tick, the
  released messages go through the txn buffer, then the tick itself is delivered;
- other messages are pushed into the reorder buffer (late or duplicate ones dropped and
  counted); what the txn buffer releases is filtered by vchannel (`""` = broadcast
  reaches every consumer): the filter runs AFTER the transaction buffer, so a txn's
  control messages are always seen whatever vchannel the consumer reads;
- backpressure: pull-based, the log is read only when the consumer asks and nothing
  is pending, and never while the pending queue holds more than `max_pending`
  messages (a commit may release many at once); at most PREFETCH fragments are read
  and checked ahead;
- a consuming scanner waits `wal_scanner_startup_delay` after it is created, then
  blocks while a pause flag (its pchannel's or the global one, in etcd) is set; the
  flag is re-read every `wal_pause_poll` while consuming. A recovery scanner ignores
  both (a writer must be able to replay and fence while consumers are held back).

Pull-based: `next(timeout)` returns the next message or None (a helper thread reads
ahead). For the flusher: `Scanner(meta, store, p, settings, start=<minimum checkpoint id>)`
delivers every vchannel of `p` (vchannel="") in time-tick order from that id inclusive;
committed txn bodies carry their commit's time tick and keep their own ids; TimeTicks
are delivered too (they drive syncing); `last_message_id` is the last id delivered.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from seglake.wal import message as M
from seglake.wal.log import LogState, WalLog, check_wal_settings, pause_state
from seglake.wal.message import Message, MessageId
from seglake.wal.pending import PendingQueue
from seglake.wal.reorder import ReorderBuffer
from seglake.wal.txn import TxnBuffer

PREFETCH = 2   # fragments read and checked ahead of the consumer


@dataclass
class ScanStats:
    read: int = 0          # messages read from the log
    filtered: int = 0      # dropped by the vchannel filter
    delivered: int = 0
    fragments: int = 0
    bytes: int = 0         # bytes of the fragments read (their index records' sizes)
    paused_seconds: float = 0.0


class Scanner:
    def __init__(self, meta, store, pchannel: str, settings, *, start: MessageId | None = None,
                 vchannel: str = "", recovery: bool = False, follow: bool = True, max_pending: int = 16,
                 poll_interval: float = 0.05, clock=time.monotonic, sleep=time.sleep, log=None):
        """`log`: where the fragments come from (default: the pchannel's log in `store`;
        an ArchivedLog reads a WAL archive in a backup target: lifecycle/backup/archive.py)."""
        check_wal_settings(settings)
        self.log = WalLog(meta, store, pchannel) if log is None else log
        self.meta, self.settings = meta, settings
        self.pchannel = pchannel
        self.start = None if start is None else MessageId.parse(start)
        self.vchannel = vchannel
        self.recovery = recovery
        self.follow = follow
        self.poll_interval = poll_interval
        self.clock, self.sleep = clock, sleep
        self.reorder = ReorderBuffer()
        self.txn = TxnBuffer()
        self.pending = PendingQueue(max_pending)
        self.stats = ScanStats()
        self._created = clock()
        self._started = recovery
        self._next_fragment = self.start.fragment if self.start else 1
        self._state: LogState | None = None
        self._frag: deque[Message] = deque()
        self._recs: deque = deque()   # index records of committed fragments not yet read
        self._ahead: deque = deque()
        self._pool = None
        self._error: Exception | None = None   # a read failure, raised after what preceded it
        self._pause_checked = -1e18
        self.last_message_id: MessageId | None = None

    # -- consumption gate ------------------------------------------------------------------
    def paused(self) -> dict | None:
        return None if self.recovery else pause_state(self.meta, self.pchannel)

    def _gate(self, deadline: float | None) -> bool:
        """Startup delay, then pause. False when the deadline passed first."""
        if self.recovery:
            return True
        if not self._started:
            ready_at = self._created + self.settings.wal_scanner_startup_delay
            while self.clock() < ready_at:
                if deadline is not None and self.clock() >= deadline:
                    return False
                self.sleep(min(self.poll_interval, ready_at - self.clock()) if deadline is None
                           else max(0.0, min(self.poll_interval, ready_at - self.clock(), deadline - self.clock())))
        if self._started and self.clock() - self._pause_checked < self.settings.wal_pause_poll:
            return True
        began = self.clock()
        while self.paused() is not None:
            if deadline is not None and self.clock() >= deadline:
                self.stats.paused_seconds += self.clock() - began
                return False
            self.sleep(self.settings.wal_pause_poll if deadline is None
                       else max(0.0, min(self.settings.wal_pause_poll, deadline - self.clock())))
        self.stats.paused_seconds += self.clock() - began
        self._pause_checked = self.clock()
        self._started = True
        return True

    # -- reading -----------------------------------------------------------------------------
    def _read_one(self) -> Message | None:
        """The next committed message of the log, or None when caught up. Up to
        PREFETCH fragments are read and checked ahead on a helper thread (file reads and
        CRC32C run without the GIL), in order; a damaged one raises when reached."""
        while not self._frag:
            if not self._ahead:
                if not self._recs:
                    if self._state is not None:
                        if not self.follow:
                            return None
                    self._state = self.log.state()
                    if self._state.last >= self._next_fragment:
                        self._recs.extend(self.log.fragments(self._next_fragment, self._state))
                self._fill_ahead()
                if not self._ahead:
                    return None
            n, size, fut = self._ahead.popleft()
            msgs = fut.result()
            self._fill_ahead()
            self.stats.fragments += 1
            self.stats.bytes += size
            if self.start is not None and n == self.start.fragment:
                msgs = [m for m in msgs if not m.id < self.start]
            self._frag.extend(msgs)
        self.stats.read += 1
        return self._frag.popleft()

    def _fill_ahead(self) -> None:
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor
            # two workers: one fragment's read overlaps the previous one's checksum
            self._pool = ThreadPoolExecutor(PREFETCH, thread_name_prefix=f"wal-scan-{self.pchannel}")
        while len(self._ahead) < PREFETCH and self._recs:
            rec = self._recs.popleft()
            self._ahead.append((rec.n, rec.size or 0, self._pool.submit(self.log.read_fragment, rec)))
            self._next_fragment = rec.n + 1

    def _pump(self) -> bool:
        """Read from the log until something is deliverable, never while the pending
        queue is full (reading lazily keeps few fragment buffers alive). True if
        anything was read."""
        progressed = False
        while not self.pending.full() and not len(self.pending) and self._error is None:
            try:
                m = self._read_one()
            except Exception as e:  # noqa: BLE001 - raised once what came before is delivered
                self._error = e
                break
            if m is None:
                break
            progressed = True
            self.handle(m)
        return progressed

    def handle(self, m: Message) -> None:
        """One message from upstream through filter, reorder and txn buffers."""
        if m.type == M.TIME_TICK:
            released = self.txn.handle(self.reorder.pop_until(m.time_tick), m.time_tick, m.term)
            if self.vchannel:
                kept = [r for r in released if not r.vchannel or r.vchannel == self.vchannel]
                self.stats.filtered += len(released) - len(kept)
                released = kept
            self.pending.add(released)
            self.pending.add([m])
            return
        self.reorder.push(m)

    # -- API ----------------------------------------------------------------------------------
    def next(self, timeout: float | None = None) -> Message | None:
        """The next message for this consumer; None if none came within `timeout`
        (None: wait forever when following, return at the end otherwise)."""
        deadline = None if timeout is None else self.clock() + timeout
        if not self._gate(deadline):
            return None
        while True:
            if len(self.pending):
                m = self.pending.pop()
                self.stats.delivered += 1
                if m.id is not None:
                    self.last_message_id = m.id
                return m
            if self._pump():
                continue
            if self._error is not None:
                raise self._error
            if not self.follow or (deadline is not None and self.clock() >= deadline):
                return None
            self.sleep(self.poll_interval if deadline is None
                       else max(0.0, min(self.poll_interval, deadline - self.clock())))
            if not self._gate(deadline):
                return None

    def __iter__(self):
        while True:
            m = self.next()
            if m is None:
                return
            yield m

    def drain(self) -> list[Message]:
        """Everything deliverable now, without waiting for new fragments."""
        out = []
        self._state = None  # re-read the log record once
        follow, self.follow = self.follow, False
        try:
            while (m := self.next(timeout=0)) is not None:
                out.append(m)
        finally:
            self.follow = follow
        return out

    def drain_more(self) -> None:
        """Read the log record again at the next read (a non-following scanner that
        reached the end sees what was committed since)."""
        self._state = None

    @property
    def late(self) -> int:
        return self.reorder.late

    @property
    def duplicates(self) -> int:
        return self.reorder.duplicates

    def close(self) -> None:
        self._frag.clear()
        self._ahead.clear()
        self._recs.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def recovery_scanner(meta, store, pchannel: str, settings, start: MessageId | None = None, **kw) -> Scanner:
    """Reads everything (no vchannel filter) and ignores pause and startup delay."""
    return Scanner(meta, store, pchannel, settings, start=start, recovery=True, **kw)
