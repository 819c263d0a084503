"""bench/scale.py: GC mark at scale on SeaweedFS S3 through the Spark path.

A private etcd and SeaweedFS (`weed mini`) are started; the bucket is filled with
segment files (10 per segment record, 10 collections) and 10% orphans, written through
the filer's HTTP API by 3 processes x 8 threads (empty objects: the set-up time is
printed). Then, in the same run:

- GC mark through spark-submit of spark/jobs/gc_scan.py (a dry run; master from
  SEGLAKE_BENCH_SPARK_MASTER, else local[2]) vs a raw paginated `list_objects_v2` of the
  same bucket: `BENCH gc_mark_s3_500k` (end-to-end job time / raw listing time, target 2.00);
- the driver's peak RSS (the driver JVM + the Python driver, sampled from /proc; in
  local mode the executors run inside that JVM, on a cluster they do not) at 100k and
  500k objects: `BENCH gc_driver_rss_growth` (500k / 100k, target 1.20).

bench/scale_restore.py (the restore line) runs afterwards when present.

    python bench/scale.py [--objects 500000] [--small 100000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import private_etcd, verdict  # noqa: E402

BUCKET, BASE = "seglake-bench", "scale"
FILES_PER_SEGMENT = 10
COLLECTIONS = 10
ORPHAN_SHARE = 0.1


def _put_range(args) -> int:
    """One process: PUT these keys (empty objects) through the filer, 8 keep-alive threads."""
    port, keys = args
    local = threading.local()

    def put(key: str) -> None:
        for attempt in range(3):
            c = getattr(local, "c", None) or http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            local.c = c
            try:
                c.request("PUT", f"/buckets/{BUCKET}/{BASE}/{key}", body=b"",
                          headers={"Content-Type": "application/octet-stream"})
                r = c.getresponse()
                r.read()
                if r.status in (200, 201):
                    return
                raise OSError(f"filer answered {r.status} for {key}")
            except (OSError, http.client.HTTPException):
                c.close()
                local.c = None
                if attempt == 2:
                    raise
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, keys))
    return len(keys)


def populate(meta, filer_port: int, start_segment: int, objects: int) -> tuple[int, int, int]:
    """Segment records (10 files each) + orphans, about `objects` objects in all.
    Returns (segments, referenced files, orphans)."""
    from seglake.meta.segments import FLUSHED, Binlog, IndexFile, Segment
    from seglake.storage import layout

    n_orphans = int(objects * ORPHAN_SHARE)
    n_segments = (objects - n_orphans) // FILES_PER_SEGMENT
    segs, keys = [], []
    for i in range(n_segments):
        sid = start_segment + i
        coll = 1000 + i % COLLECTIONS
        logs = sid * 16
        segs.append(Segment(
            segment_id=sid, collection_id=coll, partition_id=coll + 1, channel=f"ch_{coll}", state=FLUSHED,
            num_rows=10, binlogs={f: (Binlog(logs + 2 * k, 0, 10), Binlog(logs + 2 * k + 1, 0, 10))
                                  for k, f in enumerate((100, 101, 102))},
            deltalogs=(Binlog(logs + 6, 0, 1),), statslogs={100: (Binlog(logs + 7, 0, 10),)},
            index_files=(IndexFile(sid, 1, "a", 0), IndexFile(sid, 1, "b", 0))))
        keys += [f.key for f in layout.segment_files(segs[-1])]
    for i in range(n_orphans):
        coll = 1000 + i % COLLECTIONS
        keys.append(layout.insert_log(coll, coll + 1, 900_000_000 + start_segment + i // 10, 100, i))
    meta.segments.save(segs)
    procs = 3
    with ProcessPoolExecutor(procs) as pool:
        list(pool.map(_put_range, [(filer_port, keys[i::procs]) for i in range(procs)]))
    return n_segments, n_segments * FILES_PER_SEGMENT, n_orphans


def raw_list(client) -> int:
    n = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{BASE}/",
                                                                  PaginationConfig={"PageSize": 1000}):
        n += len(page.get("Contents", []))
    return n


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def driver_pids(root: int, script: str) -> list[int]:
    """The driver JVM (spark-submit execs into it) and the Python driver it starts (not
    the executors' Python workers)."""
    pids, todo = [root], [root]
    while todo:
        for c in _children(todo.pop()):
            todo.append(c)
            if script in _cmdline(c) and "pyspark.daemon" not in _cmdline(c):
                pids.append(c)
    return pids


def spark_mark(settings, run_id: str, master: str) -> tuple[float, int, dict]:
    """(wall seconds, peak driver RSS in KiB, summary) of one spark-submit of gc_scan.py."""
    script = str(REPO / "spark" / "jobs" / "gc_scan.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    env.update(settings.to_env())
    env.update({"PYTHONPATH": f"{REPO / 'include'}:{env.get('PYTHONPATH', '')}", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"})
    cmd = ["spark-submit", "--master", master, "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=8", script, "--run-id", run_id,
           "--missing-tolerance", "0", "--drop-tolerance", "0", "--force", "1", "--dry-run", "1"]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, parts, done = 0, {}, threading.Event()

    def sample():
        nonlocal peak
        pids: list[int] = []
        while not done.is_set():
            if len(pids) < 2:
                pids = driver_pids(p.pid, script)
            now = {x: _rss_kib(x) for x in pids}
            peak = max(peak, sum(now.values()))
            for x, v in now.items():
                parts[x] = max(parts.get(x, 0), v)
            done.wait(0.1)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = p.communicate(timeout=3600)
    wall = time.perf_counter() - t
    done.set()
    th.join()
    if p.returncode != 0:
        raise RuntimeError(f"gc_scan failed ({p.returncode}): {err[-3000:]}")
    jvm, py = parts.get(p.pid, 0), sum(v for x, v in parts.items() if x != p.pid)
    print(f"  driver peaks: JVM {jvm / 1024:.0f} MiB, Python driver {py / 1024:.0f} MiB", flush=True)
    return wall, peak, json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=500_000)
    ap.add_argument("--small", type=int, default=100_000)
    args = ap.parse_args(argv)

    import boto3
    from botocore.config import Config

    from seglake.config import Settings
    from seglake.devstack import WeedServer
    from seglake.meta import Meta
    from seglake.meta.kv import KV

    master = os.environ.get("SEGLAKE_BENCH_SPARK_MASTER") or "local[2]"
    with private_etcd() as etcd, tempfile.TemporaryDirectory(prefix="seglake-bench-scale-", dir="/work") as d:
        weed = WeedServer(state_dir=Path(d)).start(timeout=60)
        try:
            settings = Settings.from_dict({
                "etcd_endpoint": etcd.endpoint, "store_uri": f"s3://{BUCKET}/{BASE}", "s3_endpoint": weed.endpoint,
                "s3_access_key": weed.access_key, "s3_secret_key": weed.secret_key, "etcd_timeout": 30})
            client = boto3.client("s3", endpoint_url=weed.endpoint, aws_access_key_id=weed.access_key,
                                  aws_secret_access_key=weed.secret_key, region_name="us-east-1",
                                  config=Config(s3={"addressing_style": "path"}))
            client.create_bucket(Bucket=BUCKET)
            meta = Meta(KV(etcd.endpoint, timeout=30), root="seglake")
            rss, total, orphans, referenced, next_seg = {}, 0, 0, 0, 1
            result = {}
            for size in (args.small, args.objects):
                t = time.perf_counter()
                segs, ref, orph = populate(meta, weed.ports["filer"], next_seg, size - total)
                next_seg += segs
                total, referenced, orphans = total + ref + orph, referenced + ref, orphans + orph
                listed = raw_list(client)  # (+ the reports of earlier marks under _gc/)
                assert listed >= total, (listed, total)
                print(f"set-up: {ref + orph} objects ({segs} segment records, {orph} orphans) in "
                      f"{time.perf_counter() - t:.1f}s; bucket holds {total}", flush=True)
                wall, peak, summary = spark_mark(settings, f"scale-{size}", master)
                assert summary["candidates"] == orphans and summary["referenced"] == referenced, summary
                rss[size] = peak
                print(f"spark mark ({master}) of {total} objects: {wall:.1f}s end to end, driver peak RSS "
                      f"{peak / 1024:.0f} MiB (JVM + Python driver), {summary['candidates']} candidates", flush=True)
                result[size] = wall
            t_list = _timed(lambda: raw_list(client))  # (warm: the set-up listed the bucket too)
            print(f"raw paginated list_objects_v2 of {total} objects: {t_list:.1f}s", flush=True)
            meta.close()
        finally:
            weed.stop(timeout=30)
    verdict("gc_mark_s3_500k", result[args.objects], t_list, 2.0)
    verdict("gc_driver_rss_growth", rss[args.objects], rss[args.small], 1.2)
    restore = Path(__file__).resolve().parent / "scale_restore.py"
    if restore.exists():
        return subprocess.run([sys.executable, str(restore)]).returncode
    return 0


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
