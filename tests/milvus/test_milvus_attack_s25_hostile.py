"""Adversarial cases of session 25 against seglake's Milvus capture (issue 29): hostile
records in the source Milvus's etcd. A real Milvus 2.3.5 (the worker's milvus_server) makes
a collection; its whole etcd root is copied to a fresh root of the same etcd (the bucket is
Milvus's own, untouched) and one record of the copy is damaged. A capture of the copy must
refuse with a clear seglake error naming what is wrong, before anything is written to the
backup target: never a Python exception out of the protobuf reader, never data files
copied and then refused."""

from __future__ import annotations

import os
import textwrap
import uuid

import pytest

from bundle_helper import TOY, MilvusS3Settings, pyrun
from seglake.errors import SeglakeError
from seglake.meta.kv import KV
from seglake.milvus import capture as captures
from seglake.milvus.proto import fields, one
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


@pytest.fixture(scope="module")
def source(milvus_server, milvus_python):
    """A flushed collection: 2 partitions, 3 sealed segments, deletes (delta logs), an index."""
    name = f"hs_{uuid.uuid4().hex[:8]}"
    pyrun(milvus_python, milvus_server.address, TOY + textwrap.dedent(f"""
    c = toy({name!r}, parts=["p1"])
    put(c, range(0, 30), "a")
    c.flush()
    put(c, range(30, 50), "a", partition="p1")
    c.flush()
    c.delete("pk in [3, 31]")
    c.flush()
    c.create_index("vec", {{"index_type": "FLAT", "metric_type": "L2", "params": {{}}}})
    """))
    return name


def enc(f: dict) -> bytes:
    """fields() back to bytes (varints and length-delimited values: what these records hold)."""
    def varint(v: int) -> bytes:
        v &= (1 << 64) - 1
        out = b""
        while True:
            b, v = v & 0x7F, v >> 7
            out += bytes([b | (0x80 if v else 0)])
            if not v:
                return out
    out = b""
    for num in sorted(f):
        for v in f[num]:
            if isinstance(v, int):
                out += varint(num << 3) + varint(v)
            else:
                out += varint(num << 3 | 2) + varint(len(v)) + v
    return out


def mirror(kv: KV, root: str) -> str:
    """A copy of Milvus's whole etcd root under a fresh root; returns it."""
    new = f"hx-{uuid.uuid4().hex[:8]}"
    for item in kv.range(root + "/"):
        kv.put(new + item.key[len(root):], bytes(item.value))
    return new


def keys_of(kv: KV, root: str, sub: str, cid: int) -> list:
    return sorted(kv.range(f"{root}/meta/{sub}/{cid}/"), key=lambda i: i.key)


def run_capture(kv, milvus_server, s3_server, backup, root: str, name: str):
    bucket = captures.open_bucket(MilvusS3Settings(s3_server), milvus_server.s3.bucket, milvus_server.s3.root_path)
    return captures.capture(kv, bucket, backup, root, [name], bundle="b1", threads=2,
                            source={"bucket": milvus_server.s3.bucket, "root_path": milvus_server.s3.root_path})


def written(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)


def _collection_id(kv, root, name) -> int:
    for item in kv.range(f"{root}/meta/root-coord/database/collection-info/"):
        f = fields(bytes(item.value))
        if one(fields(one(f, 2, b"")), 1, b"").decode() == name:
            return int(item.key.rsplit("/", 1)[1])
    raise AssertionError(name)


def _first_segment_with(kv, root, cid, kind: str):
    """(key, value) of the first binlog / deltalog / s record of the collection."""
    items = keys_of(kv, root, f"datacoord-meta/{kind}", cid)
    assert items, kind
    return items[0].key, bytes(items[0].value)


def _damage_garbage_segment(kv, root, cid):
    key, _ = _first_segment_with(kv, root, cid, "s")
    kv.put(key, b"\xff\xff\xff\xff")             # not a protobuf message
    return key


def _damage_name_not_utf8(kv, root, cid):
    key, raw = _first_segment_with(kv, root, cid, "s")
    f = fields(raw)
    f[4] = [b"\xff\xfe-dml"]                      # the insert channel, not UTF-8
    kv.put(key, enc(f))
    return key


def _damage_channel_a_number(kv, root, cid):
    key, raw = _first_segment_with(kv, root, cid, "s")
    f = fields(raw)
    f[4] = [7]                                    # a varint where the channel's string is
    kv.put(key, enc(f))
    return key


def _damage_segment_id_not_a_number(kv, root, cid):
    key, raw = _first_segment_with(kv, root, cid, "binlog")
    parts = key.split("/")
    parts[-2] = "x" + parts[-2]                   # .../binlog/C/P/xS/F
    kv.put("/".join(parts), raw)
    return "/".join(parts)


def _damage_missing_field_logs(kv, root, cid):
    """A Flushed segment without the insert logs of its vector field (102)."""
    items = [i for i in keys_of(kv, root, "datacoord-meta/binlog", cid) if i.key.endswith("/102")]
    kv.delete(items[0].key)
    return items[0].key.rsplit("/", 1)[0].rsplit("/", 1)[1]     # the segment id


def _damage_rows(kv, root, cid):
    """A segment whose record says one row more than its logs hold."""
    key, raw = _first_segment_with(kv, root, cid, "s")
    f = fields(raw)
    f[5] = [one(f, 5, 0) + 1]
    kv.put(key, enc(f))
    return str(one(f, 1, 0))


