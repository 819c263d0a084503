"""bench/scale.py: GC mark at scale on SeaweedFS S3 through the Spark path.

By default (`make bench`) the run starts the project's own scale-out cluster
(seglake.dev.cluster: 3 etcd members, SeaweedFS, a Spark standalone master and 2 workers of
1 core / 1 GiB, loopback), with bounded waits, and stops every server by pid at the end,
also when the run fails. `--master local[2]` (or SEGLAKE_BENCH_SPARK_MASTER) runs against
a private etcd + SeaweedFS and that master instead. One bucket is filled once, in two
steps, and serves both lines: segment files (10 per segment record, 10 collections) and
10% orphans, written through the filer's HTTP API by 3 processes x 8 threads (empty
objects: the set-up time is printed). Then, in the same run:

- GC mark through spark-submit of spark/jobs/gc_scan.py (a dry run) vs a raw paginated
  `list_objects_v2` of the same bucket: `BENCH gc_mark_s3_500k` (end-to-end job time /
  raw listing time, target 2.00);
- the driver's peak RSS at 100k and 500k objects: `BENCH gc_driver_rss_growth` (500k /
  100k, target 1.20). Counted: VmRSS from /proc of every process in spark-submit's tree
  (the driver JVM that spark-submit execs into, the launcher JVM it runs first, the Python
  driver), summed per 0.1 s sample, the peak sum. On the cluster the executors are
  children of the worker daemons, not of spark-submit: the run checks that no executor
  (JVM or Python worker) is in the counted tree, and prints the executors' peaks apart
  (not counted). In local mode the executors run inside the driver JVM and cannot be
  told apart: the line then measures driver + executors.

bench/scale_restore.py (the restore line) runs afterwards when present (`--no-restore`:
not).

    python bench/scale.py [--objects 500000] [--small 100000] [--master cluster|local[2]|URL]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_tmpdir, private_etcd, verdict  # noqa: E402

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


# -- the driver's memory, from /proc -------------------------------------------------------
def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _parents() -> dict[int, list[int]]:
    """ppid -> children, from one pass over /proc."""
    out: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    out.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def tree(root: int, parents: dict[int, list[int]]) -> list[int]:
    """`root` and every process below it."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += parents.get(pid, [])
    return out


def role(pid: int) -> str:
    """What a Spark-side process is, from its command line."""
    cmd = _cmdline(pid)
    for needle, name in (("CoarseGrainedExecutorBackend", "executor JVM"), ("deploy.SparkSubmit", "driver JVM"),
                         ("launcher.Main", "launcher JVM"), ("pyspark.daemon", "executor Python"),
                         ("pyspark.worker", "executor Python"), ("gc_scan.py", "Python driver")):  # (JVMs first:
        # the driver JVM's command line names gc_scan.py too)
        if needle in cmd:
            return name
    return (cmd.split() or ["?"])[0].rsplit("/", 1)[-1]


