"""TEMPORARY minimal segment file writer (replaced by the row-model branch)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from seglake.meta.segments import Binlog
from seglake.storage import layout

ROW_ID_FIELD, TS_FIELD = 0, 1


@dataclass
class SegmentFiles:
    binlogs: dict = field(default_factory=dict)
    deltalogs: tuple = ()
    statslogs: dict = field(default_factory=dict)
    nbytes: int = 0
    log_ids_used: int = 0


def log_ids_needed(schema, has_deletes: bool) -> int:
    return len(schema.fields) + 2 + 1 + (1 if has_deletes else 0)


def _put(store, key, table):
    import pyarrow.parquet as pq
    return store.put_writer(key, lambda f: pq.write_table(table, f, compression="zstd"))


def write_delta_log(store, log_id, c, p, s, pks, ts, partitions) -> Binlog:
    info = _put(store, layout.delta_log(c, p, s, log_id),
                pa.table({"pk": pa.array(pks, pa.int64()), "ts": pa.array(ts, pa.int64()),
                          "partition": pa.array(partitions, pa.int64())}))
    return Binlog(log_id, info.size, len(pks), int(np.min(ts)), int(np.max(ts)))


def write_segment_files(store, first_log_id, c, p, s, schema, table, row_ids, ts, deletes=None,
                        bloom_fp=0.001) -> SegmentFiles:
    out = SegmentFiles()
    i = first_log_id
    if table is not None and table.num_rows:
        cols = [(ROW_ID_FIELD, "RowID", pa.array(row_ids, pa.int64())), (TS_FIELD, "Timestamp", pa.array(ts, pa.int64()))]
        cols += [(f.field_id, f.name, table.column(f.name)) for f in schema.fields]
        lo, hi = int(np.min(ts)), int(np.max(ts))
        jobs = [(fid, i + k, name, col) for k, (fid, name, col) in enumerate(cols)]
        i += len(cols)

        def one(j):
            fid, lid, name, col = j
            return fid, lid, _put(store, layout.insert_log(c, p, s, fid, lid), pa.table({name: col}))
        with ThreadPoolExecutor(4) as pool:
            for fid, lid, info in pool.map(one, jobs):
                out.binlogs[fid] = (Binlog(lid, info.size, table.num_rows, lo, hi),)
                out.nbytes += info.size
        pks = table.column(schema.primary.name).to_numpy()
        stats = json.dumps({"fieldID": schema.primary.field_id, "minPk": int(pks.min()), "maxPk": int(pks.max()),
                            "rows": len(pks)}).encode()
        info = store.put(layout.stats_log(c, p, s, schema.primary.field_id, i), stats)
        out.statslogs[schema.primary.field_id] = (Binlog(i, info.size, len(pks), lo, hi),)
        out.nbytes += info.size
        i += 1
    if deletes is not None:
        b = write_delta_log(store, i, c, p, s, *deletes)
        out.deltalogs = (b,)
        out.nbytes += b.size
        i += 1
    out.log_ids_used = i - first_log_id
    return out
