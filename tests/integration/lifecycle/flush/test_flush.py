"""The WAL flusher against real etcd and real files: exactly once across kills and
concurrent flushers, checkpoints, seal policies, verify/snapshot/restore of the result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from seglake.lifecycle import copyjob, restore, snapshot, verify
from seglake.lifecycle.flush import Flusher, flush_pchannel
from seglake.wal.checkpoints import CheckpointError, Checkpoint, advances, live_vchannels, read_checkpoint, record_truncation, truncatable_fragments, truncated_before
from seglake.meta import Meta
from seglake.meta.catalog import DROPPED as COLL_DROPPED, pchannel_of
from seglake.meta.segments import DROPPED, FLUSHED
from seglake.lifecycle.verify import segment_rows
from seglake.storage import layout
from seglake.wal import message as M
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import Fenced
from seglake.wal.message import Message, MessageId

import time

from seglake.wal.log import WalLog
from wal_helpers import all_messages, make_collection, pchannels, visible_pks


def _flush_all(meta, store, settings, coll, **kw):
    return [flush_pchannel(meta, store, p, settings, flush_all=True, **kw) for p in pchannels(coll)]


def _ingest(meta, store, settings, name="c1", shards=2):
    """300 rows in 3 batches, 10 deletes, a committed txn (20 rows) and a rolled-back
    txn (20 rows). Returns (collection, committed pks, deleted pks, rolled-back pks)."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, name, shards=shards)
        for i in range(3):
            c.insert(name, synthetic_rows(coll, 100, 1 + 100 * i))
        c.delete(name, list(range(5, 15)))
        txn = synthetic_rows(coll, 20, 1001, shard=0)
        c.insert(name, txn, txn=True)
        # a rolled-back transaction, appended by hand on the first vchannel
        v = coll.vchannels[0]
        w = c.writer(pchannel_of(v))
        w.append(Message.begin_txn(v, 777, 60000))
        w.append(Message.insert(v, coll.collection_id, coll.partitions[0].partition_id,
                                M.conform_batch(synthetic_rows(coll, 20, 5001).to_batches()[0], coll.schema), txn_id=777))
        w.append(Message.rollback_txn(v, 777))
    committed = list(range(1, 301)) + txn.column("pk").to_pylist()
    return coll, committed, list(range(5, 15)), list(range(5001, 5021))


def test_flush_holds_every_committed_row_once_deletes_in_delta_logs_rolled_back_nowhere(meta, any_store, settings):
    store = any_store
    coll, committed, deleted, rolled = _ingest(meta, store, settings)
    stats = _flush_all(meta, store, settings, coll)
    pks, dels = segment_rows(meta, store, coll.collection_id, [FLUSHED])
    assert sorted(pks) == committed
    assert sorted(dels) == deleted
    assert not set(rolled) & set(pks)
    assert sum(s["rows"] for s in stats) == len(committed)
    # a re-run reads the log again from the checkpoints and adds nothing
    again = _flush_all(meta, store, settings, coll)
    assert sum(s["segments"] + s["delta_logs"] for s in again) == 0
    assert sorted(segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]) == committed
    report = verify.verify_collection(meta, store, "c1")
    assert report["ok"], verify.format_report(report)
    assert report["rows"] == len(committed)


def test_replay_skips_what_the_checkpoint_covers_and_recovery_starts_at_the_minimum(meta, store, settings):
    """Partition p2 stays buffered (its start holds the checkpoint back) while _default's
    later rows are flushed: the next run replays from the checkpoint, skips the flushed
    rows, re-buffers p2's, and the result holds every row exactly once."""
    from wal_helpers import schema
    s = settings.replace(flush_seal_rows=25)
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("c1", schema(), shards=1, partitions=["_default", "p2", "p3"])
        c.insert("c1", synthetic_rows(coll, 1, 9000))                 # a safe point before p2
        c.insert("c1", synthetic_rows(coll, 5, 1), partition="p2")    # buffered, never sealed here
        c.insert("c1", synthetic_rows(coll, 5, 201), partition="p3")  # buffered, opened later
        c.insert("c1", synthetic_rows(coll, 30, 101))                 # 31 rows: sealed, flushed
    p, v = pchannels(coll)[0], coll.vchannels[0]
    st = flush_pchannel(meta, store, p, s)
    assert st["rows"] == 31
    cp = read_checkpoint(meta, v)[0]
    p2_ids = [m.id for m in all_messages(meta, store, p, settings)
              if m.type == M.INSERT and m.partition_id == coll.partition("p2").partition_id]
    assert cp.message_id < min(p2_ids)                              # held at the buffered start
    f = Flusher(meta, store, p, s).open()
    assert f.start == cp.message_id                                  # recovery from the checkpoint
    st = f.run(flush_all=True).to_json()
    assert st["skipped"] >= 1 and st["rows"] == 10
    pks, _ = segment_rows(meta, store, coll.collection_id, [FLUSHED])
    assert sorted(pks) == [1, 2, 3, 4, 5] + list(range(101, 131)) + list(range(201, 206)) + [9000]
    assert not read_checkpoint(meta, v)[0].message_id < cp.message_id


