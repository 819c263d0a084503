"""Transaction buffer: holds a transaction's messages until it ends.

Input: messages released by the reorder buffer (time-tick order) and the confirming
time tick. Output: what may be consumed now. A transaction is named by its producer
and its txn id (producers never share one: a retry on a new producer under the same
id is another transaction).
- no txn id: passes through at once;
- BeginTxn: opens the txn (a second Begin of an open txn id is ignored, counted);
- body (Insert/Delete with a txn id): buffered; the txn's expiry moves to
  body.time_tick + keepalive; a body of an unknown txn is dropped (counted);
- CommitTxn: the txn's bodies are emitted together, in their order, each stamped with
  one of the k ticks just below the commit's (the producer gave the commit k+1 ticks,
  `props["bodies"]` = k): so each message keeps its own order ({insert pk 5; delete
  5; insert 5} leaves the second insert visible) and all of them come after everything
  before the commit (ids kept). A commit of an unknown txn is ignored (counted);
- RollbackTxn: the txn's messages are dropped;
- after each batch every txn whose expiry <= the confirming tick is dropped (expired);
- a DropCollection ends every open txn with a message on its vchannel (counted as
  `dropped`; the writer refuses their commit: a txn never commits half, nor rows into
  a released vchannel, and holds no safe point back);
- a failover ends every open txn (the writer refuses a body or commit of a txn begun
  under an older term): the first message or confirming tick of a newer term drops
  every txn begun under an older one (counted as `fenced`). Without it a txn the new
  writer can never commit held every safe point back until its keepalive, and a retry
  under the same txn id merged the uncommitted first attempt's bodies into the retry's
  commit (rows twice). Ticks of a newer term are above every older term's, so nothing
  of an older term follows in tick order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from seglake.meta.alloc import compose_ts
from seglake.wal import message as M
from seglake.wal.message import Message


@dataclass
class _Txn:
    begin: Message
    keepalive_ts: int
    expires_at: int
    body: list[Message] = field(default_factory=list)


def _keepalive_ts(ms: int) -> int:
    return compose_ts(int(ms))


class TxnBuffer:
    def __init__(self) -> None:
        self._txns: dict[int, _Txn] = {}
        self.bytes = 0
        self.committed = self.rolled_back = self.expired = 0
        self.unknown = self.duplicate_begin = self.fenced = self.dropped = 0
        self.legacy_commits = 0
        self.term = 0   # the newest WAL term seen

    def __len__(self) -> int:
        return len(self._txns)

    def open_on(self, vchannel: str) -> bool:
        """Whether an open transaction holds `vchannel` (its safe point waits for it)."""
        return any(t.begin.vchannel == vchannel for t in self._txns.values())

    def open_txns(self) -> list[dict]:
        """The open transactions: id, vchannel, begin tick, expiry tick, bodies."""
        return [{"txn_id": i[1], "producer": i[0], "vchannel": t.begin.vchannel, "begin_tt": t.begin.time_tick,
                 "expires_at": t.expires_at, "bodies": len(t.body)} for i, t in self._txns.items()]

    def next_expiry(self) -> int | None:
        return min((t.expires_at for t in self._txns.values()), default=None)

    def handle(self, msgs: list[Message], tt: int, term: int = 0) -> list[Message]:
        """`msgs` released up to the confirming tick `tt`, written at `term` (0: unknown)."""
        out: list[Message] = []
        for m in msgs:
            if m.term > self.term:
                self._new_term(m.term)
            if not m.txn_id:
                if m.type == M.DROP_COLLECTION:
                    self._end_touching(m.vchannel)
                out.append(m)
            elif m.type == M.BEGIN_TXN:
                self._begin(m)
            elif m.type == M.COMMIT_TXN:
                out.extend(self._commit(m))
            elif m.type == M.ROLLBACK_TXN:
                self._drop((m.producer, m.txn_id), "rolled_back")
            else:
                self._body(m)
        if term > self.term:
            self._new_term(term)
        self._expire(tt)
        return out

    def _end_touching(self, vchannel: str) -> None:
        for txn_id in [i for i, t in self._txns.items()
                       if t.begin.vchannel == vchannel or any(b.vchannel == vchannel for b in t.body)]:
            self._drop(txn_id, "dropped")

    def _new_term(self, term: int) -> None:
        self.term = term
        for txn_id in [i for i, t in self._txns.items() if t.begin.term < term]:
            self._drop(txn_id, "fenced")

    def _begin(self, m: Message) -> None:
        if (m.producer, m.txn_id) in self._txns:
            self.duplicate_begin += 1
            return
        ka = _keepalive_ts(m.props.get("keepalive_ms", 0))
        self._txns[(m.producer, m.txn_id)] = _Txn(m, ka, m.time_tick + ka)
        self.bytes += m.estimate_size()

    def _body(self, m: Message) -> None:
        t = self._txns.get((m.producer, m.txn_id))
        if t is None:
            self.unknown += 1
            return
        t.body.append(m)
        t.expires_at = max(t.expires_at, m.time_tick + t.keepalive_ts)
        self.bytes += m.estimate_size()

    def _commit(self, m: Message) -> list[Message]:
        t = self._txns.pop((m.producer, m.txn_id), None)
        if t is None:
            self.unknown += 1
            return []
        self.bytes -= t.begin.estimate_size() + sum(b.estimate_size() for b in t.body)
        self.committed += 1
        k = m.props.get("bodies")
        if not isinstance(k, int) or k < len(t.body):   # a log written before the row model
            self.legacy_commits += 1
            return [replace(b, time_tick=m.time_tick) for b in t.body]
        first = m.time_tick - len(t.body)
        return [replace(b, time_tick=first + i) for i, b in enumerate(t.body)]

    def _drop(self, txn_id: int, counter: str) -> None:
        t = self._txns.pop(txn_id, None)
        if t is None:
            if counter == "rolled_back":
                self.unknown += 1
            return
        self.bytes -= t.begin.estimate_size() + sum(b.estimate_size() for b in t.body)
        setattr(self, counter, getattr(self, counter) + 1)

    def _expire(self, tt: int) -> None:
        for txn_id in [i for i, t in self._txns.items() if t.expires_at <= tt]:
            self._drop(txn_id, "expired")
