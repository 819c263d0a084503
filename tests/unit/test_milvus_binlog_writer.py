"""seglake.milvus.binlog_writer: every type a seglake collection holds, written as a Milvus
binlog, reads back through seglake.milvus.binlog (the reader a capture and a restore use)
with the same values, byte for byte; the descriptor has Milvus 2.3's layout (post-header
lengths, extras) as a real 2.3.5 file has it."""

from __future__ import annotations

import io
import struct

import numpy as np
import pyarrow as pa
import pytest

from seglake.milvus import binlog
from seglake.milvus import binlog_writer as w

IDS = (11, 22, 33)


def _read(raw: bytes, field_id, entries, kind="insert"):
    assert binlog.check(io.BytesIO(raw), len(raw), kind=kind, collection_id=11, partition_id=22, segment_id=33,
                        field_id=field_id, entries=entries) == []
    return binlog.column(io.BytesIO(raw), len(raw))


@pytest.mark.parametrize("dtype, arrow, values", [
    (1, pa.bool_(), [True, False, True]),
    (2, pa.int8(), [-128, 0, 127]),
    (3, pa.int16(), [-32768, 1, 32767]),
    (4, pa.int32(), [-2**31, 7, 2**31 - 1]),
    (5, pa.int64(), [-2**63, 0, 2**63 - 1]),
    (10, pa.float32(), [np.float32(0.1).item(), -0.0, 3.4e38]),
    (11, pa.float64(), [0.1, -1e-300, 1.7976931348623157e308]),
    (21, pa.string(), ["", "ä€😀", "x" * 1000]),
])
def test_each_scalar_type_reads_back_exactly(dtype, arrow, values):
    raw = w.insert_log(*IDS, 100 + dtype, dtype, pa.array(values, arrow), 5, 9)
    got = _read(raw, 100 + dtype, len(values))
    assert got == pa.array(values, arrow).to_pylist()
    if dtype in (10, 11):      # the bits, not only the value
        width = "<f4" if dtype == 10 else "<f8"
        assert np.asarray(got, width).tobytes() == np.asarray(values, width).tobytes()
    desc, _ = binlog.payloads(io.BytesIO(raw), len(raw))
    assert (desc.field_id, desc.payload_type, desc.start_ts, desc.end_ts) == (100 + dtype, dtype, 5, 9)


def test_float_vectors_read_back_byte_exact_from_seglake_fixed_size_lists():
    rng = np.random.default_rng(7)
    vecs = rng.standard_normal((50, 8)).astype("<f4")
    col = pa.chunked_array([pa.array(list(vecs[:20]), pa.list_(pa.float32(), 8)),
                            pa.array(list(vecs[20:]), pa.list_(pa.float32(), 8))])
    raw = w.insert_log(*IDS, 102, 101, col, 1, 2, dim=8)
    got = _read(raw, 102, 50)
    assert got == [v.tobytes() for v in vecs]                  # dim x float32 LE, as Milvus holds it


def test_row_id_and_timestamp_fields_and_a_delete_log():
    ts = [470756345078349846 + i for i in range(4)]
    assert _read(w.insert_log(*IDS, 0, 5, pa.array([1, 2, 3, 4], pa.int64()), ts[0], ts[-1]), 0, 4) == [1, 2, 3, 4]
    assert _read(w.insert_log(*IDS, 1, 5, pa.array(ts, pa.int64()), ts[0], ts[-1]), 1, 4) == ts
    raw = w.delete_log(*IDS, [5, -6, 2**62], [ts[3], ts[2], ts[1]])
    assert binlog.check(io.BytesIO(raw), len(raw), kind="delete", collection_id=11, partition_id=22, segment_id=33,
                        field_id=None, entries=3) == []
    assert binlog.deletes(io.BytesIO(raw), len(raw)) == [(5, ts[3]), (-6, ts[2]), (2**62, ts[1])]
    desc, events = binlog.payloads(io.BytesIO(raw), len(raw))
    assert (desc.field_id, desc.payload_type, [c for c, _, _ in events]) == (-1, 20, [2])


