"""The scanner adaptor over a real log: start position, txn, filter, backpressure,
pause (consumer vs recovery), startup delay."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from seglake.meta.catalog import pchannel_of
from seglake.wal import message as M
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import set_pause
from seglake.wal.scanner import Scanner, recovery_scanner

from wal_helpers import inserted_pks, make_collection, pchannels


@pytest.fixture
def filled(meta, store, settings):
    """Collection with 2 shards on 2 pchannels: 3 plain batches, one committed txn, one
    rolled-back txn (hand-made), then deletes."""
    with WalClient(meta, store, settings, batch_rows=10) as c:
        coll = make_collection(c, shards=2)
        c.insert("c1", synthetic_rows(coll, 30, 1))
        c.insert("c1", synthetic_rows(coll, 10, 1000, shard=0), txn=True)
        v = coll.vchannels[0]
        w = c.writer(pchannel_of(v))
        w.append(M.Message.begin_txn(v, 555, 60000))
        w.append(M.Message.insert(v, coll.collection_id, coll.partitions[0].partition_id,
                                  synthetic_rows(coll, 5, 2000).to_batches()[0], txn_id=555))
        w.append(M.Message.rollback_txn(v, 555))
        c.delete("c1", [1, 2])
    return coll


def _key(meta, store, p, n):
    from seglake.wal.log import WalLog
    return next(r.key for r in WalLog(meta, store, p).fragments(n) if r.n == n)


def _scan(meta, store, settings, p, **kw):
    return Scanner(meta, store, p, settings, follow=False, **kw).drain()


def test_consumer_sees_committed_rows_only_in_tick_order(meta, store, settings, filled):
    pks = []
    for p in pchannels(filled):
        msgs = _scan(meta, store, settings, p)
        ticks = [m.time_tick for m in msgs]
        assert ticks == sorted(ticks)
        pks += inserted_pks(msgs)
    txn = synthetic_rows(filled, 10, 1000, shard=0).column("pk").to_pylist()
    assert sorted(pks) == list(range(1, 31)) + txn   # rolled-back 2000.. absent


def test_start_from_message_id_inclusive(meta, store, settings, filled):
    p = pchannels(filled)[0]
    everything = _scan(meta, store, settings, p)
    inserts = [m for m in everything if m.type == M.INSERT and not m.txn_id]
    start = inserts[1].id
    got = _scan(meta, store, settings, p, start=start)
    ids = [m.id for m in got if m.type == M.INSERT and not m.txn_id]
    assert ids[0] == start and all(not i < start for i in ids)
    assert got[0].id == start


def test_vchannel_filter_on_log(meta, store, settings):
    """Two vchannels on one pchannel: each consumer sees its own inserts and broadcasts."""
    with WalClient(meta, store, settings) as c:
        # collection ids chosen by the allocator: find two collections whose vchannels share a pchannel
        colls = [make_collection(c, name=f"k{i}", shards=1) for i in range(17)]
        by_p = {}
        for coll in colls:
            by_p.setdefault(pchannels(coll)[0], []).append(coll)
        a, b = next(v for v in by_p.values() if len(v) >= 2)[:2]
        c.insert(a.name, synthetic_rows(a, 3, 1))
        c.insert(b.name, synthetic_rows(b, 4, 100))
        p = pchannels(a)[0]
        c.writer(p).append(M.Message(M.FLUSH, ""))   # a broadcast
    got = _scan(meta, store, settings, p, vchannel=a.vchannels[0])
    assert sorted(inserted_pks(got)) == [1, 2, 3]
    assert any(m.type == M.FLUSH and m.vchannel == "" for m in got)
    assert not any(m.vchannel == b.vchannels[0] for m in got)
    assert any(m.type == M.TIME_TICK for m in got)


def test_backpressure_stops_reading_when_pending_full(meta, store, settings):
    """A commit releases 30 messages at once: while they wait, nothing more is read."""
    with WalClient(meta, store, settings, batch_rows=1) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 30, 1), txn=True)    # 30 bodies, one commit
        for i in range(10):
            c.insert("c1", synthetic_rows(coll, 1, 100 + i))     # 10 more fragments after it
    p = pchannels(coll)[0]
    s = Scanner(meta, store, p, settings, follow=False, max_pending=4)
    assert s.next(timeout=0).type == "CreateCollection"
    assert s.stats.read <= 2          # read on demand: not the whole log ahead of the consumer
    while (m := s.next(timeout=0)) is not None and m.txn_id == 0:
        pass
    assert m is not None and m.txn_id and len(s.pending) > 4      # the commit's release
    read_at_release = s.stats.read
    for _ in range(len(s.pending)):
        s.next(timeout=0)
        assert s.stats.read == read_at_release                   # no read while draining
    rest = s.drain()
    assert inserted_pks(rest) == list(range(100, 110))
    assert s.stats.read > read_at_release
    s.close()


def test_pause_blocks_consumer_not_recovery_and_resume_releases(meta, store, settings, filled):
    p = pchannels(filled)[0]
    fast = dataclasses.replace(settings, wal_pause_poll=0.05)
    set_pause(meta, p, True, "test")
    consumer = Scanner(meta, store, p, fast, follow=False)
    assert consumer.next(timeout=0.3) is None            # held back
    assert consumer.stats.delivered == 0
    rec = recovery_scanner(meta, store, p, fast, follow=False)
    assert rec.next(timeout=0.3) is not None             # ignores the flag
    got = []
    t = threading.Thread(target=lambda: got.append(consumer.next(timeout=10)))
    t.start()
    time.sleep(0.2)
    assert not got
    set_pause(meta, p, False)
    t.join(10)
    assert got and got[0] is not None


def test_global_pause_holds_every_pchannel(meta, store, settings, filled):
    fast = dataclasses.replace(settings, wal_pause_poll=0.05)
    set_pause(meta, None, True)
    for p in pchannels(filled):
        assert Scanner(meta, store, p, fast, follow=False).next(timeout=0.2) is None
    set_pause(meta, None, False)
    assert Scanner(meta, store, pchannels(filled)[0], fast, follow=False).next(timeout=1) is not None


def test_pause_while_consuming_blocks_after_refresh(meta, store, settings, filled):
    p = pchannels(filled)[0]
    now = [0.0]
    fast = dataclasses.replace(settings, wal_pause_poll=1.0)
    s = Scanner(meta, store, p, fast, follow=False, clock=lambda: now[0], sleep=lambda d: now.__setitem__(0, now[0] + d))
    assert s.next(timeout=0) is not None
    set_pause(meta, p, True)
    now[0] += 2.0                           # past the refresh interval
    assert s.next(timeout=0.5) is None
    set_pause(meta, p, False)
    assert s.next(timeout=0.5) is not None


def test_startup_delay_before_consuming(meta, store, settings, filled):
    p = pchannels(filled)[0]
    now = [100.0]
    slept = []

    def sleep(d):
        slept.append(d)
        now[0] += d
    delayed = dataclasses.replace(settings, wal_scanner_startup_delay=30.0)
    s = Scanner(meta, store, p, delayed, follow=False, clock=lambda: now[0], sleep=sleep)
    assert s.next(timeout=10) is None          # 10 s into a 30 s delay: nothing
    assert s.stats.read == 0
    m = s.next(timeout=60)
    assert m is not None and now[0] >= 130.0
    rec = recovery_scanner(meta, store, p, delayed, follow=False, clock=lambda: 0.0, sleep=sleep)
    assert rec.next(timeout=0) is not None    # recovery scanners do not wait


def test_follow_sees_new_fragments(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        p = pchannels(coll)[0]
        s = Scanner(meta, store, p, settings, poll_interval=0.01)
        s.drain()
        c.insert("c1", synthetic_rows(coll, 2, 50))
        got = []
        while (m := s.next(timeout=2)) is not None and m.type != M.INSERT:
            got.append(m)
        assert m is not None and m.body.column("pk").to_pylist() == [50, 51]


def test_damaged_fragment_raises_in_order_after_earlier_messages(meta, store, settings):
    from seglake.storage import layout
    from seglake.wal.log import CorruptFragment, WalLog
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        for i in range(5):
            c.insert("c1", synthetic_rows(coll, 1, 10 + i))
    p = pchannels(coll)[0]
    last = WalLog(meta, store, p).state().last
    path = store.root / _key(meta, store, p, last)
    path.write_bytes(path.read_bytes()[:-10])
    s = Scanner(meta, store, p, settings, follow=False)
    got = []
    with pytest.raises(CorruptFragment, match=_key(meta, store, p, last)):
        while (m := s.next(timeout=0)) is not None:
            got.append(m)
    assert inserted_pks(got) == [10, 11, 12, 13]   # everything before the damage, in order
    s.close()


def test_flush_reaches_each_vchannel_after_its_rows(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=2)
        c.insert("c1", synthetic_rows(coll, 10, 1))
        c.flush("c1")
    for v in coll.vchannels:
        got = Scanner(meta, store, pchannel_of(v), settings, follow=False, vchannel=v).drain()
        kinds = [m.type for m in got if m.type != M.TIME_TICK]
        assert kinds == [M.CREATE_COLLECTION, M.INSERT, M.FLUSH]
        flush = next(m for m in got if m.type == M.FLUSH)
        assert flush.vchannel == v and all(m.time_tick < flush.time_tick for m in got if m.type == M.INSERT)
