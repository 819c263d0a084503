"""Wait for a job (the sensor's read), and finish it: Completed (targets Flushed, then
the collection Created) or Failed (rolled back)."""

from __future__ import annotations

import time

from seglake import faults
from seglake.errors import Conflict, NotFound, StateError
from seglake.meta import Meta
from seglake.meta.copyjobs import (JOB_COMPLETED, JOB_EXECUTING, JOB_FAILED, JOB_PENDING, JOB_TERMINAL, TASK_COMPLETED, TASK_FAILED, TASK_TERMINAL, CopyJob, CopyTask)
from seglake.meta.kv import retry_on_conflict
from seglake.meta.catalog import CREATED, IMPORTING as COLL_IMPORTING
from seglake.meta.segments import FLUSHED, IMPORTING
from seglake.lifecycle.copyjob.target import rollback_target

PROGRESS_EVERY_S = 0.5



# -- wait / finalize ------------------------------------------------------------------------
def wait_status(meta: Meta, job_id: int, now: float | None = None) -> tuple[str, str]:
    """Read-only: ("success", why) once finalize can decide, else ("waiting", progress)."""
    now = time.time() if now is None else now
    try:
        job, _ = meta.copyjobs.get(job_id)
    except NotFound as e:
        return "error", str(e)
    if job.state in JOB_TERMINAL:
        return "success", f"copy job {job_id} is {job.state}"
    done = 0
    if job.state == JOB_EXECUTING:
        done, failed = _terminal_counts(meta, job)
        if failed:
            return "success", f"copy job {job_id} has a failed task"
        if done == job.total_tasks:
            return "success", f"copy job {job_id}: all {done} tasks completed"
    if now > job.timeout_at:
        return "success", f"copy job {job_id} timed out"
    if job.state == JOB_PENDING:
        return "waiting", f"copy job {job_id} is Pending"
    return "waiting", f"copy job {job_id}: {done}/{job.total_tasks} tasks completed"


def _terminal_counts(meta: Meta, job: CopyJob) -> tuple[int, int]:
    """(tasks Completed, tasks Failed): two count-only reads of the state markers; a job
    planned before they existed (no `state_markers`) from its task records."""
    if job.state_markers:
        counts = meta.copyjobs.terminal_counts(job.job_id)
        return counts[TASK_COMPLETED], counts[TASK_FAILED]
    tasks = [t for t in meta.copyjobs.tasks(job.job_id) if t.task_id < job.total_tasks]
    return sum(t.state == TASK_COMPLETED for t in tasks), sum(t.state == TASK_FAILED for t in tasks)


def _all_completed(job: CopyJob, tasks: list[CopyTask]) -> bool:
    return len(tasks) == job.total_tasks and all(t.state == TASK_COMPLETED for t in tasks)


def finalize(meta: Meta, job_id: int, now: float | None = None, settings=None) -> CopyJob:
    """Complete or fail the job from what its tasks say; a no-op while tasks still run.
    Work that finished wins over a timeout reached afterwards. `settings`: to open a
    bundle's backup target and end the job's hold on it (else it expires by itself)."""
    now = time.time() if now is None else now
    job, _ = meta.copyjobs.get(job_id)
    if job.state == JOB_COMPLETED:
        return _finish(meta, job, now, settings)   # re-run: make sure every step happened
    if job.state == JOB_FAILED:
        return fail(meta, job_id, job.reason, now=now, settings=settings)
    if job.state == JOB_EXECUTING:
        tasks = meta.copyjobs.tasks(job_id)
        failed = [t for t in tasks if t.state == TASK_FAILED]
        if failed:
            return fail(meta, job_id, f"{len(failed)}/{len(tasks)} tasks failed; task {failed[0].task_id}: "
                                      f"{failed[0].reason}", now=now, settings=settings)
        if _all_completed(job, tasks):
            return _finish(meta, job, now, settings)
    if now > job.timeout_at:
        return fail(meta, job_id, "timeout", now=now, settings=settings)
    return job


