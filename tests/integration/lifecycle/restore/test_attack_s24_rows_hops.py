"""Adversary s24 (issue 26): combinations of copies nobody chained before, each copy judged
against a model of every acknowledged call (pk, partition NAME, value), row for row.

- restore -> bundle -> IMPORT into another etcd root (whose partition ids are skewed by
  an earlier collection with the same partition names in another order) -> restore of
  the imported snapshot -> compaction with folds -> restore to a PAST instant -> compaction
  -> bundle back into the first root (import) -> restore -> drop -> undrop;
- a site whose TSO runs ahead (a producer with a fast clock) exported, imported and
  restored at once into a site whose clock is behind its timestamps, then written to at
  once (deletes of copied pks, upserts across partitions);
- the same bundle brought in twice (import under one name, restore straight from the
  bundle, import again after its imported snapshot was dropped) and each copy written to.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, run_restore, table
from pitr_model import copy_and_replay, drop_now, route0

PARTS = ["_default", "p1", "p2"]
FOLD = dict(min_segment_rows=1000, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _same(meta, store, name, model, where):
    got, want = rows(meta, store, name), model.visible()
    assert got == want, (where, "extra", sorted((got - want).items())[:8], "missing", sorted((want - got).items())[:8])
    return sum(want.values())


def _txn_same_pk(w: Writer, name: str, pk: int, part: str, v: float):
    """Three txn calls on pk's vchannel: insert pk, delete it (scoped), insert it again."""
    with WalClient(w.meta, w.store, w.settings) as c:
        c.insert(name, table([pk], v), partition=part, txn=True)
    w.model.insert([pk], part, v)
    with WalClient(w.meta, w.store, w.settings) as c:
        c.delete(name, [pk], partition=part, txn=True)
    w.model.delete([pk], part)
    with WalClient(w.meta, w.store, w.settings) as c:
        c.insert(name, table([pk], v + 0.5), partition=part, txn=True)
    w.model.insert([pk], part, v + 0.5)


