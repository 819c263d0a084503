"""PySpark job: write a PENDING snapshot's manifests across executors, commit on the driver.

    spark-submit spark/jobs/write_manifests.py --collection-id ID --name SNAPSHOT
                 [--snapshot-id ID] [--per-file N]

Driver: load the PENDING record, start a write attempt (a fresh id; its heartbeat keeps
the record alive while the job runs), capture the segment set (one etcd revision at or
after the request), split it into manifest groups. Executors: each writes its groups'
Avro files under the attempt's own names (a zombie or re-submitted job never overwrites
them). Driver: the attempt's metadata JSON, then PENDING -> COMMITTED in one guarded
transaction; a job that lost (another attempt committed, GC reclaimed the record) fails
with that reason. Other failures are noted on the record. Configuration arrives in the
environment.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="write_manifests")
    p.add_argument("--collection-id", type=int, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--snapshot-id", type=int, default=None)
    p.add_argument("--per-file", type=int, default=2000)
    return p.parse_args(argv)


def run(spark, meta, store, collection_id: int, name: str, per_file: int, snapshot_id: int | None = None):
    """One write attempt with the manifest groups spread over executors. Returns the
    committed record."""
    from seglake.lifecycle import snapshot
    from seglake.meta.snapshots import COMMITTED, PENDING

    rec, _ = meta.snapshots.get(collection_id, name)
    if snapshot_id is not None and rec.snapshot_id != snapshot_id:
        raise RuntimeError(f"snapshot {name!r} is now id {rec.snapshot_id}, not {snapshot_id}; nothing written")
    if rec.state == COMMITTED:
        return rec
    if rec.state != PENDING:
        raise RuntimeError(f"snapshot {name!r} is {rec.state}; nothing to write")
    from seglake.config import spark_env
    env = spark_env()  # secrets resolved: executors may not reach the driver's secrets file
    rec_json = rec.to_json()

    def write_groups(attempt: int, groups: list, alive) -> list:
        sc = spark.sparkContext
        return (sc.parallelize(groups, max(1, min(len(groups), sc.defaultParallelism)))
                  .mapPartitions(lambda it: snapshot.write_manifest_groups(it, rec_json, attempt, env))
                  .collect())
    return snapshot.write_attempt(meta, store, rec, write_groups, per_file)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings
    from seglake.meta import Meta
    from seglake.storage import open_store

    settings = Settings.load()
    spark = job_session(f"seglake-snapshot-{args.name}")  # seglake env -> spark.executorEnv.*, never argv
    try:
        with Meta.from_settings(settings) as meta:
            rec = run(spark, meta, open_store(settings), args.collection_id, args.name, args.per_file,
                      args.snapshot_id)
    finally:
        spark.stop()
    print(f"snapshot {rec.name!r} {rec.state}: {rec.segments} segments, {rec.rows} rows, "
          f"{rec.manifests} manifests at {rec.location}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
