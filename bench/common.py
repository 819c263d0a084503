"""Benchmark helpers: a private etcd, timing, the one-line BENCH verdict, and the
physical anchors the WAL benches share (the row shape, synced raw writes, raw Arrow IPC
reads)."""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def private_etcd():
    from seglake.dev.devstack import EtcdServer

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


# -- shared by bench/wal.py and bench/flush.py -------------------------------------------
def add_row_args(ap: argparse.ArgumentParser) -> None:
    """--rows --batch --dim --repeat: the WAL benches' common shape."""
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)


def vector_schema(dim: int) -> list[dict]:
    """int64 pk, a `dim`-wide float32 vector, one float scalar."""
    return [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
            {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": dim},
            {"field_id": 102, "name": "price", "dtype": "Float"}]


def bench_disk_dir() -> str:
    """Where disk-backed scratch goes: $SEGLAKE_BENCH_DIR, else the repo's .dev/bench."""
    d = os.environ.get("SEGLAKE_BENCH_DIR") or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                            ".dev", "bench")
    os.makedirs(d, exist_ok=True)
    return d


def bench_tmpdir(name: str) -> tempfile.TemporaryDirectory:
    """A scratch directory under bench_disk_dir()."""
    return tempfile.TemporaryDirectory(prefix=f"seglake-bench-{name}-", dir=bench_disk_dir())


def fsync_path(path) -> None:
    """The anchor's durability step: fsync a file or a directory by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_synced(path, data: bytes, sync: bool = True) -> None:
    """The anchor write: one plain file, fsynced before returning (unless sync=False)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def ipc_batches(buf) -> list:
    """The anchor read: the record batches of one Arrow IPC stream, nothing checked."""
    import pyarrow as pa
    with pa.ipc.open_stream(pa.py_buffer(buf)) as r:
        return list(r)