def test_the_descriptor_has_milvus_2_3_layout():
    """As a real 2.3.5 insert log holds it (captured in tests/milvus): post-header lengths
    52 then 16 x 7, then the extras' length and {"original_size":"448"} for 56 int64s."""
    raw = w.insert_log(*IDS, 100, 5, pa.array(range(56), pa.int64()), 3, 4)
    _, code, length, nxt = binlog.HEADER.unpack(raw[4:4 + binlog.HEADER.size])
    rest = raw[4 + binlog.HEADER.size + binlog.DESCRIPTOR.size:nxt]
    assert (code, length, nxt) == (0, 104, 108)
    assert rest == b"4" + b"\x10" * 7 + struct.pack("<i", 23) + b'{"original_size":"448"}'


@pytest.mark.parametrize("call, found", [
    (lambda: w.insert_log(*IDS, 100, 10, pa.array([1.0, None], pa.float32()), 1, 2), "null"),
    (lambda: w.insert_log(*IDS, 100, 22, pa.array([1]), 1, 2), "not one seglake writes"),
    (lambda: w.insert_log(*IDS, 100, 101, pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2)), 1, 2, dim=3), "dim 3"),
    (lambda: w.delete_log(*IDS, [1, 2], [3]), "as many pks"),
])
def test_what_it_cannot_write_is_refused(call, found):
    with pytest.raises(ValueError, match=found):
        call()


def test_convert_maps_every_seglake_type_and_refuses_another_naming_the_field():
    from seglake.milvus import convert

    fields = [{"field_id": 100 + i, "name": f"f{i}", "dtype": t, "is_primary": t == "Int64",
               "dim": 8 if t == "FloatVector" else None} for i, t in enumerate(convert.MILVUS_TYPE)]
    doc = {"snapshot": {"collection": {"schema": fields}}}
    got = convert.milvus_fields(convert.schema_of(doc))
    assert [(f["name"], f["data_type"], f["type_params"]) for f in got] == [
        ("f0", 1, {}), ("f1", 2, {}), ("f2", 3, {}), ("f3", 4, {}), ("f4", 5, {}), ("f5", 10, {}), ("f6", 11, {}),
        ("f7", 21, {"max_length": "65535"}), ("f8", 101, {"dim": "8"})]
    fields[6]["dtype"] = "SparseFloatVector"
    with pytest.raises(convert.ConvertError, match="field 'f6' has type 'SparseFloatVector'"):
        convert.schema_of(doc)


def test_a_log_less_some_rows_or_deletes_keeps_its_descriptor_and_the_rest():
    """What a restore into Milvus < 2.3.4 stages (restore.pk_filter_fixes): an insert log
    less the rows a delete hides, a delete log less the records of some pks."""
    raw = w.insert_log(*IDS, 101, 101, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], 5, 9, dim=2)
    out = w.without_rows(raw, [True, False, True])
    assert binlog.payloads(io.BytesIO(out), len(out))[0] == binlog.payloads(io.BytesIO(raw), len(raw))[0]
    assert _read(out, 101, 2) == [_read(raw, 101, 3)[i] for i in (0, 2)]
    with pytest.raises(ValueError):
        w.without_rows(raw, [False, False, False])      # a log with no row is never staged
    with pytest.raises(ValueError):
        w.without_rows(raw, [True, True])
    dl = w.delete_log(*IDS, [7, 8, 7], [10, 11, 12])
    kept = w.without_deletes(dl, {7})
    assert binlog.deletes(io.BytesIO(kept), len(kept)) == [(8, 11)]
    assert binlog.check(io.BytesIO(kept), len(kept), kind="delete", collection_id=11, partition_id=22,
                        segment_id=33, field_id=None, entries=1) == []
    assert w.without_deletes(dl, {7, 8}) is None


@pytest.mark.parametrize("version, legacy", [("v2.3.3-lite", True), ("v2.3.0", True), ("2.3.4", False),
                                             ("v2.3.5-lite", False), ("v2.3.12", False), ("", True)])
def test_which_targets_filter_an_import_by_pk_alone(version, legacy):
    from seglake.milvus import restore

    assert restore.filters_by_pk(version) is legacy
