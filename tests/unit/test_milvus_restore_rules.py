"""The pure rules of the restore into Milvus: the binlog reader (Milvus's event format), the
schema a restore can reproduce, and the capture document's paths (no Milvus needed)."""

from __future__ import annotations

import hashlib
import io
import json
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.lifecycle.backup import bundle as bundles
from seglake.milvus import binlog, restore
from seglake.storage import layout
from seglake.storage.local import LocalStore


def event_file(values, arrow_type, payload_type: int, ids=(1, 2, 3, 100)) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"val": pa.array(values, type=arrow_type)}), buf)
    payload = buf.getvalue()
    extra = json.dumps({"original_size": "1"}).encode()
    desc = binlog.DESCRIPTOR.pack(*ids, 1, 2, payload_type) + bytes(12) + len(extra).to_bytes(4, "little") + extra
    d_len = binlog.HEADER.size + len(desc)
    out = (binlog.MAGIC).to_bytes(4, "little") + binlog.HEADER.pack(0, 0, d_len, 4 + d_len) + desc
    e_len = binlog.HEADER.size + binlog.EVENT_TS + len(payload)
    code = 2 if payload_type == 21 else 1
    out += binlog.HEADER.pack(0, code, e_len, len(out) + e_len) + (1).to_bytes(8, "little") + (2).to_bytes(8, "little") + payload
    return out


def _io(raw: bytes):
    return io.BytesIO(raw), len(raw)


def test_binlog_columns_vectors_and_deletes():
    raw = event_file([5, -3, 7], pa.int64(), 5)
    desc, _ = binlog.payloads(*_io(raw))
    assert (desc.collection_id, desc.partition_id, desc.segment_id, desc.field_id) == (1, 2, 3, 100)
    assert binlog.column(*_io(raw)) == [5, -3, 7]
    vec = struct.pack("<2f", 1.5, -2.0)
    got = binlog.column(*_io(event_file([vec], pa.binary(8), 101)))
    assert restore._norm(got[0], {"data_type": 101}) == restore._norm([1.5, -2.0], {"data_type": 101}) == [1.5, -2.0]
    raw = event_file([json.dumps({"pk": 9, "ts": 44, "pkType": 5}), "10,45"], pa.string(), 21)
    assert binlog.deletes(*_io(raw)) == [(9, 44), (10, 45)]


@pytest.mark.parametrize("damage", ["magic", "truncate", "payload"])
def test_a_damaged_binlog_is_refused(damage):
    raw = bytearray(event_file([1, 2, 3], pa.int64(), 5))
    if damage == "magic":
        raw[0] ^= 0xFF
    elif damage == "truncate":
        raw = raw[:-20]
    else:
        raw[-1] ^= 0xFF          # the Parquet payload's closing magic
    with pytest.raises(binlog.BinlogError if damage != "payload" else Exception):
        binlog.column(*_io(bytes(raw)))


def schema_doc(fields):
    return {"snapshot": {"collection": {"schema": {"fields": fields}}}}


F = lambda i, name, t, **kw: {"field_id": i, "name": name, "data_type": t, "type_params": kw.pop("tp", {}), **kw}