def newest_ts(segments) -> int:
    """The largest timestamp any of these segment records carries (rows, deletes)."""
    out = 0
    for s in segments:
        out = max(out, s.start_ts, s.dml_ts, *(b.ts_to for logs in s.binlogs.values() for b in logs),
                  *(b.ts_to for b in s.deltalogs))
    return out


def _finish(meta: Meta, job: CopyJob, now: float, settings=None) -> CopyJob:
    """Decide (job Completed, one guarded txn: a concurrent fail loses), then Flush the
    targets in batches while the collection is still Importing (nobody uses it), then
    ONE txn makes the collection Created, then unpin. Re-runnable from any step."""
    targets = [s for s in meta.segments.list(job.target_collection_id) if s.state in (IMPORTING, FLUSHED)]
    job = meta.copyjobs.transition(job.job_id, JOB_COMPLETED, finished_at=job.finished_at or now,
                                   total_rows=sum(s.num_rows for s in targets))
    meta.segments.transition([s.ref for s in targets if s.state == IMPORTING], FLUSHED)
    # restored rows are never newer than this store's clock: whatever clock wrote them,
    # every write to the target once it is usable gets a larger timestamp
    meta.tso.advance_past(newest_ts(targets))
    faults.point("copy.before_complete")
    if "replay" not in meta.catalog.get(job.target_collection_id).properties.get("restored_from", {}):
        retry_on_conflict(lambda: meta.catalog.set_state(job.target_collection_id, CREATED, expect=COLL_IMPORTING),
                          f"make the target of copy job {job.job_id} usable")
    # (a restore to a time: the target stays Importing until its replay (lifecycle/pitr) finishes)
    _let_go(meta, job, settings)
    return job


def _let_go(meta: Meta, job: CopyJob, settings) -> None:
    """The source no longer needs keeping: unpin the snapshot, or end the hold on the
    bundle (best effort: a hold not renewed expires after holds.HOLD_TTL)."""
    if job.bundle is None:
        if job.snapshot:   # (a restore to a time with no base snapshot pinned none)
            meta.snapshots.unpin(job.source_collection_id, job.snapshot, job.job_id)
        return
    from seglake.lifecycle.backup import holds
    from seglake.lifecycle.copyjob.bundled import target_of
    from seglake.storage import layout

    b = job.bundle
    try:
        holds.release(target_of(b["uri"], settings), layout.bundle_hold(b["db"], b["collection"], b["bundle"],
                                                                       b["hold"]))
    except Exception:  # noqa: BLE001 - expires after HOLD_TTL
        pass


def fail(meta: Meta, job_id: int, reason: str, now: float | None = None, settings=None) -> CopyJob:
    """Job Failed (first, so nothing new starts; a job already Completed stays so and is
    finished instead), remaining tasks Failed, rollback, unpin."""
    now = time.time() if now is None else now
    try:
        job = meta.copyjobs.transition(job_id, JOB_FAILED, reason=reason, finished_at=now)
    except StateError:
        job, _ = meta.copyjobs.get(job_id)
        if job.state == JOB_COMPLETED:
            return _finish(meta, job, now, settings)  # completion won the race
        raise
    for t in meta.copyjobs.tasks(job_id):
        if t.state not in TASK_TERMINAL:
            try:
                cur, kv = meta.copyjobs.get_task(job_id, t.task_id)
                if cur.state not in TASK_TERMINAL:
                    meta.copyjobs.update_task(kv, cur.replace(state=TASK_FAILED, reason=job.reason, updated_at=now))
            except Conflict:
                pass  # its runner finished it meanwhile: terminal either way
    rollback_target(meta, job.target_collection_id, f"copy job {job_id} failed: {job.reason}", now=now)
    _let_go(meta, job, settings)
    return job
