"""PySpark job: the sweep phase of GC on the executors, one task per report part.

    spark-submit spark/jobs/gc_sweep.py --run-id RUN

Driver: read the mark's summary.json (counts and the list of report parts, no
candidate). Executors: each reads its part of the report, and batch by batch re-checks
it against what changed in etcd since the mark's revision (a segment or snapshot
referenced since is kept), deletes with `store.delete_checked` (DeleteObjects batches on
S3, the no-follow path locally), then removes the records of its part's Dropped
segments whose files are all gone (compare-guarded) -- `gc.sweep_part`, the code the
inline sweep runs. Driver: adds up the per-part counts into summary.json.
A task is never retried (spark.task.maxFailures=1): a failed sweep is re-run whole,
which is idempotent, and its counts stay true.
"""

from __future__ import annotations

import argparse
import json
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gc_sweep")
    p.add_argument("--run-id", required=True)
    p.add_argument("--batch", type=int, default=0, help="candidates per re-check and delete batch")
    return p.parse_args(argv)


def spark_sweep(spark, store, run_id: str, settings_env: dict, batch: int = 0):
    """The distributed sweep; returns the merged gc.SweepResult (also in summary.json)."""
    from seglake.lifecycle import gc

    mark_rev, parts = gc.sweep_plan(store, run_id)  # (refused for a dry run's mark)
    batch = gc.positive("--batch", batch or gc.SWEEP_BATCH)
    env = dict(settings_env)
    out = gc.SweepResult()
    gc.sweeping.mark_sweep_started(store, run_id)   # until the record below: files may be partly deleted
    if parts:
        rdd = spark.sparkContext.parallelize(parts, len(parts)).mapPartitions(
            lambda it: [json.dumps(gc.sweep_parts_from_env(env, run_id, mark_rev, list(it), batch))])
        for r in rdd.collect():  # one small JSON of counts per part
            out.merge(gc.SweepResult.from_json(json.loads(r)))
    gc.record_sweep(store, run_id, out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.config import Settings, spark_env
    from seglake.lifecycle import gc
    from seglake.sparksession import job_session
    from seglake.storage import open_store

    gc.check_run_id(args.run_id)  # before anything starts
    settings = Settings.load()
    store = open_store(settings)
    spark = job_session(f"seglake-gc-sweep-{args.run_id}",   # seglake env -> spark.executorEnv.*, never argv
                        conf={"spark.task.maxFailures": "1", "spark.speculation": "false"})  # one attempt per part: true counts
    try:
        out = spark_sweep(spark, store, args.run_id, spark_env(), args.batch)
    finally:
        spark.stop()
    print(json.dumps(out.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
