"""Adversarial cases of restoring a SEGLAKE EXPORT into a real Milvus 2.3.5 (issue 29 D3,
seglake.milvus.convert): after the restore, Milvus's count(*) equals seglake's visible rows
(duplicates counted) and Milvus's query equals seglake's `dedupe_by_pk` of them, value by
value -- for the row-model edges (re-inserts, duplicates, identical (pk, ts) in two
segments, an upsert at the delete's own timestamp, partition-scoped deletes, deletes in a
0-row segment, of pks that never existed, newer than every row, a segment whose every row is
deleted) and for schema edges (every scalar type at its limits, multi-byte / empty / longest
VarChar, dim 1). A delete issued in Milvus after the restore hides the restored rows."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from bundle_helper import SessionClient
from seglake import visibility
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.meta.kv import KV
from seglake.meta.segments import FLUSHED, Segment
from seglake.milvus import restore
from seglake.segfiles import log_ids_needed, write_segment_files
from seglake.storage.local import LocalStore
from seglake.wal.message import arrow_schema

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


def target_of(milvus_server, s3_server) -> restore.MilvusTarget:
    return restore.MilvusTarget(address=milvus_server.address, bucket=milvus_server.s3.bucket,
                                s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                                s3_secret_key=s3_server.secret_key)


@pytest.fixture
def env(etcd_server, tmp_path):
    kv = KV(etcd_server.endpoint, timeout=10, root=f"mx{uuid.uuid4().hex[:8]}")
    yield kv, kv.marker_keys, LocalStore(str(tmp_path / "backup"))
    kv.close()


def add_segment(meta, store, coll, part: str, columns: dict, ts, deletes=None, delta_partitions=None) -> int:
    """One Flushed segment of `columns` (field name -> list) at timestamps `ts`, with an
    optional delta log (pks, ts, partition ids; 0 = collection-wide)."""
    pid = coll.partition(part).partition_id
    n = len(ts)
    table = pa.table({f.name: columns[f.name] for f in coll.schema.fields}, schema=arrow_schema(coll.schema))
    sid = meta.ids.allocate()
    first = meta.ids.allocate(log_ids_needed(coll.schema, deletes is not None, n))
    row_ids = (meta.ids.allocate(n) + np.arange(n, dtype=np.int64)) if n else np.zeros(0, np.int64)
    files = write_segment_files(store, first, coll.collection_id, pid, sid, coll.schema, table, row_ids,
                                np.array(ts, np.int64), deletes=deletes)
    meta.segments.save([Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=pid,
                                channel=coll.vchannels[0], state=FLUSHED, num_rows=n, binlogs=files.binlogs,
                                deltalogs=files.deltalogs, statslogs=files.statslogs, index_files=(),
                                start_ts=int(min(ts)) if n else int(deletes[1].max()),
                                dml_ts=int(max(list(ts) + list(deletes[1] if deletes else []))),
                                created_ts=int(min(ts)) if n else int(deletes[1].max()),
                                delta_partitions=delta_partitions or {})])
    return sid


def _norm(v):
    if isinstance(v, (list, tuple)):
        return tuple(np.float32(x).item() for x in v)
    if isinstance(v, float):
        return np.float32(v).item() if abs(v) < 3.5e38 else v
    return v


def seglake_view(meta, store, name, fields) -> tuple[int, dict]:
    """(count(*), {pk: sorted list of its visible rows}) in seglake."""
    coll = meta.catalog.get_by_name(name)
    t = visibility.visible_rows(meta, store, coll.collection_id, columns=[f for f in fields if f != "pk"])
    cols = [t.column(f).to_pylist() for f in fields]
    out: dict = {}
    for i in range(t.num_rows):
        out.setdefault(cols[0][i], []).append(tuple(_norm(c[i]) for c in cols))
    return t.num_rows, {pk: sorted(v) for pk, v in out.items()}


def milvus_view(client, name, fields, expr="pk < 0 || pk >= 0") -> tuple[int, dict]:
    """(count(*), {pk: sorted list of the rows Milvus's query returns})."""
    count = client.one({"op": "count_loaded", "name": name})["count"]
    rows = client.one({"op": "query", "name": name, "expr": expr, "output_fields": fields, "limit": 16384})
    out: dict = {}
    for r in rows:
        out.setdefault(r["pk"], []).append(tuple(_norm(r[f]) for f in fields))
    return count, {pk: sorted(v) for pk, v in out.items()}


def same_rows(milvus: tuple[int, dict], seglake: tuple[int, dict]) -> None:
    """Equal count(*) (duplicates counted), equal pks, and each pk's rows in Milvus's query
    distinct ones of seglake's rows of that pk (Milvus 2.3.5's query returns one row of a pk
    visible twice, not always the same one: it picks none by timestamp)."""
    assert milvus[0] == seglake[0]
    assert sorted(milvus[1]) == sorted(seglake[1])
    for pk, rows in milvus[1].items():
        left = list(seglake[1][pk])
        for row in rows:
            assert row in left, (pk, rows, seglake[1][pk])
            left.remove(row)


def _restore(env, milvus_server, s3_server, meta, store, src, new):
    kv, keys, backup = env
    snapshot.create(meta, store, src, "s1")
    exports.export(meta, store, backup, src, "s1", bundle="e1", say=lambda _: None)
    return restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                       restore.Request(db="default", collection=src, bundle="e1", name=new, sample=100, poll=0.5))


def row_model_collection(meta, store, src: str, ahead: bool = True):
    """The row-model edges (test_row_model_edges_restored_exactly's comments); `ahead`: with
    a row stamped ten years ahead (seglake's own bundle restore refuses such a bundle)."""
    dim = 2
    coll = meta.catalog.create(src, [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
                                     {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": dim},
                                     {"field_id": 102, "name": "price", "dtype": "Float"}],
                               partitions=["_default", "part_1"], shards=2)
    p1 = coll.partition("part_1").partition_id
    t = [meta.tso.now() for _ in range(10)]

    def cols(pks, add=0.0):
        vec = pa.FixedSizeListArray.from_arrays(pa.array([float(p) + add for p in pks for _ in range(dim)],
                                                         pa.float32()), dim)
        return {"pk": pa.array(pks, pa.int64()), "embedding": vec,
                "price": pa.array([p + 0.25 + add for p in pks], pa.float32())}

    # S1: the base rows
    add_segment(meta, store, coll, "_default", cols([1, 2, 3, 4, 5, 6, 7, 13]), [t[1]] * 8)
    # S2: a 0-row ("L0") segment: 1 deleted collection-wide, 999 never existed, 3 deleted in
    # part_1 only (3 is in _default: stays visible)
    add_segment(meta, store, coll, "_default", cols([]), [],
                deletes=(np.array([1, 999, 3], np.int64), np.array([t[2]] * 3, np.int64),
                         np.array([0, 0, p1], np.int64)), delta_partitions={p1: "part_1"})
    # S3: 1 inserted again (another partition), 2 again with S1's (pk, ts) and other values,
    # 8 (upserted below), 9 (deleted in part_1 below)
    add_segment(meta, store, coll, "part_1", cols([1, 2, 8, 9], add=100.0), [t[3], t[1], t[1], t[1]])
    # S4: every row of it deleted by its own delta log; 6 deleted at its own row's ts (stays)
    add_segment(meta, store, coll, "_default", cols([10, 11]), [t[1], t[1]],
                deletes=(np.array([10, 11, 6], np.int64), np.array([t[4], t[4], t[1]], np.int64),
                         np.array([0, 0, 0], np.int64)))
    # S5: an upsert of 8 (delete and insert at t5), 9 deleted in part_1, 4 deleted after every row
    add_segment(meta, store, coll, "part_1", cols([8, 12], add=200.0), [t[5], t[5]],
                deletes=(np.array([8, 9, 4], np.int64), np.array([t[5], t[5], t[9]], np.int64),
                         np.array([0, p1, 0], np.int64)), delta_partitions={p1: "part_1"})
    # S6: 5 inserted again (a duplicate, newer), 13 upserted inside this segment
    add_segment(meta, store, coll, "_default", cols([5, 13, 13], add=300.0), [t[6], t[1], t[7]],
                deletes=(np.array([13], np.int64), np.array([t[7]], np.int64), np.array([0], np.int64)))
    # S7: a row stamped ten years ahead (a TSO ahead of the target Milvus's clock)
    if ahead:
        add_segment(meta, store, coll, "part_1", cols([20], add=400.0), [t[9] + ((10 * 365 * 86400 * 1000) << 18)])


def test_row_model_edges_restored_exactly(env, meta, store, milvus_server, s3_server):
    src, new = f"ed_{uuid.uuid4().hex[:8]}", f"from_ed_{uuid.uuid4().hex[:8]}"
    row_model_collection(meta, store, src)
    fields = ["pk", "embedding", "price"]
    want = seglake_view(meta, store, src, fields)
    assert sorted(want[1]) == [1, 2, 3, 5, 6, 7, 8, 12, 13, 20]             # the model, in seglake
    assert want[0] == 12 and len(want[1][2]) == len(want[1][5]) == 2         # 2 and 5 twice
    assert want[1][8] == [(8, (208.0, 208.0), 208.25)] and want[1][13] == [(13, (313.0, 313.0), 313.25)]
    report = _restore(env, milvus_server, s3_server, meta, store, src, new)
    assert report["state"] == "verified" and report["ok"], report["problems"]
    assert report["count"] == report["visible_rows"] == 12
    c = SessionClient(milvus_server.address)
    same_rows(milvus_view(c, new, fields), want)

    # a delete issued in Milvus after the restore hides the restored rows: Milvus stamps
    # them itself, even the one seglake stamped ten years ahead (20)
    c.one({"op": "delete", "name": new, "pks": [3, 5, 12, 20]})
    n_after, rows_after = milvus_view(c, new, fields)
    assert sorted(rows_after) == [1, 2, 6, 7, 8, 13] and n_after == 12 - 5


def test_schema_edges_restored_exactly(env, meta, store, milvus_server, s3_server):
    src, new = f"sc_{uuid.uuid4().hex[:8]}", f"from_sc_{uuid.uuid4().hex[:8]}"
    coll = meta.catalog.create(src, [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
                                     {"field_id": 101, "name": "v", "dtype": "FloatVector", "dim": 1},
                                     {"field_id": 102, "name": "b", "dtype": "Bool"},
                                     {"field_id": 103, "name": "i8", "dtype": "Int8"},
                                     {"field_id": 104, "name": "i16", "dtype": "Int16"},
                                     {"field_id": 105, "name": "i32", "dtype": "Int32"},
                                     {"field_id": 106, "name": "i64", "dtype": "Int64"},
                                     {"field_id": 107, "name": "f", "dtype": "Float"},
                                     {"field_id": 108, "name": "d", "dtype": "Double"},
                                     {"field_id": 109, "name": "s", "dtype": "VarChar"}],
                               partitions=["_default"], shards=1)
    strs = ["", "ä", "日本語テキスト", "🙂" * 10, "x" * 65535, "é" * 32767 + "x", "a'b\"c\\d", "\u0000z"]
    n = len(strs)
    pks = [-(2**63) + 1, -1, 0, 1, 2**62, 2**63 - 2, 7, 8]
    data = {"pk": pa.array(pks, pa.int64()),
            "v": pa.FixedSizeListArray.from_arrays(pa.array([1e-30, -3.4e38, 0.0, 1.0, 2.5, -0.0, 3.0, 4.0],
                                                            pa.float32()), 1),
            "b": pa.array([True, False] * 4), "i8": pa.array([-128, 127, 0, -1, 1, 5, 6, 7], pa.int8()),
            "i16": pa.array([-32768, 32767, 0, 1, 2, 3, 4, 5], pa.int16()),
            "i32": pa.array([-2**31, 2**31 - 1, 0, 1, 2, 3, 4, 5], pa.int32()),
            "i64": pa.array([-2**63, 2**63 - 1, 0, 1, 2, 3, 4, 5], pa.int64()),
            "f": pa.array([3.4e38, -1e-38, 0.1, 1.5, 2.5, 3.5, 4.5, 5.5], pa.float32()),
            "d": pa.array([1.7e308, -5e-324, 0.1, 1.5, 2.5, 3.5, 4.5, 5.5], pa.float64()),
            "s": pa.array(strs, pa.string())}
    t1 = meta.tso.now()
    add_segment(meta, store, coll, "_default", data, [t1] * n)
    report = _restore(env, milvus_server, s3_server, meta, store, src, new)
    assert report["state"] == "verified" and report["ok"], report["problems"]
    fields = ["pk", "v", "b", "i8", "i16", "i32", "i64", "f", "d", "s"]
    c = SessionClient(milvus_server.address)
    got = c.one({"op": "query", "name": new, "expr": "pk < 0 || pk >= 0", "output_fields": fields, "limit": 100})
    got = {r["pk"]: r for r in got}
    assert sorted(got) == sorted(pks)
    for i, pk in enumerate(pks):
        r = got[pk]
        assert r["s"] == strs[i], (pk, len(r["s"]), len(strs[i]))
        assert r["b"] == data["b"][i].as_py() and r["i8"] == data["i8"][i].as_py()
        assert r["i16"] == data["i16"][i].as_py() and r["i32"] == data["i32"][i].as_py()
        assert r["i64"] == data["i64"][i].as_py()
        assert np.float32(r["f"]) == np.float32(data["f"][i].as_py()) and r["d"] == data["d"][i].as_py()
        assert np.float32(r["v"][0]) == np.float32(data["v"][i].as_py()[0])


def test_an_empty_collection_and_an_empty_partition(env, meta, store, milvus_server, s3_server):
    src, new = f"em_{uuid.uuid4().hex[:8]}", f"from_em_{uuid.uuid4().hex[:8]}"
    meta.catalog.create(src, [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
                              {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 3}],
                        partitions=["_default", "p_empty"], shards=1)
    report = _restore(env, milvus_server, s3_server, meta, store, src, new)
    assert report["state"] == "verified" and report["ok"] and report["count"] == 0, report
    c = SessionClient(milvus_server.address)
    assert set(c.one({"op": "schema", "name": new})["partitions"]) == {"_default", "p_empty"}


def test_a_capture_with_a_pk_inserted_twice_restores_and_verifies(env, milvus, milvus_server, s3_server):
    """Milvus keeps both rows of a pk inserted twice (count(*) counts both): a capture of
    such a collection restores, verifies, and has the same count and rows."""
    from bundle_helper import capture

    kv, keys, backup = env
    src, new = f"dup_{uuid.uuid4().hex[:8]}", f"from_dup_{uuid.uuid4().hex[:8]}"
    milvus({"op": "create", "name": src, "partitions": ["p1"], "shards": 1, "dim": 2},
           {"op": "insert", "name": src, "partition": "p1", "pks": list(range(20))},
           {"op": "flush", "name": src},
           {"op": "insert", "name": src, "partition": "p1", "pks": [3, 4]},
           {"op": "flush", "name": src})
    capture(milvus_server, s3_server, backup, src)
    report = restore.run(kv, keys, backup, target_of(milvus_server, s3_server),
                         restore.Request(db="default", collection=src, bundle="b1", name=new, sample=20, poll=0.5))
    assert report["state"] == "verified" and report["ok"], report["problems"]
    assert report["count"] == report["visible_rows"] == 22 and report["sampled"] == 20
    c = SessionClient(milvus_server.address)
    got = c.one({"op": "query", "name": new, "expr": "pk >= 0", "output_fields": ["pk", "v"], "limit": 100})
    assert sorted(set(r["pk"] for r in got)) == list(range(20))


def test_a_data_file_damaged_after_check_is_never_converted(env, meta, store):
    """The DAG checks in one task and converts in a later one: a data file damaged in
    between (here: replaced by another valid Parquet file of the same field, other values)
    is refused as it is read, never converted into Milvus binlogs (nor read by verify)."""
    from seglake.dev import demo
    from seglake.milvus import convert
    from seglake.storage import layout

    kv, keys, backup = env
    src = f"dm_{uuid.uuid4().hex[:8]}"
    demo.seed(meta, store, demo.SeedParams(name=src, partitions=1, segments=2, rows=20, dim=2, shards=1))
    snapshot.create(meta, store, src, "s1")
    exports.export(meta, store, backup, src, "s1", bundle="e1", say=lambda _: None)
    mdoc = restore.read_bundle(backup, restore.Request("default", src, "e1", "dm_new"))
    conv = convert.Converter(backup, mdoc)
    conv.check_values()
    a, b = sorted(conv.segments)
    price = {sid: next(k for k in mdoc["files"] if k.startswith(f"{layout.INSERT_LOG}/") and
                       k.split("/")[-3:-1] == [str(sid), "102"]) for sid in (a, b)}
    blob = backup.root / layout.bundle_blob(mdoc["files"][price[a]]["sha256"])
    blob.write_bytes((backup.root / layout.bundle_blob(mdoc["files"][price[b]]["sha256"])).read_bytes())
    with pytest.raises(convert.ConvertError, match=f"{price[a]}: its data file .* is damaged"):
        convert.Converter(backup, mdoc).segment_files(a)
    with pytest.raises(convert.ConvertError, match="damaged"):
        convert.Converter(backup, mdoc).visible()


@pytest.mark.parametrize("extreme", [2**63 - 1, -2**63])
def test_the_int64_ends_as_pk_are_refused_before_any_write(env, meta, store, extreme):
    """Milvus 2.3.5 counts a row of pk 2**63 - 1 imported this way, but no query returns it
    (`pk == 9223372036854775807`, `pk > 0`: seen in this suite's Milvus); -2**63 cannot be
    written in an expression (ParseInt of 9223372036854775808 fails: verify's query failed).
    Refused at check, naming the segment, instead of a restore whose verify finds the row
    missing or fails -- or, unsampled, a "verified" restore with a row no query reaches."""
    from seglake.milvus import convert

    kv, keys, backup = env
    src = f"mx_{uuid.uuid4().hex[:8]}"
    coll = meta.catalog.create(src, [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
                                     {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 2}],
                               partitions=["_default"], shards=1)
    vec = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, 3.0, 4.0], pa.float32()), 2)
    sid = add_segment(meta, store, coll, "_default", {"pk": pa.array([1, extreme], pa.int64()), "embedding": vec},
                      [meta.tso.now()] * 2)
    snapshot.create(meta, store, src, "s1")
    exports.export(meta, store, backup, src, "s1", bundle="e1", say=lambda _: None)
    mdoc = restore.read_bundle(backup, restore.Request("default", src, "e1", "mx_new"))
    with pytest.raises(convert.ConvertError, match=f"'pk' {extreme} in segment {sid}"):
        convert.Converter(backup, mdoc).check_values()


