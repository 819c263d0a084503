"""bench/scale_restore.py: restore on S3 at object-store speed. 20,000 objects of 64 KiB
(2,000 segments of 10 files) on a private SeaweedFS S3 server and a private etcd;
measured in the same run on the same source objects:

- anchor: a raw boto3 CopyObject loop over every source key, `--concurrency` threads,
  one client whose connection pool holds that many connections;
- engine: the whole restore (restore(): target records; plan; the copy through the
  copy-task runner with copy_threads = `--concurrency`, one runner, as one Spark
  executor or one inline worker runs it; finalize), every copy checked by ETag.

Runs alternate (anchor, engine, ...) and the medians are compared:

    BENCH restore_s3_20k ratio=<engine / anchor> target=1.20

Also printed: the engine's requests by operation (one CopyObject per object, conditional
on the ETag its task's listing gave, plus a few ListObjectsV2 pages per task; no HEAD),
the engine as deployed (run_inline's worker processes, one per core, copy_threads split
over them) and the S3 LIST rate over the bucket. The set-up (server start, PUTs,
snapshot) is timed and printed apart. (Until the listing replaced a HEAD per object the
engine cost a raw HeadObject + CopyObject loop: `--head-loop` times one for comparison.)

    python bench/scale_restore.py [--files 20000] [--size 65536] [--concurrency 32] [--runs 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import private_etcd, verdict  # noqa: E402

FILES_PER_SEGMENT = 10
TARGET = 1.20


def build_source(meta, store, name: str, n_files: int, size: int, concurrency: int):
    """A collection of n_files/10 segments, each referencing 10 objects of `size` random
    bytes (PUT in parallel), and its snapshot. Returns the source keys."""
    from seglake.dev import demo
    from seglake.lifecycle import snapshot
    from seglake.meta.segments import FLUSHED, Binlog, IndexFile, Segment
    from seglake.storage import layout

    coll = meta.catalog.create(name, demo.demo_schema(8), partitions=["_default", "p1"])
    segs = []
    for i in range(max(1, n_files // FILES_PER_SEGMENT)):
        part = coll.partitions[i % 2].partition_id
        sid, logs, build = meta.ids.allocate(), meta.ids.allocate(8), meta.ids.allocate()
        segs.append(Segment(
            segment_id=sid, collection_id=coll.collection_id, partition_id=part, channel=coll.vchannels[0],
            state=FLUSHED, num_rows=1000,
            binlogs={f: (Binlog(logs + 2 * k, size, 1000), Binlog(logs + 2 * k + 1, size, 1000))
                     for k, f in enumerate((100, 101, 102))},
            deltalogs=(Binlog(logs + 6, size, 10),), statslogs={100: (Binlog(logs + 7, size, 1000),)},
            index_files=(IndexFile(build, 1, "centroids", size), IndexFile(build, 1, "meta", size))))
    keys = [f.key for s in segs for f in layout.segment_files(s)]
    blob = os.urandom(size)
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda k: store.client.put_object(Bucket=store.bucket, Key=store._full(k), Body=blob), keys))
    meta.segments.save(segs)
    snapshot.create(meta, store, name, "snap")
    return keys


def raw_copy_loop(conn: tuple[str, str, str], bucket: str, keys: list[str], prefix: str, concurrency: int,
                  head: bool = False) -> int:
    """The anchor: CopyObject of every key to `prefix`, `concurrency` in flight. head:
    a HeadObject before each copy (how the engine learnt the source's size and ETag
    before it listed them), for comparison."""
    import boto3
    from botocore.config import Config

    endpoint, access_key, secret_key = conn
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=access_key, aws_secret_access_key=secret_key,
                          config=Config(max_pool_connections=concurrency, s3={"addressing_style": "path"},
                                        retries={"max_attempts": 5, "mode": "standard"}))

    def one(key: str) -> None:
        if head:
            client.head_object(Bucket=bucket, Key=key)
        client.copy_object(Bucket=bucket, Key=f"{prefix}/{key}", CopySource={"Bucket": bucket, "Key": key})

    with ThreadPoolExecutor(concurrency) as pool:
        return sum(1 for _ in pool.map(one, keys))


def engine_restore(meta, store, settings, source: str, target: str, workers: int = 1) -> dict:
    """restore -> plan -> copy -> finalize. workers=1: one runner with copy_threads in
    flight; more: run_inline's worker processes (one per core, as deployed; each a
    runner with copy_threads in flight, the Spark executor's code)."""
    from seglake.lifecycle import copyjob, restore

    t0 = time.perf_counter()
    job_id = restore.restore(meta, store, source, "snap", target, engine="inline")
    copyjob.plan(meta, job_id, settings.max_segments_per_task)
    t1 = time.perf_counter()
    tasks = copyjob.run_inline(meta, store, job_id, threads=settings.copy_threads, settings=settings, workers=workers)
    t2 = time.perf_counter()
    job = copyjob.finalize(meta, job_id)
    t3 = time.perf_counter()
    assert job.state == "Completed" and not [t for t in tasks if t.state != "Completed"], job
    return {"total": t3 - t0, "setup": t1 - t0, "copy": t2 - t1, "finalize": t3 - t2,
            "files": job.total_files, "tasks": job.total_tasks}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=64 << 10)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--head-loop", action="store_true", help="also time a raw HeadObject + CopyObject loop")
    args = ap.parse_args(argv)

    from seglake.config import Settings
    from seglake.dev.devstack import WeedServer
    from seglake.meta import Meta
    from seglake.meta.kv import KV
    from seglake.storage import open_store

    with tempfile.TemporaryDirectory(prefix="seglake-bench-s3restore-") as d, private_etcd() as etcd:
        t = time.perf_counter()
        weed = WeedServer(state_dir=Path(d)).start(timeout=60)
        try:
            settings = Settings.from_dict({
                "etcd_endpoint": etcd.endpoint, "store_uri": "s3://seglake-bench", "s3_endpoint": weed.endpoint,
                "s3_access_key": weed.access_key, "s3_secret_key": weed.secret_key,
                "copy_threads": args.concurrency})
            store = open_store(settings)
            store.ensure_bucket()
            meta = Meta(KV(etcd.endpoint, timeout=30), root="seglake")
            try:
                keys = build_source(meta, store, "src", args.files, args.size, args.concurrency)
                setup = time.perf_counter() - t
                print(f"set-up: SeaweedFS + etcd start, {len(keys)} PUTs of {args.size} B, snapshot: {setup:.1f}s")
                print(f"concurrency {args.concurrency} (copy_threads; anchor threads and connection pool), "
                      f"{settings.max_segments_per_task} segments per task, {os.cpu_count()} cores")
                conn = (weed.endpoint, weed.access_key, weed.secret_key)
                procs = max(1, min(4, os.cpu_count() or 1))  # run_inline's default worker count
                settings_n = Settings.from_dict({**settings.to_dict(secrets=True),
                                                 "copy_threads": max(1, args.concurrency // procs)})
                times: dict[str, list[float]] = {"raw": [], "raw_head": [], "engine": [], "deployed": []}
                sent: collections.Counter = collections.Counter()  # by operation, every request of `store`
                store.client.meta.events.register(
                    "before-send.s3", lambda event_name, **_: sent.update([event_name.rsplit(".", 1)[-1]]))
                requests: collections.Counter = collections.Counter()  # the one-runner engine's
                for i in range(args.runs):
                    t = time.perf_counter()
                    n = raw_copy_loop(conn, store.bucket, keys, f"raw{i}", args.concurrency)
                    times["raw"].append(time.perf_counter() - t)
                    if args.head_loop:
                        t = time.perf_counter()
                        raw_copy_loop(conn, store.bucket, keys, f"rawh{i}", args.concurrency, head=True)
                        times["raw_head"].append(time.perf_counter() - t)
                    before = sent.copy()
                    r = engine_restore(meta, store, settings, "src", f"one{i}")
                    times["engine"].append(r["total"])
                    requests.update(sent - before)
                    rn = engine_restore(meta, store, settings_n, "src", f"many{i}", workers=procs)
                    times["deployed"].append(rn["total"])
                    head = f"raw HEAD+CopyObject loop {times['raw_head'][-1]:.2f}s; " if args.head_loop else ""
                    print(f"run {i}: raw CopyObject loop {times['raw'][-1]:.2f}s ({n / times['raw'][-1]:.0f}/s); "
                          f"{head}engine {r['total']:.2f}s "
                          f"(restore+plan {r['setup']:.2f}s, copy {r['copy']:.2f}s over {r['tasks']} tasks, "
                          f"finalize {r['finalize']:.2f}s); engine as deployed ({procs} worker processes x "
                          f"{settings_n.copy_threads}) {rn['total']:.2f}s", flush=True)
                print(f"engine requests (one runner, {args.runs} restore(s) of {len(keys)} objects, with the "
                      "snapshot reads): " + ", ".join(f"{op} {n}" for op, n in requests.most_common()))
                med = {k: statistics.median(v) for k, v in times.items() if v}
                import boto3  # a stock client, as the anchor's (the store's parses timestamps faster)

                plain = boto3.client("s3", endpoint_url=weed.endpoint, region_name="us-east-1",
                                     aws_access_key_id=weed.access_key, aws_secret_access_key=weed.secret_key)
                t = time.perf_counter()
                pages = listed = 0
                for page in plain.get_paginator("list_objects_v2").paginate(
                        Bucket=store.bucket, PaginationConfig={"PageSize": 1000}):
                    pages, listed = pages + 1, listed + len(page.get("Contents", []))
                t_list = time.perf_counter() - t
                head = (f", raw HEAD+copy {med['raw_head']:.2f}s (engine {med['engine'] / med['raw_head']:.2f}x)"
                        if args.head_loop else "")
                print(f"median of {args.runs}: raw {med['raw']:.2f}s, engine {med['engine']:.2f}s, "
                      f"deployed {med['deployed']:.2f}s{head}")
                print(f"S3 LIST rate: {listed} objects in {pages} pages, {t_list:.2f}s: {listed / t_list:,.0f} "
                      f"objects/s, {t_list / pages * 1000:.0f} ms per page")
                verdict("restore_s3_20k", med["engine"], med["raw"], TARGET)
            finally:
                meta.close()
        finally:
            weed.stop(timeout=15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