class RssSampler:
    """Peak VmRSS of the driver tree (every process below spark-submit: the sum per
    sample, and each process's own peak), and each executor process's peak (the trees
    below the worker daemons, the daemons themselves left out). A sample every 0.1 s,
    the trees walked again every 0.5 s."""

    def __init__(self, driver_root: int, worker_pids: list[int]):
        self.root, self.workers = driver_root, worker_pids
        self.peak = 0
        self.driver: dict[int, int] = {}
        self.executors: dict[int, int] = {}
        self.roles: dict[int, str] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()

    def _run(self) -> None:
        n, drv, exe = 0, [], []
        while not self._done.is_set():
            if n % 5 == 0:
                parents = _parents()
                drv = tree(self.root, parents)
                exe = [x for w in self.workers for x in tree(w, parents) if x != w]
                for x in drv + exe:  # (again each time: spark-submit's bash execs into the JVM)
                    self.roles[x] = role(x) if _cmdline(x) else self.roles.get(x, "?")
            now = {x: _rss_kib(x) for x in drv}
            self.peak = max(self.peak, sum(now.values()))
            for x, v in now.items():
                self.driver[x] = max(self.driver.get(x, 0), v)
            for x in exe:
                self.executors[x] = max(self.executors.get(x, 0), _rss_kib(x))
            n += 1
            self._done.wait(0.1)

    def check_driver_only(self) -> None:
        """On a cluster, an executor in the counted tree would make the number a lie."""
        wrong = [f"{x} ({self.roles[x]})" for x in self.driver if self.roles[x].startswith("executor")]
        if wrong:
            raise RuntimeError(f"executor processes in spark-submit's tree: {wrong}")

    def lines(self) -> list[str]:
        def fmt(d: dict[int, int]) -> str:
            return ", ".join(f"{self.roles[x]} {v / 1024:.0f} MiB (pid {x})"
                             for x, v in sorted(d.items(), key=lambda kv: -kv[1]) if v)
        out = [f"  counted (spark-submit's tree), peaks: {fmt(self.driver)}; peak of the sum {self.peak / 1024:.0f} MiB"]
        if self.executors:
            out.append(f"  not counted (below the worker daemons), peaks: {fmt(self.executors)}")
        return out


