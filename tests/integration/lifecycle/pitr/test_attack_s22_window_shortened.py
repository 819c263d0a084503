"""attack-s22: a window shortened, GC run (it releases what the shorter window no longer
needs), then lengthened again: restores inside the shorter window are exact; an instant
that only the longer window reaches, whose log GC released meanwhile, is refused naming
the truncated fragments -- never restored with rows missing -- and the refusal writes
nothing."""

from __future__ import annotations

import os
import time

import pytest

from seglake.lifecycle import gc, pitr, snapshot
from seglake.lifecycle.pitr import window as pwindow
from seglake.storage import layout
from seglake.wal.client import WalClient

from etcd_root import root_changes, root_state
from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


def _age_all(store) -> None:
    t = time.time() - 3 * 86400
    for o in store.list(f"{layout.WAL}/"):
        if layout.parse_wal_fragment(o.key):
            os.utime(store.root / o.key, (t, t))


def test_window_shortened_gc_then_lengthened(meta, store, settings, monkeypatch):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 20), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        for i in range(4):
            model.record(c.delete("src", [2 + i]), 2.0)
            model.record(c.insert("src", rows(range(100 + 10 * i, 110 + 10 * i), 3.0)), 3.0)
            flush_all(meta, store, settings, coll)
        t_between = meta.tso.reserve(1, linearizable=True)
        model.record(c.upsert("src", rows(range(1, 6), 4.0)), 4.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s2")
        model.record(c.delete("src", [3, 4]), 5.0)
        model.record(c.insert("src", rows(range(200, 210), 6.0)), 6.0)
        flush_all(meta, store, settings, coll)
        t_late = meta.tso.reserve(1, linearizable=True)
    # 20 minutes later, the window shortened to 10 minutes: s2 is its base; GC releases the rest
    later = time.time() + 1200
    monkeypatch.setattr(pwindow, "clock", lambda: later)
    s2 = meta.snapshots.get(coll.collection_id, "s2")[0]
    pitr.set_window(meta, "src", "10m")
    assert [h.snapshot.snapshot_id for h in pitr.holds(meta)] == [s2.snapshot_id]   # s2 is its base
    _age_all(store)
    gc.run(meta, store, gc.GCOptions(**OPTS))
    # t_late is 20 minutes old (outside 10m): refused, nothing written
    rev = root_state(meta)
    with pytest.raises(pitr.OutsideWindow):
        pitr.restore_as_of(meta, store, "src", "late", t_late)
    assert root_state(meta) == rev, root_changes(rev, root_state(meta))
    # the window lengthened again: t_late (after s2) is exact; t_between (before s2, its log released) refused
    pitr.set_window(meta, "src", "1h")
    got = visible_of(meta, store, restore_to(meta, store, settings, "src", "late", t_late))
    assert got == model.visible(t_late)
    rev = root_state(meta)
    try:
        r = restore_to(meta, store, settings, "src", "between", t_between)
    except (pitr.LogGap, pitr.OutsideWindow) as e:
        print("refused:", e)
        assert root_state(meta) == rev, root_changes(rev, root_state(meta))
        return
    assert visible_of(meta, store, r) == model.visible(t_between)   # (if GC had kept it: exact)
