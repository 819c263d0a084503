"""Adversary s21 (issue 26): the retention schedule's prune judges "the schedule's bundles of
this collection" by the collection's ID (prune._schedules_bundle). Ids are local to one etcd
root: two sites backing up to one target, each with a collection "src" of the same id (the
same history allocates the same ids), see each other's schedule bundles as their own. Site
A's prune (keep_last 1) keeps site B's newer bundle as "the newest" and drops A's only bundle
and B's older one: A has no backup left, B lost one it never asked to prune."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.lifecycle import retention, snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import scheduled
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet


def _site(meta, store, settings, v: float, names) -> int:
    w = Writer(meta, store, settings)
    w.create("src", ["_default"])
    w.insert("src", range(10), v=v)
    w.flush("src")
    for n in names:
        snapshot.create(meta, store, "src", n, owner=retention.OWNER + n)
    return meta.catalog.get_by_name("src").collection_id


def test_one_sites_schedule_prune_leaves_another_sites_bundles(meta, store, settings, etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "s")
    backup = LocalStore(tmp_path / "backup")
    a_names = ["sched_20261128T1000Z"]
    b_names = ["sched_20261128T1100Z", "sched_20261128T1200Z"]
    try:
        a_id = _site(meta, store, settings, 1.0, a_names)
        b_id = _site(meta2, store2, settings2, 2.0, b_names)
        assert a_id == b_id   # the collision the test is about
        for n in a_names:
            exports.export(meta, store, backup, "src", n, schedule=True, **quiet)
        for n in b_names:
            exports.export(meta2, store2, backup, "src", n, schedule=True, **quiet)
        # site A's scheduled export-and-prune of its "src" (keep_last 1), as backup.scheduled runs it
        rep = scheduled.export_collection(meta, store, backup, {"db": "default", "collection": "src",
                                                                "collection_id": a_id, "policy": {"keep_last": 1}},
                                          dry_run=False, threads=2, min_age=86400.0, max_bytes_per_second=0,
                                          max_requests_per_second=0, by="", **quiet)
        left = sorted(b for _, _, b, done in bundles.find(backup, "default", "src") if done)
        assert set(b_names) <= set(left), ("site A's prune dropped", rep["pruned"], "left", left)
        assert set(a_names) <= set(left), ("site A's prune dropped its only bundle", rep["pruned"], "left", left)
    finally:
        meta2.close()
