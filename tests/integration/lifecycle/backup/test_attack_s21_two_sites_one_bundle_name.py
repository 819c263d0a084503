"""Adversary s21 (issue 26): ids are local to one etcd root, but an export decides that a
bundle already in the target is "the same snapshot: done already" by the snapshot's and
collection's IDS alone (bundle.same_snapshot). Two sites (etcd roots) that back up to one
target -- a case the archive supports (bundles name their site) -- and have a collection of
the same name allocate the same ids for the same history: the second site's export of its
own snapshot under the same bundle name answers "already", copies nothing and reports the
bundle committed; a restore of that bundle then gives the FIRST site's rows."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.errors import Conflict
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows


def _site(meta, store, settings, v: float) -> Writer:
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1"])
    w.insert("src", range(10), "p1", v)
    w.flush("src")
    snapshot.create(meta, store, "src", "s1")
    return w


def test_another_sites_snapshot_is_never_taken_for_the_bundle_already_exported(meta, store, settings,
                                                                                etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "b")
    backup = LocalStore(tmp_path / "backup")
    try:
        _site(meta, store, settings, 1.0)                # site A
        wb = _site(meta2, store2, settings2, 2.0)        # site B: same history, its own values
        a = meta.snapshots.get(meta.catalog.get_by_name("src").collection_id, "s1")[0]
        b = meta2.snapshots.get(meta2.catalog.get_by_name("src").collection_id, "s1")[0]
        print("ids A", (a.collection_id, a.snapshot_id), "B", (b.collection_id, b.snapshot_id))
        exports.export(meta, store, backup, "src", "s1", **quiet)
        try:
            report = exports.export(meta2, store2, backup, "src", "s1", **quiet)
        except Conflict:
            return          # refused: the bundle of that name is another site's (fine)
        # else the export must have backed up site B's snapshot
        restore_bundle(meta2, store2, backup, "src", "s1", "back")
        got = rows(meta2, store2, "back")
        assert got == wb.model.visible(), ("export answered", {k: report.get(k) for k in ("already", "copied_files")},
                                           "restored", sorted(got)[:3], "site B wrote", sorted(wb.model.visible())[:3])
    finally:
        meta2.close()
