"""attack-pitr2: restore to a time at the edges (issue 30): instants near now whose log is
still being committed, boundaries of the window, identities across copies. Every check
is row-exact against pitr_model.Model (every acknowledged operation with its ticks)."""

from __future__ import annotations

import threading

from seglake.lifecycle import pitr
from seglake.meta import alloc
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, restore_to, rows, visible_of


def _stall_next_commit(monkeypatch):
    """The next commit a WAL writer thread makes stalls right after it reserved its tick
    (a GC pause, a slow etcd round trip): returns (reserved, go, ticks)."""
    real, reserved, go, ticks = alloc.TSO.reserve, threading.Event(), threading.Event(), []

    def stalled(self, count, above=0, *, linearizable=False):
        t = real(self, count, above, linearizable=linearizable)
        if linearizable and threading.current_thread() is not threading.main_thread() and not reserved.is_set():
            ticks.append(t)
            reserved.set()
            go.wait(120)
        return t
    monkeypatch.setattr(alloc.TSO, "reserve", stalled)
    return reserved, go, ticks


def test_a_restore_to_now_while_a_commit_below_it_is_in_flight_has_that_write(meta, store, settings, monkeypatch):
    """A restore to an instant past the log's last tick (`--as-of` now) read the log and
    ended it with a synthetic TimeTick(as_of); a commit that had reserved its tick below
    the instant and was still on its way (reserve -> etcd txn) landed after the replay,
    acknowledged with a tick <= as_of: the target lacked an acknowledged write of its
    instant, silently. The replay must seal the source log at the instant first (as the
    archive does), so such a commit fails its compare and takes a tick above it."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 11), 1.0)), 1.0)
        reserved, go, ticks = _stall_next_commit(monkeypatch)
        done, errs = [], []

        def call():
            try:
                done.append(c.insert("src", rows(range(100, 110), 2.0)))
            except Exception as e:   # noqa: BLE001
                errs.append(e)
        th = threading.Thread(target=call)
        th.start()
        try:
            assert reserved.wait(60)
            as_of = meta.tso.now()     # the restore's instant: after the stalled commit's tick
            assert as_of > ticks[0]
            target = restore_to(meta, store, settings, "src", "r_now", as_of)
        finally:
            go.set()
            th.join(60)
        monkeypatch.undo()
        assert done and not errs, errs
        model.record(done[0], 2.0)
    want = model.visible(as_of)
    got = visible_of(meta, store, target)
    missing = sorted(set(want) - set(got))
    assert got == want, (f"restore as of {as_of}: {len(missing)} acknowledged rows of the instant missing "
                         f"{missing[:5]}, extra {sorted(set(got) - set(want))[:5]}")