def test_schema_refusals_name_the_field():
    ok = [F(100, "pk", 5, is_primary_key=True), F(101, "vec", 101, tp={"dim": "4"})]
    assert [f["name"] for f in restore.check_schema(schema_doc(ok))["fields"]] == ["pk", "vec"]
    with pytest.raises(restore.MilvusRestoreError, match="field 'sv' has data type SparseFloatVector"):
        restore.check_schema(schema_doc(ok + [F(102, "sv", 104, data_type_name="SparseFloatVector")]))
    keyed = restore.check_schema(schema_doc(ok + [F(102, "tenant", 21, is_partition_key=True)]))
    assert keyed["fields"][-1]["is_partition_key"]
    with pytest.raises(restore.MilvusRestoreError, match=r"partition key field\(s\) \[\('t', 'Float'\)\]"):
        restore.check_schema(schema_doc(ok + [F(102, "t", 10, is_partition_key=True, data_type_name="Float")]))
    coll = {"partitions": [{"partition_id": 7, "name": "_default_1"}, {"partition_id": 6, "name": "_default_0"}]}
    assert restore._partitions(coll, keyed) == ["_default_0", "_default_1"]
    coll["partitions"].append({"partition_id": 9, "name": "p9"})
    with pytest.raises(restore.MilvusRestoreError, match="not Milvus's _default_0"):
        restore._partitions(coll, keyed)
    with pytest.raises(restore.MilvusRestoreError, match="not 100.. in order"):
        restore.check_schema(schema_doc([ok[0], F(105, "vec", 101, tp={"dim": "4"})]))
    with pytest.raises(restore.MilvusRestoreError, match="2 primary key fields"):
        restore.check_schema(schema_doc(ok + [F(102, "pk2", 5, is_primary_key=True)]))
    with pytest.raises(restore.MilvusRestoreError, match="vector field 'vec' has no dim"):
        restore.check_schema(schema_doc([ok[0], F(101, "vec", 101)]))


def _bundle(tmp_path, kind="milvus", path=None):
    backup = LocalStore(str(tmp_path))
    raw = event_file([1], pa.int64(), 5)
    sha = hashlib.sha256(raw).hexdigest()
    backup.put(layout.bundle_blob(sha), raw)
    keys = [f"insert_log/7/8/9/{f}/1" for f in (0, 1, 100)]
    if path:
        keys[2] = path
    doc = {"format": bundles.FORMAT, "version": bundles.VERSION, "bundle": "b1", "uid": "a" * 32,
           "source": {"db": "default", "collection": "c", "collection_id": 7},
           "snapshot": {"collection": {"shards": 1, "partitions": [{"partition_id": 8, "name": "_default"}],
                                       "schema": {"fields": [F(100, "pk", 5, is_primary_key=True)]}}},
           "segments": [{"segment_id": 9, "partition_id": 8, "num_rows": 1, "deltalogs": [],
                         "binlogs": [{"field_id": f, "logs": [{"entries": 1, "path": k}]}
                                     for f, k in zip((0, 1, 100), keys)]}],
           "files": {k: {"size": len(raw), "sha256": sha} for k in keys}}
    if kind:
        doc["kind"] = kind
    bundles.write(backup, doc)
    return backup


def test_bundle_paths_must_be_the_keys_their_ids_name(tmp_path):
    req = restore.Request(db="default", collection="c", bundle="b1", name="n")
    assert restore.read_bundle(_bundle(tmp_path / "ok"), req)["segments"][0]["segment_id"] == 9
    with pytest.raises(restore.MilvusRestoreError, match="not the key its ids name"):
        restore.read_bundle(_bundle(tmp_path / "forged", path="insert_log/7/8/10/100/1"), req)
    with pytest.raises(restore.MilvusRestoreError, match="neither a Milvus capture nor a seglake export"):
        restore.read_bundle(_bundle(tmp_path / "other", kind="other"), req)


@pytest.mark.parametrize("field,value", [("sample", -1), ("sample", 10**6), ("threads", 0), ("poll", float("nan")),
                                         ("import_timeout", float("inf")), ("name", "a/b"), ("name", "1x")])
def test_request_numbers_and_names_are_checked(field, value):
    req = restore.Request(db="default", collection="c", bundle="b1", name="n")
    setattr(req, field, value)
    with pytest.raises(Exception, match=field if field != "name" else "collection"):
        req.check()


