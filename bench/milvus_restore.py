"""bench/milvus_restore.py: restore a 1M-row Milvus capture into a real Milvus 2.3.5 with
seglake (issue 29 D3), against Milvus's own bulk insert of the same files started by hand,
same run, same server.

A private etcd, SeaweedFS and Milvus (the PyPI wheel's server, its own venv); a collection
of N rows (default 1,000,000; pk, a float, a `dim`-wide float vector; 2 shards), flushed,
captured by seglake into a local bundle. Then, alternately, into the same server under new
names:

* anchor (by hand, what milvus-backup's restore does): create the collection through the
  public API, upload every captured insert/delta log of each segment to the bucket (boto3,
  `threads` threads), one backup-mode bulk insert per partition (milvus-backup's grouping; a
  partition's folder holds its segments' folders), poll until all are
  Completed, build a FLAT index, load;
* seglake: `seglake.milvus.restore.run` -- check (every data file's SHA-256, the schema),
  create, stage (SHA-256 checked on the way), one import per partition with every state
  recorded in etcd, wait, index, load, verify (count(*) and a sample of rows).

    python bench/milvus_restore.py [--rows 1000000] [--dim 32] [--threads 8] [--repeat 3]

Prints
    BENCH milvus_restore_1M ratio=<seglake / by hand> target=1.50 ok|miss
(the name keeps "1M"; the first lines say the row count actually run.)
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
from common import private_etcd, verdict  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUCKET = "milvus-bench-restore"
FLAT = {"index_type": "FLAT", "metric_type": "L2", "params": {}}


def client(python, address: str, *ops, timeout: float = 3600) -> list:
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
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import boto3
    from botocore.config import Config

    from seglake.dev.devstack import WeedServer
    from seglake.dev.milvus import MilvusServer, MilvusUnavailable, S3Target, milvus_python
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.meta.kv import KV
    from seglake.milvus import capture, restore
    from seglake.storage import layout
    from seglake.storage.local import LocalStore

    try:
        python = milvus_python()
    except MilvusUnavailable as e:
        print(f"BENCH milvus_restore_1M skipped: cannot run Milvus here ({e})")
        return 0
    with tempfile.TemporaryDirectory(prefix="seglake-bench-mrestore-") as state, private_etcd() as etcd:
        weed = WeedServer(state_dir=Path(state) / "weed").start(timeout=60)
        srv = None
        try:
            root = f"bench-{uuid.uuid4().hex[:6]}"
            srv = MilvusServer(state_dir=Path(state) / "milvus", etcd_endpoint=etcd.endpoint, etcd_root=root,
                               s3=S3Target(endpoint=weed.endpoint, bucket=BUCKET, root_path=f"files-{root}",
                                           access_key=weed.access_key, secret_key=weed.secret_key),
                               config={"dataCoord.compaction.enableAutoCompaction": "false"})
            srv.prepare()
            srv.start(timeout=180)
            name = "bench_src"
            t = time.perf_counter()
            ops = [{"op": "create", "name": name, "shards": 2, "dim": args.dim}]
            ops += [{"op": "insert", "name": name, "pks": list(range(i, min(args.rows, i + args.batch))),
                     "random_vectors": True}
                    for i in range(0, args.rows, args.batch)]
            client(python, srv.address, *ops, {"op": "flush", "name": name})
            print(f"milvus: {args.rows} rows inserted and flushed in {time.perf_counter() - t:.1f} s", flush=True)

            class S:
                milvus_s3_endpoint, milvus_s3_region = weed.endpoint, "us-east-1"
                milvus_s3_access_key, milvus_s3_secret_key = weed.access_key, weed.secret_key
                copy_threads = args.threads
            backup = LocalStore(Path(state) / "backup")
            with KV(etcd.endpoint, timeout=10) as kv:
                capture.capture(kv, capture.open_bucket(S, BUCKET, srv.s3.root_path), backup, root, [name],
                                bundle="b1", threads=args.threads, say=lambda _: None)
            doc = bundles.read(backup, "default", name, "b1")
            files = {p for e in doc["segments"] for p in restore.seg_files(e)}
            nbytes = sum(doc["files"][p]["size"] for p in files)
            print(f"bundle: {len(doc['segments'])} segments, {len(files)} insert/delta logs, "
                  f"{nbytes / 2**20:.1f} MiB", flush=True)
            s3 = boto3.client("s3", endpoint_url=weed.endpoint, aws_access_key_id=weed.access_key,
                              aws_secret_access_key=weed.secret_key, region_name="us-east-1",
                              config=Config(s3={"addressing_style": "path"}, max_pool_connections=64))
            c = doc["source"]["collection_id"]

            def by_hand(new: str) -> float:
                """Create, upload, one backup-mode import per partition, wait, index, load."""
                t0 = time.perf_counter()
                client(python, srv.address, {"op": "create", "name": new, "shards": 2, "dim": args.dim})
                base = f"by-hand/{new}"

                def up(path):
                    f = doc["files"][path]
                    s3.put_object(Bucket=BUCKET, Key=f"{base}/{path}",
                                  Body=backup.get(layout.bundle_blob(f["sha256"])))
                with ThreadPoolExecutor(args.threads) as ex:
                    list(ex.map(up, sorted(files)))
                parts = {int(p["partition_id"]): p["name"] for p in doc["snapshot"]["collection"]["partitions"]}
                imports = [{"op": "import", "name": new, "partition": parts[pid],
                            "files": [f"{base}/{kind}/{c}/{pid}/" for kind in ("insert_log", "delta_log")],
                            "options": {"backup": "true"}}
                           for pid in sorted({int(e["partition_id"]) for e in doc["segments"]})]
                ids = [r["task_id"] for r in client(python, srv.address, *imports)]
                while True:
                    states = client(python, srv.address, *[{"op": "import_state", "task_id": i} for i in ids])
                    if any(s["state"] in ("Failed", "FailedAndCleaned") for s in states):
                        raise SystemExit(f"by-hand import failed: {states}")
                    if all(s["state"] == "Completed" for s in states):
                        break
                    time.sleep(0.5)
                client(python, srv.address, {"op": "create_index", "name": new, "field": "vec", "params": FLAT},
                       {"op": "load", "name": new})
                took = time.perf_counter() - t0
                n = client(python, srv.address, {"op": "count_loaded", "name": new})[0]["count"]
                assert n == args.rows, (n, args.rows)
                return took

            def seglake(new: str) -> float:
                target = restore.MilvusTarget(address=srv.address, bucket=BUCKET, s3_endpoint=weed.endpoint,
                                              s3_access_key=weed.access_key, s3_secret_key=weed.secret_key)
                with KV(etcd.endpoint, timeout=10, root=f"seglake-{uuid.uuid4().hex[:6]}") as kv:
                    t0 = time.perf_counter()
                    rep = restore.run(kv, kv.marker_keys, backup, target,
                                      restore.Request(db="default", collection=name, bundle="b1", name=new,
                                                      sample=100, poll=0.5, threads=args.threads,
                                                      import_timeout=7200))
                    took = time.perf_counter() - t0
                assert rep["state"] == "verified" and rep["count"] == args.rows, rep
                return took

            hand, mine = [], []
            for r in range(args.repeat):
                hand.append(by_hand(f"hand_{r}"))
                mine.append(seglake(f"seglake_{r}"))
                print(f"run {r + 1}: by hand {hand[-1]:.1f} s, seglake {mine[-1]:.1f} s", flush=True)
                client(python, srv.address, {"op": "drop", "name": f"hand_{r}"}, {"op": "drop", "name": f"seglake_{r}"})
            mh, ms = statistics.median(hand), statistics.median(mine)
            print(f"median of {args.repeat}: by hand {mh:.1f} s ({args.rows / mh:,.0f} rows/s), seglake {ms:.1f} s "
                  f"({args.rows / ms:,.0f} rows/s); {args.rows} rows; load average {os.getloadavg()[0]:.1f} on "
                  f"{os.cpu_count()} cores", flush=True)
            verdict("milvus_restore_1M", ms, mh, 1.50)
        finally:
            if srv is not None:
                srv.stop()
            weed.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
