"""Adversary s24 (issue 26): a bundle chain (a full bundle + incrementals, the WAL archived)
whose MIDDLE bundle is pruned and its data swept, then: the newest and the oldest bundle
restored into another etcd root, restores to instants from the target alone (bases: the
oldest bundle + the archive across the pruned one; the newest), a new incremental export
(its files vouched by the newest bundle), the middle snapshot exported again under the
pruned bundle's name, and a restore to an instant based on it. Every copy equal to the
model of the acknowledged calls at its instant (pk, partition name, value)."""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lifecycle" / "restore"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lifecycle" / "pitr"))

from seglake.lifecycle import compaction, pitr, retention, snapshot
from seglake.lifecycle.backup import archive, holds, prune
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.pitr import from_target
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows
from pitr_model import copy_and_replay

PARTS = ["_default", "p1", "p2"]


def _same(meta, store, name, model, where):
    got, want = rows(meta, store, name), model.visible()
    assert got == want, (where, "extra", sorted((got - want).items())[:8], "missing", sorted((want - got).items())[:8])
    return sum(want.values())


def test_a_chain_with_its_middle_bundle_pruned_and_swept(meta, store, settings, etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "mid")
    backup = LocalStore(tmp_path / "backup")
    counts = {}
    try:
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        pitr.set_window(meta, "src", "1h")
        retention.set_policy(meta, "src", {"keep_last": 10, "archive": True})
        w.insert("src", range(0, 30), "p1", 1.0)
        w.insert("src", range(20, 50), "p2", 2.0)
        w.flush("src")
        snapshot.create(meta, store, "src", "s1")
        at_s1 = copy.deepcopy(w.model)
        exports.export(meta, store, backup, "src", "s1", **quiet)
        w.delete("src", range(0, 5), partition="p1")
        w.insert("src", range(25, 30), "_default", 3.0, upsert=True)
        w.flush("src")
        w.delete("src", [40, 41], partition=None)
        t12 = meta.tso.now()
        at_t12 = copy.deepcopy(w.model)
        w.insert("src", range(60, 70), "p1", 4.0)
        w.flush("src")
        snapshot.create(meta, store, "src", "s2")
        at_s2 = copy.deepcopy(w.model)
        exports.export(meta, store, backup, "src", "s2", **quiet)
        w.delete("src", range(60, 63), partition="p1")
        w.insert("src", range(20, 23), "p1", 5.0, upsert=True)
        w.flush("src")
        t23 = meta.tso.now()
        at_t23 = copy.deepcopy(w.model)
        w.insert("src", range(5, 10), "p2", 6.0, upsert=True)
        w.flush("src")
        # s2's segments compacted away: the files only the middle bundle lists become sweepable
        compaction.compact(meta, store, "src", compaction.Policy(min_segment_rows=1000, target_rows=1000,
                                                                 delete_ratio=0.0, protection=0.0, l0_age=0.0))
        snapshot.create(meta, store, "src", "s3")
        at_s3 = copy.deepcopy(w.model)
        exports.export(meta, store, backup, "src", "s3", **quiet)
        w.delete("src", [44, 45], partition="p2")
        w.flush("src")
        t3 = meta.tso.now()
        at_t3 = copy.deepcopy(w.model)
        archive.run(meta, store, backup)
        # the middle bundle goes, and every data file only it referenced
        assert holds.drop_unless_held(backup, "default", "src", "s2") == []
        old = time.time() - 30 * 86400
        for f in (Path(backup.root) / "data").rglob("*"):
            if f.is_file():
                os.utime(f, (old, old))
        swept = prune.sweep_data(backup, min_age=3600, say=lambda line: None)
        counts["swept"] = swept.get("deleted")
        assert swept.get("deleted"), swept
        covered = min(archive.ArchivedLog(backup, archive.site_id(meta), p).covered()
                      for p in archive.archived_pchannels(meta))
        assert covered >= t3
        w2 = Writer(meta2, store2, settings2)
        restore_bundle(meta2, store2, backup, "src", "s3", "b3")
        counts["b3"] = _same(meta2, store2, "b3", at_s3, "b3")
        restore_bundle(meta2, store2, backup, "src", "s1", "b1")
        counts["b1"] = _same(meta2, store2, "b1", at_s1, "b1")
        for name, t, want in (("t12", t12, at_t12), ("t23", t23, at_t23), ("t3", t3, at_t3)):
            job = from_target.restore_as_of_from_target(meta2, store2, backup, "src", name, t, engine="inline")
            copy_and_replay(meta2, store2, settings2, job, name)
            counts[name] = _same(meta2, store2, name, want, f"as of {name} from the target")
        # a new incremental export after the prune; the middle snapshot again under its old name
        w.insert("src", range(100, 105), "p2", 7.0)
        w.flush("src")
        snapshot.create(meta, store, "src", "s4")
        exports.export(meta, store, backup, "src", "s4", **quiet)
        exports.export(meta, store, backup, "src", "s2", **quiet)
        restore_bundle(meta2, store2, backup, "src", "s4", "b4")
        counts["b4"] = _same(meta2, store2, "b4", w.model, "b4")
        restore_bundle(meta2, store2, backup, "src", "s2", "b2again")
        counts["b2 again"] = _same(meta2, store2, "b2again", at_s2, "b2 again")
        job = from_target.restore_as_of_from_target(meta2, store2, backup, "src", "t23b", t23, engine="inline")
        copy_and_replay(meta2, store2, settings2, job, "t23b")
        counts["t23 on b2 again"] = _same(meta2, store2, "t23b", at_t23, "t23 from the re-exported s2")
        del w2
        print("rows compared:", counts)
    finally:
        meta2.close()