def test_checkpoint_rules():
    a = Checkpoint(MessageId(1, 5, 3), 100)
    assert advances(None, a)
    assert not advances(a, Checkpoint(MessageId(1, 5, 3), 100))        # equal: no-op
    assert advances(a, Checkpoint(MessageId(2, 6, 0), 200))
    with pytest.raises(CheckpointError):
        advances(a, Checkpoint(MessageId(1, 5, 2), 100))
    with pytest.raises(CheckpointError):
        advances(a, Checkpoint(MessageId(1, 6, 0), 99))


def test_checkpoint_is_the_start_of_the_oldest_buffered_segment(meta, store, settings):
    """Without a seal, rows stay buffered: the checkpoint must not pass their start, so
    the next run re-reads them; nothing is flushed twice or lost."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 10, 1))      # a first safe point exists after this
        p = pchannels(coll)[0]
        flush_pchannel(meta, store, p, settings)          # nothing sealed (default policy)
        cp0 = read_checkpoint(meta, coll.vchannels[0])[0]
        c.insert("c1", synthetic_rows(coll, 10, 11))
    stats = flush_pchannel(meta, store, p, settings)
    cp1 = read_checkpoint(meta, coll.vchannels[0])[0]
    first_insert = min(m.id for m in all_messages(meta, store, p, settings) if m.type == M.INSERT)
    assert stats["segments"] == 0 and cp0 is not None
    assert not cp1.message_id < cp0.message_id and cp1.message_id < first_insert
    # no Growing record is left behind by a run that ends with buffered rows
    assert [s.state for s in meta.segments.list(coll.collection_id)] == []
    stats = flush_pchannel(meta, store, p, settings, flush_all=True)
    assert stats["rows"] == 20
    assert sorted(segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]) == list(range(1, 21))


def test_create_collection_replayed_twice_opens_one_state(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        v = coll.vchannels[0]
        c.writer(pchannel_of(v)).append(Message(M.CREATE_COLLECTION, v, collection_id=coll.collection_id))
        c.insert("c1", synthetic_rows(coll, 10, 1))
    f = Flusher(meta, store, pchannel_of(v), settings)
    f.states.clear()
    f.term, f.term_rev = 0, 0
    stats = f.run(flush_all=True)
    assert list(f.states) == [v]
    assert stats.duplicate_creates >= 1
    assert sorted(segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]) == list(range(1, 11))


def test_a_dropped_collection_is_skipped_at_recovery(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c1", shards=1)
        other = make_collection(c, "c2", shards=1)
        c.insert("c1", synthetic_rows(coll, 10, 1))
    p = pchannel_of(coll.vchannels[0])
    meta.catalog.set_state(coll.collection_id, "Dropping")
    meta.catalog.set_state(coll.collection_id, COLL_DROPPED)
    assert coll.vchannels[0] not in live_vchannels(meta, p)
    flush_pchannel(meta, store, p, settings, flush_all=True)
    assert list(meta.segments.list(coll.collection_id)) == []
    assert read_checkpoint(meta, coll.vchannels[0])[0] is None
    if pchannel_of(other.vchannels[0]) == p:
        assert read_checkpoint(meta, other.vchannels[0])[0] is not None


def test_two_flushers_of_one_pchannel_one_commits_the_other_is_fenced(meta, store, settings):
    coll, committed, deleted, _ = _ingest(meta, store, settings, shards=1)
    p = pchannels(coll)[0]
    a = Flusher(meta, store, p, settings).open()
    b = Flusher(meta, store, p, settings).open()        # newer term: fences a
    with pytest.raises(Fenced, match="fenced"):
        a.run(flush_all=True)
    b.run(flush_all=True)
    pks, dels = segment_rows(meta, store, coll.collection_id, [FLUSHED])
    assert sorted(pks) == committed and sorted(dels) == deleted
    # a's files (written before its failed commit) are unreferenced orphans
    referenced = {f.key for s in meta.segments.list(coll.collection_id) for f in layout.segment_files(s)}
    on_disk = {o.key for pre in layout.collection_prefixes(coll.collection_id) for o in store.list(pre)}
    assert referenced <= on_disk
    assert all(s.state in (FLUSHED, DROPPED) for s in meta.segments.list(coll.collection_id))


def _append_at(meta, store, settings, coll, t, msgs):
    """Append with a writer whose clock reads `t` (the TSO follows it forward: a bound that
    allows it, or a clock ahead of a store in use is refused as fast)."""
    from seglake.wal.writer import WalWriter
    with WalWriter.open(meta, store, pchannels(coll)[0], settings.replace(max_clock_skew=3600),
                        clock=lambda: t) as w:
        w.append(msgs)


@pytest.mark.parametrize("rows, idle, age, step, batches, expect", [
    (25, 1e6, 1e6, 0.0, [30], "rows"),            # 30 rows >= 25 at the tick
    (10**6, 30.0, 1e6, 31.0, [5], "idle"),        # a tick 31 s after the last row
    (10**6, 1e6, 50.0, 31.0, [3, 3], "age"),      # 62 s since the first row, rows kept coming
    (10**6, 1e6, 1e6, 31.0, [5], None),           # no policy reached: stays buffered
])
def test_seal_policies_measured_in_ticks(rows, idle, age, step, batches, expect, meta, store, settings):
    """Ages are the data's age in the log (ticks of the one TSO), not the flusher run's
    clock: a writer whose clock moves `step` s between appends drives them."""
    s = settings.replace(flush_seal_rows=rows, flush_seal_idle=idle, flush_seal_age=age)
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
    t, first = time.time(), 1
    for n in batches:
        rows_ = synthetic_rows(coll, n, first)
        _append_at(meta, store, settings, coll, t, [Message.insert(
            coll.vchannels[0], coll.collection_id, coll.partitions[0].partition_id, rows_.to_batches()[0])])
        first += n
        t += step
    _append_at(meta, store, settings, coll, t, [Message.time_tick_msg()])
    # the flusher's TSO is up to 62 s behind that writer's clock: a bound that allows it
    s = s.replace(max_clock_skew=3600)
    with Meta.from_settings(s) as m:
        st = flush_pchannel(m, store, pchannels(coll)[0], s)
    if expect is None:
        assert st["seals"] == {} and st["segments"] == 0
    else:
        assert st["seals"] == {expect: 1} and st["rows"] == sum(batches)


def test_a_scheduled_run_seals_small_old_data_and_the_checkpoint_moves(meta, store, settings):
    """Issue 17 #3: rows older than the idle policy are sealed by the next plain run
    (no flush_all, no Flush message), however few; the checkpoint moves past them."""
    s = settings.replace(flush_seal_idle=1.0, flush_seal_age=2.0)
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 3, 1))
    p = pchannels(coll)[0]
    st = flush_pchannel(meta, store, p, s)
    assert st["segments"] == 0          # younger than the policy: kept in the log
    time.sleep(2.2)
    st = flush_pchannel(meta, store, p, s)
    assert st["segments"] == 1 and st["rows"] == 3
    cp, _ = read_checkpoint(meta, coll.vchannels[0])
    assert cp is not None and cp.message_id.fragment >= WalLog(meta, store, p).state().last
    assert visible_pks(meta, store, coll.collection_id) == [1, 2, 3]


def test_seal_reason_unit():
    from seglake.meta.alloc import compose_ts
    from seglake.wal.buffer import AGE, BYTES, IDLE, ROWS, SealPolicy, SegmentBuffer
    import pyarrow as pa

    def tt(sec):
        return compose_ts(int(sec * 1000))
    batch = pa.record_batch([pa.array(np.arange(5, dtype=np.int64))], names=["pk"])
    pol = SealPolicy(rows=10, bytes=10_000, age=100.0, idle=30.0)
    buf = SegmentBuffer(1, 1, 1, "v", None)
    assert buf.seal_reason(pol, tt(1e9)) is None                  # empty never seals
    buf.add_rows(batch, tt(50.0))
    assert buf.seal_reason(pol, tt(60.0)) is None
    assert buf.seal_reason(pol, tt(80.0)) == IDLE
    buf.add_rows(batch, tt(95.0))
    assert buf.seal_reason(pol, tt(96.0)) == ROWS
    buf2 = SegmentBuffer(2, 1, 1, "v", None)
    buf2.add_rows(batch, tt(1.0))
    buf2.add_rows(batch[:1], tt(90.0))
    assert buf2.seal_reason(pol, tt(101.0)) == AGE
    assert buf2.seal_reason(SealPolicy(rows=10, bytes=1024, age=1e6, idle=1e6), tt(0.0)) is None
    big = pa.record_batch([pa.array(np.arange(200, dtype=np.int64))], names=["pk"])
    buf2.add_rows(big, tt(100.0))
    assert buf2.seal_reason(SealPolicy(rows=10**6, bytes=1024, age=1e6, idle=1e6), tt(100.0)) == BYTES


def test_seal_policy_settings_are_validated(settings, meta, store):
    from seglake.errors import ConfigError, ValidationError
    from seglake.wal.buffer import SealPolicy
    for bad in ({"flush_seal_age": float("inf")}, {"flush_seal_idle": float("nan")}, {"flush_seal_rows": 0},
                {"flush_seal_rows": 10**12}, {"flush_seal_age": 1e12}, {"flush_seal_bytes": 10}):
        with pytest.raises(ConfigError, match="flush_seal"):
            settings.replace(**bad)
    # the engine re-checks a policy built by hand (no Settings in between)
    for kw in ({"age": float("inf")}, {"idle": float("nan")}, {"rows": 0}, {"bytes": True}):
        with pytest.raises(ValidationError, match="flush_seal"):
            SealPolicy(**{"rows": 10, "bytes": 4096, "age": 1.0, "idle": 1.0, **kw}).validate()
    assert meta.kv.get(meta.keys.root + "/wal/seglake-dml_0/flusher") is None   # nothing taken


def test_a_flush_message_seals(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=2)
        c.insert("c1", synthetic_rows(coll, 40, 1))
        c.flush("c1")
    stats = [flush_pchannel(meta, store, p, settings) for p in pchannels(coll)]   # no flush_all
    assert sum(s["seals"].get("flush", 0) for s in stats) == 2
    assert sorted(segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]) == list(range(1, 41))


def test_a_delete_reaching_flushed_data_hides_it_and_a_replay_adds_nothing(meta, store, settings):
    """Deletes are stored once (an L0 segment: a delta log, 0 rows) and hide every older
    row of their pk wherever it lives; none of the flushed pk columns is read."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 50, 1))
    p = pchannels(coll)[0]
    flush_pchannel(meta, store, p, settings, flush_all=True)
    with WalClient(meta, store, settings) as c:
        c.delete("c1", [3, 4, 999])
    st = flush_pchannel(meta, store, p, settings, flush_all=True)
    assert st["delta_logs"] == 1
    l0 = [s for s in meta.segments.list(coll.collection_id) if s.level == "L0"]
    assert len(l0) == 1 and l0[0].num_rows == 0 and l0[0].deltalogs[0].entries == 3
    assert visible_pks(meta, store, coll.collection_id) == [x for x in range(1, 51) if x not in (3, 4)]
    flush_pchannel(meta, store, p, settings, flush_all=True)     # replay: not written twice
    assert sum(len(s.deltalogs) for s in meta.segments.list(coll.collection_id)) == 1
    assert verify.verify_collection(meta, store, "c1")["ok"]


