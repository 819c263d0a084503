"""A SeaweedFS restart (same data dir and ports) during a restore on S3 and during a GC
sweep on S3: the operation completes or fails with a clear error, a re-run converges,
nothing referenced is deleted, nothing is committed twice."""

import time

import pytest
from fault_harness import (
    assert_invariants, assert_restored, copy_progress, job_for, seed_and_snapshot, wait_until)

from seglake.lifecycle import copyjob, gc, restore
from seglake.storage import layout

pytestmark = pytest.mark.s3


@pytest.fixture
def s3(s3_fault_settings):
    from seglake.meta import Meta
    from seglake.storage import open_store

    with Meta.from_settings(s3_fault_settings) as meta:
        yield meta, open_store(s3_fault_settings), s3_fault_settings


def _redrive(meta, store, job_id):
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id, threads=4)
    return copyjob.finalize(meta, job_id)


def test_s3_restart_during_a_restore(s3, weed, spawn):
    meta, store, settings = s3
    _, snap = seed_and_snapshot(meta, store, partitions=1)
    child = spawn("restore_all", {"collection": "demo", "snapshot": "s1", "target": "r"}, settings,
                  faults="copy.after_file:sleep=0.05")
    wait_until(lambda: copy_progress(meta, store, "r", snap.files)() >= 0.3, what="30% copied")
    weed.restart()
    child.wait(180).assert_ok_or_clear_error("S3", "unavailable")
    job = job_for(meta, "r")
    if job.state != "Completed":
        job = _redrive(meta, store, job.job_id)
    assert job.state == "Completed", (
        f"a restore across an S3 restart failed: {job.reason!r}; the source is intact, so it must resume")
    assert_restored(meta, store, job.job_id, snap)
    assert_invariants(meta, store)


def test_s3_restart_during_a_gc_sweep(s3, weed, spawn):
    meta, store, settings = s3
    coll, _ = seed_and_snapshot(meta, store, partitions=1)
    part = coll.partitions[0].partition_id
    orphans = {layout.insert_log(coll.collection_id, part, 900_000 + i, 100, 1) for i in range(40)}
    for k in orphans:
        store.put(k, b"orphan")
    time.sleep(1.1)  # older than a zero tolerance (S3 mtimes cannot be set back)
    opts = {"missing_tolerance": 0, "drop_tolerance": 0, "force": True}
    child = spawn("gc_run", {"opts": opts, "delete_delay": 0.05}, settings)
    wait_until(lambda: sum(store.exists(k) for k in orphans) <= 30, what="the sweep under way")
    weed.restart()
    child.wait(180).assert_ok_or_clear_error("S3", "unavailable", "references")
    assert_invariants(meta, store)
    left = {k for k in orphans if store.exists(k)}
    result = gc.run(meta, store, gc.GCOptions(**opts))
    assert not any(store.exists(k) for k in orphans)
    assert result["sweep"]["deleted"] == len(left), (result["sweep"], len(left))
    assert_invariants(meta, store)
    job = restore.restore(meta, store, "demo", "s1", "after_gc")  # the snapshot is still whole
    assert _redrive(meta, store, job).state == "Completed"
