"""PySpark job: verify every file a collection's segment metadata references.

    spark-submit spark/jobs/verify_collection.py --collection NAME [--db DB] --report-key KEY

The driver plans the checks from etcd (seglake.lifecycle.verify.plan), executors check
files in parallel (one partition per core, threads inside for S3 latency), the driver
counts the visible rows (seglake.visibility), summarizes and writes the report JSON to
the store at KEY (a temp name, then visible).
Configuration arrives in the environment (SEGLAKE_CONFIG + secrets), never in argv.
Exit code 0 when the job ran, whatever it found: the DAG judges the report.
"""

from __future__ import annotations

import argparse
import json
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="verify_collection")
    p.add_argument("--collection", required=True)
    p.add_argument("--db", default="default")
    p.add_argument("--report-key", required=True)
    return p.parse_args(argv)


def run(spark, settings, collection: str, db: str) -> dict:
    """Plan on the driver, check on executors, count visible rows on the driver (the one
    visibility function), summarize: the job minus its I/O setup."""
    from seglake.config import spark_env
    from seglake.lifecycle.verify import check_partition, count_visible, plan, summarize
    from seglake.meta import Meta
    from seglake.storage import open_store

    with Meta.from_settings(settings) as meta:
        planned = plan(meta, collection, db)
    sc = spark.sparkContext
    env = spark_env()  # secrets resolved: executors may not reach the driver's secrets file
    n = max(1, min(sc.defaultParallelism, len(planned["checks"])))
    problems = (sc.parallelize(planned["checks"], n)
                  .mapPartitions(lambda it: check_partition(it, env))
                  .collect())
    with Meta.from_settings(settings) as meta:
        visible, more = count_visible(meta, open_store(settings), planned, problems)
    return summarize(planned, problems + more, visible)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings
    from seglake.lifecycle.verify import format_report
    from seglake.storage import open_store

    settings = Settings.load()
    spark = job_session(f"seglake-verify-{args.collection}")  # seglake env -> spark.executorEnv.*, never argv
    try:
        report = run(spark, settings, args.collection, args.db)
    finally:
        spark.stop()
    open_store(settings).put(args.report_key, json.dumps(report, indent=1).encode())
    print(format_report(report))
    print(f"report written to {args.report_key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