KILLER = r"""
import os, signal, sys
from seglake.config import Settings
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.lifecycle.flush import flush_pchannel
s = Settings.load()
meta, store = Meta.from_settings(s), open_store(s)
point, nth = sys.argv[2], int(sys.argv[3])
seen = [0]
def hook(f, **kw):
    seen[0] += 1
    if seen[0] >= nth:
        os.kill(os.getpid(), signal.SIGKILL)
flush_pchannel(meta, store, sys.argv[1], s, flush_all=True, hooks={point: hook})
print("completed", flush=True)
"""


@pytest.mark.parametrize("point, nth", [("after_files", 1), ("after_files", 2), ("after_commit", 1),
                                        ("after_commit", 2)])
def test_sigkill_of_a_flusher_then_rerun_is_exactly_once(point, nth, meta, store, settings):
    s = settings.replace(flush_seal_rows=60)
    coll, committed, deleted, rolled = _ingest(meta, store, settings, shards=1)
    p = pchannels(coll)[0]
    env = {**os.environ, **s.to_env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", KILLER, p, point, str(nth)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    flush_pchannel(meta, store, p, s, flush_all=True)
    pks, dels = segment_rows(meta, store, coll.collection_id, [FLUSHED])
    assert sorted(pks) == committed
    assert sorted(set(dels)) == deleted and len(dels) == len(deleted)
    assert not set(rolled) & set(pks)
    assert {s.state for s in meta.segments.list(coll.collection_id)} <= {FLUSHED, DROPPED}
    assert verify.verify_collection(meta, store, "c1")["ok"]


def test_flushed_collection_verifies_snapshots_and_restores(meta, store, settings):
    coll, committed, _, _ = _ingest(meta, store, settings)
    _flush_all(meta, store, settings, coll)
    snapshot.create(meta, store, "c1", "s1")
    job_id = restore.restore(meta, store, "c1", "s1", "c1copy")
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id, threads=2)
    job = copyjob.finalize(meta, job_id)
    assert job.total_rows == len(committed)
    report = verify.verify_collection(meta, store, "c1copy")
    assert report["ok"] and report["rows"] == len(committed)


