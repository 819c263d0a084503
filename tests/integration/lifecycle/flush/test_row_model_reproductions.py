"""Issue 17's reproductions as regression tests (each seen failing on main d95988c):
deletes and inserts on restored and seeded collections, skewed writer clocks, producers
that fenced each other, an upsert inside a transaction, a filtered scanner and a txn."""

from __future__ import annotations

import time

import numpy as np
import pytest

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta import Meta
from seglake.meta.catalog import pchannel_of
from seglake.visibility import visible_rows
from seglake.wal import message as M
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.writer import WalWriter

from wal_helpers import make_collection, pchannels


def _flush(meta, store, settings, coll, **kw):
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True, **kw)


def _visible(meta, store, coll) -> list[int]:
    return sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())


def _restore(meta, store, src: str, target: str):
    snapshot.create(meta, store, src, "s1")
    job_id = restore.restore(meta, store, src, "s1", target)
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id, threads=2)
    copyjob.finalize(meta, job_id)
    return meta.catalog.get_by_name(target)


def test_deleting_every_row_of_a_restored_collection_leaves_none(meta, store, settings):
    """#1: restore used to give target segments round-robin vchannels while the WAL routes a
    delete by its pk's hash: 249 of 400 deleted rows stayed visible."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "src", shards=2)
        c.insert("src", synthetic_rows(coll, 400, 1))
    _flush(meta, store, settings, coll)
    tgt = _restore(meta, store, "src", "dst")
    assert _visible(meta, store, tgt) == list(range(1, 401))
    src_shard = {s.segment_id: s.channel for s in meta.segments.list(coll.collection_id)}
    for s in meta.segments.list(tgt.collection_id):   # source shard i -> target shard i
        assert s.channel == tgt.vchannels[coll.vchannels.index(src_shard[s.source["segment_id"]])]
    with WalClient(meta, store, settings) as c:
        c.delete("dst", list(range(1, 401)))
        c.upsert("dst", synthetic_rows(tgt, 5, 1000))
    _flush(meta, store, settings, tgt)
    assert _visible(meta, store, tgt) == list(range(1000, 1005))


@pytest.mark.parametrize("skew", [3600.0, -3600.0])
def test_inserts_into_a_restored_collection_survive_a_skewed_source_clock(store, settings, skew):
    """#2: the flusher skipped inserts whose tick was below the restored segments' ticks
    (written by a clock an hour ahead): acknowledged rows were never flushed. (A
    max_clock_skew that lets clocks an hour apart write: the rows are under test here,
    the bound in tests/integration/meta/test_tso_clock_skew.py.)"""
    settings = settings.replace(max_clock_skew=2 * abs(skew))
    with Meta.from_settings(settings) as meta:
        _skewed_source_then_restore(meta, store, settings, skew)


def _skewed_source_then_restore(meta, store, settings, skew):
    with WalClient(meta, store, settings, clock=lambda: time.time() + skew) as c:
        coll = make_collection(c, "src", shards=2)
        c.insert("src", synthetic_rows(coll, 20, 1))
    _flush(meta, store, settings, coll)
    tgt = _restore(meta, store, "src", "dst")
    with WalClient(meta, store, settings) as c:     # this writer's clock is right
        c.insert("dst", synthetic_rows(tgt, 20, 100))
        c.delete("dst", [1, 2])
    _flush(meta, store, settings, tgt)
    assert _visible(meta, store, tgt) == list(range(3, 21)) + list(range(100, 120))


def test_deletes_on_a_seeded_collection_reach_their_rows(meta, store, settings):
    """#1 on `demo seed`: 100 of 200 deletes were lost (segments round-robin)."""
    coll, _ = demo.seed(meta, store, demo.SeedParams(name="seeded", rows=100, segments=2, partitions=2,
                                                      shards=2, delete_ratio=0.0))
    before = _visible(meta, store, coll)
    gone = before[::2]
    with WalClient(meta, store, settings) as c:
        c.delete("seeded", gone)
    _flush(meta, store, settings, coll)
    assert _visible(meta, store, coll) == sorted(set(before) - set(gone))


def test_a_drop_of_one_collection_never_fences_another_collections_ingest(meta, store, settings):
    """#4: dropping c2 fenced an ingest into c1 on the same pchannel and killed its txn."""
    from seglake.lifecycle import drop
    with WalClient(meta, store, settings) as c:
        c1 = make_collection(c, "c1", shards=1)
        p = pchannels(c1)[0]
        # a second collection whose shard 0 rides the same pchannel
        c2 = next(x for x in (make_collection(c, f"o{i}", shards=1) for i in range(40))
                  if pchannels(x)[0] == p)
        rows = synthetic_rows(c1, 10, 1)
        c.insert("c1", rows.slice(0, 5))
        w = c.writer(p)
        v = c1.vchannels[0]
        w.append(M.Message.begin_txn(v, 4242, 60_000))
        w.append(M.Message.insert(v, c1.collection_id, c1.partitions[0].partition_id,
                                  M.conform_batch(rows.slice(5, 5).to_batches()[0], c1.schema), txn_id=4242))
        drop.begin_drop(meta, store, settings, c2.name)
        w.append(M.Message.commit_txn(v, 4242))     # neither fenced nor refused
        c.insert("c1", synthetic_rows(c1, 5, 100))
    _flush(meta, store, settings, c1)
    assert _visible(meta, store, c1) == list(range(1, 11)) + list(range(100, 105))