def spark_mark(settings, run_id: str, master: str, worker_pids: list[int],
               gc_log: Path | None = None) -> tuple[float, int, dict]:
    """(wall seconds, peak driver RSS in KiB, summary) of one spark-submit of gc_scan.py;
    spark-submit runs in its own process group, killed if this run fails or times out."""
    script = str(REPO / "spark" / "jobs" / "gc_scan.py")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    env.update(settings.to_env())
    env.update({"PYTHONPATH": f"{REPO / 'include'}:{env.get('PYTHONPATH', '')}", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"})
    cmd = ["spark-submit", "--master", master, "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=8", script, "--run-id", run_id,
           "--missing-tolerance", "0", "--drop-tolerance", "0", "--force", "1", "--dry-run", "1"]
    if gc_log is not None:  # the driver JVM's heap after each collection (what is live vs committed)
        cmd[1:1] = ["--conf", f"spark.driver.extraJavaOptions=-Xlog:gc*:file={gc_log / (run_id + '.driver-gc.log')}"]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        with RssSampler(p.pid, worker_pids) as rss:
            out, err = p.communicate(timeout=1800)
        wall = time.perf_counter() - t
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
    if p.returncode != 0:
        raise RuntimeError(f"gc_scan failed ({p.returncode}): {err[-3000:]}")
    if worker_pids:
        rss.check_driver_only()
    for line in rss.lines():
        print(line, flush=True)
    return wall, rss.peak, json.loads(out.strip().splitlines()[-1])


# -- the servers --------------------------------------------------------------------------------
@contextmanager
def servers(master: str, scratch: Path):
    """(settings, filer port, master URL, worker daemon pids) of this run's servers:
    master "cluster": the project's standalone cluster (seglake.dev.cluster), started with a
    bounded wait, its servers tied to this process, and stopped by pid on the way out --
    also on failure; any other master: a private etcd + SeaweedFS and that master."""
    if master != "cluster":
        from seglake.config import Settings
        from seglake.dev.devstack import WeedServer

        with private_etcd() as etcd:
            weed = WeedServer(state_dir=scratch / "weed").start(timeout=60)
            try:
                yield Settings.from_dict({
                    "etcd_endpoint": etcd.endpoint, "store_uri": f"s3://{BUCKET}/{BASE}",
                    "s3_endpoint": weed.endpoint, "s3_access_key": weed.access_key,
                    "s3_secret_key": weed.secret_key, "etcd_timeout": 30}), weed.ports["filer"], master, []
            finally:
                weed.stop(timeout=30)
        return
    from seglake.dev.cluster import ClusterStack

    stack = ClusterStack(base=scratch / "cluster", bucket=BUCKET, prefix=BASE)
    t = time.perf_counter()
    try:
        stack.up(timeout=300)
        workers = [stack.owned_pid(w) for w in stack.spark_workers]
        print(f"cluster up in {time.perf_counter() - t:.1f}s: etcd {stack.etcd_endpoints}, s3 {stack.s3_endpoint}, "
              f"spark {stack.spark_master_url}, workers {len(workers)} x {stack.worker_cores} core / "
              f"{stack.worker_memory} (pids {workers})", flush=True)
        yield stack.settings(prefix=BASE, etcd_timeout=30), stack.weed.ports["filer"], stack.spark_master_url, workers
    finally:
        t = time.perf_counter()
        stopped = stack.down()
        print(f"cluster down in {time.perf_counter() - t:.1f}s: {', '.join(stopped)}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=500_000)
    ap.add_argument("--small", type=int, default=100_000)
    ap.add_argument("--master", default=os.environ.get("SEGLAKE_BENCH_SPARK_MASTER") or "cluster",
                    help="cluster (start the project's standalone cluster), or a Spark master URL")
    ap.add_argument("--no-restore", action="store_true", help="skip bench/scale_restore.py")
    ap.add_argument("--gc-log", type=Path, help="diagnosis: write the driver JVM's GC log into this directory")
    args = ap.parse_args(argv)

    import boto3
    from botocore.config import Config
    from seglake.meta import Meta
    from seglake.storage import open_store

    t_run = time.perf_counter()
    with bench_tmpdir("scale") as d, \
            servers(args.master, Path(d)) as (settings, filer_port, master, workers):
        open_store(settings).ensure_bucket()
        client = boto3.client("s3", endpoint_url=settings.s3_endpoint, aws_access_key_id=settings.s3_access_key,
                              aws_secret_access_key=settings.s3_secret_key, region_name="us-east-1",
                              config=Config(s3={"addressing_style": "path"}))
        rss, total, orphans, referenced, next_seg, setup = {}, 0, 0, 0, 1, 0.0
        result = {}
        with Meta.from_settings(settings) as meta:
            for size in (args.small, args.objects):
                t = time.perf_counter()
                segs, ref, orph = populate(meta, filer_port, next_seg, size - total)
                next_seg += segs
                total, referenced, orphans = total + ref + orph, referenced + ref, orphans + orph
                listed = raw_list(client)  # (+ the reports of earlier marks under _gc/)
                assert listed >= total, (listed, total)
                setup += time.perf_counter() - t
                print(f"set-up: {ref + orph} objects ({segs} segment records, {orph} orphans) in "
                      f"{time.perf_counter() - t:.1f}s; bucket holds {total}", flush=True)
                wall, peak, summary = spark_mark(settings, f"scale-{size}", master, workers, args.gc_log)
                assert summary["candidates"] == orphans and summary["referenced"] == referenced, summary
                rss[size] = peak
                print(f"spark mark ({master}) of {total} objects: {wall:.1f}s end to end, driver peak RSS "
                      f"{peak / 1024:.0f} MiB, {summary['candidates']} candidates", flush=True)
                result[size] = wall
        t_list = _timed(lambda: raw_list(client))  # (warm: the set-up listed the bucket too)
        print(f"raw paginated list_objects_v2 of {total} objects: {t_list:.1f}s", flush=True)
    print(f"set-up of {total} objects {setup:.1f}s in all; bench wall time {time.perf_counter() - t_run:.1f}s",
          flush=True)
    verdict("gc_mark_s3_500k", result[args.objects], t_list, 2.0)
    verdict("gc_driver_rss_growth", rss[args.objects], rss[args.small], 1.2)
    restore = Path(__file__).resolve().parent / "scale_restore.py"
    if restore.exists() and not args.no_restore:
        return subprocess.run([sys.executable, str(restore)], check=False).returncode
    return 0


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