def test_truncatable_fragments_are_strictly_below_every_checkpoint(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        p = pchannels(coll)[0]
        assert truncatable_fragments(meta, p) == []               # no checkpoint: nothing
        for i in range(4):
            c.insert("c1", synthetic_rows(coll, 10, 1 + 10 * i))
        flush_pchannel(meta, store, p, settings, flush_all=True)
        c.insert("c1", synthetic_rows(coll, 10, 100))             # above the checkpoint
    cp = read_checkpoint(meta, coll.vchannels[0])[0]
    keys = truncatable_fragments(meta, p)
    nums = [layout.parse_wal_fragment(k)[1] for k in keys]
    assert nums and all(n < cp.message_id.fragment for n in nums)
    assert truncatable_fragments(meta, p, consumer_positions=[MessageId(0, 1, 0)]) == []
    # a second live collection without a checkpoint on the same pchannel blocks truncation
    with WalClient(meta, store, settings) as c:
        c2 = make_collection(c, "c2", shards=1)
    if pchannel_of(c2.vchannels[0]) == p:
        assert truncatable_fragments(meta, p) == []
        flush_pchannel(meta, store, p, settings)
        keys = truncatable_fragments(meta, p)
    # truncate: record first, then delete; recovery then starts above the bound
    bound = record_truncation(meta, p, keys)
    assert store.delete_many(keys) == []
    assert truncated_before(meta, p) == bound
    with WalClient(meta, store, settings) as c:
        c3 = make_collection(c, "c3", shards=1)                  # no checkpoint yet
        c.insert("c3", synthetic_rows(c3, 5, 1))
    for q in sorted(set(pchannels(c3)) | {p}):
        flush_pchannel(meta, store, q, settings, flush_all=True)
    assert sorted(segment_rows(meta, store, c3.collection_id, [FLUSHED])[0]) == [1, 2, 3, 4, 5]
    assert sorted(segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]) == list(range(1, 41)) + list(range(100, 110))


