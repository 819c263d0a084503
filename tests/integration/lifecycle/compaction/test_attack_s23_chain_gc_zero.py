"""Attack s23 (issues 26 + 28): a chain of copies with a compaction and a GC at ZERO
tolerances between hops, every outcome judged against a model of every acknowledged call
(pk, partition NAME, value), then restores of the OLD snapshots (taken before each
compaction) and an undrop of a compacted copy.

Hops: src (3 partitions, scoped deletes, upserts, collection-wide deletes) -> compact ->
GC(0) -> restore h1 -> writes -> compact h1 -> GC(0) -> bundle into another etcd root h2
-> compact h2 -> GC(0) -> restore h3 -> compact -> drop -> undrop h4. Real etcd, files,
WAL and flusher."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, gc, pitr, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from compaction_helpers import DROPPED, Writer, mixed_workload, rows, run_restore, segments
from copy_model_helpers import other_root, quiet, snap_and_restore
from pitr_model import copy_and_replay, drop_now

pytestmark = pytest.mark.etcd

PARTS = ["_default", "p1", "p2"]
POL = compaction.Policy(min_segment_rows=1000, target_rows=40, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _gc0(meta, store, settings):
    opts = gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0, force=True)
    return gc.run(meta, store, opts)


def _eq(meta, store, name, want, where):
    got = rows(meta, store, name)
    assert got == want, (where, sorted((got - want).items())[:8], sorted((want - got).items())[:8])


def _compact_gc(m, s, st, name, model, where):
    before = len(segments(m, name))
    out = compaction.compact(m, s, name, POL)
    assert not [r for r in out.results if r.status == "lost"], (where, out.to_json()["results"])
    _eq(m, s, name, model.visible(), where + ("compacted", before, len(segments(m, name))))
    _gc0(m, s, st)
    _eq(m, s, name, model.visible(), where + ("after gc 0",))


def test_a_chain_with_compactions_and_zero_tolerance_gc_keeps_every_snapshot_exact(meta, store, settings,
                                                                                   etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "c")
    backup = LocalStore(tmp_path / "backup")
    olds = []                       # (meta, store, source, snapshot, model rows then)
    try:
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        for step in range(3):
            mixed_workload(w, "src", step)
        snapshot.create(meta, store, "src", "old0")
        olds.append((meta, store, "src", "old0", copy.deepcopy(w.model.visible())))
        mixed_workload(w, "src", 3)
        _compact_gc(meta, store, settings, "src", w.model, ("src",))

        snap_and_restore(meta, store, "src", "h1")
        mixed_workload(w, "h1", 4)
        snapshot.create(meta, store, "h1", "old1")
        olds.append((meta, store, "h1", "old1", copy.deepcopy(w.model.visible())))
        w.delete("h1", [3, 23, 43, 83], partition="p2")
        w.insert("h1", [4, 24, 84], "p1", 77.0, upsert=True)
        w.flush("h1")
        _compact_gc(meta, store, settings, "h1", w.model, ("h1",))

        snapshot.create(meta, store, "h1", "b1")
        exports.export(meta, store, backup, "h1", "b1", **quiet)
        restore_bundle(meta2, store2, backup, "h1", "b1", "h2")
        _eq(meta2, store2, "h2", w.model.visible(), ("h2 restored",))
        pitr.set_window(meta2, "h2", "1h")
        snapshot.create(meta2, store2, "h2", "h2base")   # a restored collection's rows are in no log
        w2 = Writer(meta2, store2, settings2, w.model)
        w2.delete("h2", [24, 64], partition="p1")
        w2.insert("h2", [43, 65], "_default", 5.0, upsert=True)
        w2.delete("h2", [66, 67])
        w2.flush("h2")
        snapshot.create(meta2, store2, "h2", "old2")
        olds.append((meta2, store2, "h2", "old2", copy.deepcopy(w.model.visible())))
        w2.insert("h2", [1, 2, 3], "p2", 9.0, upsert=True)
        w2.delete("h2", [2, 44], partition="p1")
        w2.flush("h2")
        t_before, want_then = meta2.tso.now(), copy.deepcopy(w.model.visible())
        w2.delete("h2", [5, 45])
        w2.insert("h2", [6, 46], "p1", 8.0, upsert=True)
        w2.flush("h2")
        _compact_gc(meta2, store2, settings2, "h2", w.model, ("h2",))
        # a restore to an instant before that compaction + GC(0), inside the window
        copy_and_replay(meta2, store2, settings2, pitr.restore_as_of(meta2, store2, "h2", "h2then", t_before),
                        "h2then")
        _eq(meta2, store2, "h2then", want_then, ("h2 as of before its compaction",))

        snap_and_restore(meta2, store2, "h2", "h3")
        pitr.set_window(meta2, "h3", "1h")
        w2.delete("h3", [1, 41], partition="p2")
        w2.flush("h3")
        _compact_gc(meta2, store2, settings2, "h3", w.model, ("h3",))

        # drop h3 (a snapshot first: a restored collection's rows are in no log), undrop it as h4
        snapshot.create(meta2, store2, "h3", "h3base")
        w2.insert("h3", [500, 501], "p1", 3.0)
        drop_now(meta2, store2, settings2, "h3")
        copy_and_replay(meta2, store2, settings2, pitr.undrop(meta2, store2, "h3", "h4"), "h4")
        _eq(meta2, store2, "h4", w.model.visible(), ("h4 undropped",))
        _compact_gc(meta2, store2, settings2, "h4", w.model, ("h4",))

        # every old snapshot, taken before its collection's compaction + GC(0), restores exactly
        for i, (m, s, src, snap, want) in enumerate(olds):
            run_restore(m, s, src, snap, f"old{i}")
            _eq(m, s, f"old{i}", want, ("old snapshot", snap))
        # and once the old snapshots go, GC reclaims every compacted input (files and records)
        for name in ("h2", "h4"):
            pitr.clear_window(meta2, name)
        for m, s in ((meta, store), (meta2, store2)):
            for r in m.snapshots.list():
                if r.collection_name != "h3":       # the dropped h3's window keeps its base
                    snapshot.drop_by_id(m, s, r.collection_id, r.name)
        _gc0(meta, store, settings)
        _gc0(meta2, store2, settings2)
        _gc0(meta, store, settings)
        for m, name in ((meta, "src"), (meta, "h1"), (meta2, "h2")):
            left = [x.segment_id for x in segments(m, name, DROPPED) if x.compacted_to is not None]
            assert left == [], (name, "compacted inputs still recorded after their snapshot went", left)
    finally:
        meta2.close()
