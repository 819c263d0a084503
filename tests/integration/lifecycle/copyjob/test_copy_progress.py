"""Issue 27 item 2, the engine side: a copy's progress moves per file (not per segment),
never goes backwards when an interrupted task is resumed (what is already in the target
counts), carries the current rate, and a job whose count stops moving reads "stalled".
Real etcd, real files, real copies; the interruption is a fault point after a file."""

import pytest

from seglake import console, faults
from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.copyjob import copying
from seglake.meta.copyjobs import CopyJobs

PARAMS = demo.SeedParams(partitions=1, segments=3, rows=40, dim=4)


@pytest.fixture
def job(meta, store):
    demo.seed(meta, store, PARAMS)
    snapshot.create(meta, store, "demo", "s1")
    job_id = restore.restore(meta, store, "demo", "s1", "t1")
    copyjob.plan(meta, job_id, 100)        # one task with every segment
    return job_id


@pytest.fixture
def writes(monkeypatch):
    """Every task record written: (done_files, done_bytes, copied_segments, state)."""
    seen = []
    orig = CopyJobs.update_task_kv

    def recorded(self, kv, new):
        out = orig(self, kv, new)
        seen.append((new.done_files, new.done_bytes, new.copied_segments, new.state))
        return out
    monkeypatch.setattr(CopyJobs, "update_task_kv", recorded)
    monkeypatch.setattr(copying, "PROGRESS_EVERY_S", -1.0)   # save after every file (the pacing is not under test)
    return seen


def test_progress_moves_per_file_and_never_back_across_a_resume(meta, store, job, writes):
    (task,) = meta.copyjobs.tasks(job)
    files_per_segment = task.total_files // len(task.mappings)
    assert files_per_segment > 1 and task.total_files > 4
    stop_at = task.total_files // 2 + 1
    with faults.inject("copy.after_file", "raise", at=stop_at), pytest.raises(faults.InjectedFault):
        copyjob.copy_task(meta, store, job, task.task_id)
    before = copyjob.progress(meta, job)
    assert 0 < before["done_bytes"] < before["total_bytes"] and before["done_files"] == stop_at - 1
    # finer steps: saves between segment ends (a file moves the count, a segment need not have ended)
    mid_segment = [w for w in writes if w[0] % files_per_segment]
    assert mid_segment, writes

    resumed_from = len(writes)
    done = copyjob.copy_task(meta, store, job, task.task_id)
    assert done.state == "Completed" and done.done_bytes == done.total_bytes
    shown = [(f, b) for f, b, _, _ in writes]
    assert all(b2 >= b1 and f2 >= f1 for (f1, b1), (f2, b2) in zip(shown, shown[1:])), shown
    # the resumed attempt found the first attempt's files whole and counted them, it did not start from 0
    assert min(b for _, b in shown[resumed_from:]) >= before["done_bytes"]
    after = copyjob.progress(meta, job)
    assert after["done_bytes"] == after["total_bytes"] and after["done_files"] == after["total_files"]


def test_a_task_that_stops_moving_makes_its_job_stalled(meta, store, job, writes):
    (task,) = meta.copyjobs.tasks(job)
    with faults.inject("copy.after_file", "raise", at=3), pytest.raises(faults.InjectedFault):
        copyjob.copy_task(meta, store, job, task.task_id)   # a runner that died: the task stays InProgress
    (row,) = [d for d in console.copy_jobs(meta, now=0.0) if d["job_id"] == job]   # "now" before any write
    p = row["progress"]
    last = p["progress_at"]
    assert last and p["live"] and p["live"][0][0] == last
    (row,) = [d for d in console.copy_jobs(meta, now=last + 1) if d["job_id"] == job]
    assert row["health"] == "running" and row["stalled_s"] is None
    (row,) = [d for d in console.copy_jobs(meta, now=last + console.STALL_AFTER_S + 5) if d["job_id"] == job]
    assert row["health"] == "stalled" and row["stalled_s"] == console.STALL_AFTER_S + 5
    assert row["rate_bps"] == 0.0 and row["eta_s"] is None   # no rate, no promise while nothing moves


def test_the_rate_window_is_the_recent_rate_and_always_finite():
    w = copying.RateWindow(10.0)
    assert w.add(0.0, 0) == 0.0                       # one sample: no rate
    for t in range(1, 21):
        rate = w.add(float(t), t * 100)               # 100 B/s
    assert rate == 100.0
    for t in range(21, 26):
        rate = w.add(float(t), 2000 + (t - 20) * 1000)   # then 1000 B/s for 5 s
    assert rate == pytest.approx((7000 - 1500) / 10)  # the window [15, 25], not the run's average
    w = copying.RateWindow(10.0)
    assert w.add(5.0, 500) == 0.0 and w.add(5.0, 900) == 0.0    # no time passed: no rate
    assert w.add(6.0, 100) == 0.0                               # a count going back: no rate, never negative