DAMAGES = {"garbage_segment_record": _damage_garbage_segment, "channel_not_utf8": _damage_name_not_utf8,
           "channel_a_number": _damage_channel_a_number,
           "segment_id_not_a_number": _damage_segment_id_not_a_number,
           "missing_field_logs": _damage_missing_field_logs, "rows_off_by_one": _damage_rows}


def test_an_undamaged_copy_of_the_root_captures(source, milvus_server, s3_server, etcd_server, tmp_path):
    """The harness itself: the copied root captures like the original (so the refusals below
    are the damage's)."""
    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        root = mirror(kv, milvus_server.etcd_root)
        try:
            reps = run_capture(kv, milvus_server, s3_server, LocalStore(str(tmp_path / "backup")), root, source)
        finally:
            kv.delete_prefix(root + "/")
    assert reps[0]["state"] == "committed" and reps[0]["segments"] >= 2, reps


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_hostile_catalog_record_is_refused_naming_it_before_any_write(source, milvus_server, s3_server, etcd_server,
                                                                         tmp_path, damage):
    """One damaged record of the source's etcd: the capture fails with a seglake error (the
    CLI's one-line message, the DAG's clear failure) naming the record or the segment, and
    the backup target holds nothing (no data file copied before the refusal)."""
    target = tmp_path / "backup"
    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        root = mirror(kv, milvus_server.etcd_root)
        try:
            cid = _collection_id(kv, root, source)
            named = DAMAGES[damage](kv, root, cid)
            with pytest.raises(Exception) as got:
                run_capture(kv, milvus_server, s3_server, LocalStore(str(target)), root, source)
        finally:
            kv.delete_prefix(root + "/")
    assert isinstance(got.value, SeglakeError), (
        f"{damage}: a {type(got.value).__name__} out of the capture, not a seglake error: {got.value}")
    msg = str(got.value)
    assert named in msg and "nothing captured" in msg, f"{damage}: the error does not name {named!r}: {msg}"
    files = written(target) if target.exists() else []
    assert not files, f"{damage}: refused after writing {len(files)} files to the target: {files[:5]}"


# -- hostile objects in the source's bucket: a log whose descriptor ids and row count are
#    right but whose values are not its field's type
def _plan_of(kv, milvus_server, s3_server, name):
    bucket = captures.open_bucket(MilvusS3Settings(s3_server), milvus_server.s3.bucket, milvus_server.s3.root_path)
    planned = captures.plan(kv, bucket, milvus_server.etcd_root, [name])
    return planned["collections"][0]["catalog"]


@pytest.mark.parametrize("swap", ["varchar_as_int64", "vector_of_another_dim", "vector_declared_as_varchar"])
def test_a_log_whose_values_are_not_its_field_s_type_is_refused(milvus_server, milvus_python, s3_server, tmp_path,
                                                                swap):
    """Milvus's bucket holds, under a segment's VarChar (or FloatVector, dim 2) log key, a
    binlog with the right collection / partition / segment / field ids and the right number
    of rows, but Int64 values (or vectors of dim 3, or a descriptor saying VarChar over
    vector bytes). Not Milvus's file for that field: a restore would hand Milvus's import
    values of another type (a failed import after the collection was made, or wrong rows).
    The capture refuses it naming the log, and commits nothing."""
    from bundle_helper import s3_client
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.milvus import binlog_writer
    from seglake.errors import NotFound

    name = f"hp_{uuid.uuid4().hex[:8]}"
    pyrun(milvus_python, milvus_server.address, TOY + f"c = toy({name!r}); put(c, range(0, 20), 'a'); c.flush()")
    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        cat = _plan_of(kv, milvus_server, s3_server, name)
        seg = cat["segments"][0]
        cid = cat["collection"]["collection_id"]
        fid = 102 if swap.startswith("vector") else 101
        log = next(fl["logs"][0] for fl in seg["binlogs"] if fl["field_id"] == fid)
        n = log["entries"]
        ids = (cid, seg["partition_id"], seg["segment_id"], fid)
        if swap == "varchar_as_int64":
            raw = binlog_writer.insert_log(*ids, 5, list(range(n)), log["ts_from"], log["ts_to"])
        elif swap == "vector_of_another_dim":
            raw = binlog_writer.insert_log(*ids, 101, [[1.0, 2.0, 3.0]] * n, log["ts_from"], log["ts_to"], dim=3)
        else:
            arr = binlog_writer.payload_array([[1.0, 2.0]] * n, 101, 2)
            raw = binlog_writer._file(ids, log["ts_from"], log["ts_to"], 21, binlog_writer.INSERT_EVENT,
                                      binlog_writer._parquet(arr), arr.nbytes)
        s3_client(s3_server).put_object(Bucket=milvus_server.s3.bucket,
                                        Key=f"{milvus_server.s3.root_path}/{log['path']}", Body=raw)
        backup = LocalStore(str(tmp_path / "backup"))
        with pytest.raises(Exception) as got:
            run_capture(kv, milvus_server, s3_server, backup, milvus_server.etcd_root, name)
    assert isinstance(got.value, SeglakeError), f"{swap}: {type(got.value).__name__}: {got.value}"
    assert log["path"] in str(got.value), f"{swap}: the error does not name {log['path']}: {got.value}"
    with pytest.raises(NotFound):
        bundles.read(backup, "default", name, "b1")
