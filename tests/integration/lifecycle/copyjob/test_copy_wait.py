"""The restore's wait (copyjob.wait_status: the sensor's poke and the trigger's poll) costs
O(1) etcd reads whatever the number of tasks -- the job record and two count-only reads
of the task state markers -- and stays exact: Completed only once every task is,
Failed as soon as one is, the timeout. Real etcd, real files, real copies."""

import pytest

from seglake.dev import demo
from seglake.errors import Conflict
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.meta.copyjobs import JOB_COMPLETED, JOB_FAILED, TASK_COMPLETED, TASK_FAILED, TASK_IN_PROGRESS
from seglake.meta.kv import KV
from seglake.storage import layout

PARAMS = demo.SeedParams(partitions=1, segments=12, rows=10, dim=4)


@pytest.fixture
def job(meta, store):
    demo.seed(meta, store, PARAMS)
    snapshot.create(meta, store, "demo", "s1")
    job_id = restore.restore(meta, store, "demo", "s1", "t1")
    copyjob.plan(meta, job_id, 1)          # 12 tasks of one segment
    return job_id


class Reads:
    """Every etcd read a KV makes: requests, and the records (with their bytes) they return."""

    def __init__(self, monkeypatch):
        self.requests, self.records, self.bytes = 0, 0, 0
        for name in ("get", "range", "count"):
            orig = getattr(KV, name)
            monkeypatch.setattr(KV, name, self._wrap(orig, name))

    def _wrap(self, orig, name):
        reads = self

        def counted(kv, *args, **kwargs):
            out = orig(kv, *args, **kwargs)
            if name == "range":
                return reads._gen(out)
            reads.requests += 1
            if name == "get" and out is not None:
                reads.records += 1
                reads.bytes += len(out.value)
            return out
        return counted

    def _gen(self, it):
        self.requests += 1
        for kv in it:
            self.records += 1
            self.bytes += len(kv.value)
            yield kv


def _poke(meta, job_id, monkeypatch, **kw):
    reads = Reads(monkeypatch)
    status = copyjob.wait_status(meta, job_id, **kw)
    monkeypatch.undo()
    return status, reads


def test_a_poke_reads_the_job_and_two_counts_whatever_the_number_of_tasks(meta, store, job, monkeypatch):
    total = meta.copyjobs.get(job)[0].total_tasks
    assert total == 12
    for t in range(5):
        copyjob.copy_task(meta, store, job, t)
    status, reads = _poke(meta, job, monkeypatch)
    # the job record only: no task record is read (the old poke read all 12, twice)
    assert reads.records == 1 and reads.requests == 3, vars(reads)
    assert reads.bytes == len(meta.kv.get(meta.keys.copy_job(job)).value)
    assert status == ("waiting", f"copy job {job}: 5/12 tasks completed")


def test_completed_only_once_every_task_is_completed(meta, store, job, monkeypatch):
    for t in range(11):
        copyjob.copy_task(meta, store, job, t)
    task, kv = meta.copyjobs.get_task(job, 11)
    meta.copyjobs.update_task_kv(kv, task.replace(state=TASK_IN_PROGRESS, attempt=1))   # another runner has it
    assert copyjob.wait_status(meta, job) == ("waiting", f"copy job {job}: 11/12 tasks completed")
    copyjob.copy_task(meta, store, job, 11)
    assert copyjob.wait_status(meta, job) == ("success", f"copy job {job}: all 12 tasks completed")
    assert copyjob.finalize(meta, job).state == JOB_COMPLETED


def test_failed_as_soon_as_one_task_failed(meta, store, job):
    task, _ = meta.copyjobs.get_task(job, 3)
    m = task.mappings[0]
    src = meta.segments.get(m.source_collection, m.source_partition, m.source_segment)
    store.delete_many([next(iter(layout.segment_files(src))).key])        # its source is gone: the task fails
    copyjob.copy_task(meta, store, job, 0)
    assert copyjob.copy_task(meta, store, job, 3).state == TASK_FAILED
    assert copyjob.wait_status(meta, job) == ("success", f"copy job {job} has a failed task")  # 10 still Pending
    assert copyjob.finalize(meta, job).state == JOB_FAILED


def test_the_timeout_still_ends_the_wait(meta, store, job):
    copyjob.copy_task(meta, store, job, 0)
    late = meta.copyjobs.get(job)[0].timeout_at + 1
    assert copyjob.wait_status(meta, job, now=late) == ("success", f"copy job {job} timed out")


def test_a_marker_is_written_in_the_task_txn_or_not_at_all(meta, store, job):
    task, kv = meta.copyjobs.get_task(job, 0)
    meta.copyjobs.update_task_kv(kv, task.replace(state=TASK_IN_PROGRESS, attempt=1))
    with pytest.raises(Conflict):      # a stale read: the guarded txn writes neither record nor marker
        meta.copyjobs.update_task_kv(kv, task.replace(state=TASK_COMPLETED))
    assert meta.copyjobs.terminal_counts(job) == {TASK_COMPLETED: 0, TASK_FAILED: 0}
    copyjob.copy_task(meta, store, job, 0)
    assert meta.copyjobs.terminal_counts(job) == {TASK_COMPLETED: 1, TASK_FAILED: 0}
    task, kv = meta.copyjobs.get_task(job, 0)
    meta.copyjobs.update_task_kv(kv, task.replace(reason="re-written"))   # terminal -> same state: one marker
    assert meta.copyjobs.terminal_counts(job) == {TASK_COMPLETED: 1, TASK_FAILED: 0}


def test_a_job_planned_before_the_markers_is_judged_from_its_task_records(meta, store, job):
    """A job planned by an older seglake has tasks Completed without markers: it must not
    wait until its timeout."""
    copyjob.run_inline(meta, store, job)
    meta.kv.delete_prefix(meta.keys.copy_task_states_prefix(job))
    rec, kv = meta.copyjobs.get(job)
    meta.copyjobs.update(kv, rec.replace(state_markers=False))
    assert copyjob.wait_status(meta, job) == ("success", f"copy job {job}: all 12 tasks completed")


def test_removing_a_finished_job_removes_its_markers(meta, store, job):
    copyjob.run_inline(meta, store, job)
    finished = copyjob.finalize(meta, job)
    assert meta.kv.count(meta.keys.copy_task_states_prefix(job)) == 12
    assert copyjob.cleanup_expired(meta, retention=0, now=finished.finished_at + 1) == [job]
    assert meta.kv.count(meta.keys.copy_task_states_prefix(job)) == 0
    assert meta.kv.count(meta.keys.copy_tasks_prefix(job)) == 0
