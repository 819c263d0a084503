"""Adversary s21 (issue 26): an import files a bundle as snapshot `s1` of a collection
named like a LIVE one ("src": as_collection defaults to the bundle's collection name) --
allowed, and `restore src s1` restores the imported rows. The import keeps "one snapshot
per (collection name, db, name): restore finds it by name" (imports._check_name_free), but
a snapshot the live collection takes later under the same name is not refused: from then on
the same `restore src s1` silently restores other rows (the live collection's), and the
imported snapshot answers only to its collection id. A DR runbook that restores "src/s1"
gets another collection's data without a word."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.errors import Conflict
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet, rows, run_restore


def test_a_live_snapshot_never_takes_the_name_of_an_imported_one(meta, store, settings, etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "n")
    backup = LocalStore(tmp_path / "backup")
    try:
        w = Writer(meta, store, settings)
        w.create("src", ["_default"])
        w.insert("src", range(5), v=1.0)
        w.flush("src")
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        w2 = Writer(meta2, store2, settings2)
        w2.create("src", ["_default"])               # the DR site has its own live "src"
        w2.insert("src", range(100, 103), v=7.0)
        w2.flush("src")
        imports.import_bundle(meta2, store2, backup, "src", "s1", **quiet)
        run_restore(meta2, store2, "src", "s1", "r_before")
        imported = rows(meta2, store2, "r_before")
        assert imported == w.model.visible()
        # the live "src" takes a snapshot of the same name: refused (the name is the imported
        # one's), or else `src s1` must go on meaning what it meant
        try:
            snapshot.create(meta2, store2, "src", "s1")
        except Conflict:
            return
        run_restore(meta2, store2, "src", "s1", "r_after")
        got = rows(meta2, store2, "r_after")
        assert got == imported, ("restore src s1 before", sorted(imported), "after a live snapshot s1",
                                 sorted(got))
    finally:
        meta2.close()
