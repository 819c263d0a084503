"""Pure WAL buffers: reorder, txn, pending, and the scanner's handle() pipeline."""

from __future__ import annotations

import pyarrow as pa

from seglake.meta.alloc import compose_ts
from seglake.wal import message as M
from seglake.wal.message import Message, MessageId
from seglake.wal.pending import PendingQueue
from seglake.wal.reorder import ReorderBuffer
from seglake.wal.txn import TxnBuffer

_n = iter(range(1, 10**6))


def msg(tt: int, typ: str = M.INSERT, vch: str = "v0", txn: int = 0, mid: MessageId | None = None, **props):
    mid = mid or MessageId(1, 1, next(_n))
    return Message(typ, vch, time_tick=tt, txn_id=txn, term=1, id=mid, props=props)


def tick(tt: int) -> Message:
    return msg(tt, M.TIME_TICK, "")


# -- reorder ---------------------------------------------------------------------------
def test_reorder_releases_exactly_up_to_tick_sorted():
    b = ReorderBuffer()
    for tt in (50, 10, 30, 31, 20, 40):
        assert b.push(msg(tt))
    out = b.pop_until(30)
    assert [m.time_tick for m in out] == [10, 20, 30]
    assert len(b) == 3
    assert [m.time_tick for m in b.pop_until(100)] == [31, 40, 50]


def test_reorder_equal_ticks_release_in_id_order():
    b = ReorderBuffer()
    ids = [MessageId(1, 2, 5), MessageId(1, 1, 9), MessageId(1, 2, 0)]
    for mid in ids:
        b.push(msg(7, mid=mid))
    assert [m.id for m in b.pop_until(7)] == sorted(ids)


def test_reorder_late_message_dropped_and_counted():
    b = ReorderBuffer()
    b.push(msg(10))
    b.pop_until(20)
    assert not b.push(msg(19))
    assert b.late == 1 and len(b) == 0
    assert b.push(msg(20))  # equal to the last released tick is not late


def test_reorder_duplicate_id_dropped_and_counted():
    b = ReorderBuffer()
    mid = MessageId(1, 3, 0)
    assert b.push(msg(10, mid=mid))
    assert not b.push(msg(11, mid=mid))
    assert b.duplicates == 1
    assert len(b.pop_until(100)) == 1


# -- txn ---------------------------------------------------------------------------------
KEEP_MS = 1000


def begin(tt, txn, vch="v0"):
    return msg(tt, M.BEGIN_TXN, vch, txn, keepalive_ms=KEEP_MS)


def test_txn_commit_emits_bodies_together_at_commit_tick():
    t = TxnBuffer()
    plain = msg(5)
    out = t.handle([begin(10, 7), msg(11, txn=7), plain, msg(12, txn=7)], 12)
    assert out == [plain]
    commit = msg(20, M.COMMIT_TXN, txn=7)
    out = t.handle([commit], 20)
    assert [m.time_tick for m in out] == [20, 20]
    assert all(m.txn_id == 7 and m.type == M.INSERT for m in out)
    assert t.committed == 1 and len(t) == 0


def test_txn_rollback_drops_messages():
    t = TxnBuffer()
    t.handle([begin(10, 8), msg(11, txn=8)], 11)
    assert t.handle([msg(12, M.ROLLBACK_TXN, txn=8)], 12) == []
    assert t.rolled_back == 1 and len(t) == 0 and t.bytes == 0


def test_txn_expires_after_keepalive():
    t = TxnBuffer()
    t.handle([begin(compose_ts(1000), 9), msg(compose_ts(1500), txn=9)], compose_ts(1500))
    t.handle([], compose_ts(2499))       # last activity 1500 + 1000 ms not reached
    assert len(t) == 1
    t.handle([], compose_ts(2500))
    assert len(t) == 0 and t.expired == 1
    # a commit after expiry is an unknown txn: nothing emitted
    assert t.handle([msg(compose_ts(2600), M.COMMIT_TXN, txn=9)], compose_ts(2600)) == []
    assert t.unknown == 1


