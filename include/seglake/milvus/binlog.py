"""Milvus 2.3's binlog files (insert and delete logs), read: the event format of
milvus-io/milvus internal/storage (event_header.go, event_data.go, binlog_writer.go).

    int32 LE magic 0xFFFABC
    descriptor event: header (ts u64, type i8, event_length i32, next_position i32: 17 bytes),
        collection, partition, segment, field ids (i64 x4), start/end ts (u64 x2), payload type
        (i32), post-header lengths, extras (i32 length + JSON)
    data events: header (17 bytes), start/end ts (u64 x2), then a complete Parquet file
        with one column (the payload) up to the event's end

Delete logs of 2.3 hold JSON strings {"pk", "ts", "pkType"} (older: "pk,ts").
Only reads; every length is checked against the file (a damaged file raises BinlogError).
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass

from seglake.errors import SeglakeError

MAGIC = 0xFFFABC
HEADER = struct.Struct("<QbiI")            # timestamp, type code, event length, next position
DESC_FIX = struct.Struct("<qqqqQQi")       # collection, partition, segment, field, start, end, payload type
EVENT_FIX = struct.Struct("<QQ")           # start, end ts of a data event


class BinlogError(SeglakeError):
    """A binlog file is not a Milvus event file, or is damaged."""


@dataclass(frozen=True)
class Descriptor:
    collection_id: int
    partition_id: int
    segment_id: int
    field_id: int
    payload_type: int


def _events(raw: bytes, where: str):
    if len(raw) < 4 + HEADER.size + DESC_FIX.size or int.from_bytes(raw[:4], "little") != MAGIC:
        raise BinlogError(f"{where}: not a Milvus binlog (no magic 0xFFFABC)")
    pos = 4
    _, _, length, nxt = HEADER.unpack_from(raw, pos)
    c, p, s, f, _, _, ptype = DESC_FIX.unpack_from(raw, pos + HEADER.size)
    desc = Descriptor(c, p, s, f, ptype)
    if length <= 0 or nxt < pos + length or nxt > len(raw):
        raise BinlogError(f"{where}: damaged descriptor event")
    pos, payloads = nxt, []
    while pos < len(raw):
        if pos + HEADER.size + EVENT_FIX.size > len(raw):
            raise BinlogError(f"{where}: truncated event at byte {pos}")
        _, _, length, nxt = HEADER.unpack_from(raw, pos)
        end = pos + length
        if length < HEADER.size + EVENT_FIX.size or end > len(raw):
            raise BinlogError(f"{where}: damaged event at byte {pos}")
        payloads.append(raw[pos + HEADER.size + EVENT_FIX.size:end])
        pos = end if nxt in (0, end) or nxt < end else nxt
    return desc, payloads


def read_column(raw: bytes, where: str = "binlog") -> tuple[Descriptor, list]:
    """(descriptor, the payload column's values as Python objects). Float vectors
    (fixed-size binary of dim*4 bytes) come back as lists of floats (float32 values)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    desc, payloads = _events(raw, where)
    values: list = []
    for pl in payloads:
        try:
            col = pq.read_table(io.BytesIO(pl)).column(0)
        except (pa.ArrowException, OSError, IndexError) as e:
            raise BinlogError(f"{where}: a payload is not readable Parquet: {e}") from None
        if desc.payload_type == 101:   # FloatVector
            values.extend(np.frombuffer(b, dtype="<f4").tolist() for b in col.to_pylist())
        else:
            values.extend(col.to_pylist())
    return desc, values


def read_deletes(raw: bytes, where: str = "delta log") -> list[tuple[object, int]]:
    """[(pk, ts)] of a delete log."""
    _, values = read_column(raw, where)
    out = []
    for v in values:
        if isinstance(v, bytes):
            v = v.decode()
        try:
            if v.startswith("{"):
                d = json.loads(v)
                out.append((d["pk"], int(d["ts"])))
            else:
                pk, ts = v.rsplit(",", 1)
                out.append((int(pk) if pk.lstrip("-").isdigit() else pk, int(ts)))
        except (ValueError, KeyError, AttributeError):
            raise BinlogError(f"{where}: an entry is not a (pk, ts) pair: {str(v)[:80]!r}") from None
    return out