def test_the_dynamic_field_is_milvuss_own_last_json_field():
    ok = [F(100, "pk", 5, is_primary_key=True), F(101, "vec", 101, tp={"dim": "4"})]
    meta = F(102, "$meta", 23, is_dynamic=True)
    doc = schema_doc(ok + [meta])
    doc["snapshot"]["collection"]["schema"]["enable_dynamic_field"] = True
    got = restore.check_schema(doc)
    assert got["enable_dynamic_field"] and got["fields"][-1]["name"] == "$meta"
    with pytest.raises(restore.MilvusRestoreError, match=r"dynamic field\(s\) \['\$meta'\] with enable_dynamic_field=False"):
        restore.check_schema(schema_doc(ok + [meta]))             # $meta without the flag
    doc = schema_doc(ok)
    doc["snapshot"]["collection"]["schema"]["enable_dynamic_field"] = True
    with pytest.raises(restore.MilvusRestoreError, match=r"dynamic field\(s\) \[\]"):
        restore.check_schema(doc)                                  # the flag without $meta
    doc = schema_doc([ok[0], F(101, "$meta", 23, is_dynamic=True), F(102, "vec", 101, tp={"dim": "4"})])
    doc["snapshot"]["collection"]["schema"]["enable_dynamic_field"] = True
    with pytest.raises(restore.MilvusRestoreError, match="last"):
        restore.check_schema(doc)                                  # not the last field


def test_verify_compares_arrays_binary_vectors_and_dynamic_keys_as_milvus_returns_them():
    arr = {"data_type": 22, "element_type": 5}
    assert restore._norm(b"\x1a\x03\n\x01\x05", arr) == restore._norm([5], arr) == [5]
    farr = {"data_type": 22, "element_type": 10}
    import struct
    raw = b"\x22" + bytes([6]) + b"\x0a\x04" + struct.pack("<f", 0.1)   # FloatArray{data: [0.1]}
    assert restore._norm(raw, farr) == restore._norm([0.1], farr)
    sarr = {"data_type": 22, "element_type": 21}
    assert restore._norm(b"\x32\x06\x0a\x01a\x0a\x01b", sarr) == ["a", "b"]
    bv = {"data_type": 100}
    assert restore._norm([{"hex": "dd06"}], bv) == restore._norm(b"\xdd\x06", bv)
    dyn = {"data_type": 23, "is_dynamic": True}
    assert restore._norm(None, dyn) == {} and restore._norm(b'{"a": 1}', dyn) == {"a": 1}


def test_collection_properties_are_a_map_of_strings_or_refused():
    assert restore._properties({"collection.ttl.seconds": "60"}) == {"collection.ttl.seconds": "60"}
    assert restore._properties(None) == {}
    for bad in ({"ttl": 60}, ["a"], {"k": "v" * 70000}):
        with pytest.raises(restore.MilvusRestoreError, match="properties"):
            restore._properties(bad)


def test_the_smallest_int64_pk_is_asked_for_as_milvus_parses_it():
    assert restore.pk_expr("pk", [1, -2]) == "pk in [1, -2]"
    assert restore.pk_expr("pk", [-(2 ** 63), 5]) == "(pk in [5]) or (pk < -9223372036854775807)"
    assert restore.pk_expr("pk", [-(2 ** 63)]) == "pk < -9223372036854775807"
    assert restore.pk_expr("id", ['a"b']) == 'id in ["a\\"b"]'


def test_index_params_are_the_users_own_no_metric_invented_for_a_scalar_index():
    assert restore._index_params({"index_params": {"index_type": "STL_SORT"}}) == {"index_type": "STL_SORT"}
    assert restore._index_params({"user_index_params": {"index_type": "Trie"}}) == {"index_type": "Trie"}
    got = restore._index_params({"index_params": {"index_type": "HNSW", "metric_type": "COSINE", "M": "16",
                                                  "efConstruction": "32"}})
    assert got == {"index_type": "HNSW", "metric_type": "COSINE", "params": {"M": 16, "efConstruction": 32}}


def test_pk_expr_writes_characters_past_the_basic_plane_as_they_are():
    """Milvus unquotes as Go does: the surrogate-pair escapes json.dumps writes for an emoji
    are "invalid syntax" to it (seen on 2.3.5: every verify of such a restore failed)."""
    from seglake.milvus.restore import pk_expr

    e = pk_expr("id", ["😀", 'q"\\', "a\nb", "ü"])
    assert e == 'id in ["😀", "q\\"\\\\", "a\\nb", "ü"]' and "\\ud83d" not in e
