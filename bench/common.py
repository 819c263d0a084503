"""Benchmark helpers: a private etcd, timing, and the one-line BENCH verdict."""

from __future__ import annotations

import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_etcd():
    from seglake.devstack import EtcdServer

    with tempfile.TemporaryDirectory(prefix="seglake-bench-") as d:
        server = EtcdServer(state_dir=Path(d)).start(timeout=20)
        try:
            yield server
        finally:
            server.stop()


def timed(fn, repeat: int = 1):
    """(median seconds, last result) over `repeat` runs."""
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def verdict(name: str, measured: float, anchor: float, target: float, lower_is_better: bool = True) -> str:
    ratio = measured / anchor if anchor > 0 else float("inf")
    ok = ratio <= target if lower_is_better else ratio >= target
    line = f"BENCH {name} ratio={ratio:.2f} target={target:.2f} {'ok' if ok else 'miss'}"
    print(line, flush=True)
    return line
