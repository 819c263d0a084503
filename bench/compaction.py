"""Benchmark: compaction (seglake.lifecycle.compaction) of --rows rows in --segments
segments with --deleted of the pks deleted (collection-wide deletes in an L0 segment),
compacted into about --outputs segments (inline, one unit after another).

Anchor (same run): pyarrow alone reading the same binlogs (every field, RowID, Timestamp),
filtering the same rows (numpy isin on the deleted pks) and writing Parquet (zstd) for
the kept rows, one file per field per output -- what compaction does minus etcd, the
visibility rule's scopes, stats/bloom logs and the commit. Also printed: the readers'
gain, counting the visible rows before vs after. Then the same compaction of the same
data on Spark local[2] (spark/jobs/compact.py's run, a fresh session: start-up stated
apart and counted in the total).

    python bench/compaction.py [--rows 1000000] [--segments 100] [--deleted 0.1] [--outputs 4] [--no-spark]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_disk_dir, private_etcd, timed, vector_schema, verdict  # noqa: E402


def spark_line(meta, store, settings, build, pol, kept: int, total: int, t_anchor: float) -> None:
    """The same compaction (same rows, deletes, policy) on Spark local[2], the way the
    compaction DAG's SparkSubmit runs it (spark/jobs/compact.py: plan on the driver, units
    on the executors, each with its own guarded commit); a fresh session, its start-up
    counted in the total and stated apart."""
    import time
    from pathlib import Path

    from seglake.visibility import visible_count

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark" / "jobs"))
    os.environ.update(settings.to_env())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    import compact as compact_job
    from pyspark.sql import SparkSession

    coll, _ = build("cmp_spark")
    os.sync()
    t = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").appName("bench-compaction")
             .config("spark.ui.enabled", "false").getOrCreate())
    t_start = time.perf_counter() - t
    try:
        t0 = time.perf_counter()
        summary = compact_job.run(spark, meta, store, "cmp_spark", "default", pol)
        t_job = time.perf_counter() - t0
    finally:
        spark.stop()
    t_total = time.perf_counter() - t
    c = summary.counts()
    after = visible_count(meta, store, coll.collection_id)
    assert after == kept and c["lost"] == 0 and c["rows_dropped"] == total - kept, (after, kept, c)
    print(f"spark (local[2]) compaction: {t_total:.2f} s total = session start-up {t_start:.2f} s + job "
          f"{t_job:.2f} s (+ stop); {c['segments_in']} segments -> {c['segments_out']}, {kept} rows kept")
    verdict("compaction_spark_1M", t_total, t_anchor, 3.0)
    verdict("compaction_spark_job_1M", t_job, t_anchor, 2.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--deleted", type=float, default=0.1)
    ap.add_argument("--outputs", type=int, default=4)
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark line")
    args = ap.parse_args()
    if min(args.rows, args.segments, args.outputs) < 1 or not 0 <= args.deleted < 1:
        ap.error("counts must be at least 1 and --deleted in [0, 1)")

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seglake.config import Settings
    from seglake.lifecycle import compaction
    from seglake.meta import Meta
    from seglake.meta.segments import FLUSHED, Segment
    from seglake.segfiles import log_ids_needed, write_segment_files
    from seglake.storage import layout, open_store
    from seglake.visibility import visible_count
    from seglake.wal.message import arrow_schema

    rng = np.random.default_rng(0)
    with private_etcd() as etcd, tempfile.TemporaryDirectory(dir=bench_disk_dir()) as d:
        settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": "bcmp", "store_uri": d})
        meta, store = Meta.from_settings(settings), open_store(settings)
        try:
            per = args.rows // args.segments
            base_ts = 1 << 40
            total = per * args.segments
            deleted = rng.choice(np.arange(1, total + 1, dtype=np.int64), int(total * args.deleted), replace=False)
            seed = int(rng.integers(1 << 30))

            def build(name: str):
                """The same collection (same rows, same deletes) under `name`."""
                r = np.random.default_rng(seed)
                coll = meta.catalog.create(name, vector_schema(8), partitions=["_default"], shards=1)
                part, chan = coll.partitions[0].partition_id, coll.vchannels[0]
                segs, files = [], []
                for i in range(args.segments):
                    pks = np.arange(i * per, (i + 1) * per, dtype=np.int64) + 1
                    n = len(pks)
                    vec = pa.FixedSizeListArray.from_arrays(pa.array(r.random(n * 8, dtype=np.float32)), 8)
                    table = pa.table({"pk": pks, "embedding": vec, "price": r.random(n, dtype=np.float32)},
                                     schema=arrow_schema(coll.schema))
                    sid, first = meta.ids.allocate(), meta.ids.allocate(log_ids_needed(coll.schema, False, n))
                    ts = base_ts + i * per + np.arange(n)
                    f = write_segment_files(store, first, coll.collection_id, part, sid, coll.schema, table,
                                            pks, ts)
                    segs.append(Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part,
                                        channel=chan, state=FLUSHED, num_rows=n, binlogs=f.binlogs,
                                        statslogs=f.statslogs, start_ts=f.ts_from, dml_ts=f.ts_to))
                    files.append({fid: layout.insert_log(coll.collection_id, part, sid, fid, logs[0].log_id)
                                  for fid, logs in f.binlogs.items()})
                sid, first = meta.ids.allocate(), meta.ids.allocate()
                f = write_segment_files(store, first, coll.collection_id, part, sid, coll.schema,
                                        arrow_schema(coll.schema).empty_table(), [], [],
                                        deletes=(deleted, base_ts + total + 1, 0))
                segs.append(Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part,
                                    channel=chan, state=FLUSHED, level="L0", deltalogs=f.deltalogs,
                                    dml_ts=base_ts + total + 1, delta_partitions={}))
                meta.segments.save(segs)
                return coll, files

            coll, files = build("cmp")
            out_dir = tempfile.mkdtemp(dir=d, prefix="anchor")

            def anchor():
                kept_total = 0
                groups = np.array_split(np.arange(args.segments), args.outputs)
                for g, idx in enumerate(groups):
                    cols = {fid: pa.concat_tables([pq.read_table(store.open_read(files[i][fid])) for i in idx])
                            for fid in files[0]}
                    mask = ~np.isin(cols[100].column(0).to_numpy(), deleted)
                    for fid, t in cols.items():
                        pq.write_table(t.filter(pa.array(mask)), os.path.join(out_dir, f"{g}_{fid}.parquet"),
                                       compression="zstd")
                    kept_total += int(mask.sum())
                return kept_total

            t_anchor, kept = timed(anchor)
            t_count_before, before = timed(lambda: visible_count(meta, store, coll.collection_id))
            pol = compaction.Policy(min_segment_rows=per + 1, target_rows=max(1, kept // args.outputs),
                                    delete_ratio=1.0, protection=0)
            t_compact, summary = timed(lambda: compaction.compact(meta, store, "cmp", pol))
            c = summary.counts()
            t_count_after, after = timed(lambda: visible_count(meta, store, coll.collection_id))
            assert before == after == kept, (before, after, kept)
            assert c["lost"] == 0 and c["rows_dropped"] == total - kept
            print(f"{total} rows in {args.segments} segments, {len(deleted)} deleted -> {c['segments_out']} "
                  f"segments ({len(summary.plan.units)} units), {kept} rows kept")
            print(f"compaction {t_compact:.2f} s; anchor (pyarrow read + filter + write) {t_anchor:.2f} s; "
                  f"visible count before {t_count_before:.3f} s, after {t_count_after:.3f} s")
            verdict("compaction_1M", t_compact, t_anchor, 1.5)
            verdict("compaction_readers_gain", t_count_after, t_count_before, 1.0)
            if not args.no_spark:
                spark_line(meta, store, settings, build, pol, kept, total, t_anchor)
        finally:
            meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
