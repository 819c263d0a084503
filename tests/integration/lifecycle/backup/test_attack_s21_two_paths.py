"""Adversary s21 (issue 26): one bundle brought into another root by BOTH paths -- an import
(then a restore of the imported snapshot) and a restore straight from the bundle -- and
each result exported again and restored back into the first root: all four copies equal
the model of every acknowledged write (partition-scoped deletes, upserts moving pks
between partitions, collection-wide deletes, unflushed writes at the snapshot)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, run_restore

PARTS = ["_default", "p1", "p2"]


def test_import_and_bundle_restore_of_one_bundle_and_their_bundles_back_equal_the_model(meta, store, settings,
                                                                                         etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "two")
    backup = LocalStore(tmp_path / "backup")
    try:
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        w.insert("src", range(0, 40), "p1", 1.0)
        w.insert("src", range(20, 60), "p2", 2.0)
        w.flush("src")
        w.delete("src", range(10, 30), partition="p2")
        w.insert("src", range(25, 35), "_default", 3.0, upsert=True)      # pks of p1/p2 upserted into _default
        w.delete("src", [0, 1, 59], partition=None)
        w.flush("src")
        want = w.model.visible()
        w.insert("src", range(100, 110), "p1", 9.0)                        # unflushed at the snapshot
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        imports.import_bundle(meta2, store2, backup, "src", "s1", as_collection="imp", **quiet)
        run_restore(meta2, store2, "imp", "s1", "via_import", compare=True)
        restore_bundle(meta2, store2, backup, "src", "s1", "via_bundle")
        for name in ("via_import", "via_bundle"):
            assert rows(meta2, store2, name) == want, name
            snapshot.create(meta2, store2, name, f"{name}_s")
            exports.export(meta2, store2, backup, name, f"{name}_s", **quiet)
            restore_bundle(meta, store, backup, name, f"{name}_s", f"{name}_back")
            assert rows(meta, store, f"{name}_back") == want, f"{name}_back"
        # the imported snapshot itself, exported again without a restore, then imported back
        exports.export(meta2, store2, backup, "imp", "s1", bundle="imp_again", **quiet)
        imports.import_bundle(meta, store, backup, "imp", "imp_again", as_collection="imp_home", **quiet)
        run_restore(meta, store, "imp_home", "s1", "imp_home_r", compare=True)
        assert rows(meta, store, "imp_home_r") == want
    finally:
        meta2.close()
