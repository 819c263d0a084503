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


def check(fh, size: int, *, kind: str, collection_id: int, partition_id: int, segment_id: int,
          field_id: int | None, entries: int, buf: bytes | None = None) -> list[str]:
    """What is wrong with a captured log against what its key and its segment's records
    give it: the descriptor's ids, the events' kind, the rows of the payloads. [] if nothing.
    `buf`: the log's bytes when in memory (`fh` reads the same bytes): the Parquet payloads
    are read from it in place, not through Python file calls."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        desc, events = payloads(fh, size)
        rows = 0
        for code, start, end in events:
            src = (pa.BufferReader(pa.py_buffer(memoryview(buf)[start:end])) if buf is not None
                   else _Window(fh, start, end))
            rows += pq.ParquetFile(src).metadata.num_rows
    except BinlogError as e:
        return [f"not a Milvus {kind} log: {e}"]
    except Exception as e:   # noqa: BLE001 - an unreadable payload is a finding
        return [f"a payload of this {kind} log is not readable Parquet: {e}"]
    out = []
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
