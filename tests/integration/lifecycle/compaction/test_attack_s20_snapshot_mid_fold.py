"""Attack s20: a snapshot taken while an L0 fold is between its files and its commit; the
fold commits; GC with zero tolerances runs; the snapshot restores to the pre-fold rows
exactly (row ids and timestamps), before and after the GC, and after the snapshot is
dropped GC reclaims the fold's inputs and hits (records and files)."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, gc, snapshot
from seglake.lifecycle.compaction import compacting
from seglake.storage import layout

from compaction_helpers import DROPPED, Writer, exact, policy, run_restore, segments

pytestmark = pytest.mark.etcd


def _gc(meta, store, settings, cid):
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True, collection_id=cid))


def _exact_by_name(meta, store, name):
    # row ids and timestamps survive a restore: compare (pk, RowID, Timestamp, partition, v)
    return exact(meta, store, name)


def test_snapshot_during_a_fold_restores_the_pre_fold_rows(meta, store, settings, monkeypatch):
    w = Writer(meta, store, settings)
    w.create("sf", ["_default", "p1", "p2"], shards=1)
    for i, p in enumerate(["_default", "p1", "p2"]):
        w.insert("sf", range(1, 21), p, float(i))
    w.flush("sf")
    w.delete("sf", [1, 2, 3])
    w.flush("sf")
    w.delete("sf", [5, 6], partition="p2")
    w.flush("sf")
    before = exact(meta, store, "sf")
    coll = meta.catalog.get_by_name("sf")
    fired = []

    def during(unit):
        if not fired:
            fired.append(unit.unit_id)
            snapshot.create(meta, store, "sf", "mid")

    real = compacting.run_unit
    monkeypatch.setattr(compacting, "run_unit", lambda m, s, u, **kw: real(
        m, s, u, hooks={"after_files": during}, **{k: v for k, v in kw.items() if k != "hooks"}))
    s = compaction.compact(meta, store, "sf", policy(min_segment_rows=1, delete_ratio=1.0, l0_age=0.0))
    monkeypatch.undo()
    assert fired and any(u.kind == compaction.FOLD for u in s.plan.units)
    assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    assert exact(meta, store, "sf") == before
    dropped = {x.segment_id: x for x in segments(meta, "sf", DROPPED)}
    assert dropped
    _gc(meta, store, settings, coll.collection_id)
    assert set(dropped) <= {x.segment_id for x in segments(meta, "sf", DROPPED)}    # held by the snapshot
    run_restore(meta, store, "sf", "mid", "sf_mid")
    assert exact(meta, store, "sf_mid") == before
    snapshot.drop(meta, store, "sf", "mid")
    _gc(meta, store, settings, coll.collection_id)
    left = {x.segment_id for x in segments(meta, "sf", DROPPED)}
    assert not left & set(dropped), left & set(dropped)
    for sid, seg in dropped.items():
        for f in layout.segment_files(seg):
            assert not list(store.list(f.key)), f.key
    assert exact(meta, store, "sf") == before and exact(meta, store, "sf_mid") == before
