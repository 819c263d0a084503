"""Benchmark: the visibility function (seglake.visibility.visible_rows) on ~1M rows and
100k deletes.

Writes --rows rows in --segments segments through seglake.segfiles (fields 0/1, pk,
an 8-dim vector, a float), then --deletes deletes: half collection-wide in an L0
segment, half in the data segments' delta logs (a tenth of those partition-scoped), at
timestamps that hide about half of the rows they name. Times (median of --repeat):
- visible_rows (list the segments in etcd, read pk/RowID/Timestamp and every delta log,
  apply the rule, filter);
- apply_deletes alone on the arrays (the rule, vectorised);
- the anchor: pyarrow reading the same pk, RowID and Timestamp Parquet files, nothing else.

    python bench/visibility.py [--rows 1000000] [--segments 10] [--deletes 100000] [--repeat 3]
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
    ap.add_argument("--segments", type=int, default=10)
    ap.add_argument("--deletes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if min(args.rows, args.segments, args.deletes, args.repeat) < 1:
        ap.error("every count must be at least 1")

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from seglake.config import Settings
    from seglake.meta import Meta
    from seglake.meta.segments import FLUSHED, Segment
    from seglake.segfiles import ROW_ID_FIELD, TS_FIELD, log_ids_needed, write_segment_files
    from seglake.storage import layout, open_store
    from seglake.visibility import PARTITION_ID, PK, TIMESTAMP, apply_deletes, visible_rows
    from seglake.wal.message import arrow_schema

    rng = np.random.default_rng(0)
    with private_etcd() as etcd, tempfile.TemporaryDirectory(dir=bench_disk_dir()) as d:
        settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": "bvis", "store_uri": d})
        meta, store = Meta.from_settings(settings), open_store(settings)
        try:
            coll = meta.catalog.create("vis", vector_schema(8), partitions=["_default", "p2"], shards=2)
            parts = [p.partition_id for p in coll.partitions]
            per = args.rows // args.segments
            pks_all = rng.permutation(args.rows).astype(np.int64) + 1
            base_ts = 1 << 40
            half = args.deletes // 2
            segs, keys = [], []
            for i in range(args.segments):
                pks = pks_all[i * per:(i + 1) * per]
                n = len(pks)
                ts = base_ts + rng.integers(0, 1000, n)
                vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8)
                table = pa.table({"pk": pks, "embedding": vec, "price": rng.random(n, dtype=np.float32)},
                                 schema=arrow_schema(coll.schema))
                k = (args.deletes - half) // args.segments
                dels = (rng.choice(pks_all, k), base_ts + rng.integers(0, 1000, k),
                        np.where(rng.random(k) < 0.1, rng.choice(parts, k), 0))
                sid, first = meta.ids.allocate(), meta.ids.allocate(log_ids_needed(coll.schema, True, n))
                part = parts[i % 2]
                f = write_segment_files(store, first, coll.collection_id, part, sid, coll.schema, table,
                                        np.arange(i * per, i * per + n), ts, deletes=dels)
                segs.append(Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part,
                                    channel=coll.vchannels[i % 2], state=FLUSHED, num_rows=n, binlogs=f.binlogs,
                                    deltalogs=f.deltalogs, statslogs=f.statslogs, start_ts=f.ts_from,
                                    dml_ts=f.ts_to))
                keys += [layout.insert_log(coll.collection_id, part, sid, fid, f.binlogs[fid][0].log_id)
                         for fid in (100, ROW_ID_FIELD, TS_FIELD)]
            sid, first = meta.ids.allocate(), meta.ids.allocate()
            f = write_segment_files(store, first, coll.collection_id, parts[0], sid, coll.schema,
                                    arrow_schema(coll.schema).empty_table(), [], [],
                                    deletes=(rng.choice(pks_all, half), base_ts + rng.integers(0, 1000, half), 0))
            segs.append(Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=parts[0],
                                channel=coll.vchannels[0], state=FLUSHED, level="L0", deltalogs=f.deltalogs))
            meta.segments.save(segs)

            def anchor():
                return sum(pq.read_table(store.open_read(k)).num_rows for k in keys)

            t_anchor, _ = timed(anchor, args.repeat)
            t_vis, out = timed(lambda: visible_rows(meta, store, coll.collection_id), args.repeat)
            from seglake.visibility import live_segments, read_deletes, read_rows
            rows = read_rows(store, coll.schema, live_segments(meta, coll.collection_id))
            parts = {p.partition_id: p.name for p in coll.partitions}
            dl = read_deletes(store, live_segments(meta, coll.collection_id), parts)
            t_rule, mask = timed(lambda: apply_deletes(
                rows.column(PK).to_numpy(), rows.column(TIMESTAMP).to_numpy(), rows.column(PARTITION_ID).to_numpy(),
                dl.pks, dl.ts, dl.partitions), args.repeat)
            assert out.num_rows == int(mask.sum()) and 0 < out.num_rows < rows.num_rows
            print(f"{rows.num_rows} rows in {args.segments} segments, {len(dl)} deletes: visible {out.num_rows}")
            print(f"visible_rows {t_vis:.3f} s; apply_deletes alone {t_rule:.3f} s; "
                  f"anchor (pyarrow read of the pk/RowID/Timestamp files) {t_anchor:.3f} s  [medians of {args.repeat}]")
            verdict("visible_rows_1m", t_vis, t_anchor, 4.0)   # reading + the rule + the filter vs the bare read
        finally:
            meta.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
