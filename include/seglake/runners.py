"""Where a lifecycle's work runs -- in the task (inline) or on Spark -- decided in one
place (issue 18 item 2).

    engine = "auto" | "spark" | "inline"       the DAG param / CLI flag
    choose(kind, engine, size, settings)       auto: inline below the kind's threshold

A kind's work size and its threshold (config keys):

    copy           bytes a copy job copies          inline_threshold_bytes
    flush          bytes of WAL backlog             inline_threshold_bytes
    verify_bundle  bytes of a bundle's data         inline_threshold_bytes
    snapshot       segment records to write         snapshot_inline_max_segments
    gc             files the references hold        gc_inline_max_files
    compaction     bytes of the units' inputs       inline_threshold_bytes

How inline work runs: `run_inline(fn, units, workers=, pool="thread"|"process")`, the
one bounded pool every lifecycle's inline engine uses; `io_threads(threads, *stores)` how
many threads a copy between stores gets; `split(units, parts)` is the one
way units are dealt to workers (inline processes and Spark partitions alike);
`worker_settings(env)` is how a worker rebuilds its settings.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from itertools import islice
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

from seglake.errors import ValidationError
from seglake.proclife import worker_of

ENGINES = ("auto", "spark", "inline")
THRESHOLDS = {"copy": "inline_threshold_bytes", "flush": "inline_threshold_bytes",
              "verify_bundle": "inline_threshold_bytes", "snapshot": "snapshot_inline_max_segments",
              "gc": "gc_inline_max_files", "compaction": "inline_threshold_bytes",
              "verify": "inline_threshold_bytes"}


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValidationError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    return engine


def choose(kind: str, engine: str, size: int, settings) -> str:
    """'spark' or 'inline' for `size` units of `kind` work. auto: inline under the kind's
    threshold (THRESHOLDS), Spark from it."""
    if kind not in THRESHOLDS:
        raise ValueError(f"no engine threshold for work of kind {kind!r}; kinds: {', '.join(THRESHOLDS)}")
    if check_engine(engine) != "auto":
        return engine
    return "inline" if size < getattr(settings, THRESHOLDS[kind]) else "spark"


# -- the inline runner -----------------------------------------------------------------------
POOLS = ("thread", "process")


def run_inline(fn: Callable, units: Sequence, *, workers: int, pool: str = "thread",
               before_each: Callable[[], None] | None = None) -> Iterator:
    """Run `fn(unit)` for every unit in this task; yield the results in unit order.

    - workers <= 1 or a single unit: one after another, in this thread, calling
      `before_each()` (e.g. a lease check) before each unit.
    - pool "thread": a bounded thread pool (I/O-bound units: copies, reads, checks).
    - pool "process": spawned worker processes (CPU-bound Python per unit: manifest
      writes, many small files); `fn` and the units must pickle, and every worker dies
      with this process (proclife.worker_of), so a SIGKILLed task leaves no worker.

    At most 2 x workers units are submitted and not yet consumed (a slow consumer never
    has every unit's result in memory). A unit's exception is raised at its turn; units
    not yet started are cancelled and the running ones are waited for (units are
    idempotent, so a retry redoes them safely).
    """
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {', '.join(POOLS)}; got {pool!r}")
    units = list(units)
    n = max(1, min(int(workers), len(units)))
    if n == 1:
        for u in units:
            if before_each is not None:
                before_each()
            yield fn(u)
        return
    if pool == "thread":
        ex = ThreadPoolExecutor(n, thread_name_prefix="seglake-unit")
    else:
        ex = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=worker_of, initargs=(os.getpid(),))
    try:   # at most 2 x workers units submitted and not yet consumed: memory stays bounded
        todo, window = iter(units), deque()
        for u in islice(todo, 2 * n):
            window.append(ex.submit(fn, u))
        while window:
            result = window.popleft().result()
            for u in islice(todo, 1):
                window.append(ex.submit(fn, u))
            yield result
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def io_threads(threads: int, *stores) -> int:
    """Threads for copying or hashing between these stores: `threads` when one of them is
    remote (S3: each request waits on the network); on local files only at most one per
    core (the work is Python, hashing and the kernel's: more threads than cores contend in
    the kernel -- exporting 20,000 files on 2 cores, 8 threads took 5.6-6.7 s and 4.5-5.9 s
    of system time, 2 threads 3.9-4.6 s and 1.8-2.9 s; the copy job's worker processes
    use no threads on local files for the same reason)."""
    from seglake.storage.local import LocalStore

    if stores and all(type(s) is LocalStore for s in stores):
        return max(1, min(int(threads), os.cpu_count() or 1))
    return int(threads)


def split(items: Sequence, parts: int) -> list[list]:
    """`items` dealt round-robin into at most `parts` non-empty shares (the split a
    process pool or a Spark job gives its workers)."""
    parts = max(1, min(int(parts), len(items)))
    return [list(items[i::parts]) for i in range(parts)] if items else []


def worker_settings(settings_env: dict):
    """The Settings a worker (a spawned process or a Spark executor) runs with: rebuilt
    from the environment dict the driver handed over (Settings.to_env), never from the
    worker's own environment."""
    from seglake.config import Settings

    return Settings.load(env=settings_env)
