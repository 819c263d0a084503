"""Copy-segment jobs: the checker of Milvus's copy_segment_checker.go as small steps.

    Pending --plan--> Executing --(every task Completed)--> finish --> Completed
       |                  |--(a task Failed | timeout)----> fail   --> Failed + rollback
       '--(timeout)-------'
    Completed | Failed --(copy_job_retention after finished_at)--> removed (tasks, then job);
                          a job stays while its target is not settled.

- plan: Pending -> Executing. The task size is recorded on the job first, then tasks of
  that many mappings are written (children before the parent), then the job flips.
  Mappings are taken in the order their source directories list (_listing_order).
  Idempotent with any size argument: a re-run derives exactly the same tasks.
- copy_task: copies every file of each mapped segment (insert, delta, stats, index) to
  the target's paths, each through its own temporary object made visible atomically
  and checked by checksum against the source; on a retry, a file already present is
  kept only if its checksum equals the source's, and leftovers that are not part of the
  segment are removed. Fail-fast: a missing source fails the task with the file's name.
  On S3 the task first lists its sources (Store.describe: a few ListObjectsV2 pages for
  the task's files, no HEAD per file), then copies each file in ONE request, conditional
  on the listed ETag and checked against it (see _copy_mappings for why per task).
  The runner (inline thread or Spark executor) writes the task's progress to etcd; a
  task record is written only by the attempt that owns it (a zombie cannot finish it).
- wait_status: read-only, for the sensor: done when every task is Completed, any is
  Failed, the job is terminal, or the timeout has passed. A poke reads the job record
  and counts the tasks' state markers: O(1) in the number of tasks.
- finalize: all tasks Completed wins over a timeout reached afterwards. Completed: the
  job flips first (the decision, one guarded txn), targets go Flushed in batches while
  the collection is still Importing, then ONE txn makes the collection Created.
  Failed: the job flips first, remaining tasks Failed, ONE txn drops the collection and
  frees its name, then the targets go Dropped in batches. Both unpin. Idempotent, and
  safe to observe half done: the collection is never Created with a target not Flushed.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, wait

from seglake import faults
from seglake.errors import Conflict, NotFound, SeglakeError, StateError
from seglake.lifecycle.restore import drop_segments, rollback_target, source_and_target_files
from seglake.meta import Meta
from seglake.meta.codec import encode_struct
from seglake.meta.copyjobs import (
    JOB_COMPLETED, JOB_EXECUTING, JOB_FAILED, JOB_PENDING, JOB_TERMINAL, TASK_COMPLETED, TASK_FAILED,
    TASK_IN_PROGRESS, TASK_PENDING, TASK_TERMINAL, CopyJob, CopyTask, Mapping)
from seglake.meta.kv import Delete, KeyValue, Put, batched, retry_on_conflict, unchanged
from seglake.meta.catalog import CREATED, DROPPED as COLL_DROPPED, IMPORTING as COLL_IMPORTING
from seglake.meta.segments import FLUSHED, IMPORTING
from seglake.proclife import worker_of
from seglake.storage import Store, layout
from seglake.storage.base import ChecksumMismatch, Listed
from seglake.throttle import Throttle, human_rate

PROGRESS_EVERY_S = 0.5


class SourceMissing(SeglakeError):
    pass


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


from seglake.runners import ENGINES  # noqa: E402
UNSET_ENGINE = (None, "", "None")  # "None": an unset Param rendered by a template


def resume_engine(meta: Meta, job_id: int, requested: str | None) -> str:
    """The engine a run of the job uses: the one asked for, else the job's own (what its
    restore asked for), so a resume or re-drive keeps the original engine by default."""
    engine = meta.copyjobs.get(job_id)[0].engine if requested in UNSET_ENGINE else requested
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    return engine


# -- copy -----------------------------------------------------------------------------------
def job_throttle(meta: Meta, job: CopyJob) -> Throttle:
    """The job's rate limit as seen by one runner (every runner shares it through etcd)."""
    return Throttle(meta.kv, meta.keys.copy_throttle(job.job_id), job.max_bytes_per_second,
                    job.max_requests_per_second)


