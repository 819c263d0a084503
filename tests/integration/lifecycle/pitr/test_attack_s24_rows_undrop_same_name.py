"""Adversary s24 (issue 26): drop + undrop INTO THE SAME NAME + restore, then restores to
instants of the name on either side of the drop (at_instant must pick the collection that
held the name then), an old snapshot of the dropped one restored, the undropped one
compacted and GC'd at zero tolerances, then bundled into another root by import + restore.
Every copy equal to the model of the acknowledged calls at its instant."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

import pytest

from seglake.lifecycle import compaction, copyjob, gc, pitr, snapshot
from seglake.lifecycle import restore as restores
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.lifecycle.pitr.planning import OutsideWindow
from seglake.errors import NotFound
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet, rows, run_restore
from pitr_model import copy_and_replay, drop_now

PARTS = ["_default", "p1", "p2"]
FOLD = compaction.Policy(min_segment_rows=1000, target_rows=7, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _same(meta, store, name, model, where):
    got, want = rows(meta, store, name), model.visible()
    assert got == want, (where, "extra", sorted((got - want).items())[:8], "missing", sorted((want - got).items())[:8])
    return sum(want.values())


def _gc0(meta, store, settings):
    return gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                          force=True))


def test_undrop_into_the_same_name_then_instants_on_both_sides(meta, store, settings, etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "und")
    backup = LocalStore(tmp_path / "backup")
    counts = {}
    try:
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        pitr.set_window(meta, "src", "1h")
        w.insert("src", range(0, 20), "p1", 1.0)
        w.insert("src", range(10, 30), "p2", 2.0)
        w.flush("src")
        snapshot.create(meta, store, "src", "old")
        at_old = copy.deepcopy(w.model)
        w.delete("src", range(0, 3), partition="p1")
        w.insert("src", range(15, 18), "_default", 3.0, upsert=True)
        t1 = meta.tso.now()
        at_t1 = copy.deepcopy(w.model)
        w.insert("src", range(40, 45), "p2", 4.0)                  # unflushed at the drop
        at_drop = copy.deepcopy(w.model)
        drop_now(meta, store, settings, "src")
        t_gap = meta.tso.now()
        copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "src"), "src")
        counts["undropped into src"] = _same(meta, store, "src", at_drop, "undrop into the same name")
        pitr.set_window(meta, "src", "1h")
        snapshot.create(meta, store, "src", "base")                  # its rows are in no log of its own
        w.delete("src", [40, 41], partition="p2")
        w.insert("src", [1, 2], "p1", 5.0, upsert=True)
        w.flush("src")
        t2 = meta.tso.now()
        at_t2 = copy.deepcopy(w.model)
        # instants: before the drop (the dropped collection held the name), after the undrop
        copy_and_replay(meta, store, settings, pitr.restore_as_of(meta, store, "src", "i1", t1), "i1")
        counts["as of t1 (dropped one)"] = _same(meta, store, "i1", at_t1, "as of t1")
        copy_and_replay(meta, store, settings, pitr.restore_as_of(meta, store, "src", "i2", t2), "i2")
        counts["as of t2 (undropped one)"] = _same(meta, store, "i2", at_t2, "as of t2")
        with pytest.raises((OutsideWindow, NotFound)):               # nothing held the name then
            pitr.restore_as_of(meta, store, "src", "gap", t_gap)
        # the dropped one's old snapshot, by name: which 'src'? (the live one has no 'old')
        dropped = [c for c in meta.catalog.list(include_dropped=True) if c.name == "src" and c.state != "Created"]
        job = restores.restore(meta, store, "src", "old", "o1", engine="inline",
                               collection_id=dropped[0].collection_id)
        copyjob.plan(meta, job)
        copyjob.run_inline(meta, store, job)
        copyjob.finalize(meta, job)
        counts["old snapshot of the dropped one"] = _same(meta, store, "o1", at_old, "old snapshot")
        # the undropped one compacted, GC'd at zero tolerances, then bundled into another root
        compaction.compact(meta, store, "src", FOLD)
        _gc0(meta, store, settings)
        counts["src compacted + gc"] = _same(meta, store, "src", w.model, "src compacted + gc")
        snapshot.create(meta, store, "src", "s3")
        exports.export(meta, store, backup, "src", "s3", **quiet)
        imports.import_bundle(meta2, store2, backup, "src", "s3", as_collection="src", **quiet)
        _gc0(meta2, store2, settings2)
        run_restore(meta2, store2, "src", "s3", "far")
        _gc0(meta2, store2, settings2)
        counts["far"] = _same(meta2, store2, "far", w.model, "far")
        for name, want in (("i1", at_t1), ("i2", at_t2), ("o1", at_old)):
            assert rows(meta, store, name) == want.visible(), (name, "after GC")
        print("rows compared:", counts)
    finally:
        meta2.close()
