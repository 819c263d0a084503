"""PySpark job: the mark phase of GC with the listing split across executors.

    spark-submit spark/jobs/gc_scan.py --run-id RUN [--collection-id C]
        [--missing-tolerance S] [--drop-tolerance S] [--force 0|1] [--dry-run 0|1]

Driver: check tolerances (refuse below the floor unless forced), load every reference
(fail closed), fix the age cutoff, split the store into per-collection prefixes.
Executors: list their prefixes. Spark: anti-join the listing with the references
(and count what it left out, so `listed` and `referenced` mean what they mean inline).
Driver: classify what is left with the same `gc.judge` as the inline engine (own
layout only, age, dropped segments, paused, pending snapshot), write the candidate
report under _gc/RUN/. Deleting is the sweep's job, never this one's.
"""

from __future__ import annotations

import argparse
import json
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gc_scan")
    p.add_argument("--run-id", required=True)
    p.add_argument("--collection-id", type=int, default=0, help="0: the whole store")
    p.add_argument("--missing-tolerance", type=float, default=None)
    p.add_argument("--drop-tolerance", type=float, default=None)
    p.add_argument("--force", type=int, choices=[0, 1], default=0)
    p.add_argument("--dry-run", type=int, choices=[0, 1], default=0)
    return p.parse_args(argv)


def spark_listing(spark, store, refs, settings_env: dict):
    """A `listing(prefixes)` for gc.mark: executors list, Spark anti-joins with the live
    references; returns (unreferenced objects, number of referenced objects left out)."""
    from seglake.lifecycle.gc import list_units_from_env, split_prefixes
    from seglake.storage.base import ObjectInfo

    def listing(prefixes):
        units, loose = split_prefixes(store, prefixes)
        if not units:
            return loose, 0
        sc = spark.sparkContext
        rdd = sc.parallelize(units, max(1, min(len(units), sc.defaultParallelism * 4)))
        rows = spark.createDataFrame(rdd.mapPartitions(lambda it: list_units_from_env(it, settings_env)),
                                     "path string, size long, mtime double").cache()
        total = rows.count()
        ref_df = spark.createDataFrame([(p,) for p in refs.files] or [("",)], "path string")
        unreferenced = rows.join(ref_df, on="path", how="left_anti").collect()
        rows.unpersist()
        objects = loose + [ObjectInfo(r["path"], r["size"], r["mtime"]) for r in unreferenced]
        return objects, total - len(unreferenced)

    return listing


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings
    from seglake.lifecycle import gc
    from seglake.meta import Meta
    from seglake.storage import open_store

    settings = Settings.load()
    opts = gc.GCOptions.from_settings(settings, missing_tolerance=args.missing_tolerance,
                                      drop_tolerance=args.drop_tolerance, force=bool(args.force),
                                      dry_run=bool(args.dry_run), collection_id=args.collection_id or None).check()
    store = open_store(settings)
    from seglake.config import spark_env
    env = spark_env()  # secrets resolved: executors may not reach the driver's secrets file
    spark = job_session(f"seglake-gc-scan-{args.run_id}")  # seglake env -> spark.executorEnv.*, never argv
    try:
        with Meta.from_settings(settings) as meta:
            refs = gc.load_references(meta, store)
            result = gc.mark(meta, store, opts, run_id=args.run_id, refs=refs,
                             listing=spark_listing(spark, store, refs, env))
    finally:
        spark.stop()
    print(json.dumps(result.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
