"""PySpark job: capture Milvus collections into bundles (big collections; small ones run
inline in the milvus_backup task or the CLI).

    spark-submit spark/jobs/milvus_capture.py --milvus-etcd H:P --milvus-root by-dev --bucket B
        [--bucket-root files] --bundle NAME [--db default] (--collections c1,c2 | --all) [--backup-uri URI]
        [--max-mib-per-second N] [--max-requests-per-second N]

The driver reads Milvus's catalog (one etcd revision, range reads) and lists its bucket
(seglake.milvus.capture.plan), executors read, check and copy the files (GET from Milvus's
bucket, PUT into the target's data/), the driver writes each bundle and its commit marker.
Read-only on Milvus. Configuration and every credential (milvus_s3_*, backup_s3_*) arrive in
the environment (SEGLAKE_CONFIG + secrets), never in argv. Prints the reports as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="milvus_capture")
    p.add_argument("--milvus-etcd", required=True)
    p.add_argument("--milvus-root", default="by-dev")
    p.add_argument("--bucket", required=True)
    p.add_argument("--bucket-root", default="files")
    p.add_argument("--bundle", required=True)
    p.add_argument("--db", default="default")
    p.add_argument("--collections", default="")
    p.add_argument("--all", action="store_true")
    p.add_argument("--backup-uri", default="")
    p.add_argument("--max-mib-per-second", type=float, default=0)
    p.add_argument("--max-requests-per-second", type=float, default=0)
    return p.parse_args(argv)


def run(spark, settings, req: dict, backup_uri: str | None, bps: float = 0, rps: float = 0, meta=None) -> list:
    """The capture with its units on Spark: the job minus its I/O setup."""
    import uuid

    from seglake.config import spark_env
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.meta.kv import KV
    from seglake.milvus import capture

    env = spark_env()   # secrets resolved: executors may not reach the driver's secrets file
    key = meta.keys.backup_throttle(f"milvus-{uuid.uuid4().hex[:12]}") if meta is not None and (bps or rps) else ""
    runner = capture.spark_runner(spark, env, req["bucket"], req["bucket_root"], backup_uri, key, bps, rps)
    bucket = capture.open_bucket(settings, req["bucket"], req["bucket_root"])
    with KV(req["milvus_etcd"], timeout=settings.etcd_timeout) as kv:
        try:
            return capture.capture(kv, bucket, bundles.open_target(settings, backup_uri), req["milvus_root"],
                                   req["collections"], bundle=req["bundle"], db=req["db"],
                                   threads=settings.copy_threads, source={"bucket": req["bucket"],
                                                                          "root_path": req["bucket_root"]},
                                   runner=runner, say=print)
        finally:
            if key:
                meta.kv.delete(key)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.config import Settings
    from seglake.milvus import capture
    from seglake.sparksession import job_session

    settings = Settings.load()
    req = capture.check_request(args.milvus_etcd, args.milvus_root, args.bucket, args.bucket_root,
                                args.collections, args.bundle, db=args.db, all_collections=args.all)
    bps, rps = args.max_mib_per_second * (1 << 20), args.max_requests_per_second
    meta = None
    if bps or rps:
        from seglake.meta import Meta
        meta = Meta.from_settings(settings)
    spark = job_session(f"seglake-milvus-capture-{args.bundle}")   # seglake env -> executorEnv, never argv
    try:
        reports = run(spark, settings, req, args.backup_uri or None, bps, rps, meta)
    finally:
        spark.stop()
    print(json.dumps([{k: v for k, v in r.items() if k != "throttle"} for r in reports]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
