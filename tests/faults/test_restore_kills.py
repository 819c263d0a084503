"""A restore SIGKILLed at 10/50/90% of its copy (inline engine: in-process tasks, and
worker processes), and at its named steps, then re-driven: the job Completes with the
snapshot's rows, every target file equals its source, nothing is committed twice."""

import pytest
from fault_harness import (
    assert_invariants, assert_restored, copy_progress, job_for, kill_when, seed_and_snapshot)

from seglake.lifecycle import copyjob

SLOW = "copy.after_file:sleep=0.03"  # ~2.7 s for the 90 files: room to kill at a chosen point


def _redrive(meta, store, job_id, per_task=3):
    """The copy_segment_job path, in process: plan (idempotent), copy, finalize."""
    copyjob.plan(meta, job_id, per_task)
    copyjob.run_inline(meta, store, job_id)
    return copyjob.finalize(meta, job_id)


@pytest.mark.parametrize("workers", [1, 2], ids=["in_process", "worker_processes"])
@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
def test_restore_killed_mid_copy_is_re_driven_to_completion(meta, store, settings, spawn, at, workers):
    _, snap = seed_and_snapshot(meta, store)
    child = spawn("restore_all", {"collection": "demo", "snapshot": "s1", "target": "r", "workers": workers},
                  settings, faults=SLOW)
    seen = kill_when(child, copy_progress(meta, store, "r", snap.files), at)
    assert seen < 1.0
    job = job_for(meta, "r")
    assert job.state == "Executing"
    assert_invariants(meta, store)  # a killed restore never breaks what is committed
    _redrive(meta, store, job.job_id)
    assert_restored(meta, store, job.job_id, snap)
    assert_invariants(meta, store)


def test_a_killed_driver_whose_workers_live_on_is_re_driven_safely(meta, store, settings, spawn):
    """Only the driver dies; its worker processes may still be copying while the
    re-drive runs (two writers of the same target files): the result must be exact,
    and the orphaned workers must not outlive their driver for long."""
    _, snap = seed_and_snapshot(meta, store)
    child = spawn("restore_all", {"collection": "demo", "snapshot": "s1", "target": "r", "workers": 2},
                  settings, faults=SLOW)
    kill_when(child, copy_progress(meta, store, "r", snap.files), 0.3, group=False)
    job = job_for(meta, "r")
    _redrive(meta, store, job.job_id)
    left = _still_alive(child.descendants, within=10)
    assert not left, f"worker processes {sorted(left)} still run 10 s after their driver was killed"
    assert_restored(meta, store, job.job_id, snap)
    assert_invariants(meta, store)


@pytest.mark.parametrize("point", ["copy.after_plan_tasks", "copy.before_complete"])
def test_restore_killed_at_a_step_boundary_is_re_driven(meta, store, settings, spawn, point):
    _, snap = seed_and_snapshot(meta, store)
    child = spawn("restore_all", {"collection": "demo", "snapshot": "s1", "target": "r"}, settings,
                  faults=f"{point}:kill")
    out = child.wait(60)
    assert out.rc == -9, out.err[-2000:]
    job = job_for(meta, "r")
    # copy.before_complete comes after the completion decision (job Completed, one txn)
    # and before the target is made usable: half done, the collection is still invisible
    assert job.state in (("Pending", "Executing") if point == "copy.after_plan_tasks" else ("Completed",))
    assert meta.catalog.get(job.target_collection_id).state == "Importing"
    assert_invariants(meta, store)
    _redrive(meta, store, job.job_id)
    assert_restored(meta, store, job.job_id, snap)
    assert_invariants(meta, store)


def _still_alive(pids, within):
    import time

    from seglake.dev.devstack import pid_alive

    deadline = time.time() + within
    while time.time() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return {p for p in pids if pid_alive(p)}
