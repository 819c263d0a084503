"""Milvus's binlog event files, written: the layout seglake.milvus.binlog reads, as Milvus
2.3 writes it (milvus-io/milvus internal/storage/event_writer.go, event_data.go), so that
Milvus's bulk insert in backup mode imports them like its own flushed segments.

    int32 LE magic 0xFFFABC
    descriptor event: header (ts u64, type 0, event length i32, next position i32), fix part
        (collection, partition, segment, field ids i64; start/end ts u64; payload type i32),
        post-header lengths (8 bytes: 52 for the descriptor, 16 for each other event type),
        extras length i32 + extras JSON {"original_size": "<bytes>"}
    one event (insert 1 / delete 2): header, start/end ts (u64), a Parquet file of one
        non-null column `val` (zstd; what Milvus writes: int64, float, fixed_size_binary[dim*4]
        for a float vector, a JSON string per delete for a 2.3 delete log)

Only the types a seglake collection holds are written (VECTOR and scalar types below); the
caller checks the values (no nulls, finite) before anything is written.
"""

from __future__ import annotations

import io
import json
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seglake.milvus.binlog import DESCRIPTOR, HEADER, MAGIC

INSERT_EVENT, DELETE_EVENT = 1, 2
POST_HEADER_LENGTHS = bytes([DESCRIPTOR.size] + [16] * 7)   # descriptor + 7 event types (2.3)
STRING = 20                    # schemapb.DataType.String: a delete log's payload
PK_INT64 = 5
# schemapb.DataType -> the Arrow type of its payload column (FloatVector: per dim, below)
ARROW = {1: pa.bool_(), 2: pa.int8(), 3: pa.int16(), 4: pa.int32(), 5: pa.int64(), 10: pa.float32(),
         11: pa.float64(), 21: pa.string()}
FLOAT_VECTOR = 101


def _parquet(values: pa.Array) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({"val": values}, schema=pa.schema([pa.field("val", values.type, nullable=False)])),
                   sink, compression="zstd")
    return sink.getvalue()


def _file(ids: tuple[int, int, int, int], ts_from: int, ts_to: int, payload_type: int, code: int,
          payload: bytes, original_size: int) -> bytes:
    extras = json.dumps({"original_size": str(original_size)}, separators=(",", ":")).encode()
    fix = DESCRIPTOR.pack(*ids, ts_from, ts_to, payload_type) + POST_HEADER_LENGTHS + struct.pack("<i", len(extras)) + extras
    length = HEADER.size + len(fix)
    out = bytearray(struct.pack("<i", MAGIC))
    out += HEADER.pack(ts_to, 0, length, 4 + length) + fix
    body = struct.pack("<QQ", ts_from, ts_to) + payload
    n = HEADER.size + len(body)
    out += HEADER.pack(ts_to, code, n, len(out) + n) + body
    return bytes(out)


def payload_array(values, data_type: int, dim: int | None = None) -> pa.Array:
    """`values` (an Arrow array or chunked array of the seglake column, or a list) as the
    payload column Milvus holds for `data_type`."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if data_type == FLOAT_VECTOR:
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"a float vector needs its dim, got {dim!r}")
        if isinstance(values, pa.Array):
            flat = values.flatten().to_numpy(zero_copy_only=False) if len(values) else np.zeros(0)
        else:
            flat = np.asarray(values, dtype="<f4").reshape(-1)
        flat = np.ascontiguousarray(flat, dtype="<f4")
        if flat.size != len(values) * dim:
            raise ValueError(f"float vectors of dim {dim}: {flat.size} floats for {len(values)} rows")
        return pa.FixedSizeBinaryArray.from_buffers(pa.binary(dim * 4), len(values), [None, pa.py_buffer(flat.tobytes())])
    typ = ARROW.get(data_type)
    if typ is None:
        raise ValueError(f"data type {data_type} is not one seglake writes as a Milvus binlog")
    arr = values if isinstance(values, pa.Array) else pa.array(values)
    return arr.cast(typ) if arr.type != typ else arr


def insert_log(collection_id: int, partition_id: int, segment_id: int, field_id: int, data_type: int, values,
               ts_from: int, ts_to: int, dim: int | None = None) -> bytes:
    """One insert binlog of a field (0 = row ids, 1 = timestamps: Int64)."""
    arr = payload_array(values, data_type, dim)
    if arr.null_count:
        raise ValueError(f"field {field_id}: {arr.null_count} null values (a Milvus 2.3 binlog holds none)")
    return _file((collection_id, partition_id, segment_id, field_id), ts_from, ts_to, data_type, INSERT_EVENT,
                 _parquet(arr), arr.nbytes)


def delete_log(collection_id: int, partition_id: int, segment_id: int, pks, tss) -> bytes:
    """One 2.3 delete log: (pk, ts) pairs as JSON strings {"pk", "ts", "pkType": 5}."""
    pks, tss = [int(p) for p in pks], [int(t) for t in tss]
    if len(pks) != len(tss) or not pks:
        raise ValueError(f"a delete log needs as many pks as timestamps, at least one ({len(pks)}, {len(tss)})")
    recs = pa.array([f'{{"pk":{p},"ts":{t},"pkType":{PK_INT64}}}' for p, t in zip(pks, tss)], pa.string())
    return _file((collection_id, partition_id, segment_id, -1), min(tss), max(tss), STRING, DELETE_EVENT,
                 _parquet(recs), sum(len(r) for r in recs.to_pylist()))


def without_deletes(raw: bytes, drop: set) -> bytes | None:
    """The delete log `raw` less its records of the pks in `drop`: the same descriptor ids and
    payload type, the kept records' strings unchanged; None when no record is left."""
    from seglake.milvus import binlog

    desc, _ = binlog.payloads(io.BytesIO(raw), len(raw))
    keep, tss = [], []
    for v in binlog.column(io.BytesIO(raw), len(raw)):
        v = v.decode() if isinstance(v, bytes) else v
        pk, ts = binlog.delete_record(v)
        if pk not in drop:
            keep.append(v)
            tss.append(ts)
    if not keep:
        return None
    return _file((desc.collection_id, desc.partition_id, desc.segment_id, desc.field_id), min(tss), max(tss),
                 desc.payload_type, DELETE_EVENT, _parquet(pa.array(keep, pa.string())), sum(len(v) for v in keep))


def without_rows(raw: bytes, keep: list[bool]) -> bytes:
    """The insert log `raw` with only the rows `keep` marks (one flag per row, in order): the
    same descriptor ids, timestamps and payload type, its events' payloads as one."""
    from seglake.milvus import binlog

    desc, events = binlog.payloads(io.BytesIO(raw), len(raw))
    t = pa.concat_tables([pq.read_table(io.BytesIO(raw[a:b])) for _, a, b in events])
    if t.num_rows != len(keep) or not any(keep):
        raise ValueError(f"an insert log of {t.num_rows} rows, {len(keep)} row flags, {sum(keep)} kept")
    t = t.filter(pa.array(keep))
    sink = io.BytesIO()
    pq.write_table(t, sink, compression="zstd")
    return _file((desc.collection_id, desc.partition_id, desc.segment_id, desc.field_id), desc.start_ts, desc.end_ts,
                 desc.payload_type, INSERT_EVENT, sink.getvalue(), t.nbytes)
