"""Milvus's binlog event files, read (never written): enough to check a captured insert or
delete log by its content and to read a bundle's rows.

    int32 LE magic 0xFFFABC
    descriptor event: header (ts u64, type i8, event length i32, next position i32: 17 bytes),
        fix part: collection, partition, segment, field ids (i64), start/end ts (u64), payload
        data type (i32), then post-header lengths and extras (skipped via next position)
    events (insert 1 / delete 2 / ...): header (17 bytes), start/end ts (16 bytes), then the
        payload -- a complete Parquet file with one column -- up to the event's next position

(milvus-io/milvus internal/storage/event_header.go, event_data.go, binlog_reader.go.)
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass

MAGIC = 0xFFFABC
HEADER = struct.Struct("<QbiI")          # timestamp, type code, event length, next position
DESCRIPTOR = struct.Struct("<qqqqQQi")   # collection, partition, segment, field, start ts, end ts, payload type
EVENT_TS = 16
DATA_EVENTS = {1: "insert", 2: "delete"}


class BinlogError(ValueError):
    """Bytes that are not a Milvus binlog, or not the one its key names."""


@dataclass(frozen=True)
class Descriptor:
    collection_id: int
    partition_id: int
    segment_id: int
    field_id: int
    start_ts: int
    end_ts: int
    payload_type: int


class _Window(io.RawIOBase):
    """A read-only, seekable window [start, end) of a seekable file (a payload inside a binlog)."""

    def __init__(self, fh, start: int, end: int):
        self.fh, self.start, self.end, self.pos = fh, start, end, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, off: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.end - self.start}[whence]
        self.pos = max(0, base + off)
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, b) -> int:
        n = max(0, min(len(b), self.end - self.start - self.pos))
        self.fh.seek(self.start + self.pos)
        data = self.fh.read(n)
        b[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _exact(fh, n: int, what: str) -> bytes:
    b = fh.read(n)
    if len(b) != n:
        raise BinlogError(f"truncated {what}")
    return b


def payloads(fh, size: int) -> tuple[Descriptor, list[tuple[int, int, int]]]:
    """(descriptor, [(event type, payload start, payload end)]) of the binlog in `fh`
    (seekable, `size` bytes)."""
    fh.seek(0)
    if struct.unpack("<i", _exact(fh, 4, "magic"))[0] != MAGIC:
        raise BinlogError("does not start with Milvus's binlog magic 0xFFFABC")
    _, code, length, nxt = HEADER.unpack(_exact(fh, HEADER.size, "descriptor header"))
    if code != 0 or not 4 + HEADER.size + DESCRIPTOR.size <= nxt <= size or length != nxt - 4:
        raise BinlogError(f"bad descriptor event (type {code}, length {length}, next {nxt}, file {size} bytes)")
    desc = Descriptor(*DESCRIPTOR.unpack(_exact(fh, DESCRIPTOR.size, "descriptor")))
    events, pos = [], nxt
    while pos < size:
        fh.seek(pos)
        _, code, length, nxt = HEADER.unpack(_exact(fh, HEADER.size, "event header"))
        if code not in DATA_EVENTS or nxt != pos + length or not pos + HEADER.size + EVENT_TS <= nxt <= size:
            raise BinlogError(f"bad event at offset {pos} (type {code}, length {length}, next {nxt})")
        events.append((code, pos + HEADER.size + EVENT_TS, nxt))
        pos = nxt
    return desc, events


# an insert log's payload column, by the field's schemapb.DataType: the Arrow type family
# Milvus 2.3's payload writer gives it (internal/storage/payload_writer.go); vectors: a fixed
# width of dim * 4 bytes (FloatVector) or dim / 8 (BinaryVector). Strings and bytes are one
# family (whether a string column carries Parquet's UTF8 annotation is the writer's choice)
_FAMILY = {1: "bool", 2: "int", 3: "int", 4: "int", 5: "int", 10: "float", 11: "float", 20: "bytes", 21: "bytes",
           22: "bytes", 23: "bytes", 100: "vector", 101: "vector"}


def _family(t) -> str:
    import pyarrow.types as at

    if at.is_boolean(t):
        return "bool"
    if at.is_integer(t):
        return "int"
    if at.is_floating(t):
        return "float"
    if at.is_fixed_size_binary(t):
        return "vector"
    if at.is_string(t) or at.is_large_string(t) or at.is_binary(t) or at.is_large_binary(t):
        return "bytes"
    return str(t)


def field_types(schema_fields: list) -> dict[int, dict]:
    """{field id: {"data_type", "dim"?}} of a captured schema's user fields and of the system
    fields 0 (row ids) and 1 (timestamps), both Int64: what check() compares an insert log with."""
    out = {0: {"data_type": 5}, 1: {"data_type": 5}}
    for f in schema_fields:
        t = {"data_type": f["data_type"]}
        if f["data_type"] in (100, 101):
            d = str((f.get("type_params") or {}).get("dim", ""))
            if d.isdigit():
                t["dim"] = int(d)
        out[f["field_id"]] = t
    return out


def _vector_width(data_type: int, dim: int | None) -> int | None:
    if not isinstance(dim, int) or dim < 1:
        return None
    return dim * 4 if data_type == 101 else (dim // 8 if data_type == 100 else None)


def check(fh, size: int, *, kind: str, collection_id: int, partition_id: int, segment_id: int,
          field_id: int | None, entries: int, buf: bytes | None = None, data_type: int | None = None,
          dim: int | None = None) -> list[str]:
    """What is wrong with a captured log against what its key and its segment's records
    give it: the descriptor's ids, the events' kind, the rows of the payloads and, for an
    insert log whose field's `data_type` (and vector `dim`) is given, the descriptor's
    payload type and every payload column's type (a log of another field's or another
    collection's values under this key, its ids and rows rewritten, is not this field's).
    [] if nothing. `buf`: the log's bytes when in memory (`fh` reads the same bytes): the
    Parquet payloads are read from it in place, not through Python file calls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = []
    try:
        desc, events = payloads(fh, size)
        rows = 0
        for code, start, end in events:
            src = (pa.BufferReader(pa.py_buffer(memoryview(buf)[start:end])) if buf is not None
                   else _Window(fh, start, end))
            pf = pq.ParquetFile(src)
            rows += pf.metadata.num_rows
            if data_type is not None:
                columns.append(pf.schema_arrow.field(0).type if pf.schema_arrow.names else None)
    except BinlogError as e:
        return [f"not a Milvus {kind} log: {e}"]
    except Exception as e:   # noqa: BLE001 - an unreadable payload is a finding
        return [f"a payload of this {kind} log is not readable Parquet: {e}"]
    out = []
    if kind == "insert" and data_type is not None:
        if desc.payload_type != data_type:
            out.append(f"its descriptor's payload type is {desc.payload_type}; field {field_id} is of data type "
                       f"{data_type}")
        width = _vector_width(data_type, dim)
        for t in columns:
            fam = _family(t) if t is not None else "none"
            if fam != _FAMILY.get(data_type, fam) or (width is not None and t.byte_width != width):
                out.append(f"a payload column is {t}; field {field_id} of data type {data_type}"
                           + (f" (dim {dim}: {width}-byte values)" if width is not None else "") + " is not")
                break
    want = (collection_id, partition_id, segment_id) + (() if field_id is None else (field_id,))
    got = (desc.collection_id, desc.partition_id, desc.segment_id) + (() if field_id is None else (desc.field_id,))
    if kind == "delete":
        # Milvus 2.3's data node flushes a delete buffered for a segment compacted meanwhile
        # into the delta log of the segment it became, its descriptor naming the old one (seen
        # on 2.3.5 with auto-compaction on); Milvus applies it to the segment it is listed
        # under, as a capture's readers do: collection and partition must still be the key's
        got, want = got[:2], want[:2]
    if got != want:
        out.append(f"its descriptor names collection/partition{'' if kind == 'delete' else '/segment'}"
                   f"{'/field' if field_id is not None else ''} "
                   f"{got}; its key names {want}")
    code = 1 if kind == "insert" else 2
    if any(c != code for c, _, _ in events):
        out.append(f"holds events of types {sorted({c for c, _, _ in events})}; a {kind} log holds type {code}")
    if rows != entries:
        out.append(f"holds {rows} rows; the segment's records give it {entries}")
    return out


def column(fh, size: int) -> list:
    """Every value of a log (insert: the field's values; delete: the delete records)."""
    import pyarrow.parquet as pq

    _, events = payloads(fh, size)
    out = []
    for _, start, end in events:
        out.extend(pq.ParquetFile(_Window(fh, start, end)).read().column(0).to_pylist())
    return out


def deletes(fh, size: int) -> list[tuple[object, int]]:
    """(pk, ts) of every delete in a delete log (2.3: JSON strings {"pk", "ts", "pkType"};
    older: "pk,ts")."""
    return [delete_record(v) for v in column(fh, size)]


def delete_record(v) -> tuple[object, int]:
    """(pk, ts) of one delete record of a delete log (a JSON string or "pk,ts")."""
    v = v.decode() if isinstance(v, bytes) else v
    if v.startswith("{"):
        d = json.loads(v)
        return d["pk"], int(d["ts"])
    pk, ts = v.rsplit(",", 1)
    return (int(pk) if pk.lstrip("-").isdigit() else pk), int(ts)
