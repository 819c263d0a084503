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


def raw_paged_read(client, prefix: bytes, page: int = 1000) -> int:
    """The anchor read: the raw etcd3 client paging a prefix at one revision."""
    from etcd3 import utils

    start, end, rev, n = prefix, utils.prefix_range_end(prefix), None, 0
    while True:
        resp = client.get_range_response(start, end, limit=page, revision=rev)
        rev = rev or resp.header.revision
        n += len(resp.kvs)
        if not resp.more:
            return n
        start = resp.kvs[-1].key + b"\0"
