"""PySpark job: verify a bundle in the backup target (big bundles; small ones run inline).

    spark-submit spark/jobs/verify_bundle.py --collection NAME --bundle NAME [--db DB] [--backup-uri URI]

The driver plans from the bundle document (seglake.lifecycle.backup.verify.plan: one
unit per distinct data file), executors read and check the units in parallel (a thread
pool inside each partition for S3 latency), the driver summarizes and records the report
in etcd ({root}/backup/verify/...), where the DAG and the seglake page read it.
Configuration and the backup target's credentials arrive in the environment
(SEGLAKE_CONFIG + secrets), never in argv; --backup-uri is a location, no secret.
Exit code 0 when the job ran, whatever it found: the DAG judges the report.
"""

from __future__ import annotations

import argparse
import sys
import time


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="verify_bundle")
    p.add_argument("--collection", required=True)
    p.add_argument("--bundle", required=True)
    p.add_argument("--db", default="default")
    p.add_argument("--backup-uri", default="")
    return p.parse_args(argv)


def run(spark, settings, collection: str, bundle: str, db: str, backup_uri: str | None) -> dict:
    """Plan on the driver, check on executors, summarize: the job minus its I/O setup."""
    from seglake.config import spark_env
    from seglake.lifecycle.backup import bundle as bundles, holds
    from seglake.lifecycle.backup import verify

    started = time.time()
    target = bundles.open_target(settings, backup_uri)
    with holds.held(target, db, collection, bundle, by="verify (spark)", say=print):   # not pruned while read
        planned = verify.plan(target, collection, bundle, db=db)
        units = planned["units"]
        problems: list[dict] = []
        if units:
            sc = spark.sparkContext
            env = spark_env()   # secrets resolved: executors may not reach the driver's secrets file
            n = max(1, min(sc.defaultParallelism, len(units)))
            problems = (sc.parallelize(units, n)
                          .mapPartitions(lambda it: verify.check_partition(it, env, backup_uri))
                          .collect())
        return verify.summarize(planned, problems, started, engine="spark")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings
    from seglake.lifecycle.backup import verify
    from seglake.meta import Meta

    settings = Settings.load()
    spark = job_session(f"seglake-verify-bundle-{args.bundle}")   # seglake env -> executorEnv, never argv
    try:
        report = run(spark, settings, args.collection, args.bundle, args.db, args.backup_uri or None)
    finally:
        spark.stop()
    with Meta.from_settings(settings) as meta:
        verify.record(meta, report)
    verify.say_report(report, print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
