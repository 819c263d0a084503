"""Run one copy task: copy every file of each mapped segment to the target's paths, each
checked against its source, the task's progress written by the attempt that owns it."""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor, wait

from seglake import faults
from seglake.errors import Conflict, NotFound, SeglakeError
from seglake.meta import Meta
from seglake.meta.copyjobs import (JOB_EXECUTING, TASK_COMPLETED, TASK_FAILED, TASK_IN_PROGRESS, TASK_TERMINAL, CopyJob, CopyTask)
from seglake.meta.kv import KeyValue, retry_on_conflict
from seglake.storage import Store, layout
from seglake.storage.base import ChecksumMismatch, Listed
from seglake import throttle as throttles
from seglake.throttle import Throttle
from seglake.lifecycle.copyjob.target import source_and_target_files

PROGRESS_EVERY_S = 0.5   # a task's progress is saved at most this often, after any file (not per segment)
RATE_WINDOW_S = 10.0     # the "current rate" is over this recent window (the whole run hides a stall)



COPY_WINDOW = 2      # files a task keeps queued per copy thread


class SourceMissing(SeglakeError):
    pass


# -- copy -----------------------------------------------------------------------------------
def job_throttle(meta: Meta, job: CopyJob) -> Throttle:
    """The job's rate limit as seen by one runner (every runner shares it through etcd)."""
    return throttles.for_run(meta, meta.keys.copy_throttle(job.job_id), job.max_bytes_per_second,
                            job.max_requests_per_second)


class StoreFiles:
    """Where a restore of a snapshot copies from: this store (the job's mappings name the
    source segments' keys here)."""

    def __init__(self, store: Store):
        self.store = store

    def describe(self, keys) -> dict[str, Listed]:
        return self.store.describe(keys)

    def copy(self, *args) -> tuple[bool, int]:
        return _copy_one(*args)

    def close(self) -> None:
        pass


def open_source(store: Store, job: CopyJob, settings=None, meta: Meta | None = None):
    """Where the job's files come from, opened once per runner (close() it): this store,
    or for a restore from a bundle the backup target (copyjob/bundled.py)."""
    if job.bundle is None:
        return StoreFiles(store)
    from seglake.lifecycle.copyjob.bundled import BundleFiles
    return BundleFiles(job, settings, meta)