def test_txn_commit_of_unknown_txn_ignored():
    t = TxnBuffer()
    assert t.handle([msg(5, M.COMMIT_TXN, txn=42)], 5) == []
    assert t.unknown == 1


def test_txn_duplicate_begin_ignored_keeps_first():
    t = TxnBuffer()
    t.handle([begin(10, 3), msg(11, txn=3), begin(12, 3)], 12)
    assert t.duplicate_begin == 1
    out = t.handle([msg(13, M.COMMIT_TXN, txn=3)], 13)
    assert len(out) == 1   # the body sent before the repeated begin is kept


def test_txn_body_of_unknown_txn_dropped():
    t = TxnBuffer()
    assert t.handle([msg(3, txn=77)], 3) == []
    assert t.unknown == 1


# -- pending -----------------------------------------------------------------------------
def test_pending_queue_full_above_limit():
    q = PendingQueue(max_len=2)
    q.add([msg(1), msg(2)])
    assert not q.full()
    q.add([msg(3)])
    assert q.full()
    assert q.pop().time_tick == 1 and not q.full()


# -- scanner pipeline (no I/O) -------------------------------------------------------------
class _Settings:
    wal_batch_time = 0.0
    wal_txn_keepalive = 60.0
    wal_scanner_startup_delay = 0.0
    wal_pause_poll = 1.0
    wal_fragment_bytes = 1 << 20


def _pipeline(vchannel: str):
    from seglake.wal.scanner import Scanner

    s = Scanner.__new__(Scanner)
    s.vchannel = vchannel
    s.reorder, s.txn, s.pending = ReorderBuffer(), TxnBuffer(), PendingQueue(1000)
    from seglake.wal.scanner import ScanStats
    s.stats = ScanStats()
    return s


def _delivered(s):
    out = []
    while len(s.pending):
        out.append(s.pending.pop())
    return out


def test_vchannel_filter_passes_own_and_broadcast_never_filters_ticks():
    s = _pipeline("v1")
    for m in (msg(1, vch="v1"), msg(2, vch="v2"), msg(3, M.CREATE_COLLECTION, vch=""), tick(10)):
        s.handle(m)
    got = _delivered(s)
    assert [(m.type, m.vchannel) for m in got] == [(M.INSERT, "v1"), (M.CREATE_COLLECTION, ""), (M.TIME_TICK, "")]
    assert s.stats.filtered == 1


def test_no_vchannel_means_everything():
    s = _pipeline("")
    for m in (msg(1, vch="v1"), msg(2, vch="v2"), tick(3)):
        s.handle(m)
    assert len(_delivered(s)) == 3


def test_message_without_confirming_tick_is_held():
    s = _pipeline("")
    s.handle(msg(5))
    s.handle(tick(4))
    assert [m.type for m in _delivered(s)] == [M.TIME_TICK]
    s.handle(tick(5))
    assert [m.type for m in _delivered(s)] == [M.INSERT, M.TIME_TICK]


def test_message_encode_decode_roundtrip():
    batch = pa.record_batch([pa.array([1, 2], pa.int64())], names=["pk"])
    m = Message(M.INSERT, "v", 5, 3, 2, None, 10, 11, {"a": 1}, batch)
    back = Message.decode(m.encode(), MessageId(2, 4, 0))
    assert (back.type, back.vchannel, back.time_tick, back.txn_id, back.term, back.collection_id,
            back.partition_id, back.props) == (M.INSERT, "v", 5, 3, 2, 10, 11, {"a": 1})
    assert back.body.equals(batch) and back.id == MessageId(2, 4, 0)


def test_message_id_parse_and_order():
    assert MessageId.parse("1:2:3") == MessageId(1, 2, 3)
    assert MessageId(1, 2, 9) < MessageId(2, 3, 0)
    import pytest
    from seglake.errors import ValidationError
    for bad in ("1:2", "a:b:c", "1:-2:3"):
        with pytest.raises(ValidationError):
            MessageId.parse(bad)