def copy_task(meta: Meta, store: Store, job_id: int, task_id: int, threads: int = 1,
              now=time.time, pool: ThreadPoolExecutor | None = None, throttle: Throttle | None = None) -> CopyTask:
    """Run one task to Completed (or Failed on a missing source). Safe to re-run and to
    run twice at once: every file goes through the attempt's own temporary object and
    appears whole, and only the attempt that owns the task record writes it. Copies run
    on `pool` (shared by the tasks of one runner), else on `threads` threads of its own;
    each copy first takes its share of the job's rate limit (`throttle`, else the job's)."""
    job, _ = meta.copyjobs.get(job_id)
    throttle = throttle if throttle is not None else job_throttle(meta, job)

    def take() -> tuple[CopyTask, KeyValue | None]:
        task, kv = meta.copyjobs.get_task(job_id, task_id)
        if task.state in TASK_TERMINAL or job.state != JOB_EXECUTING or now() > job.timeout_at:
            return task, None
        return meta.copyjobs.update_task_kv(kv, task.replace(state=TASK_IN_PROGRESS, attempt=task.attempt + 1,
                                                             updated_at=now(), reason=""))
    task, mine = retry_on_conflict(take, f"take copy task {task_id} of job {job_id}")
    if mine is None:
        return task
    own = _Owned(task, mine)
    progress = {"segments": 0, "files": 0, "bytes": 0, "skipped": 0}
    own_pool = ThreadPoolExecutor(threads) if pool is None and threads > 1 else None
    pool = pool or own_pool
    try:
        with store.durable_batch():  # every file durable before the task can be Completed
            _copy_mappings(meta, store, job, own, progress, pool, now, throttle)
    except SourceMissing as e:
        return _finish_task(meta, own, progress, TASK_FAILED, str(e), now())
    except (_Superseded, FileNotFoundError):
        cur, _ = meta.copyjobs.get_task(job_id, task_id)
        if cur.attempt == task.attempt:
            raise  # a real failure of the attempt that owns the task
        return cur  # a re-drive took the task over (and removed our temp files): leave it to it
    finally:
        if own_pool:
            own_pool.shutdown(wait=True)
    return _finish_task(meta, own, progress, TASK_COMPLETED, "", now())


class _Owned:
    """The task record as this attempt last wrote it (record and KeyValue): its next
    write is guarded on that revision, so it needs no read unless someone else wrote."""

    def __init__(self, task: CopyTask, kv: KeyValue):
        self.task, self.kv = task, kv


def _copy_mappings(meta: Meta, store: Store, job: CopyJob, own: _Owned, progress: dict, pool, now,
                   throttle: Throttle | None = None) -> None:
    """Copy every file of the task's segments, counting into `progress` and saving it to
    the task record now and then (raises _Superseded once a re-drive owns the task).
    The target records are read together, in one round trip per 128. With a pool, up to
    COPY_WINDOW x its threads files are in flight across segments; a segment counts once
    all its files are done, and no copy of this task is left running when this returns.

    The sources' sizes and content hashes come from one describe() of all the task's
    files, taken by each attempt when it starts, not at plan time: the task record stays
    the mappings alone (an ETag per file there would add ~40 B per file to every
    progress write, and to etcd's quota for the job's life), a resumed or re-driven
    attempt checks against what the sources are NOW, and the listing runs on the
    runners (Spark executors), not on the driver. A retry also takes the destinations'
    hashes from the listing of the target's directories it makes anyway (leftovers): a
    file found whole is kept without any request of its own."""
    task = own.task
    last = time.monotonic()
    targets = meta.segments.get_many((job.target_collection_id, m.target_partition, m.target_segment)
                                     for m in task.mappings)
    check = task.attempt > 1  # a first attempt writes into fresh, unique target paths
    window = COPY_WINDOW * pool._max_workers if pool else 0
    pending: deque = deque()  # (future, last file of its segment?) in submission order

    def settle_oldest() -> None:
        nonlocal last
        fut, ends_segment = pending.popleft()
        if fut is not None:
            copied, size = fut.result()
            progress["files" if copied else "skipped"] += 1
            progress["bytes"] += size if copied else 0
        if ends_segment:
            progress["segments"] += 1
            if time.monotonic() - last > PROGRESS_EVERY_S:
                _save_progress(meta, own, progress, now())
                last = time.monotonic()

    plans = [source_and_target_files(target) for target in targets]
    sources = store.describe(src for files in plans for src, _, _ in files)
    try:
        for target, files in zip(targets, plans, strict=True):
            present = _remove_leftovers(store, target, {dst for _, dst, _ in files}) if check else None
            for i, (src, dst, size) in enumerate(files):
                args = (store, src, dst, size, check, sources.get(src),
                        _UNLISTED if present is None else present.get(dst), throttle)
                progress.setdefault("first", now())   # the rate counts from the first copy, not the set-up
                fut = pool.submit(_copy_one, *args) if pool else _done(_copy_one, *args)
                pending.append((fut, i == len(files) - 1))
                while len(pending) > window:
                    settle_oldest()
            if not files:
                pending.append((None, True))
        while pending:
            settle_oldest()
    finally:  # on a failure: nothing of this task keeps copying after it is finished
        for fut, _ in pending:
            if fut is not None:
                fut.cancel()
        wait([fut for fut, _ in pending if fut is not None])


