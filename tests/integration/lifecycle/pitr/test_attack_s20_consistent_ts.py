"""attack-s20: a snapshot's consistent_ts must bound EVERY tick it captured -- the rows'
(dml_ts) and the deletes' (deltalog ts_to). capture_raw takes max(tso.now(), newest
dml_ts), and a flushed segment's dml_ts is its last ROW tick: the deletes stored in its
delta log (a delete rides in the delta log of the next segment synced on its vchannel)
may carry higher ticks. A snapshot process whose batched now() lags the flusher's writes
(up to BATCH_MAX_AGE, alloc's documented bound: another process) gets a consistent_ts
below a delete it holds; a restore to an instant between the two then starts from that
snapshot and applies a delete made AFTER the instant: a row visible at the instant is
missing from the restore.

Another process is simulated in this one: the snapshot's Meta reaches the same etcd
through another endpoint spelling (localhost, not 127.0.0.1), so its TSO has its own
batch and floor as a second process's would; the batch's age limit is raised so the lag
alloc allows for 50 ms lasts the few hundred ms the writes and the flush take here."""

from __future__ import annotations

from seglake.lifecycle import pitr, snapshot
from seglake.meta import Meta
from seglake.meta import alloc
from seglake.wal import message as M
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def test_a_snapshot_holding_a_delete_above_its_consistent_ts_is_not_the_base_of_an_earlier_instant(
        meta, store, settings, monkeypatch):
    other = Meta.from_settings(settings.replace(
        etcd_endpoint=settings.etcd_endpoint.replace("127.0.0.1", "localhost")))
    try:
        assert other.tso._scope != meta.tso._scope
        with WalClient(meta, store, settings) as c:
            coll = c.create_collection("src", SCHEMA, shards=1)
            pitr.set_window(meta, "src", "1h")
            model = Model(meta, store, "src")
            model.record(c.insert("src", rows(range(1, 11), 1.0)), 1.0)
            flush_all(meta, store, settings, coll)
            monkeypatch.setattr(alloc, "BATCH_MAX_AGE", 30.0)
            lagging = other.tso.now()          # the snapshot process's batch, reserved now
            res = c.insert("src", rows(range(11, 21), 2.0))
            model.record(res, 2.0)
            row_tick = max(m.time_tick for m in model.messages(res) if m.type == M.INSERT)
            res = c.delete("src", [5])
            model.record(res, 3.0)
            del_tick = max(m.time_tick for m in model.messages(res) if m.type == M.DELETE)
        flush_all(meta, store, settings, coll)   # rows 11..20 and the delete of 5: one segment
        assert lagging < row_tick < del_tick
        snapshot.create(other, store, "src", "s2")
        monkeypatch.setattr(alloc, "BATCH_MAX_AGE", 0.05)   # (finish's advance_past waits it out)
        rec, _ = meta.snapshots.get(coll.collection_id, "s2")
        held = max(b.ts_to for s in meta.segments.list(coll.collection_id) for b in s.deltalogs)
        assert row_tick < held <= del_tick   # (a delete is stored with its call's timestamp)
        # instants after every row and before the delete of pk 5 reached the log (its tick;
        # the call's timestamp `held` it is stored with is lower)
        bad = {}
        for i, t in enumerate(sorted({row_tick, held, del_tick - 1})):
            target = restore_to(meta, store, settings, "src", f"r{i}", t)
            got, want = visible_of(meta, store, target), model.visible(t)
            assert (5, 1.0) in want
            if got != want:
                bad[t] = (pitr.summary(meta, target)["snapshot"], sorted((want - got).elements()),
                          sorted((got - want).elements()))
        assert not bad, (f"snapshot s2 consistent_ts {rec.consistent_ts}, its delete stored at {held}, "
                         f"appended at tick {del_tick}; instant -> (base, missing, extra): {bad}")
    finally:
        other.close()


def test_a_snapshot_holding_a_txn_committed_above_its_consistent_ts_is_not_the_base_of_an_earlier_instant(
        meta, store, settings, monkeypatch):
    """The same lag with a transaction: its rows carry the ticks just below its CommitTxn
    (dml_ts = commit - 1); a consistent_ts of commit - 1 made the snapshot the base of a
    restore to commit - 1, an instant the transaction was not committed at: rows EXTRA."""
    other = Meta.from_settings(settings.replace(
        etcd_endpoint=settings.etcd_endpoint.replace("127.0.0.1", "localhost")))
    try:
        with WalClient(meta, store, settings) as c:
            coll = c.create_collection("src", SCHEMA, shards=1)
            pitr.set_window(meta, "src", "1h")
            model = Model(meta, store, "src")
            model.record(c.insert("src", rows(range(1, 11), 1.0)), 1.0)
            flush_all(meta, store, settings, coll)
            monkeypatch.setattr(alloc, "BATCH_MAX_AGE", 30.0)
            lagging = other.tso.now()
            res = c.insert("src", rows(range(100, 106), 2.0), txn=True)
            model.record(res, 2.0, txn=True)
            commit = [m.time_tick for m in model.messages(res) if m.type == M.COMMIT_TXN][0]
        flush_all(meta, store, settings, coll)
        assert lagging < commit
        snapshot.create(other, store, "src", "s2")
        monkeypatch.setattr(alloc, "BATCH_MAX_AGE", 0.05)
        rec, _ = meta.snapshots.get(coll.collection_id, "s2")
        t = commit - 1
        target = restore_to(meta, store, settings, "src", "r", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        assert got == want, (f"snapshot s2 consistent_ts {rec.consistent_ts}, txn committed at {commit}; restore as "
                             f"of {t} (base {pitr.summary(meta, target)['snapshot']}): extra "
                             f"{sorted((got - want).elements())}, missing {sorted((want - got).elements())}")
    finally:
        other.close()
