"""seglake.milvus.binlog: Milvus's binlog event files, built here byte by byte in the layout
Milvus 2.3 writes (magic, descriptor event, insert/delete events with Parquet payloads), and
the checks a capture and verify make of them."""

from __future__ import annotations

import io
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.milvus import binlog


def _parquet(values, typ) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"val": pa.array(values, typ)}), buf)
    return buf.getvalue()


def make(ids=(1, 2, 3, 100), events=((1, [1, 2, 3]),), typ=pa.int64(), magic=binlog.MAGIC) -> bytes:
    """A binlog: descriptor (collection, partition, segment, field ids) + events (type, values)."""
    extras = b'{"original_size":"24"}'
    fix = binlog.DESCRIPTOR.pack(*ids, 10, 20, 5) + bytes(12) + struct.pack("<i", len(extras)) + extras
    length = binlog.HEADER.size + len(fix)
    out = struct.pack("<i", magic) + binlog.HEADER.pack(10, 0, length, 4 + length) + fix
    for code, values in events:
        payload = struct.pack("<QQ", 10, 20) + _parquet(values, typ)
        n = binlog.HEADER.size + len(payload)
        out += binlog.HEADER.pack(10, code, n, len(out) + n) + payload
    return out


def check(raw: bytes, **kw) -> list[str]:
    want = {"kind": "insert", "collection_id": 1, "partition_id": 2, "segment_id": 3, "field_id": 100,
            "entries": 3, **kw}
    return binlog.check(io.BytesIO(raw), len(raw), **want)


def test_a_good_insert_log_passes_and_its_values_read_back():
    raw = make(events=((1, [1, 2]), (1, [3])))
    assert check(raw) == []
    assert binlog.column(io.BytesIO(raw), len(raw)) == [1, 2, 3]


def test_a_delete_log_holds_its_deletes():
    recs = ['{"pk":5,"ts":100,"pkType":5}', '{"pk":6,"ts":101,"pkType":5}']
    raw = make(ids=(1, 2, 3, 0), events=((2, recs),), typ=pa.string())
    assert check(raw, kind="delete", field_id=None, entries=2) == []
    assert binlog.deletes(io.BytesIO(raw), len(raw)) == [(5, 100), (6, 101)]


@pytest.mark.parametrize("raw, kw, found", [
    (make(), {"entries": 4}, "holds 3 rows; the segment's records give it 4"),
    (make(ids=(1, 2, 3, 101)), {}, "its key names (1, 2, 3, 100)"),
    (make(ids=(9, 2, 3, 100)), {}, "descriptor names"),
    (make(events=((2, [1, 2, 3]),)), {}, "a insert log holds type 1"),
    (make(magic=0x1234), {}, "magic"),
    (make()[:-7], {}, "not"),
    (make() + b"\x00" * 5, {}, "not a Milvus insert log"),
])
def test_a_wrong_log_is_named(raw, kw, found):
    problems = check(raw, **kw)
    assert problems and any(found in p for p in problems), problems


def test_a_delete_log_carried_over_from_a_compacted_segment_passes():
    """Milvus 2.3.5 (auto-compaction on, deletes while segments are compacted) lists under
    segment S a delete log whose descriptor names the segment it was buffered for (seen on a
    real 2.3.5: key .../470765587470945763/..., descriptor 470765587471147132; collection and
    partition equal): Milvus applies it to S. A capture takes it; another collection or
    partition, or an insert log naming another segment, is still refused."""
    recs = ['{"pk":5,"ts":100,"pkType":5}']
    raw = make(ids=(1, 2, 7, 0), events=((2, recs),), typ=pa.string())
    assert check(raw, kind="delete", field_id=None, entries=1) == []
    for ids in ((9, 2, 7, 0), (1, 8, 7, 0)):
        bad = make(ids=ids, events=((2, recs),), typ=pa.string())
        assert any("descriptor names" in p for p in check(bad, kind="delete", field_id=None, entries=1))
    assert any("descriptor names" in p for p in check(make(ids=(1, 2, 7, 100))))