def test_a_replayed_delete_is_not_written_twice(meta, store, settings):
    """p2's buffered rows hold the checkpoint below a delete already written: the replay
    must not write it again."""
    from wal_helpers import schema
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("c1", schema(), shards=1, partitions=["_default", "p2"])
        c.insert("c1", synthetic_rows(coll, 50, 1))
    p = pchannels(coll)[0]
    flush_pchannel(meta, store, p, settings, flush_all=True)
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 5, 1001), partition="p2")
        c.delete("c1", [3, 4])
    st = flush_pchannel(meta, store, p, settings, flush_all=True)
    assert st["delta_logs"] == 1 and st["rows"] == 5
    st = flush_pchannel(meta, store, p, settings, flush_all=True)
    assert st["delta_logs"] == 0 and st["rows"] == 0
    pks, dels = segment_rows(meta, store, coll.collection_id, [FLUSHED])
    assert sorted(dels) == [3, 4]
    assert visible_pks(meta, store, coll.collection_id) == sorted(
        [x for x in range(1, 51) if x not in (3, 4)] + list(range(1001, 1006)))


def test_an_open_transaction_holds_the_checkpoint_back(meta, store, settings):
    """A txn begun before a flush and committed after: the checkpoint must not pass its
    BeginTxn, or the next run would never see the txn's rows."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        v = coll.vchannels[0]
        w = c.writer(pchannel_of(v))
        w.append(Message.begin_txn(v, 4242, 3_600_000))
        w.append(Message.insert(v, coll.collection_id, coll.partitions[0].partition_id,
                                M.conform_batch(synthetic_rows(coll, 10, 500).to_batches()[0], coll.schema),
                                txn_id=4242))
        c.insert("c1", synthetic_rows(coll, 5, 1))
        flush_pchannel(meta, store, pchannel_of(v), settings, flush_all=True)
        w.append(Message.commit_txn(v, 4242))
    flush_pchannel(meta, store, pchannel_of(v), settings, flush_all=True)
    assert sorted(segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]) == [1, 2, 3, 4, 5] + list(range(500, 510))


def test_rows_below_a_vchannel_checkpoint_are_skipped_even_without_their_segment(meta, store, settings):
    """Two collections share a pchannel; one's buffered rows keep the minimum checkpoint
    low. The other's flushed segment is then dropped (as compaction would): a replay must
    still skip its rows by the vchannel checkpoint, not re-ingest them."""
    with WalClient(meta, store, settings) as c:
        a = make_collection(c, "ca", shards=16)
        b = make_collection(c, "cb", shards=16)
        c.insert("ca", synthetic_rows(a, 64, 1))
        c.insert("cb", synthetic_rows(b, 64, 1))
        c.flush("cb")
    p = pchannel_of(a.vchannels[0])
    vb = next(v for v in b.vchannels if pchannel_of(v) == p)
    flush_pchannel(meta, store, p, settings)
    flushed_b = [s for s in meta.segments.list(b.collection_id) if s.channel == vb]
    assert flushed_b and all(s.state == FLUSHED for s in flushed_b)
    meta.segments.transition([s.ref for s in flushed_b], DROPPED, now=0.0)
    f = Flusher(meta, store, p, settings).open()
    assert f.start < read_checkpoint(meta, vb)[0].message_id
    f.run(flush_all=True)
    assert [s for s in meta.segments.list(b.collection_id, states=[FLUSHED]) if s.channel == vb] == []


def test_a_delete_never_hides_rows_inserted_after_it(meta, store, settings):
    """A delete of a pk that did not exist yet, then an insert of that pk: the row is
    newer than the delete and stays visible, through replays and re-flushes."""
    from wal_helpers import schema
    s = settings.replace(flush_seal_rows=25)
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("c1", schema(), shards=1, partitions=["_default", "p2"])
        c.insert("c1", synthetic_rows(coll, 5, 1001), partition="p2")   # stays buffered
        c.delete("c1", [7, 8])                                         # nothing to delete yet
        c.insert("c1", synthetic_rows(coll, 30, 1))                    # 7 and 8 inserted after
    p = pchannels(coll)[0]
    flush_pchannel(meta, store, p, s)
    with WalClient(meta, store, settings) as c:
        c.delete("c1", [1001])
    flush_pchannel(meta, store, p, s)
    flush_pchannel(meta, store, p, s, flush_all=True)
    with WalClient(meta, store, settings) as c:
        c.delete("c1", [9])                                            # a real delete on the Flushed rows
    flush_pchannel(meta, store, p, s, flush_all=True)
    assert visible_pks(meta, store, coll.collection_id) == [x for x in range(1, 31) if x != 9] + \
        list(range(1002, 1006))


def test_a_reinserted_pk_stays_visible_an_upsert_replaces(meta, store, settings):
    """Delete then insert of the same pk in one growing segment: the new row is newer
    than the delete and stays; an upsert hides only strictly older rows of its pks."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 10, 1))
        c.delete("c1", [2, 3])
        c.insert("c1", synthetic_rows(coll, 1, 2))
        c.upsert("c1", synthetic_rows(coll, 2, 5))
        c.upsert("c1", synthetic_rows(coll, 1, 77))                    # an upsert of a new pk
    flush_pchannel(meta, store, pchannels(coll)[0], settings, flush_all=True)
    assert visible_pks(meta, store, coll.collection_id) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 77]
