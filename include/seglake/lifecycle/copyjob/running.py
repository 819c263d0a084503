"""Where a job's tasks run: inline (the one inline runner: worker processes for large
jobs) or on Spark executors (run_tasks_from_env); the copies of one runner share one
bounded pool of file copies across up to TASKS_IN_FLIGHT tasks (two levels: a task
windows its files over the shared copy pool, so run_inline's one-level map cannot
express it)."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor

from seglake import runners
from seglake.meta import Meta
from seglake.meta.copyjobs import TASK_TERMINAL, CopyTask
from seglake.storage import Store
from seglake.throttle import human_rate
from seglake.lifecycle.copyjob.copying import copy_task, job_throttle, open_source

PROGRESS_EVERY_S = 0.5



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
        # worker processes of the one inline runner: they die with this driver, so a
        # SIGKILLed driver leaves no copier behind
        list(runners.run_inline(_run_share, [(share, job_id, env) for share in runners.split(ids, workers)],
                                workers=workers, pool="process"))
        return [meta.copyjobs.get_task(job_id, t)[0] for t in ids]
    return list(run_tasks(meta, store, job_id, ids, threads, settings))


def _run_share(unit: tuple) -> list[tuple[int, str, str]]:
    task_ids, job_id, settings_env = unit
    return list(run_tasks_from_env(task_ids, job_id, settings_env))


def run_tasks_from_env(task_ids, job_id: int, settings_env: dict):
    """Spark executor side: open etcd and the store from the settings the driver handed
    over, run the given tasks, yield (task_id, state, reason)."""
    from seglake.storage import open_store

    settings = runners.worker_settings(settings_env)
    store = open_store(settings)
    threads = settings.copy_threads if settings.is_s3 else 1
    with Meta.from_settings(settings) as meta:
        for t in run_tasks(meta, store, job_id, list(task_ids), threads, settings):
            yield t.task_id, t.state, t.reason


TASKS_IN_FLIGHT = 4  # tasks of one runner side by side: one task's tail never idles the pool


def run_tasks(meta: Meta, store: Store, job_id: int, task_ids: list[int], concurrency: int = 1, settings=None):
    """Run the tasks with up to `concurrency` (settings key copy_threads) file copies in
    flight: one pool shared by up to TASKS_IN_FLIGHT tasks at once, each task's copies
    windowed across its segments. Yields each task's final record, in the order given;
    a failure stops the tasks not yet started and waits for the running ones. The
    job's source (this store, or a bundle's backup target: opened with `settings`) is
    opened once for all of them."""
    if not task_ids:
        return
    job = meta.copyjobs.get(job_id)[0]
    throttle = job_throttle(meta, job)   # one per runner: its report is the runner's
    source = open_source(store, job, settings, meta)
    try:
        if concurrency <= 1:
            for task_id in task_ids:
                yield copy_task(meta, store, job_id, task_id, throttle=throttle, source=source)
            return
        files = ThreadPoolExecutor(concurrency, thread_name_prefix="seglake-copy")
        tasks = ThreadPoolExecutor(min(TASKS_IN_FLIGHT, len(task_ids)), thread_name_prefix="seglake-task")
        try:
            for fut in [tasks.submit(copy_task, meta, store, job_id, t, pool=files, throttle=throttle, source=source)
                        for t in task_ids]:
                yield fut.result()
        finally:
            tasks.shutdown(wait=True, cancel_futures=True)
            files.shutdown(wait=True)
    finally:
        source.close()
        if throttle.bounded:
            r = throttle.report()
            store = (f"; store-wide limit {human_rate(r['store_limit_bytes_per_second'], 'B/s')}, "
                     f"{human_rate(r['store_limit_requests_per_second'], 'req/s')} (shared by all copy work), waited "
                     f"{r['store_waited_s']:.1f} s for it" if "store_waited_s" in r else "")
            print(f"copy job {job_id}: rate limit {human_rate(r['limit_bytes_per_second'], 'B/s')}, "
                  f"{human_rate(r['limit_requests_per_second'], 'req/s')} (shared by every runner); this runner "
                  f"moved {r['bytes']} bytes in {r['requests']} requests at {human_rate(r['bytes_per_second'], 'B/s')}"
                  f", waited {r['waited_s']:.1f} s{store}", file=sys.stderr, flush=True)
