"""bench/export.py: snapshot export to a backup target (issue 19), on tmpfs (/dev/shm),
where no disk noise hides the software's own overhead.

Source: a collection whose segments reference N files (default 20,000 of 64 KiB, as bench/restore.py, each
with its own random content). Measured in the same run:

* anchor (the issue's): `cp -r` of the source tree; also printed: `cp -r` plus the
  SHA-256 of every file (`sha256sum`, two processes), the physical work a checked,
  content-addressed copy cannot avoid;
* the floor of a checked copy in Python (not a verdict, printed): per file open, read,
  SHA-256, write a temp file, fsync, rename into data/{sha[:2]}/{sha}, with as many
  threads as the export uses -- what any Python export pays before its own bookkeeping;
* a full export into an empty target (the engine, inline: no Airflow);
* an incremental export after 1% of the files changed (a new snapshot in which 1% of
  the segments were replaced by segments with new files), against the full export.

    python bench/export.py [--files 20000] [--size 16384] [--repeat 3]

Prints
    BENCH export_20k ratio=<full export / cp -r> target=1.20 ok|miss
    BENCH export_incremental_1pct ratio=<incremental export / full export> target=0.05 ok|miss
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import private_etcd, verdict  # noqa: E402

FILES_PER_SEGMENT = 10


def _segment(meta, coll, part: int, size: int, root: Path):
    from seglake.meta.segments import FLUSHED, Binlog, Segment
    from seglake.storage import layout

    sid, logs = meta.ids.allocate(), meta.ids.allocate(FILES_PER_SEGMENT)
    seg = Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part, channel=coll.vchannels[0],
                  state=FLUSHED, num_rows=1000,
                  binlogs={f: (Binlog(logs + 2 * k, size, 1000), Binlog(logs + 2 * k + 1, size, 1000))
                           for k, f in enumerate((100, 101, 102, 103, 104))})
    for f in layout.segment_files(seg):
        path = root / f.key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    return seg


def _children_cpu() -> float:
    import resource
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def python_floor(paths: list[str], dst: Path, threads: int) -> None:
    """The per-file work of a checked, content-addressed copy and nothing else (see the doc)."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    def one(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            data = os.read(fd, 1 << 30)
        finally:
            os.close(fd)
        sha = hashlib.sha256(data).hexdigest()
        tmp = f"{dst}/{sha[:2]}/.tmp-{sha}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            os.makedirs(f"{dst}/{sha[:2]}", exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, f"{dst}/{sha[:2]}/{sha}")

    def some(part: list[str]) -> None:
        for p in part:
            one(p)
    parts = [paths[i::threads * 8] for i in range(threads * 8)]
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(some, parts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--size", type=int, default=65536)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from seglake.dev import demo
    from seglake.config import Settings
    from seglake.lifecycle import snapshot
    from seglake.lifecycle.backup import export
    from seglake.meta import Meta
    from seglake.meta.segments import DROPPED
    from seglake.storage.local import LocalStore

    base = Path(tempfile.mkdtemp(prefix="seglake-bench-export-", dir="/dev/shm"))
    try:
        with private_etcd() as etcd:
            s = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": "bench",
                                    "store_uri": str(base / "store")})
            meta, store = Meta.from_settings(s), LocalStore(base / "store")
            coll = meta.catalog.create("bench", demo.demo_schema(8), partitions=["_default"])
            part = coll.partitions[0].partition_id
            segs = [_segment(meta, coll, part, args.size, base / "store")
                    for _ in range(max(1, args.files // FILES_PER_SEGMENT))]
            meta.segments.save(segs)
            snapshot.create(meta, store, "bench", "full")
            n_files = len(segs) * FILES_PER_SEGMENT
            quiet = dict(say=lambda line: None, threads=s.copy_threads)

            from seglake import runners
            from seglake.storage import layout
            paths = [f"{base}/store/{f.key}" for seg in segs for f in layout.segment_files(seg)]
            threads = runners.io_threads(s.copy_threads, store, store)
            anchors, hashed, fulls, floors = [], [], [], []
            cpu = {"cp": [], "floor": [], "full": [], "inc": []}   # CPU seconds: less at the mercy of other load
            for i in range(args.repeat):
                dst = base / f"cp{i}"
                t, c = time.perf_counter(), _children_cpu()
                subprocess.run(["cp", "-r", str(base / "store" / "insert_log"), str(dst)], check=True)
                anchors.append(time.perf_counter() - t)
                cpu["cp"].append(_children_cpu() - c)
                subprocess.run(f"find {dst} -type f -print0 | xargs -0 -P2 -n 500 sha256sum > /dev/null",
                               shell=True, check=True)
                hashed.append(time.perf_counter() - t)
                shutil.rmtree(dst)
                t, c = time.perf_counter(), time.process_time()
                python_floor(paths, base / "floor", threads)
                floors.append(time.perf_counter() - t)
                cpu["floor"].append(time.process_time() - c)
                shutil.rmtree(base / "floor")
                target = LocalStore(base / f"backup{i}")
                t, c = time.perf_counter(), time.process_time()
                rep = export.export(meta, store, target, "bench", "full", **quiet)
                fulls.append(time.perf_counter() - t)
                cpu["full"].append(time.process_time() - c)
                assert rep["copied_files"] == n_files, rep
                if i < args.repeat - 1:
                    shutil.rmtree(base / f"backup{i}")
            target = LocalStore(base / f"backup{args.repeat - 1}")

            # 1% of the files change: replace 1% of the segments with new ones
            k = max(1, len(segs) // 100)
            changed = [seg.replace(state=DROPPED, dropped_at=time.time()) for seg in segs[:k]]
            fresh = [_segment(meta, coll, part, args.size, base / "store") for _ in range(k)]
            meta.segments.save(changed + fresh)
            incs = []
            for i in range(args.repeat):
                snapshot.create(meta, store, "bench", f"inc{i}")
                t, c = time.perf_counter(), time.process_time()
                rep = export.export(meta, store, target, "bench", f"inc{i}", **quiet)
                incs.append(time.perf_counter() - t)
                cpu["inc"].append(time.process_time() - c)
                want = k * FILES_PER_SEGMENT if i == 0 else 0
                assert rep["copied_files"] == want and rep["files"] == n_files, rep
            anchor, with_hash = statistics.median(anchors), statistics.median(hashed)
            full, inc, floor = statistics.median(fulls), statistics.median(incs), statistics.median(floors)
            print(f"{n_files} files of {args.size} B on tmpfs: cp -r {anchor:.2f} s, cp -r + sha256sum of every file "
                  f"{with_hash:.2f} s, Python floor (read, SHA-256, write, fsync, rename; {threads} threads) "
                  f"{floor:.2f} s ({floor / anchor:.2f}x cp -r); full export {full:.2f} s "
                  f"({full / floor:.2f}x the floor, {full / with_hash:.2f}x cp -r + sha256sum); "
                  f"incremental after 1% changed {inc:.3f} s (first: {incs[0]:.3f} s)  [medians of {args.repeat}]")
            cpus = {k: statistics.median(v) for k, v in cpu.items()}
            print(f"CPU seconds (user + system; this process's threads, cp's own): cp -r {cpus['cp']:.2f}, Python floor "
                  f"{cpus['floor']:.2f}, full export {cpus['full']:.2f} ({cpus['full'] / cpus['cp']:.2f}x cp -r, "
                  f"{cpus['full'] / cpus['floor']:.2f}x the floor), incremental {cpus['inc']:.3f} "
                  f"({cpus['inc'] / cpus['full']:.3f}x the full export)  [medians]")
            verdict("export_20k", full, anchor, 1.20)
            verdict("export_incremental_1pct", max(incs[0], inc), full, 0.05)
            meta.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