def test_fields_named_like_key_columns_are_converted_by_field_id(env, meta, store):
    """A collection whose non-primary fields are named like visibility's key columns (`pk`
    beside a primary `id`, `segment_id`, `Timestamp`: names Milvus and the catalog accept)
    was refused by the converter ("clashes with the key column"): its restore into Milvus
    could never run. Each field's binlog now holds that field's values, and verify's rows
    name them as the schema does."""
    import io

    from seglake.milvus import binlog, convert

    kv, keys, backup = env
    src = f"kc_{uuid.uuid4().hex[:8]}"
    coll = meta.catalog.create(src, [{"field_id": 100, "name": "id", "dtype": "Int64", "is_primary": True},
                                     {"field_id": 101, "name": "pk", "dtype": "Int64"},
                                     {"field_id": 102, "name": "segment_id", "dtype": "VarChar", "max_length": 8},
                                     {"field_id": 103, "name": "Timestamp", "dtype": "Double"},
                                     {"field_id": 104, "name": "vec", "dtype": "FloatVector", "dim": 2}],
                               partitions=["_default"], shards=1)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 2)
    ts = meta.tso.now()
    sid = add_segment(meta, store, coll, "_default",
                      {"id": pa.array([1, 2, 3], pa.int64()), "pk": pa.array([-7, -8, -9], pa.int64()),
                       "segment_id": pa.array(["a", "b", "c"]), "Timestamp": pa.array([0.5, 1.5, 2.5]),
                       "vec": vec}, [ts] * 3,
                      deletes=(np.array([2], np.int64), np.array([ts + 1], np.int64), np.array([0], np.int64)))
    snapshot.create(meta, store, src, "s1")
    exports.export(meta, store, backup, src, "s1", bundle="e1", say=lambda _: None)
    mdoc = restore.read_bundle(backup, restore.Request("default", src, "e1", "kc_new"))
    conv = convert.Converter(backup, mdoc)
    conv.check_values()
    files = conv.segment_files(sid)
    got = {}
    for fid in (100, 101, 102, 103):
        (key,) = [k for k in files if k.split("/")[-2] == str(fid)]
        col = binlog.column(io.BytesIO(files[key]), len(files[key]))
        got[fid] = col if isinstance(col, list) else col.to_pylist()
    # (a row a delete hides goes with a delete log, as convert's module doc says)
    assert got == {100: [1, 2, 3], 101: [-7, -8, -9], 102: ["a", "b", "c"], 103: [0.5, 1.5, 2.5]}
    assert [k for k in files if k.startswith("delta_log/")]
    vis = conv.visible()
    assert vis["count"] == 2 and sorted(vis["rows"]) == [1, 3]
    assert {k: v for k, v in vis["rows"][3][0].items() if k != "vec"} == \
        {"id": 3, "pk": -9, "segment_id": "c", "Timestamp": 2.5}
    rows = visibility.visible_rows(meta, store, coll.collection_id, columns=["pk", "segment_id", "Timestamp"])
    assert rows.column("pk#101").to_pylist() == [-7, -9] and rows.column("pk").to_pylist() == [1, 3]


