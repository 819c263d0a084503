"""Adversary rows5 (issue 26, clock bounds across copies): a bundle whose rows were stamped
by a TSO running ~4 s ahead of the wall clock (a writer's clock ahead, inside
max_clock_skew) restored, or imported, into another etcd root whose TSO is at the wall
clock; a delete and an upsert of those pks written there at once must hide the copied rows
(their timestamps must lie above the copied ones). Held: the copy's finish / the import
move the target root's TSO past the newest copied timestamp. Row-exact against the model."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.meta.alloc import TSO
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Model, Writer, other_root, quiet, rows, run_restore


@pytest.mark.parametrize("how", ["restore_from_bundle", "import_then_restore"])
def test_rows_stamped_ahead_copied_into_a_root_whose_tso_is_behind_are_hidden_by_its_next_writes(
        meta, store, settings, etcd_server, tmp_path, how):
    assert settings.max_clock_skew > 4.0
    TSO(meta.kv, meta.keys.alloc_tso(), clock=lambda: time.time() + 4.0,
        max_clock_skew=settings.max_clock_skew).reserve(1, linearizable=True)
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1"])
    w.insert("src", range(1, 21), "_default", 1.0)
    w.insert("src", range(11, 31), "p1", 2.0)
    w.flush("src")
    snapshot.create(meta, store, "src", "s1")
    backup = LocalStore(tmp_path / "backup")
    exports.export(meta, store, backup, "src", "s1", **quiet)
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "clk")
    try:
        assert meta2.tso.now() < meta.tso.now()   # the target root's TSO is behind the bundle's stamps
        if how == "restore_from_bundle":
            restore_bundle(meta2, store2, backup, "src", "s1", "b")
        else:
            imports.import_bundle(meta2, store2, backup, "src", "s1", say=lambda line: None)
            run_restore(meta2, store2, "src", "s1", "b", compare=False)
        w2 = Writer(meta2, store2, settings2, Model())
        w2.model.rows = [list(r) for r in w.model.rows]
        w2.delete("b", range(1, 6))                      # collection-wide
        w2.delete("b", range(11, 16), partition="p1")    # scoped
        w2.insert("b", range(16, 19), "_default", 3.0, upsert=True)
        w2.flush("b")
        got, want = rows(meta2, store2, "b"), w2.model.visible()
        assert got == want, (sorted((got - want).items())[:6], sorted((want - got).items())[:6])
        print(how, "rows compared", sum(want.values()))
    finally:
        meta2.close()
