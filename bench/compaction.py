"""Benchmark: compaction (seglake.lifecycle.compaction) of --rows rows in --segments
segments with --deleted of the pks deleted (collection-wide deletes in an L0 segment),
compacted into about --outputs segments (inline, one unit after another).

Anchor (same run): pyarrow alone reading the same binlogs (every field, RowID, Timestamp),
filtering the same rows (numpy isin on the deleted pks) and writing Parquet (zstd) for
the kept rows, one file per field per output -- what compaction does minus etcd, the
visibility rule's scopes, stats/bloom logs and the commit. Also printed: the readers'
gain, counting the visible rows before vs after.

    python bench/compaction.py [--rows 1000000] [--segments 100] [--deleted 0.1] [--outputs 4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import bench_disk_dir, private_etcd, timed, vector_schema, verdict  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--deleted", type=float, default=0.1)
    ap.add_argument("--outputs", type=int, default=4)
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
            coll = meta.catalog.create("cmp", vector_schema(8), partitions=["_default"], shards=1)
            part, chan = coll.partitions[0].partition_id, coll.vchannels[0]
            per = args.rows // args.segments
            base_ts = 1 << 40
            segs, files = [], []
            for i in range(args.segments):
                pks = np.arange(i * per, (i + 1) * per, dtype=np.int64) + 1
                n = len(pks)
                vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8)
                table = pa.table({"pk": pks, "embedding": vec, "price": rng.random(n, dtype=np.float32)},
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
            total = per * args.segments
            deleted = rng.choice(np.arange(1, total + 1, dtype=np.int64), int(total * args.deleted), replace=False)
            sid, first = meta.ids.allocate(), meta.ids.allocate()
            f = write_segment_files(store, first, coll.collection_id, part, sid, coll.schema,
                                    arrow_schema(coll.schema).empty_table(), [], [],
                                    deletes=(deleted, base_ts + total + 1, 0))
            segs.append(Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part,
                                channel=chan, state=FLUSHED, level="L0", deltalogs=f.deltalogs,
                                dml_ts=base_ts + total + 1, delta_partitions={}))
            meta.segments.save(segs)
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
        finally:
            meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
