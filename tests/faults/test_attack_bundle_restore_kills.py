"""Adversarial: a restore from a bundle SIGKILLed at more points than test_backup_kills
covers (after planning, just before completion, and in the worker-process engine mid
copy), then re-run: rows exact, every byte stored once, no temp file, no hold left."""

import uuid

import pytest
from fault_harness import price_rows
from fault_harness import seed_and_snapshot

from seglake.config import Settings
from seglake.lifecycle import copyjob
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export, holds
from seglake.lifecycle.backup import bundle_restore
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.storage.local import TMP_PREFIX, LocalStore

quiet = dict(say=lambda line: None)


def _rows(meta, store, name):
    return price_rows(meta, store, name, read=("embedding", "price"))


def _other(etcd_endpoint, tmp_path):
    return Settings.from_dict({"etcd_endpoint": etcd_endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                               "store_uri": str(tmp_path / f"dr_{uuid.uuid4().hex[:6]}"), "etcd_timeout": 5})


@pytest.mark.parametrize("fault,workers", [("copy.after_plan_tasks:kill@1", 1), ("copy.before_complete:kill@1", 1),
                                           ("copy.after_file:kill@3", 2)])
def test_a_bundle_restore_killed_anywhere_is_finished_by_a_re_run(meta, store, spawn, etcd_server, tmp_path, fault,
                                                                  workers):
    _, snap = seed_and_snapshot(meta, store)
    want = _rows(meta, store, "demo")
    path = tmp_path / "backup"
    export.export(meta, store, LocalStore(path), "demo", "s1", **quiet)
    other = _other(etcd_server.endpoint, tmp_path)
    child = spawn("backup_restore", {"collection": "demo", "bundle": "s1", "restore_to": "demo_dr",
                                     "target": str(path), "workers": workers, "per_task": 1}, other, faults=fault)
    out = child.wait(180)
    assert out.rc == (-9 if workers == 1 else 1), (out.rc, out.err[-3000:])   # a killed worker: BrokenProcessPool
    meta2, store2 = Meta.from_settings(other), open_store(other)
    try:
        r = bundle_restore.restore_from_bundle(meta2, store2, LocalStore(path), "demo", "s1", "demo_dr", engine="inline",
                                        **quiet)
        copyjob.plan(meta2, r["job_id"], 1)
        copyjob.run_inline(meta2, store2, r["job_id"])
        job = copyjob.finalize(meta2, r["job_id"])
        assert job.state == "Completed", job.reason
        assert _rows(meta2, store2, "demo_dr") == want
        doc = bundles.read(LocalStore(path), "default", "demo", "s1")
        keys = [o for o in store2.list("") if not o.key.startswith(("wal/", "_", "snapshots/"))]
        tmp = [o.key for o in keys if TMP_PREFIX in o.key]
        data = sum(o.size for o in keys if o.key.startswith(("insert_log/", "delta_log/", "stats_log/",
                                                             "index_files/")))
        assert not tmp, tmp
        assert data == doc["totals"]["bytes"], (data, doc["totals"]["bytes"])
        assert holds.holders(LocalStore(path), "default", "demo", "s1") == []
    finally:
        meta2.close()
