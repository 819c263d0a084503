"""The read side of copy jobs (progress, describe, list) and their removal after
copy_job_retention."""

from __future__ import annotations

import time

from seglake.errors import SeglakeError
from seglake.meta import Meta
from seglake.meta.copyjobs import JOB_FAILED, JOB_TERMINAL, TASK_COMPLETED, TASK_FAILED, TASK_IN_PROGRESS
from seglake.meta.kv import Delete, unchanged
from seglake.meta.catalog import DROPPED as COLL_DROPPED
from seglake.lifecycle.copyjob.finishing import finalize
from seglake.lifecycle.copyjob.target import drop_segments

PROGRESS_EVERY_S = 0.5



# -- read side ------------------------------------------------------------------------------
def progress(meta: Meta, job_id: int) -> dict:
    job, _ = meta.copyjobs.get(job_id)
    tasks = meta.copyjobs.tasks(job_id)
    done = [t for t in tasks if t.state == TASK_COMPLETED]
    return {
        "total_segments": job.total_segments, "total_files": job.total_files, "total_bytes": job.total_bytes,
        "copied_segments": sum(len(t.mappings) if t.state == TASK_COMPLETED else t.copied_segments for t in tasks),
        "copied_files": sum(t.copied_files + t.skipped_files for t in tasks),
        "copied_bytes": sum(t.earlier_bytes + t.copied_bytes for t in tasks),   # every attempt's copies
        # bytes done: a Completed task's whole size (a resumed attempt skips, never re-copies,
        # what an earlier one copied), else what the task copied so far: the progress bars
        "done_bytes": sum(t.total_bytes if t.state == TASK_COMPLETED else max(t.done_bytes, t.copied_bytes)
                          for t in tasks),
        # files done: like done_bytes, never lower than an earlier attempt's count
        "done_files": sum(t.total_files if t.state == TASK_COMPLETED else max(t.done_files, t.copied_files
                                                                              + t.skipped_files) for t in tasks),
        # liveness: when any task's done count last moved (or an attempt took a task), and the current
        # rate of each running task as of then (seglake.console judges "stalled" from these and `now`)
        "progress_at": max((t.progress_at or t.updated_at for t in tasks), default=None) or None,
        "live": [[t.progress_at, t.recent_bps] for t in tasks if t.state == TASK_IN_PROGRESS],
        "tasks": len(tasks), "tasks_completed": len(done),
        "first_copy_at": min((t.first_copy_at for t in tasks if t.first_copy_at), default=None),
        "tasks_failed": sum(t.state == TASK_FAILED for t in tasks),
    }


def describe_job(meta: Meta, job_id: int, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    job, _ = meta.copyjobs.get(job_id)
    p = progress(meta, job_id)
    end = job.finished_at or now
    return {**job.to_json(), "progress": p,
            "fraction": p["copied_segments"] / job.total_segments if job.total_segments else 1.0,
            "duration_s": round(end - (job.started_at or job.created_at), 3)}


def list_jobs(meta: Meta, collection: str | None = None) -> list[dict]:
    out = []
    for job in meta.copyjobs.list():
        if collection is None or collection in (job.source_collection, job.target_collection):
            out.append(describe_job(meta, job.job_id))
    return sorted(out, key=lambda j: j["job_id"])   # by id, oldest first (etcd lists keys as text: 10 < 9)


def cleanup_expired(meta: Meta, retention: float, now: float | None = None) -> list[int]:
    """Remove finished jobs (tasks first, then the job) `retention` seconds after they
    ended, once their target is settled (a half-done finish or rollback is completed
    first). A Failed job is kept while its target segment records still exist. Also
    completes the rollback of restore targets dropped before their job existed."""
    now = time.time() if now is None else now
    for coll in list(meta.catalog.list(include_dropped=True)):
        if coll.state == COLL_DROPPED and "restore_job_id" in coll.properties:
            drop_segments(meta, coll.collection_id, now)
    removed = []
    for job in list(meta.copyjobs.list()):
        if job.state not in JOB_TERMINAL or (job.finished_at or now) + retention > now:
            continue
        try:
            finalize(meta, job.job_id, now=now)  # idempotent: settles the target
        except SeglakeError:
            continue  # kept; the next run tries again
        if job.state == JOB_FAILED and meta.kv.count(meta.keys.segments_prefix(job.target_collection_id)):
            continue
        _, kv = meta.copyjobs.get(job.job_id)
        meta.copyjobs.delete_tasks(job.job_id)
        meta.kv.txn([unchanged(kv)], [Delete(kv.key)])
        removed.append(job.job_id)
    return removed