def test_restore_import_pitr_compaction_import_back_undrop_equal_the_model(meta, store, settings, etcd_server,
                                                                            tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "hops")
    backup = LocalStore(tmp_path / "backup")
    counts = {}
    try:
        # skew the other root's ids: same partition names, other order, other ids
        Writer(meta2, store2, settings2).create("zz", ["p2", "_default", "p1"])
        Writer(meta2, store2, settings2).create("zy", ["p1"])
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        w.insert("src", range(0, 40), "p1", 1.0)
        w.insert("src", range(20, 60), "p2", 2.0)
        w.insert("src", range(50, 70), "_default", 3.0)
        w.flush("src")
        w.delete("src", range(10, 15), partition="p1")
        w.insert("src", range(30, 36), "p2", 4.0, upsert=True)        # p1's 30..35 stay
        w.insert("src", range(5, 9), "_default", 5.0, upsert=True)    # p1's 5..8 stay
        w.delete("src", [55], partition=None)
        for pk in route0([71, 72, 73, 74, 75, 76, 77, 78], 2)[:2]:
            _txn_same_pk(w, "src", int(pk), "p1", 6.0)
        w.flush("src")
        counts["src"] = _same(meta, store, "src", w.model, "src")
        snapshot.create(meta, store, "src", "s1")
        run_restore(meta, store, "src", "s1", "r1")
        counts["r1"] = _same(meta, store, "r1", w.model, "r1")

        w.delete("r1", range(0, 6), partition="p1")                   # copied rows, scoped
        w.insert("r1", range(60, 66), "p1", 7.0, upsert=True)         # _default's 60..65 stay
        w.insert("r1", range(100, 110), "p2", 8.0)
        w.flush("r1")
        w.delete("r1", range(21, 24), partition="p2")
        w.flush("r1")
        counts["r1'"] = _same(meta, store, "r1", w.model, "r1 written")
        snapshot.create(meta, store, "r1", "s2")
        exports.export(meta, store, backup, "r1", "s2", **quiet)

        # the other root: import, restore of the imported snapshot
        imports.import_bundle(meta2, store2, backup, "r1", "s2", as_collection="imp", **quiet)
        run_restore(meta2, store2, "imp", "s2", "r2")
        w2 = Writer(meta2, store2, settings2, w.model)
        counts["r2"] = _same(meta2, store2, "r2", w2.model, "r2")
        pitr.set_window(meta2, "r2", "1h")
        w2.insert("r2", range(0, 4), "p2", 9.0, upsert=True)            # p2 had none of 0..3; p1's 0..5 gone
        w2.delete("r2", range(30, 41), partition="p1")
        w2.insert("r2", range(36, 40), "p1", 10.0, upsert=True)
        w2.flush("r2")
        compaction.compact(meta2, store2, "r2", compaction.Policy(target_rows=5, **FOLD))
        counts["r2 compacted"] = _same(meta2, store2, "r2", w2.model, "r2 compacted")
        snapshot.create(meta2, store2, "r2", "base")
        w2.insert("r2", range(200, 210), "p1", 11.0)
        w2.delete("r2", [60, 61, 62], partition=None)
        w2.flush("r2")
        w2.insert("r2", range(205, 215), "p2", 12.0, upsert=True)     # unflushed at T
        w2.delete("r2", [100, 101], partition="p2")
        for pk in route0([300, 301, 302, 303, 304, 305], 2)[:1]:
            _txn_same_pk(w2, "r2", int(pk), "p2", 13.0)
        w2.flush("r2")
        t = meta2.tso.now()
        at_t = copy.deepcopy(w2.model)
        w2.delete("r2", range(200, 206), partition="p1")
        w2.insert("r2", [1, 2], "p1", 14.0, upsert=True)
        w2.flush("r2")
        counts["r2 now"] = _same(meta2, store2, "r2", w2.model, "r2 after T")
        copy_and_replay(meta2, store2, settings2, pitr.restore_as_of(meta2, store2, "r2", "r3", t), "r3")
        counts["r3 (as of T)"] = _same(meta2, store2, "r3", at_t, "r3 as of T")
        compaction.compact(meta2, store2, "r3", compaction.Policy(target_rows=40, **FOLD))
        counts["r3 compacted"] = _same(meta2, store2, "r3", at_t, "r3 compacted")

        # back into the first root, by import, then restore, then drop + undrop
        snapshot.create(meta2, store2, "r3", "s3")
        exports.export(meta2, store2, backup, "r3", "s3", **quiet)
        imports.import_bundle(meta, store, backup, "r3", "s3", as_collection="back", **quiet)
        run_restore(meta, store, "back", "s3", "r4")
        w4 = Writer(meta, store, settings, at_t)
        counts["r4"] = _same(meta, store, "r4", w4.model, "r4")
        pitr.set_window(meta, "r4", "1h")
        snapshot.create(meta, store, "r4", "s4")
        w4.delete("r4", [102, 103], partition="p2")
        w4.insert("r4", [0, 1], "_default", 15.0, upsert=True)
        w4.flush("r4")
        w4.delete("r4", [36], partition="p1")                         # unflushed at the drop
        drop_now(meta, store, settings, "r4")
        copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "r4", "r5"), "r5")
        counts["r5 (undrop)"] = _same(meta, store, "r5", w4.model, "r5 undrop")
        print("rows compared per copy:", counts)
    finally:
        meta2.close()