def _done(fn, *args, **kwargs) -> Future:
    """fn's outcome as a finished future (the path without a pool)."""
    fut: Future = Future()
    try:
        fut.set_result(fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - re-raised by .result() in submission order
        fut.set_exception(e)
    return fut


class _Superseded(Exception):
    """Another attempt owns the task now: this one stops without writing its record."""


_UNLISTED = object()  # a destination whose directory was not listed (a first attempt)


def _copy_one(store: Store, src: str, dst: str, size: int, check: bool = True, source: Listed | None = None,
              target=_UNLISTED, throttle: Throttle | None = None) -> tuple[bool, int]:
    """(copied, size). With check (a retry), keeps a destination already present only if
    its content equals the source's; otherwise copies through a temporary object made
    visible atomically, checked against the source and the recorded size. `source` is
    the source as the task's listing described it (store.describe): its size is checked
    before the copy, which is then one conditional request (store.copy_listed); `target`
    is the destination as its directory's listing showed it (None: not there)."""
    try:
        if check and _same_content(store, src, dst, size, source, target):
            return False, size
        if source is not None and source.size != size:
            raise SourceMissing(f"source file {src} is {source.size} bytes, the snapshot recorded {size}")
        if throttle is not None:
            throttle.acquire(size)
        info, _ = store.copy_listed(source, dst) if source is not None else store.copy_checked(src, dst)
    except NotFound:
        raise SourceMissing(f"source file missing: {src}") from None
    except ChecksumMismatch as e:
        raise SourceMissing(str(e)) from None
    if info.size != size:
        raise SourceMissing(f"source file {src} is {info.size} bytes, the snapshot recorded {size}")
    faults.point("copy.after_file")
    return True, size


def _same_content(store: Store, src: str, dst: str, size: int, source: Listed | None = None,
                  target=_UNLISTED) -> bool:
    """Whether `dst` already holds `src`'s content at the recorded size. From the listings
    when they tell (the destination absent or of another size; both MD5s recorded: no
    request at all), else by the store's checksums (a HEAD each on S3, read locally)."""
    if target is _UNLISTED:
        try:
            target = store.head(dst)
        except NotFound:
            return False
    if target is None or target.size != size:
        return False
    if source is not None and getattr(target, "md5", "") and source.md5:
        return target.md5 == source.md5
    try:
        have = store.checksum(dst)
    except NotFound:
        return False  # removed since it was listed: copy it
    return have == store.checksum(src)


def _remove_leftovers(store: Store, target, expected: set[str]) -> dict[str, Listed]:
    """Objects under the target segment's own directories that are not its files (temp
    files of a killed copy) are removed; returns the expected files found there, as
    listed (with their content hash where the store records one). Those directories
    belong to this target segment only."""
    c, p, s = target.ref
    dirs = list(layout.segment_dirs(c, p, s)) + sorted({layout.index_dir(f.build_id, f.version, p, s)
                                                         for f in target.index_files})
    found, extra = {}, []
    for o in (o for d in dirs for o in store.list_described(d)):
        if o.key in expected:
            found[o.key] = o
        else:
            extra.append(o.key)
    if extra:
        store.delete_many(extra)
    return found


def _with_progress(task: CopyTask, progress: dict, **changes) -> CopyTask:
    first = min((t for t in (task.first_copy_at, progress.get("first", 0.0)) if t), default=0.0)
    return task.replace(copied_segments=progress["segments"], copied_files=progress["files"],
                        copied_bytes=progress["bytes"], skipped_files=progress["skipped"], first_copy_at=first,
                        **changes)


def _save_progress(meta: Meta, own: _Owned, progress: dict, now: float) -> None:
    """Write the progress guarded on the attempt's own last write; if anybody else wrote
    the record since, re-read it: a re-drive owns the task now (raise _Superseded, write
    nothing), else one more try from the fresh record (a lost race skips this save)."""
    try:
        own.task, own.kv = meta.copyjobs.update_task_kv(own.kv, _with_progress(own.task, progress, updated_at=now))
        return
    except Conflict:
        pass
    cur, kv = meta.copyjobs.get_task(own.task.job_id, own.task.task_id)
    if cur.state != TASK_IN_PROGRESS or cur.attempt != own.task.attempt:
        raise _Superseded()  # a re-drive owns the task now: stop, write nothing
    try:
        own.task, own.kv = meta.copyjobs.update_task_kv(kv, _with_progress(cur, progress, updated_at=now))
    except Conflict:
        pass


def _finish_task(meta: Meta, own: _Owned, progress: dict, state: str, reason: str, now: float) -> CopyTask:
    """Only the attempt that owns the record finishes it: a zombie whose task was taken
    over by a re-drive (a higher attempt) leaves it to that attempt. First guarded on the
    attempt's own last write (no read); after any other write, from a fresh read."""
    task = own.task
    changes = dict(state=state, reason=reason, updated_at=now)
    try:
        return meta.copyjobs.update_task_kv(own.kv, _with_progress(task, progress, **changes))[0]
    except Conflict:
        pass

    def attempt() -> CopyTask:
        cur, kv = meta.copyjobs.get_task(task.job_id, task.task_id)
        if cur.state in TASK_TERMINAL or cur.attempt != task.attempt:
            return cur
        return meta.copyjobs.update_task(kv, _with_progress(cur, progress, **changes))
    return retry_on_conflict(attempt, f"finish copy task {task.task_id}")


def pending_task_ids(meta: Meta, job_id: int) -> list[int]:
    return [t.task_id for t in meta.copyjobs.tasks(job_id) if t.state not in TASK_TERMINAL]


PARALLEL_MIN_FILES = 2000


def run_inline(meta: Meta, store: Store, job_id: int, threads: int = 1, settings=None,
               workers: int | None = None) -> list[CopyTask]:
    """The inline engine: every unfinished task, without Spark. Given the settings, a job
    of PARALLEL_MIN_FILES files or more is spread over worker processes (spawned, one
    per core: per-file Python work does not scale with threads), each running whole
    tasks exactly as a Spark executor does; otherwise tasks run one after another here."""
    ids = pending_task_ids(meta, job_id)
    workers = workers if workers is not None else min(4, os.cpu_count() or 1)
    job, _ = meta.copyjobs.get(job_id)
    if settings is not None and workers > 1 and len(ids) > 1 and job.total_files >= PARALLEL_MIN_FILES:
        env = settings.to_env()
        shares = [ids[i::workers] for i in range(min(workers, len(ids)))]
        ctx = multiprocessing.get_context("spawn")
        # workers die with this driver: a SIGKILLed driver leaves no copier behind
        with ProcessPoolExecutor(len(shares), mp_context=ctx, initializer=worker_of,
                                 initargs=(os.getpid(),)) as pool:
            for f in [pool.submit(_run_share, share, job_id, env) for share in shares]:
                f.result()
        return [meta.copyjobs.get_task(job_id, t)[0] for t in ids]
    return list(run_tasks(meta, store, job_id, ids, threads))


def _run_share(task_ids: list[int], job_id: int, settings_env: dict) -> list[tuple[int, str, str]]:
    return list(run_tasks_from_env(task_ids, job_id, settings_env))


def run_tasks_from_env(task_ids, job_id: int, settings_env: dict):
    """Spark executor side: open etcd and the store from the settings the driver handed
    over, run the given tasks, yield (task_id, state, reason)."""
    from seglake.config import Settings
    from seglake.storage import open_store

    settings = Settings.load(env=settings_env)
    store = open_store(settings)
    threads = settings.copy_threads if settings.is_s3 else 1
    with Meta.from_settings(settings) as meta:
        for t in run_tasks(meta, store, job_id, list(task_ids), threads):
            yield t.task_id, t.state, t.reason


TASKS_IN_FLIGHT = 4  # tasks of one runner side by side: one task's tail never idles the pool
COPY_WINDOW = 2      # files a task keeps queued per copy thread


def run_tasks(meta: Meta, store: Store, job_id: int, task_ids: list[int], concurrency: int = 1):
    """Run the tasks with up to `concurrency` (settings key copy_threads) file copies in
    flight: one pool shared by up to TASKS_IN_FLIGHT tasks at once, each task's copies
    windowed across its segments. Yields each task's final record, in the order given;
    a failure stops the tasks not yet started and waits for the running ones."""
    if not task_ids:
        return
    throttle = job_throttle(meta, meta.copyjobs.get(job_id)[0])   # one per runner: its report is the runner's
    try:
        if concurrency <= 1:
            for task_id in task_ids:
                yield copy_task(meta, store, job_id, task_id, throttle=throttle)
            return
        files = ThreadPoolExecutor(concurrency, thread_name_prefix="seglake-copy")
        tasks = ThreadPoolExecutor(min(TASKS_IN_FLIGHT, len(task_ids)), thread_name_prefix="seglake-task")
        try:
            for fut in [tasks.submit(copy_task, meta, store, job_id, t, pool=files, throttle=throttle)
                        for t in task_ids]:
                yield fut.result()
        finally:
            tasks.shutdown(wait=True, cancel_futures=True)
            files.shutdown(wait=True)
    finally:
        if throttle.limited:
            r = throttle.report()
            print(f"copy job {job_id}: rate limit {human_rate(r['limit_bytes_per_second'], 'B/s')}, "
                  f"{human_rate(r['limit_requests_per_second'], 'req/s')} (shared by every runner); this runner "
                  f"moved {r['bytes']} bytes in {r['requests']} requests at {human_rate(r['bytes_per_second'], 'B/s')}"
                  f", waited {r['waited_s']:.1f} s", file=sys.stderr, flush=True)


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


def finalize(meta: Meta, job_id: int, now: float | None = None) -> CopyJob:
    """Complete or fail the job from what its tasks say; a no-op while tasks still run.
    Work that finished wins over a timeout reached afterwards."""
    now = time.time() if now is None else now
    job, _ = meta.copyjobs.get(job_id)
    if job.state == JOB_COMPLETED:
        return _finish(meta, job, now)   # re-run: make sure every step happened
    if job.state == JOB_FAILED:
        return fail(meta, job_id, job.reason, now=now)
    if job.state == JOB_EXECUTING:
        tasks = meta.copyjobs.tasks(job_id)
        failed = [t for t in tasks if t.state == TASK_FAILED]
        if failed:
            return fail(meta, job_id, f"{len(failed)}/{len(tasks)} tasks failed; task {failed[0].task_id}: "
                                      f"{failed[0].reason}", now=now)
        if _all_completed(job, tasks):
            return _finish(meta, job, now)
    if now > job.timeout_at:
        return fail(meta, job_id, "timeout", now=now)
    return job


def newest_ts(segments) -> int:
    """The largest timestamp any of these segment records carries (rows, deletes)."""
    out = 0
    for s in segments:
        out = max(out, s.start_ts, s.dml_ts, *(b.ts_to for logs in s.binlogs.values() for b in logs),
                  *(b.ts_to for b in s.deltalogs))
    return out


def _finish(meta: Meta, job: CopyJob, now: float) -> CopyJob:
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
    retry_on_conflict(lambda: meta.catalog.set_state(job.target_collection_id, CREATED, expect=COLL_IMPORTING),
                      f"make the target of copy job {job.job_id} usable")
    meta.snapshots.unpin(job.source_collection_id, job.snapshot, job.job_id)
    return job


def fail(meta: Meta, job_id: int, reason: str, now: float | None = None) -> CopyJob:
    """Job Failed (first, so nothing new starts; a job already Completed stays so and is
    finished instead), remaining tasks Failed, rollback, unpin."""
    now = time.time() if now is None else now
    try:
        job = meta.copyjobs.transition(job_id, JOB_FAILED, reason=reason, finished_at=now)
    except StateError:
        job, _ = meta.copyjobs.get(job_id)
        if job.state == JOB_COMPLETED:
            return _finish(meta, job, now)  # completion won the race
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
    meta.snapshots.unpin(job.source_collection_id, job.snapshot, job.job_id)
    return job


# -- read side ------------------------------------------------------------------------------
def progress(meta: Meta, job_id: int) -> dict:
    job, _ = meta.copyjobs.get(job_id)
    tasks = meta.copyjobs.tasks(job_id)
    done = [t for t in tasks if t.state == TASK_COMPLETED]
    return {
        "total_segments": job.total_segments, "total_files": job.total_files, "total_bytes": job.total_bytes,
        "copied_segments": sum(len(t.mappings) if t.state == TASK_COMPLETED else t.copied_segments for t in tasks),
        "copied_files": sum(t.copied_files + t.skipped_files for t in tasks),
        "copied_bytes": sum(t.copied_bytes for t in tasks),   # bytes this job's attempts copied
        # bytes done: a Completed task's whole size (a resumed attempt skips, never re-copies,
        # what an earlier one copied), else what the task copied so far: the progress bars
        "done_bytes": sum(t.total_bytes if t.state == TASK_COMPLETED else t.copied_bytes for t in tasks),
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
    return out


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
