"""PySpark job: write a PENDING snapshot's manifests across executors, commit on the driver.

    spark-submit spark/jobs/write_manifests.py --collection-id ID --name SNAPSHOT [--per-file N]

Driver: load the PENDING record, capture the segment set (one etcd revision), split it
into manifest groups. Executors: each writes its groups' Avro files (same key for the
same group number: a re-submitted job just rewrites them). Driver: metadata JSON, then
PENDING -> COMMITTED in one guarded transaction. A failure is recorded on the record so
the DAG's sensor can report it. Configuration arrives in the environment.
"""

from __future__ import annotations

import argparse
import os
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="write_manifests")
    p.add_argument("--collection-id", type=int, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--per-file", type=int, default=2000)
    return p.parse_args(argv)


def run(spark, meta, store, collection_id: int, name: str, per_file: int):
    """Capture, distribute the manifest writes, finish. Returns the committed record."""
    from seglake.lifecycle import snapshot
    from seglake.meta.snapshots import COMMITTED, PENDING

    rec, _ = meta.snapshots.get(collection_id, name)
    if rec.state == COMMITTED:
        return rec
    if rec.state != PENDING:
        raise RuntimeError(f"snapshot {name!r} is {rec.state}; nothing to write")
    try:
        raws, ts, revision = snapshot.capture_raw(meta, rec)
        groups = list(enumerate(snapshot.group(raws, per_file)))
        env = {k: v for k, v in os.environ.items() if k.startswith("SEGLAKE_")}
        rec_json = rec.to_json()
        sc = spark.sparkContext
        written = (sc.parallelize(groups, max(1, min(len(groups), sc.defaultParallelism)))
                     .mapPartitions(lambda it: snapshot.write_manifest_groups(it, rec_json, env))
                     .collect())
        return snapshot.finish(meta, store, rec, written, ts, revision)
    except Exception as e:
        snapshot.record_failure(meta, rec, f"{type(e).__name__}: {e}")
        raise


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from pyspark.sql import SparkSession

    from seglake.config import Settings
    from seglake.meta import Meta
    from seglake.storage import open_store

    settings = Settings.load()
    spark = SparkSession.builder.appName(f"seglake-snapshot-{args.name}").getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SEGLAKE_SPARK_LOG_LEVEL", "WARN"))
    try:
        with Meta.from_settings(settings) as meta:
            rec = run(spark, meta, open_store(settings), args.collection_id, args.name, args.per_file)
    finally:
        spark.stop()
    print(f"snapshot {rec.name!r} {rec.state}: {rec.segments} segments, {rec.rows} rows, "
          f"{rec.manifests} manifests at {rec.location}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
