"""Copy-segment jobs and tasks in etcd (the metadata of a restore).

    job:   Pending --plan--> Executing --all tasks Completed--> Completed
                \\                 \\--any task Failed | timeout--> Failed
                 \\--timeout--> Failed
    task:  Pending --> InProgress --> Completed | Failed     (InProgress may be re-entered
                                                              by a re-drive: attempt + 1)

Keys: {root}/copy/jobs/{job_id}, {root}/copy/tasks/{job_id}/{task_id}; task ids are the
task's index in the job (0..n-1) and the task size is recorded on the job before the
first task is written, so planning twice (with any size) writes the same tasks, never more.
Progress lives on the tasks (each written by the attempt that owns it: `attempt` fences
a re-drive from a zombie runner), the job sums them.
A task's move to Completed or Failed also puts {root}/copy/task_states/{job_id}/{state}/{task_id}
in the same txn (terminal states never change, so a marker is never stale): a wait counts
them with count-only reads instead of reading every task record (`terminal_counts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

import msgspec

from seglake.errors import NotFound, StateError
from seglake.meta.codec import Time, decode_struct, encode_struct
from seglake.meta.kv import KeyValue, Put, retry_on_conflict, unchanged

STATE_MARKER = b"1"

if TYPE_CHECKING:
    from seglake.meta import Meta

JOB_PENDING, JOB_EXECUTING, JOB_COMPLETED, JOB_FAILED = "Pending", "Executing", "Completed", "Failed"
TASK_PENDING, TASK_IN_PROGRESS, TASK_COMPLETED, TASK_FAILED = "Pending", "InProgress", "Completed", "Failed"
JOB_TRANSITIONS = {
    JOB_PENDING: {JOB_EXECUTING, JOB_FAILED},
    JOB_EXECUTING: {JOB_COMPLETED, JOB_FAILED},
    JOB_COMPLETED: set(),
    JOB_FAILED: set(),
}
TASK_TRANSITIONS = {
    TASK_PENDING: {TASK_IN_PROGRESS, TASK_FAILED},
    TASK_IN_PROGRESS: {TASK_IN_PROGRESS, TASK_COMPLETED, TASK_FAILED},
    TASK_COMPLETED: set(),
    TASK_FAILED: set(),
}
JOB_TERMINAL = {JOB_COMPLETED, JOB_FAILED}
TASK_TERMINAL = {TASK_COMPLETED, TASK_FAILED}


class Mapping(msgspec.Struct, array_like=True, frozen=True):
    """source (collection, partition, segment) -> target (partition, segment)."""

    source_collection: int
    source_partition: int
    source_segment: int
    target_partition: int
    target_segment: int


class CopyJob(msgspec.Struct, frozen=True, kw_only=True):
    job_id: int
    state: str
    db: str
    source_collection_id: int
    source_collection: str
    snapshot: str
    snapshot_id: int
    target_collection_id: int
    target_collection: str
    total_segments: int
    total_files: int
    total_bytes: int
    created_at: Time
    timeout_at: Time
    started_at: Time | None = None
    finished_at: Time | None = None
    total_tasks: int = 0
    total_rows: int = 0
    reason: str = ""
    owner: str = ""
    engine: str = "auto"      # what the restore asked for; a resume uses it unless told otherwise
    task_size: int = 0        # segments per task, recorded once by the first plan (0: not planned)
    state_markers: bool = False  # planned by a seglake that writes task state markers (older jobs: read tasks)
    max_bytes_per_second: float = 0.0     # the job's copy rate limit, shared by all its runners (0: none)
    max_requests_per_second: float = 0.0
    origin: dict | None = None   # the DAG run that created the job: {"dag_id", "run_id"} (page links)
    # a restore from a bundle: the files come from the backup target, not this store
    # ({"uri", "db", "collection", "bundle", "uid", "hold"}; source_collection_id and
    # snapshot_id are then 0: the bundle's own ids belong to another etcd root)
    bundle: dict | None = None

    def replace(self, **changes) -> "CopyJob":
        return msgspec.structs.replace(self, **changes)

    def to_json(self) -> dict:
        return msgspec.to_builtins(self)


class CopyTask(msgspec.Struct, frozen=True, kw_only=True):
    job_id: int
    task_id: int
    state: str
    mappings: tuple[Mapping, ...]
    total_files: int = 0
    total_bytes: int = 0
    copied_segments: int = 0
    copied_files: int = 0
    copied_bytes: int = 0
    skipped_files: int = 0   # already present with the right size (a resumed copy)
    # what the earlier attempts of this task copied (copied_*: this attempt's): a job's "copied" counts
    # every attempt's (a resumed job's note and rate forgot the earlier ones -- atk s20 F9)
    earlier_files: int = 0
    earlier_bytes: int = 0
    attempt: int = 0
    reason: str = ""
    updated_at: float = 0.0
    first_copy_at: float = 0.0   # when an attempt of this task began its first file copy (rates: from there)
    # what the operator sees (issue 27): files/bytes of the task already in the target, copied or found
    # whole, never lower than an earlier attempt's count; when that count last moved (or an attempt
    # took the task); the attempt's copy rate over its last RATE_WINDOW_S, as of progress_at
    done_files: int = 0
    done_bytes: int = 0
    progress_at: float = 0.0
    recent_bps: float = 0.0

    def replace(self, **changes) -> "CopyTask":
        return msgspec.structs.replace(self, **changes)


class CopyJobs:
    def __init__(self, meta: "Meta"):
        self.kv = meta.kv
        self.keys = meta.keys

    # jobs ------------------------------------------------------------------------------
    def get(self, job_id: int) -> tuple[CopyJob, KeyValue]:
        kv = self.kv.get(self.keys.copy_job(job_id))
        if kv is None:
            raise NotFound(f"copy job {job_id} not found")
        return decode_struct(kv.value, CopyJob, kv.key), kv

    def list(self) -> Iterator[CopyJob]:
        for kv in self.kv.range(self.keys.copy_jobs_prefix()):
            yield decode_struct(kv.value, CopyJob, kv.key)

    def update(self, read: KeyValue, new: CopyJob) -> CopyJob:
        self.kv.txn([unchanged(read)], [Put(read.key, encode_struct(new))],
                    reason=f"copy job {new.job_id} changed concurrently")
        return new

    def transition(self, job_id: int, to_state: str, **changes) -> CopyJob:
        """Compare-guarded; idempotent when already there; StateError if not allowed."""
        def attempt() -> CopyJob:
            job, kv = self.get(job_id)
            if job.state == to_state:
                return job
            if to_state not in JOB_TRANSITIONS[job.state]:
                raise StateError(f"copy job {job_id} is {job.state}; {job.state} -> {to_state} not allowed")
            return self.update(kv, job.replace(state=to_state, **changes))
        return retry_on_conflict(attempt, f"copy job {job_id}")

    # tasks -----------------------------------------------------------------------------
    def task_key(self, job_id: int, task_id: int) -> str:
        return self.keys.copy_task(job_id, task_id)

    def get_task(self, job_id: int, task_id: int) -> tuple[CopyTask, KeyValue]:
        kv = self.kv.get(self.task_key(job_id, task_id))
        if kv is None:
            raise NotFound(f"copy task {task_id} of job {job_id} not found")
        return decode_struct(kv.value, CopyTask, kv.key), kv

    def tasks(self, job_id: int) -> list[CopyTask]:
        return [decode_struct(kv.value, CopyTask, kv.key) for kv in self.kv.range(self.keys.copy_tasks_prefix(job_id))]

    def terminal_counts(self, job_id: int) -> dict[str, int]:
        """{Completed: n, Failed: m}: count-only reads of the state markers (no record is read)."""
        return {state: self.kv.count(self.keys.copy_task_states_prefix(job_id, state)) for state in TASK_TERMINAL}

    def delete_tasks(self, job_id: int) -> None:
        """Every task record of the job, then its state markers."""
        self.kv.delete_prefix(self.keys.copy_tasks_prefix(job_id))
        self.kv.delete_prefix(self.keys.copy_task_states_prefix(job_id))
        self.kv.delete(self.keys.copy_throttle(job_id))

    def update_task(self, read: KeyValue, new: CopyTask) -> CopyTask:
        return self.update_task_kv(read, new)[0]

    def update_task_kv(self, read: KeyValue, new: CopyTask) -> tuple[CopyTask, KeyValue]:
        """Compare-guarded write of a task record; returns it with the KeyValue as written,
        so its writer can guard its next write on it without reading the record again
        (any other writer in between changes the revision: that write then conflicts).
        Entering a terminal state puts its state marker in the same txn."""
        old = decode_struct(read.value, CopyTask).state
        if new.state not in TASK_TRANSITIONS[old] | {new.state}:
            raise StateError(f"copy task {new.task_id}: transition to {new.state} not allowed")
        value = encode_struct(new)
        ops = [Put(read.key, value)]
        if new.state != old and new.state in TASK_TERMINAL:
            ops.append(Put(self.keys.copy_task_state(new.job_id, new.state, new.task_id), STATE_MARKER))
        rev = self.kv.txn([unchanged(read)], ops,
                          reason=f"copy task {new.task_id} of job {new.job_id} changed concurrently")
        return new, KeyValue(read.key, value, rev, read.create_revision, read.version + 1)
