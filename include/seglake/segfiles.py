"""A segment's files in the row model (issue 17): write them, read their stats back.

Formats (every Parquet file zstd-compressed, written durable and atomic through the
store: `put_writer` streams into a temp object that appears whole or not at all):

- insert binlogs `insert_log/{c}/{p}/{s}/{field}/{log}`: one Parquet file per field, one
  column named by the field (the collection's Arrow type), plus field 0 = column
  `RowID` (int64) and field 1 = column `Timestamp` (int64, hybrid TSO ts
  `physical_ms << 18 | logical`). Binlog(log_id, size, entries=rows, ts_from=min row
  ts, ts_to=max row ts) for each.
- delta log `delta_log/{c}/{p}/{s}/{log}`: columns `pk` int64, `ts` int64, `partition`
  int64 (0 = the delete applies to every partition). Binlog(log_id, size, entries=
  deletes, ts_from/ts_to = min/max delete ts). What a delete entry means is
  seglake.visibility's business (deletes are collection-wide, Milvus 2.4 "L0" style).
- stats log `stats_log/{c}/{p}/{s}/{pk field}/{log}`: JSON, Milvus-like:
  {"fieldID": pk field id, "pkType": 5, "minPk", "maxPk", "rows",
   "bf": {"m", "k", "hash", "b"}}  (seglake.bloom: a bloom filter of the segment's pks).
  Binlog(log_id, size, entries=rows, ts_from, ts_to) like the insert binlogs.

Log ids: the caller allocates `log_ids_needed(schema, has_deletes, rows)` ids and passes
the first; the files take them in this order (nothing is allocated here):
    rows > 0:  field 0, field 1, user fields in schema order, stats[, delta]
    rows == 0 (an "L0" segment: deletes only): delta
A 0-row segment without deletes writes nothing.

Legacy files (written before the row model) are still read: a stats log
{"field_id", "min", "max", "rows"} is read as min/max only (no bloom: `may_contain` =
inside the range); legacy binlogs and delta logs: see seglake.visibility.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from seglake.meta import codec
from seglake.bloom import BloomFilter
from seglake.errors import ValidationError
from seglake.meta.segments import Binlog
from seglake.storage import layout

ROW_ID_FIELD, TS_FIELD = 0, 1
ROW_ID, TIMESTAMP = "RowID", "Timestamp"
PK_TYPE_INT64 = 5              # Milvus's schemapb.DataType.Int64
DELTA_SCHEMA = pa.schema([pa.field("pk", pa.int64(), nullable=False), pa.field("ts", pa.int64(), nullable=False),
                          pa.field("partition", pa.int64(), nullable=False)])
WRITE_THREADS = 4


@dataclass(frozen=True)
class SegmentFiles:
    """What write_segment_files wrote: the lists a Segment record carries, and totals."""
    binlogs: dict = field(default_factory=dict)     # field_id -> (Binlog,)
    deltalogs: tuple = ()
    statslogs: dict = field(default_factory=dict)   # pk field id -> (Binlog,)
    nbytes: int = 0
    log_ids_used: int = 0
    rows: int = 0
    ts_from: int = 0                                 # min row ts (0 without rows)
    ts_to: int = 0                                   # max row ts


def log_ids_needed(schema, has_deletes: bool, rows: int = 1) -> int:
    """How many consecutive log ids write_segment_files uses (see the module doc)."""
    if rows == 0:
        return 1 if has_deletes else 0
    return len(schema.fields) + 3 + (1 if has_deletes else 0)


def put_parquet(store, key: str, table: pa.Table):
    """One Parquet file, zstd, with a CRC-32 of every page (visibility.read_parquet checks
    them on every read: a bit flipped in place is refused, never served as other rows or
    deletes), durable and atomic (the store's put_writer). ObjectInfo."""
    import pyarrow.parquet as pq

    return store.put_writer(key, lambda f: pq.write_table(table, f, compression="zstd", write_page_checksum=True))


def _int64(name: str, values, n: int | None = None) -> np.ndarray:
    a = np.asarray(values)
    if a.ndim != 1 or (len(a) and not np.issubdtype(a.dtype, np.integer)):
        raise ValidationError(f"{name} must be a 1-d integer array, got {a.dtype} of shape {a.shape}")
    if len(a) and a.dtype == np.uint64 and int(a.max()) > np.iinfo(np.int64).max:
        raise ValidationError(f"{name}: value above int64")
    a = a.astype(np.int64, copy=False)
    if n is not None and len(a) != n:
        raise ValidationError(f"{name} has {len(a)} values, expected {n}")
    return a


def _deletes(deletes) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    if deletes is None:
        return None
    pks, ts, parts = deletes
    pks = _int64("delete pks", pks)
    if not len(pks):
        return None
    ts = _int64("delete ts", np.broadcast_to(np.asarray(ts), pks.shape) if np.ndim(ts) == 0 else ts, len(pks))
    parts = _int64("delete partitions",
                   np.broadcast_to(np.asarray(parts), pks.shape) if np.ndim(parts) == 0 else parts, len(pks))
    if (ts < 0).any() or (parts < 0).any():
        raise ValidationError("delete ts and partitions must be non-negative")
    return pks, ts, parts


def write_delta_log(store, log_id: int, c: int, p: int, s: int, pks, ts, partitions) -> Binlog:
    """The delta log `delta_log/{c}/{p}/{s}/{log_id}`: columns pk, ts, partition (int64;
    partition 0 = every partition). `ts` and `partitions` may be scalars."""
    d = _deletes((pks, ts, partitions))
    if d is None:
        raise ValidationError("a delta log needs at least one delete")
    pks, ts, parts = d
    table = pa.Table.from_arrays([pa.array(pks), pa.array(ts), pa.array(parts)], schema=DELTA_SCHEMA)
    info = put_parquet(store, layout.delta_log(c, p, s, log_id), table)
    return Binlog(log_id, info.size, len(pks), int(ts.min()), int(ts.max()))


def stats_json(pk_field_id: int, pks: np.ndarray, bloom_fp: float = 0.001) -> dict:
    return {"fieldID": pk_field_id, "pkType": PK_TYPE_INT64, "minPk": int(pks.min()), "maxPk": int(pks.max()),
            "rows": int(len(pks)), "bf": BloomFilter.build(pks, bloom_fp).to_json()}


def write_segment_files(store, first_log_id: int, collection_id: int, partition_id: int, segment_id: int,
                        schema, table, row_ids, ts, deletes=None, bloom_fp: float = 0.001) -> SegmentFiles:
    """Write one segment's files (module doc: formats and log id order) and return what
    its record must list. `schema`: the catalog Schema; `table`: a pyarrow Table (or
    RecordBatch) with a column per schema field in the collection's Arrow types;
    `row_ids`, `ts`: int64, one per row; `deletes`: None or (pks, ts, partitions) arrays
    (ts/partitions may be scalars) for the delta log. Field files are written in
    parallel (pyarrow and the store's fsync release the GIL)."""
    c, p, s = collection_id, partition_id, segment_id
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    n = table.num_rows
    names = [f.name for f in schema.fields]
    missing = [x for x in names if x not in table.column_names]
    if missing:
        raise ValidationError(f"segment {s}: table lacks field column(s) {', '.join(missing)}")
    row_ids = _int64("row_ids", row_ids, n)
    ts = _int64("ts", ts, n)
    if n and (ts < 0).any():
        raise ValidationError(f"segment {s}: row timestamps must be non-negative")
    dels = _deletes(deletes)
    pk = schema.primary
    log = first_log_id
    if n == 0:
        if dels is None:
            return SegmentFiles()
        b = write_delta_log(store, log, c, p, s, *dels)
        return SegmentFiles(deltalogs=(b,), nbytes=b.size, log_ids_used=1)

    pk_col = table.column(pk.name)
    if pk_col.null_count:
        raise ValidationError(f"segment {s}: primary key {pk.name!r} has nulls")
    pks = pk_col.to_numpy()
    ts_from, ts_to = int(ts.min()), int(ts.max())
    jobs = [(ROW_ID_FIELD, log, pa.table({ROW_ID: pa.array(row_ids)})),
            (TS_FIELD, log + 1, pa.table({TIMESTAMP: pa.array(ts)}))]
    for i, f in enumerate(schema.fields):
        jobs.append((f.field_id, log + 2 + i, pa.table({f.name: table.column(f.name)})))
    stats_id = log + 2 + len(schema.fields)

    def write(job):
        fid, log_id, t = job
        return fid, log_id, put_parquet(store, layout.insert_log(c, p, s, fid, log_id), t).size

    def write_stats():
        data = json.dumps(stats_json(pk.field_id, pks, bloom_fp)).encode()
        return store.put(layout.stats_log(c, p, s, pk.field_id, stats_id), data).size

    binlogs, nbytes = {}, 0
    with ThreadPoolExecutor(min(WRITE_THREADS, len(jobs) + 2)) as pool:
        stats_f = pool.submit(write_stats)
        delta_f = None if dels is None else pool.submit(write_delta_log, store, stats_id + 1, c, p, s, *dels)
        for fid, log_id, size in pool.map(write, jobs):
            binlogs[fid] = (Binlog(log_id, size, n, ts_from, ts_to),)
            nbytes += size
        ssize = stats_f.result()
        deltalogs = () if delta_f is None else (delta_f.result(),)
    statslogs = {pk.field_id: (Binlog(stats_id, ssize, n, ts_from, ts_to),)}
    nbytes += ssize + sum(b.size for b in deltalogs)
    return SegmentFiles(binlogs=binlogs, deltalogs=deltalogs, statslogs=statslogs, nbytes=nbytes,
                        log_ids_used=log_ids_needed(schema, dels is not None, n), rows=n,
                        ts_from=ts_from, ts_to=ts_to)


# -- stats ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PkStats:
    """A segment's primary-key statistics: range, rows, bloom filter (None: legacy stats,
    or several logs whose filters do not merge)."""
    min: int
    max: int
    rows: int
    bloom: BloomFilter | None = None

    def may_contain(self, pks) -> np.ndarray:
        """bool per pk: False = certainly not in the segment."""
        pks = np.asarray(pks, dtype=np.int64)
        out = (pks >= self.min) & (pks <= self.max)
        if self.bloom is not None and out.any():
            idx = np.nonzero(out)[0]
            out[idx] = self.bloom.may_contain(pks[idx])
        return out

    @classmethod
    def from_json(cls, d: dict) -> "PkStats":
        if "minPk" in d:
            bf = d.get("bf")
            return cls(int(d["minPk"]), int(d["maxPk"]), int(d.get("rows", 0)),
                       None if not bf else BloomFilter.from_json(bf))
        if "min" in d:   # legacy: {"field_id", "min", "max", "rows"}
            return cls(int(d["min"]), int(d["max"]), int(d.get("rows", 0)))
        raise ValidationError(f"not a primary key stats log: keys {sorted(d)}")


def read_stats(store, seg) -> PkStats | None:
    """The pk stats of segment record `seg` (None when it has no stats log, e.g. an L0
    segment). Several logs merge: the union of their ranges, rows summed, blooms ORed when
    they have one shape (else None: only the range answers)."""
    parts = []
    for field_id, logs in sorted(seg.statslogs.items()):
        for b in logs:
            key = layout.stats_log(seg.collection_id, seg.partition_id, seg.segment_id, field_id, b.log_id)
            parts.append(PkStats.from_json(codec.loads(store.get(key), key)))
    if not parts:
        return None
    bloom = parts[0].bloom
    for x in parts[1:]:
        bloom = None if bloom is None or x.bloom is None or (x.bloom.m, x.bloom.k) != (bloom.m, bloom.k) \
            else bloom.union(x.bloom)
    return PkStats(min(x.min for x in parts), max(x.max for x in parts), sum(x.rows for x in parts), bloom)
