"""bench/milvus_capture.py: capture a real Milvus 2.3.5 collection of 1M rows into a bundle
(issue 29), against a raw copy of the same objects with the same concurrency, same run.

A private etcd, SeaweedFS and Milvus (the PyPI wheel's server, its own venv); a collection
of N rows (default 1,000,000; pk, a float, a `dim`-wide float vector; 2 shards), flushed.
Measured in the same run, into targets on the same disk (bench_disk_dir):

* anchor: every object the capture copies, GET from SeaweedFS (boto3) and written to a
  plain file, fsynced, by a pool of `threads` threads (the capture's concurrency), then
  its directory fsynced; also printed: the same plus the SHA-256 of every object (what a
  content-checked copy cannot avoid), and that into the bundle's layout (data/xx/{sha256}:
  the fan-out directories made, each fsynced once at the end, as the capture's);
* the capture (inline engine): the same objects read, hashed, binlogs parsed and checked,
  written to data/{sha256} (durable), bundle.json + commit marker;
* a second, unchanged capture: bytes copied (must be 0) and its time.

    python bench/milvus_capture.py [--rows 1000000] [--dim 32] [--threads 8] [--repeat 5]

Prints
    BENCH milvus_capture_1M ratio=<capture / raw copy> target=1.20 ok|miss
    BENCH milvus_capture_1M_again_copied_bytes ratio=<bytes copied by a 2nd capture / 1> target=0.00 ok|miss
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_tmpdir, private_etcd, verdict, write_synced  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUCKET = "milvus-bench"


def client(python, address: str, *ops, timeout: float = 1800) -> list:
    r = subprocess.run([str(python), str(REPO / "scripts" / "milvus_client.py")],
                       input=json.dumps({"address": address, "ops": list(ops)}), capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"milvus_client failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--batch", type=int, default=50_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import boto3
    from botocore.config import Config

    from seglake.dev.devstack import WeedServer
    from seglake.dev.milvus import MilvusServer, MilvusUnavailable, S3Target, milvus_python
    from seglake.meta.kv import KV
    from seglake.milvus import capture
    from seglake.storage.local import LocalStore

    try:
        python = milvus_python()
    except MilvusUnavailable as e:
        print(f"BENCH milvus_capture_1M skipped: cannot run Milvus here ({e})")
        return 0
    with tempfile.TemporaryDirectory(prefix="seglake-bench-milvus-") as state, private_etcd() as etcd:
        weed = WeedServer(state_dir=Path(state) / "weed").start(timeout=60)
        srv = None
        try:
            root = f"bench-{uuid.uuid4().hex[:6]}"
            srv = MilvusServer(state_dir=Path(state) / "milvus", etcd_endpoint=etcd.endpoint, etcd_root=root,
                               s3=S3Target(endpoint=weed.endpoint, bucket=BUCKET, root_path=f"files-{root}",
                                           access_key=weed.access_key, secret_key=weed.secret_key))
            srv.prepare()
            srv.start(timeout=180)
            name = "bench_1m"
            t = time.perf_counter()
            ops = [{"op": "create", "name": name, "shards": 2, "dim": args.dim}]
            ops += [{"op": "insert", "name": name, "pks": list(range(i, min(args.rows, i + args.batch))),
                     "random_vectors": True}
                    for i in range(0, args.rows, args.batch)]
            client(python, srv.address, *ops, {"op": "flush", "name": name})
            print(f"milvus: {args.rows} rows inserted and flushed in {time.perf_counter() - t:.1f} s")

            class S:
                milvus_s3_endpoint, milvus_s3_region = weed.endpoint, "us-east-1"
                milvus_s3_access_key, milvus_s3_secret_key = weed.access_key, weed.secret_key
                copy_threads = args.threads
            bucket = capture.open_bucket(S, BUCKET, srv.s3.root_path)
            with KV(etcd.endpoint, timeout=10) as kv:
                planned = capture.plan(kv, bucket, root, [name])
            files = planned["collections"][0]["files"]
            total = sum(f["size"] for f in files.values())
            segs = len(planned["collections"][0]["catalog"]["segments"])
            print(f"capture set: {segs} Flushed segments, {len(files)} objects, {total / 2**20:.1f} MiB")
            s3 = boto3.client("s3", endpoint_url=weed.endpoint, aws_access_key_id=weed.access_key,
                              aws_secret_access_key=weed.secret_key, region_name="us-east-1",
                              config=Config(s3={"addressing_style": "path"}, max_pool_connections=64))
            prefix = srv.s3.root_path + "/"

            def fsync_dir(d: Path) -> None:
                fd = os.open(d, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

            def raw_copy(dst: Path, hashed: bool = False, laid_out: bool = False) -> None:
                import hashlib

                def one(i_key):
                    i, key = i_key
                    body = s3.get_object(Bucket=BUCKET, Key=prefix + key)["Body"].read()
                    if laid_out:   # the bundle's layout: data/{sha256[:2]}/{sha256}
                        sha = hashlib.sha256(body).hexdigest()
                        (dst / "data" / sha[:2]).mkdir(parents=True, exist_ok=True)
                        write_synced(dst / "data" / sha[:2] / sha, body)
                        return
                    if hashed:
                        hashlib.sha256(body).hexdigest()
                    write_synced(dst / f"{i}", body)
                dst.mkdir(parents=True)
                with ThreadPoolExecutor(args.threads) as ex:
                    list(ex.map(one, enumerate(sorted(files))))
                    if laid_out:   # each directory once, in parallel (the capture's durable batch)
                        list(ex.map(fsync_dir, [*(dst / "data").iterdir(), dst / "data"]))
                fsync_dir(dst)

            def timed_cpu(fn) -> tuple[float, float]:
                """(wall seconds, CPU seconds of this process: every thread's)."""
                t, c = time.perf_counter(), time.process_time()
                fn()
                return time.perf_counter() - t, time.process_time() - c

            # SEGLAKE_BENCH_PROFILE=1: where a capture's time goes, on one thread (cProfile sees only
            # the calling thread); not a measurement
            if os.environ.get("SEGLAKE_BENCH_PROFILE"):
                import cProfile
                import pstats
                with bench_tmpdir("milvus-prof") as d, KV(etcd.endpoint, timeout=10) as kv:
                    capture.capture(kv, bucket, LocalStore(Path(d) / "w"), root, [name], bundle="w",
                                    threads=args.threads, say=lambda _: None)
                    prof = cProfile.Profile()
                    prof.enable()
                    capture.capture(kv, bucket, LocalStore(Path(d) / "t"), root, [name], bundle="p", threads=1,
                                    say=lambda _: None)
                    prof.disable()
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
            with bench_tmpdir("milvus-warm") as d, KV(etcd.endpoint, timeout=10) as kv:   # imports, connections
                capture.capture(kv, bucket, LocalStore(Path(d) / "w"), root, [name], bundle="w", threads=args.threads,
                                say=lambda _: None)
                raw_copy(Path(d) / "raw", laid_out=True)   # the anchor's connections too: both sides warm
            raw, hashed, laid, cap, again_t, again_bytes = [], [], [], [], [], []
            cpu = {"raw": [], "hashed": [], "laid": [], "cap": []}
            for r in range(args.repeat):
                for name_, out, kw in (("raw", raw, {}), ("hashed", hashed, {"hashed": True}),
                                       ("laid", laid, {"laid_out": True})):
                    with bench_tmpdir("milvus-raw") as d:
                        w, c = timed_cpu(lambda: raw_copy(Path(d) / "copy", **kw))
                        out.append(w)
                        cpu[name_].append(c)
                with bench_tmpdir("milvus-cap") as d:
                    target = LocalStore(Path(d) / "target")
                    with KV(etcd.endpoint, timeout=10) as kv:
                        reps = []
                        w, c = timed_cpu(lambda: reps.extend(capture.capture(
                            kv, bucket, target, root, [name], bundle="b1", threads=args.threads, say=lambda _: None)))
                        (rep,) = reps
                        cap.append(w)
                        cpu["cap"].append(c)
                        assert rep["copied_bytes"] == total, (rep["copied_bytes"], total)
                        t = time.perf_counter()
                        (rep2,) = capture.capture(kv, bucket, target, root, [name], bundle="b2", threads=args.threads,
                                                  say=lambda _: None)
                        again_t.append(time.perf_counter() - t)
                        again_bytes.append(rep2["copied_bytes"] + rep2["read_bytes"])
                print(f"run {r + 1}: raw copy {raw[-1]:.2f} s ({cpu['raw'][-1]:.2f} s CPU), raw copy + SHA-256 "
                      f"{hashed[-1]:.2f} s ({cpu['hashed'][-1]:.2f}), that in the bundle layout {laid[-1]:.2f} s "
                      f"({cpu['laid'][-1]:.2f}), capture {cap[-1]:.2f} s ({cpu['cap'][-1]:.2f}), second capture "
                      f"{again_t[-1]:.2f} s ({again_bytes[-1]} bytes read or copied)", flush=True)
            mr, mc = statistics.median(raw), statistics.median(cap)
            print(f"median: raw copy {mr:.2f} s ({total / 2**20 / mr:.1f} MiB/s), capture {mc:.2f} s "
                  f"({total / 2**20 / mc:.1f} MiB/s), second capture {statistics.median(again_t):.2f} s")
            mh, ml = statistics.median(hashed), statistics.median(laid)
            print(f"info: raw copy + SHA-256 of every object (the physical work of a content-checked copy): "
                  f"{mh:.2f} s; capture / that = {mc / mh:.2f}; that into the bundle's layout (data/xx/sha256, "
                  f"directories fsynced once): {ml:.2f} s; capture / that = {mc / ml:.2f}; load average "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
            cr, ch, cl, cc = (statistics.median(cpu[k]) for k in ("raw", "hashed", "laid", "cap"))
            print(f"info: median CPU seconds (this process, every thread): raw copy {cr:.2f}, + SHA-256 {ch:.2f}, "
                  f"in the bundle layout {cl:.2f}, capture {cc:.2f} (capture / raw copy = {cc / cr:.2f})")
            verdict("milvus_capture_1M", mc, mr, 1.20)
            print(f"BENCH milvus_capture_1M_again_copied_bytes ratio={max(again_bytes):.2f} target=0.00 "
                  f"{'ok' if max(again_bytes) == 0 else 'miss'}", flush=True)
        finally:
            if srv is not None:
                srv.stop()
            weed.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
