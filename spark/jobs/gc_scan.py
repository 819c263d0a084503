"""PySpark job: the mark phase of GC, with the references, the listing, the judgement
and the report all on the executors; the driver holds counts only.

    spark-submit spark/jobs/gc_scan.py --run-id RUN [--collection-id C]
        [--missing-tolerance S] [--drop-tolerance S] [--force 0|1] [--dry-run 0|1]
        [--parts N] [--segment-range-keys N] [--split-at N]

Driver: check tolerances (refuse below the floor unless forced), fix the mark's etcd
revision, read the small state at it (snapshot records, paused scopes, the WAL view),
cut the segment records into key ranges. Executors (seglake.lifecycle.gc.dist): read
segment records by key range at that revision and snapshot manifests one per task,
list the store by collection prefix (large ones cut further by a delimiter walk); Spark joins them;
executors judge every object with the inline engine's `gc.decide`, write the report
parts under _gc/RUN/ and return counts. Driver: summary.json from the counts. Any task
that cannot read its part of the references fails the job: no summary, nothing to sweep.
Deleting is gc_sweep.py's job, never this one's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gc_scan")
    p.add_argument("--run-id", required=True)
    p.add_argument("--collection-id", type=int, default=0, help="0: the whole store")
    p.add_argument("--missing-tolerance", type=float, default=None)
    p.add_argument("--drop-tolerance", type=float, default=None)
    p.add_argument("--force", type=int, choices=[0, 1], default=0)
    p.add_argument("--dry-run", type=int, choices=[0, 1], default=0)
    p.add_argument("--parts", type=int, default=0, help="report parts (0: 2 x default parallelism)")
    p.add_argument("--segment-range-keys", type=int, default=0, help="segment records per reference task")
    p.add_argument("--split-at", type=int, default=0, help="objects above which a prefix is listed in several units")
    return p.parse_args(argv)


def _partitioned_by_index(rdd, n: int, most: int | None = None):
    """The n elements spread evenly over min(n, most) partitions: one per partition when
    `most` is None (zipWithIndex + a modulo partitioner)."""
    parts = max(1, n if most is None else min(n, most))
    return rdd.zipWithIndex().map(lambda x: (x[1], x[0])).partitionBy(parts, lambda i: i % parts).values()


def spark_mark(spark, meta, store, opts, run_id: str, settings_env: dict, *, parts: int = 0,
               segment_range_keys: int = 0, split_at: int = 0, now=time.time):
    """The distributed mark; returns the gc.MarkResult the summary was written from."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from seglake.lifecycle import gc
    from seglake.lifecycle.gc import dist as gcdist, listing as gclisting
    from seglake.meta.snapshots import PENDING

    opts.check()
    gc.check_run_id(run_id)
    sc = spark.sparkContext
    par = sc.defaultParallelism
    parts = gc.positive("--parts", parts or max(2, 2 * par))
    segment_range_keys = gc.positive("--segment-range-keys", segment_range_keys or gcdist.SEGMENT_RANGE_KEYS)
    split_at = gc.positive("--split-at", split_at or gclisting.SPLIT_AT)
    started = gc.judging_time(meta, now, store)   # the host's clock, vouched for by the TSO, capped by the store's
    cutoff = started - opts.missing_tolerance  # fixed when listing STARTS
    try:
        rev = meta.kv.revision()
        raw_records = [(kv.key, kv.value) for kv in meta.kv.range(meta.keys.snapshots_prefix(), revision=rev)]
        records = [gcdist._record(r) for r in raw_records]
        scope = gc.References(revision=rev)
        scope.blocked = {r.collection_id for r in records if r.state == PENDING}
        scope.snapshot_ids = {(r.collection_id, r.snapshot_id) for r in records}
        scope.paused_all, scope.paused = gc.paused_scopes(meta)
        ranges = gcdist.segment_ranges(meta, rev, segment_range_keys)
    except Exception as e:
        raise gc.GCError(f"references could not be read completely, nothing deleted: {type(e).__name__}: {e}") from e
    wal = gc.load_wal_view(meta, store, opts.collection_id)
    plan = gcdist.MarkPlan(run_id, started, cutoff, rev, opts.collection_id, opts.drop_tolerance, scope, wal,
                           dict(settings_env))

    # references, on the executors
    seg_refs = sc.parallelize(ranges, max(1, len(ranges))).flatMap(lambda r: gcdist.segment_rows(plan, *r))
    snap_items = sc.parallelize(raw_records, max(1, len(raw_records))) \
        .flatMap(lambda r: gcdist.snapshot_rows(plan, r)).persist(StorageLevel.MEMORY_AND_DISK)
    manifests = snap_items.filter(lambda x: x[0] == "manifest").map(lambda x: x[1])
    n_manifests = manifests.count()
    man_refs = _partitioned_by_index(manifests, n_manifests).flatMap(lambda m: gcdist.manifest_rows(plan, m))
    own_refs = snap_items.filter(lambda x: x[0] == "ref").map(lambda x: x[1])
    # (on disk: in local mode executor memory is the driver JVM's)
    refs = spark.createDataFrame(seg_refs.union(man_refs).union(own_refs), gcdist.REF_SCHEMA) \
        .persist(StorageLevel.DISK_ONLY)

    # the listing, on the executors
    levels = 1 if opts.collection_id is None else 0  # insert_log/, index_files/, ... or one collection's
    top = sc.parallelize([0], 1).flatMap(lambda _: gcdist.walk_top(plan, gc.scan_prefixes(opts.collection_id), levels)) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    prefixes = top.filter(lambda x: x[0] == "unit").map(lambda x: x[1])
    n_prefixes = prefixes.count()
    want = max(gclisting.UNITS_PER_PREFIX, 4 * par)  # listing units a large prefix is cut into
    planned = _partitioned_by_index(prefixes, n_prefixes, 4 * par) \
        .flatMap(lambda p: gcdist.plan_units(plan, p, split_at, want)) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    units = planned.filter(lambda x: x[0] == "unit").map(lambda x: x[1])
    n_units = units.count()
    listed = _partitioned_by_index(units, n_units, 8 * par).flatMap(lambda u: gcdist.list_unit_rows(plan, u)) \
        .union(top.filter(lambda x: x[0] == "obj").map(lambda x: x[1])) \
        .union(planned.filter(lambda x: x[0] == "obj").map(lambda x: x[1]))
    objects = spark.createDataFrame(listed, gcdist.LIST_SCHEMA)

    # the joins: what the references say about each listed path
    files = refs.where(F.col("tag").isin(gcdist.LIVE, gcdist.DROP, gcdist.SNAPFILE))
    by_path = files.groupBy("path").agg(
        F.max(F.when(F.col("tag") != gcdist.DROP, F.lit(True))).alias("referenced"),
        F.max_by(F.struct("c", "s"), F.when(F.col("tag") == gcdist.DROP, F.col("key"))).alias("owner"))
    snap_segs = refs.where(F.col("tag") == gcdist.SNAPSEG).select("c", "s").distinct().withColumn("in_snap", F.lit(True))
    dsegs = refs.where(F.col("tag") == gcdist.DSEG).join(snap_segs, ["c", "s"], "left") \
        .withColumn("ok", F.col("flag") & F.col("in_snap").isNull())
    dropped_kept = dsegs.where(~F.col("ok")).count()
    reclaim = dsegs.where(F.col("ok")).groupBy("c", "s").agg(F.max_by("p", "key").alias("d_p"))
    seg_coll = refs.where(F.col("tag").isin(gcdist.SEGCOLL, gcdist.SNAPSEG)) \
        .withColumn("order", F.struct(F.when(F.col("tag") == gcdist.SEGCOLL, 1).otherwise(0),
                                      F.coalesce(F.col("key"), F.lit("")), -F.col("c"))) \
        .groupBy("s").agg(F.max_by("c", "order").alias("seg_coll"))

    o = objects.join(by_path, "path", "left") \
        .withColumn("own_c", F.col("owner.c")).withColumn("own_s", F.col("owner.s")).drop("owner")
    o = o.join(reclaim.select(F.col("c").alias("own_c"), F.col("s").alias("own_s"),
                              F.lit(True).alias("own_reclaimable")), ["own_c", "own_s"], "left")
    o = o.join(seg_coll.withColumnRenamed("s", "lookup_seg"), "lookup_seg", "left")
    coll = F.coalesce(F.col("p_coll"), F.col("seg_coll"))
    o = o.withColumn("g", F.when(F.col("own_c").isNotNull(), F.concat_ws("/", "own_c", "own_s"))
                     .when(F.col("p_seg").isNotNull() & coll.isNotNull(), F.concat_ws("/", coll, "p_seg"))
                     .otherwise(F.col("path")))
    cols = ["kind", "path", "size", "mtime", "referenced", "own_c", "own_s", "own_reclaimable", "seg_coll", "d_p", "g"]
    o = o.withColumn("kind", F.lit("o")).withColumn("d_p", F.lit(None).cast("long")).select(*cols)
    d = reclaim.select(F.lit("d").alias("kind"), F.lit(None).cast("string").alias("path"),
                       F.lit(None).cast("long").alias("size"), F.lit(None).cast("double").alias("mtime"),
                       F.lit(None).cast("boolean").alias("referenced"), F.col("c").alias("own_c"),
                       F.col("s").alias("own_s"), F.lit(True).alias("own_reclaimable"),
                       F.lit(None).cast("long").alias("seg_coll"), "d_p",
                       F.concat_ws("/", "c", "s").alias("g")).select(*cols)
    judged = o.unionByName(d).repartition(parts, "g").rdd \
        .mapPartitionsWithIndex(lambda i, rows: gcdist.judge_partition(plan, i, rows))
    results = [json.loads(x) for x in judged.collect()]  # one small JSON of counts per partition
    refs.unpersist()
    snap_items.unpersist()
    top.unpersist()
    planned.unpersist()

    counts = gc.MarkCounts()
    for r in results:
        counts.merge(gc.MarkCounts.from_json(r["counts"]))
    counts.dropped_kept = dropped_kept
    m = gc.MarkResult(run_id, started, cutoff, counts, [r["part"] for r in results if r["part"]], [], rev,
                      opts.dry_run, wal.summary(), engine="spark")
    gc.finish_mark(store, m.summary())
    return m


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings, spark_env
    from seglake.lifecycle import gc
    from seglake.meta import Meta
    from seglake.storage import open_store

    gc.check_run_id(args.run_id)  # before anything starts
    settings = Settings.load()
    opts = gc.GCOptions.from_settings(settings, missing_tolerance=args.missing_tolerance,
                                      drop_tolerance=args.drop_tolerance, force=bool(args.force),
                                      dry_run=bool(args.dry_run), collection_id=args.collection_id or None).check()
    store = open_store(settings)
    env = spark_env()  # secrets resolved: executors may not reach the driver's secrets file
    # seglake env -> spark.executorEnv.*, never argv; no speculative duplicate writes a report part
    spark = job_session(f"seglake-gc-scan-{args.run_id}", conf={"spark.speculation": "false"})
    try:
        with Meta.from_settings(settings) as meta:
            result = spark_mark(spark, meta, store, opts, args.run_id, env, parts=args.parts,
                                segment_range_keys=args.segment_range_keys, split_at=args.split_at)
    finally:
        spark.stop()
    print(json.dumps(result.summary()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