def test_an_upsert_inside_a_transaction_keeps_its_order(meta, store, settings):
    """#5: every txn body got the commit's tick, so {insert 100; delete 5; insert 5}
    left pk 5 dead."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
    v, part = coll.vchannels[0], coll.partitions[0].partition_id
    rows = M.conform_batch(synthetic_rows(coll, 100, 1).to_batches()[0], coll.schema)
    five = M.conform_batch(synthetic_rows(coll, 1, 5, seed=7).to_batches()[0], coll.schema)
    with WalWriter.open(meta, store, pchannels(coll)[0], settings) as w:
        w.append([M.Message.begin_txn(v, 9, 60_000),
                  M.Message.insert(v, coll.collection_id, part, rows, txn_id=9),
                  M.Message.delete(v, coll.collection_id, [5], [0], txn_id=9),
                  M.Message.insert(v, coll.collection_id, part, five, txn_id=9),
                  M.Message.commit_txn(v, 9)])
    _flush(meta, store, settings, coll)
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    assert sorted(t.column("pk").to_pylist()) == list(range(1, 101))
    price5 = [pr for pk, pr in zip(t.column("pk").to_pylist(), t.column("price").to_pylist()) if pk == 5]
    assert price5 == [pytest.approx(five.column("price")[0].as_py())]


def test_an_insert_spanning_many_pchannels_retried_never_duplicates(meta, store, settings):
    """#4: an insert across 16 pchannels raised Fenced with 28 of 32 rows durable, so a
    retry duplicated them. Now nothing fences it, and a retry of the same call (same seq,
    same producer id, even from a new client) appends nothing twice."""
    with WalClient(meta, store, settings, producer_id="job-7") as c:
        coll = make_collection(c, shards=16)
        res = c.insert("c1", synthetic_rows(coll, 32, 1))
        assert sorted(res.committed) == sorted(res.pchannels) and len(res.pchannels) > 8
    with WalClient(meta, store, settings, producer_id="job-7") as c:   # the retry, after a crash
        c.insert("c1", synthetic_rows(coll, 32, 1), seq=res.seq)
    _flush(meta, store, settings, coll)
    assert _visible(meta, store, coll) == list(range(1, 33))


def test_a_filtered_scanner_delivers_a_committed_txn(meta, store, settings):
    """#8: the vchannel filter ran before the txn buffer."""
    from seglake.wal.scanner import Scanner
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 4, 1), txn=True)
    v = coll.vchannels[0]
    got = Scanner(meta, store, pchannel_of(v), settings, vchannel=v, follow=False).drain()
    assert sorted(pk for m in got if m.type == M.INSERT for pk in m.body.column("pk").to_pylist()) == [1, 2, 3, 4]


def test_an_open_txn_holds_only_its_own_vchannel_and_expires_on_a_quiet_log(meta, store, settings):
    """#6: an open txn froze every vchannel's checkpoint of its pchannel, and expired only
    when a later tick came."""
    from seglake.wal.checkpoints import read_checkpoint
    with WalClient(meta, store, settings) as c:
        a = make_collection(c, "a", shards=1)
        p = pchannels(a)[0]
        b = next(x for x in (make_collection(c, f"b{i}", shards=1) for i in range(40)) if pchannels(x)[0] == p)
        w = c.writer(p)
        w.append(M.Message.begin_txn(a.vchannels[0], 77, 1500))    # keepalive 1.5 s
        c.insert(b.name, synthetic_rows(b, 5, 1))
    st = flush_pchannel(meta, store, p, settings, flush_all=True)
    assert [t["txn_id"] for t in st["open_txns"]] == [77]
    cp_b = read_checkpoint(meta, b.vchannels[0])[0]
    cp_a = read_checkpoint(meta, a.vchannels[0])[0]
    assert cp_b is not None and (cp_a is None or cp_a.message_id < cp_b.message_id)
    time.sleep(1.7)
    st = flush_pchannel(meta, store, p, settings, flush_all=True)   # the log is quiet
    assert st["txn_ticks"] == 1 and st["open_txns"] == []
    assert read_checkpoint(meta, a.vchannels[0])[0].message_id >= cp_b.message_id
    with pytest.raises(Exception, match="expired|not open"):
        with WalWriter.open(meta, store, p, settings) as w2:
            w2.append(M.Message.commit_txn(a.vchannels[0], 77))


def test_a_call_spanning_pchannels_reports_what_committed_and_its_retry_completes_the_rest(meta, store, settings):
    """#4: one pchannel fails for good: the call raises AppendIncomplete naming the
    pchannels that committed; a retry with its seq (a new client, same producer id)
    appends only the rest."""
    from seglake.errors import SeglakeError
    from seglake.wal.client import AppendIncomplete
    with WalClient(meta, store, settings, producer_id="job-9") as c:
        coll = make_collection(c, shards=4)
        bad = pchannels(coll)[1]
        w = c.writer(bad)

        def broken(frag):
            raise SeglakeError("disk on fire")
        w._commit = broken
        with pytest.raises(AppendIncomplete) as e:
            c.insert("c1", synthetic_rows(coll, 40, 1))
    res = e.value.result
    assert bad not in res.committed and set(res.committed) == set(res.pchannels) - {bad}
    with WalClient(meta, store, settings, producer_id="job-9") as c:
        again = c.insert("c1", synthetic_rows(coll, 40, 1), seq=res.seq)
    assert sorted(again.committed) == sorted(res.pchannels)
    _flush(meta, store, settings, coll)
    assert _visible(meta, store, coll) == list(range(1, 41))
