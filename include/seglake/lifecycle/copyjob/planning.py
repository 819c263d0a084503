"""Plan a copy job: Pending -> Executing, its tasks cut from the mappings in listing
order; and the engine a run of the job uses."""

from __future__ import annotations

import time

from seglake import faults
from seglake.meta import Meta
from seglake.meta.codec import encode_struct
from seglake.meta.copyjobs import JOB_EXECUTING, JOB_PENDING, TASK_PENDING, CopyJob, CopyTask, Mapping
from seglake.meta.kv import Delete, Put, batched, unchanged
from seglake.meta.segments import IMPORTING
from seglake.lifecycle.copyjob.finishing import fail
from seglake.runners import ENGINES

PROGRESS_EVERY_S = 0.5



# -- plan -----------------------------------------------------------------------------------
def plan(meta: Meta, job_id: int, max_per_task: int = 10, now: float | None = None) -> CopyJob:
    """Pending -> Executing with its tasks. A job in any other state is returned as is.
    The first plan records its task size on the job; every re-run uses that size."""
    if isinstance(max_per_task, bool) or not isinstance(max_per_task, int) or not 1 <= max_per_task <= 100_000:
        raise ValueError(f"max_per_task must be an integer in 1..100000, got {max_per_task!r}")
    now = time.time() if now is None else now
    job, job_kv = meta.copyjobs.get(job_id)
    if job.state != JOB_PENDING:
        return job
    if now > job.timeout_at:
        return fail(meta, job_id, "timeout", now=now)
    if not job.task_size:  # the plan is recorded once: a re-run with another size converges
        job = meta.copyjobs.update(job_kv, job.replace(task_size=max_per_task))
        job, job_kv = meta.copyjobs.get(job_id)
    targets = sorted((s for s in meta.segments.list(job.target_collection_id) if s.state == IMPORTING),
                     key=_listing_order)
    mappings = [Mapping(s.source["collection_id"], s.source["partition_id"], s.source["segment_id"],
                        s.partition_id, s.segment_id) for s in targets]
    by_id = {s.segment_id: s for s in targets}
    ops = []
    for task_id, chunk in enumerate(batched(mappings, job.task_size)):
        segs = [by_id[m.target_segment] for m in chunk]
        task = CopyTask(job_id=job_id, task_id=task_id, state=TASK_PENDING, mappings=tuple(chunk),
                        total_files=sum(s.file_count() for s in segs), total_bytes=sum(s.total_size() for s in segs),
                        updated_at=now)
        ops.append(Put(meta.copyjobs.task_key(job_id, task_id), encode_struct(task)))
    keep = {op.key for op in ops}
    ops += [Delete(kv.key) for kv in meta.kv.range(meta.keys.copy_tasks_prefix(job_id), keys_only=True)
            if kv.key not in keep]  # written by an older plan of another shape
    guard = [unchanged(job_kv)]
    meta.kv.write(ops, guard=guard, reason=f"copy job {job_id} changed while planning")
    faults.point("copy.after_plan_tasks")
    new = job.replace(state=JOB_EXECUTING, started_at=now, total_tasks=len(keep), state_markers=True)
    meta.kv.txn(guard, [Put(job_kv.key, encode_struct(new))], reason=f"copy job {job_id} changed while planning")
    return new


def _listing_order(target) -> tuple[str, str, int]:
    """Where the target's source files sit in a listing of their kind's collection
    prefix: by partition and segment directory, ids compared as the strings they are in
    the keys ('4' after '232'). Tasks cut from this order find their files together, so
    the listing a task makes of its sources (Store.describe) reads little else."""
    return str(target.source["partition_id"]), str(target.source["segment_id"]), target.segment_id


UNSET_ENGINE = (None, "", "None")  # "None": an unset Param rendered by a template


def resume_engine(meta: Meta, job_id: int, requested: str | None) -> str:
    """The engine a run of the job uses: the one asked for, else the job's own (what its
    restore asked for), so a resume or re-drive keeps the original engine by default."""
    engine = meta.copyjobs.get(job_id)[0].engine if requested in UNSET_ENGINE else requested
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    return engine