def test_a_bundle_from_a_site_whose_clock_runs_ahead_restored_and_written_at_once(meta, store, settings, etcd_server,
                                                                                   tmp_path):
    """Site B's TSO runs ~4 s ahead (a producer's clock: within max_clock_skew); its bundle is
    imported into site A (A's clock behind its timestamps), restored, and written to at
    once: every delete must hide the copied rows, every upsert replace them."""
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "fast")
    backup = LocalStore(tmp_path / "backup")
    fast = (lambda: time.time() + 4.0)
    try:
        w2 = Writer(meta2, store2, settings2)
        w2.create("src", PARTS)

        def put(name, pks, part, v, upsert=False):
            with WalClient(meta2, store2, settings2, clock=fast) as c:
                c.insert(name, table(pks, v), partition=part, upsert=upsert)
            (w2.model.upsert if upsert else w2.model.insert)(pks, part, v)

        put("src", range(0, 30), "p1", 1.0)
        put("src", range(10, 40), "p2", 2.0)
        w2.flush("src")
        put("src", range(0, 5), "p1", 3.0, upsert=True)
        with WalClient(meta2, store2, settings2, clock=fast) as c:
            c.delete("src", [20, 21], partition="p2")
        w2.model.delete([20, 21], "p2")
        w2.flush("src")
        snapshot.create(meta2, store2, "src", "s1")
        exports.export(meta2, store2, backup, "src", "s1", **quiet)
        imports.import_bundle(meta, store, backup, "src", "s1", as_collection="imp", **quiet)
        run_restore(meta, store, "imp", "s1", "a1")
        wa = Writer(meta, store, settings, copy.deepcopy(w2.model))
        wa.delete("a1", [0, 1, 2, 25], partition=None)               # at once, A's clock
        wa.insert("a1", [3, 4, 26], "p1", 5.0, upsert=True)
        wa.insert("a1", [27], "p2", 6.0, upsert=True)
        wa.flush("a1")
        _same(meta, store, "a1", wa.model, "a1 written at once after import")
        # and straight from the bundle (no import)
        restore_bundle(meta, store, backup, "src", "s1", "a2")
        wb = Writer(meta, store, settings, copy.deepcopy(w2.model))
        wb.delete("a2", [5, 6], partition="p1")
        wb.insert("a2", [7, 30], "p2", 7.0, upsert=True)
        wb.flush("a2")
        _same(meta, store, "a2", wb.model, "a2 written at once after bundle restore")
    finally:
        meta2.close()


def test_one_bundle_brought_in_three_times_each_copy_its_own(meta, store, settings, etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "thrice")
    backup = LocalStore(tmp_path / "backup")
    try:
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        w.insert("src", range(0, 20), "p1", 1.0)
        w.insert("src", range(10, 30), "p2", 2.0)
        w.flush("src")
        w.delete("src", range(0, 4), partition="p1")
        w.insert("src", range(12, 15), "p1", 3.0, upsert=True)
        w.flush("src")
        base = copy.deepcopy(w.model)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        imports.import_bundle(meta2, store2, backup, "src", "s1", as_collection="one", **quiet)
        run_restore(meta2, store2, "one", "s1", "c1")
        restore_bundle(meta2, store2, backup, "src", "s1", "c2")
        # drop the imported snapshot; import the bundle again under another name
        snapshot.drop(meta2, store2, "one", "s1")
        imports.import_bundle(meta2, store2, backup, "src", "s1", as_collection="two", snapshot="t1", **quiet)
        run_restore(meta2, store2, "two", "t1", "c3")
        models = {}
        for i, name in enumerate(["c1", "c2", "c3"]):
            wi = Writer(meta2, store2, settings2, copy.deepcopy(base))
            wi.delete(name, [10 + i], partition="p2")
            wi.insert(name, [12 + i], "p2", 10.0 + i, upsert=True)
            wi.flush(name)
            models[name] = wi.model
        for name, m in models.items():
            _same(meta2, store2, name, m, name)
        # the first copy restored again after the second import (its files may be shared)
        snapshot.create(meta2, store2, "c1", "c1s")
        run_restore(meta2, store2, "c1", "c1s", "c1r")
        _same(meta2, store2, "c1r", models["c1"], "c1r")
    finally:
        meta2.close()