def test_compacted_then_restored_in_seglake_then_restored_into_milvus(env, meta, store, milvus_server, s3_server):
    """The row-model collection compacted by seglake (L0 deletes folded, rows dropped),
    exported, restored into a new seglake collection (a copy: its delta logs keep the
    partition ids of where they were written), that one exported and restored into Milvus:
    Milvus's rows are the first collection's."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))
    from compaction_helpers import policy
    from seglake.lifecycle import compaction, copyjob
    from seglake.lifecycle.backup import bundle_restore

    kv, keys, backup = env
    src, mid, new = (f"{p}_{uuid.uuid4().hex[:8]}" for p in ("cc", "cm", "from_cc"))
    row_model_collection(meta, store, src, ahead=False)
    fields = ["pk", "embedding", "price"]
    want = seglake_view(meta, store, src, fields)
    s = compaction.compact(meta, store, src, policy(l0_age=0.0, delete_ratio=0.01))
    assert s.results and seglake_view(meta, store, src, fields) == want
    snapshot.create(meta, store, src, "s1")
    exports.export(meta, store, backup, src, "s1", bundle="e1", say=lambda _: None)
    r = bundle_restore.restore_from_bundle(meta, store, backup, src, "e1", mid, engine="inline", say=lambda _: None)
    copyjob.plan(meta, r["job_id"])
    copyjob.run_inline(meta, store, r["job_id"])
    assert copyjob.finalize(meta, r["job_id"]).state == "Completed"
    assert seglake_view(meta, store, mid, fields) == want
    report = _restore(env, milvus_server, s3_server, meta, store, mid, new)
    assert report["state"] == "verified" and report["ok"], report["problems"]
    same_rows(milvus_view(SessionClient(milvus_server.address), new, fields), want)


@pytest.mark.parametrize("bad", [{"bucket": ""}, {"bucket": "Bad_Bucket"}, {"staging": "a/../b"}, {"staging": ""},
                                 {"staging": "x y"}])
def test_a_bad_bucket_or_staging_prefix_is_refused_before_any_write(env, meta, store, milvus_server, s3_server, bad):
    """The bucket and the staging prefix are checked with the request, before the
    collection is created in Milvus (the staging store was opened only after it)."""
    import dataclasses

    from seglake.errors import ValidationError

    kv, keys, backup = env
    src, new = f"bb_{uuid.uuid4().hex[:8]}", f"from_bb_{uuid.uuid4().hex[:8]}"
    meta.catalog.create(src, [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
                              {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 2}], shards=1)
    snapshot.create(meta, store, src, "s1")
    exports.export(meta, store, backup, src, "s1", bundle="e1", say=lambda _: None)
    target = dataclasses.replace(target_of(milvus_server, s3_server), **bad)
    with pytest.raises(ValidationError, match="bucket|staging"):
        restore.run(kv, keys, backup, target, restore.Request(db="default", collection=src, bundle="e1", name=new))
    assert not SessionClient(milvus_server.address).one({"op": "has", "name": new})["exists"]
    assert list(kv.range(keys.prefix)) == []