def copy_task(meta: Meta, store: Store, job_id: int, task_id: int, threads: int = 1,
              now=time.time, pool: ThreadPoolExecutor | None = None, throttle: Throttle | None = None,
              source=None) -> CopyTask:
    """Run one task to Completed (or Failed on a missing source). Safe to re-run and to
    run twice at once: every file goes through the attempt's own temporary object and
    appears whole, and only the attempt that owns the task record writes it. Copies run
    on `pool` (shared by the tasks of one runner), else on `threads` threads of its own;
    each copy first takes its share of the job's rate limit (`throttle`, else the job's).
    `source`: where the files come from (open_source; else opened for this task)."""
    job, _ = meta.copyjobs.get(job_id)
    throttle = throttle if throttle is not None else job_throttle(meta, job)
    if source is None:
        source = open_source(store, job, meta=meta)
        try:
            return copy_task(meta, store, job_id, task_id, threads, now, pool, throttle, source)
        finally:
            source.close()

    def take() -> tuple[CopyTask, KeyValue | None]:
        task, kv = meta.copyjobs.get_task(job_id, task_id)
        if task.state in TASK_TERMINAL or job.state != JOB_EXECUTING or now() > job.timeout_at:
            return task, None
        t = now()
        return meta.copyjobs.update_task_kv(kv, task.replace(state=TASK_IN_PROGRESS, attempt=task.attempt + 1,
                                                             updated_at=t, progress_at=t, recent_bps=0.0,
                                                             reason="",
                                                             earlier_files=task.earlier_files + task.copied_files,
                                                             earlier_bytes=task.earlier_bytes + task.copied_bytes,
                                                             copied_files=0, copied_bytes=0))
    task, mine = retry_on_conflict(take, f"take copy task {task_id} of job {job_id}")
    if mine is None:
        return task
    own = _Owned(task, mine)
    progress = {"segments": 0, "files": 0, "bytes": 0, "skipped": 0, "skipped_bytes": 0}
    own_pool = ThreadPoolExecutor(threads) if pool is None and threads > 1 else None
    pool = pool or own_pool
    try:
        with store.durable_batch():  # every file durable before the task can be Completed
            _copy_mappings(meta, store, job, own, progress, pool, now, throttle, source)
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
                   throttle: Throttle | None = None, source=None) -> None:
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
    in_flight = COPY_WINDOW * pool._max_workers if pool else 0
    pending: deque = deque()  # (future, last file of its segment?) in submission order

    window = RateWindow(RATE_WINDOW_S)

    def settle_oldest() -> None:
        nonlocal last
        fut, ends_segment = pending.popleft()
        if fut is not None:
            copied, size = fut.result()
            progress["files" if copied else "skipped"] += 1
            progress["bytes" if copied else "skipped_bytes"] += size
            progress["moved_at"] = t = now()
            progress["recent_bps"] = window.add(t, progress["bytes"])
        if ends_segment:
            progress["segments"] += 1
        if fut is not None or ends_segment:   # every file moves the bars (a save at most every PROGRESS_EVERY_S)
            if time.monotonic() - last > PROGRESS_EVERY_S:
                _save_progress(meta, own, progress, now())
                last = time.monotonic()

    plans = [source_and_target_files(target) for target in targets]
    source = source if source is not None else StoreFiles(store)
    sources = source.describe(src for files in plans for src, _, _ in files)
    try:
        for target, files in zip(targets, plans, strict=True):
            present = _remove_leftovers(store, target, {dst for _, dst, _ in files}) if check else None
            for i, (src, dst, size) in enumerate(files):
                args = (store, src, dst, size, check, sources.get(src),
                        _UNLISTED if present is None else present.get(dst), throttle)
                progress.setdefault("first", now())   # the rate counts from the first copy, not the set-up
                fut = pool.submit(source.copy, *args) if pool else _done(source.copy, *args)
                pending.append((fut, i == len(files) - 1))
                while len(pending) > in_flight:
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


class RateWindow:
    """Bytes per second over the last `seconds` of (time, cumulative bytes) samples: the
    current rate, not the run's average (which keeps a stall looking like progress).
    Keeps the newest sample at or before the window's start as its anchor; 0.0 until two
    samples span some time. Always finite and >= 0."""

    def __init__(self, seconds: float):
        self.seconds = float(seconds)
        self.samples: deque = deque()

    def add(self, t: float, total: int) -> float:
        self.samples.append((float(t), int(total)))
        while len(self.samples) > 2 and self.samples[1][0] <= t - self.seconds:
            self.samples.popleft()
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        if t1 - t0 <= 0 or b1 < b0:
            return 0.0
        rate = (b1 - b0) / (t1 - t0)
        return rate if rate == rate and rate != float("inf") else 0.0


def _with_progress(task: CopyTask, progress: dict, **changes) -> CopyTask:
    """The attempt's counters on the record. done_files/done_bytes never go below what the
    record held (an earlier attempt's files are whole in the target: this attempt finds and
    skips them), so a resume does not make the operator's bars go backwards."""
    first = min((t for t in (task.first_copy_at, progress.get("first", 0.0)) if t), default=0.0)
    # segments: like done_files, never below what the record held (a resumed attempt re-walks the same
    # segments in the same order, skipping what is whole): the bar fell from 3/6 to 0/6 on a resume (atk s20 F6)
    return task.replace(copied_segments=max(task.copied_segments, progress["segments"]), copied_files=progress["files"],
                        copied_bytes=progress["bytes"], skipped_files=progress["skipped"], first_copy_at=first,
                        done_files=max(task.done_files, progress["files"] + progress["skipped"]),
                        done_bytes=max(task.done_bytes, progress["bytes"] + progress.get("skipped_bytes", 0)),
                        progress_at=max(task.progress_at, progress.get("moved_at", 0.0)),
                        recent_bps=float(progress.get("recent_bps", 0.0)), **changes)


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
