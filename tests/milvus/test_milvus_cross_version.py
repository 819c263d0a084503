"""Restore across Milvus versions: a capture of the worker's Milvus 2.3.5 restored into another
2.3.x server, and a capture of that server restored into 2.3.5; rows compared row by row per
partition, count(*), and a search of known vectors returns the same ids.

The other server is the PyPI `milvus` wheel in .dev/milvus-other-venv (`make milvus-other-venv`:
2.3.3, the oldest 2.3 server that takes `<role>.ip`, so every address it registers is loopback;
the registry has Linux wheels of 2.3.0-2.3.5 and its 2.3.8 and 2.3.9 are macOS arm64 wheels
only, so no newer 2.3 server runs here), or the venv $MILVUS_OTHER_VENV names. Skipped,
with the reason, when that venv is absent (making it downloads a 56 MB wheel)."""

from __future__ import annotations

import os
import textwrap
import subprocess
import uuid
from pathlib import Path

import pytest

from bundle_helper import SessionClient, capture, milvus_client, pyrun
from tests.milvus.conftest import own_milvus
from test_milvus_restore import all_rows, make_source, part_pks, target_of
from seglake.meta.kv import KV
from seglake.milvus import restore
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]
REPO = Path(__file__).resolve().parents[2]
OTHER_VENV = Path(os.environ.get("MILVUS_OTHER_VENV", REPO / ".dev" / "milvus-other-venv"))


def _wheel_version(venv: Path) -> str:
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import milvus; print(milvus.__version__)"],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.strip() if r.returncode == 0 else ""


@pytest.fixture(scope="module")
def other(etcd_server, s3_server, tmp_path_factory):
    from seglake.dev.milvus import BIN_CACHE

    version = _wheel_version(OTHER_VENV) if (OTHER_VENV / "bin" / "python").exists() else ""
    if not version:
        pytest.skip(f"no other Milvus 2.3.x server here: no importable `milvus` wheel in {OTHER_VENV} "
                    f"(`make milvus-other-venv` makes one)")
    if version == "2.3.5":
        pytest.skip(f"{OTHER_VENV} holds Milvus 2.3.5, the version of the worker's server")
    for server in own_milvus(etcd_server, s3_server, tmp_path_factory, "milvus-xv", "xv", auto_compaction=True,
                             start_timeout=180, venv=OTHER_VENV,
                             bin_cache=BIN_CACHE.with_name(f"{BIN_CACHE.name}-{version}")):
        assert server.prepared["version"] == version
        print(f"\nOTHER MILVUS {version} healthy in {server.healthy_after:.1f}s")
        yield server


@pytest.fixture
def env(etcd_server, tmp_path):
    kv = KV(etcd_server.endpoint, timeout=10, root=f"xv{uuid.uuid4().hex[:8]}")
    yield kv, kv.marker_keys, LocalStore(str(tmp_path / "backup"))
    kv.close()


def _server_version(address: str) -> str:
    return SessionClient(address).one({"op": "version"})["version"]


def _compare(src_addr: str, dst_addr: str, src: str, new: str) -> int:
    a_c, b_c = SessionClient(src_addr), SessionClient(dst_addr)
    a_c.one({"op": "load", "name": src})
    a, b = all_rows(a_c, src), all_rows(b_c, new)
    assert len(a) == 225 and a == b                       # row by row, every field
    assert b_c.one({"op": "count_loaded", "name": new})["count"] == 225
    for part in ("p1", "p2"):                               # rows stay in their partition
        assert part_pks(a_c, src, part) == part_pks(b_c, new, part) != []
    sch = b_c.one({"op": "schema", "name": new})
    assert sch["shards"] == 2 and set(sch["partitions"]) == {"_default", "p1", "p2"}
    assert [(i["field"], i["params"]["index_type"]) for i in sch["indexes"]] == [("vec", "IVF_FLAT")]
    known = [r["vec"] for r in a[::23]]
    q = {"field": "vec", "vectors": known, "limit": 5, "params": {"nprobe": 4}}
    s_src, s_new = a_c.one({"op": "search", "name": src, **q}), b_c.one({"op": "search", "name": new, **q})
    assert s_src == s_new and [ids[0] for ids in s_new] == [r["pk"] for r in a[::23]]
    return len(a)


@pytest.mark.parametrize("direction", ["2.3.5->other", "other->2.3.5"])
def test_restore_across_versions(direction, env, other, milvus_server, milvus_python, s3_server):
    kv, keys, backup = env
    src_srv, dst_srv = (milvus_server, other) if direction == "2.3.5->other" else (other, milvus_server)
    versions = _server_version(src_srv.address), _server_version(dst_srv.address)
    assert versions[0] != versions[1], versions
    src, new = f"src_{uuid.uuid4().hex[:8]}", f"dst_{uuid.uuid4().hex[:8]}"
    make_source(lambda *ops, **kw: milvus_client(milvus_python, src_srv.address, *ops, **kw), src)
    doc = capture(src_srv, s3_server, backup, src)
    assert doc["source"]["milvus_version"].lstrip("v").startswith(versions[0].lstrip("v")[:5])
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=50, poll=0.5)
    report = restore.run(kv, keys, backup, target_of(dst_srv, s3_server), req)
    print(f"\nRESTORE {versions[0]} -> {versions[1]}:", {k: v for k, v in report.items() if k != "problems"})
    assert report["state"] == "verified" and report["ok"], report["problems"]
    assert report["count"] == report["visible_rows"] == 225
    assert _compare(src_srv.address, dst_srv.address, src, new) == 225


# -- schemas users make, captured on 2.3.5 and restored into the other version -------------
def _xround(env, other, milvus_server, milvus_python, s3_server, build: str, *, pk, expr, fields, vec,
            sparams=None, expect_rows=None, partition_key=False):
    """build (pymilvus code, `name` the collection) on 2.3.5 -> capture -> restore into the
    other server -> rows equal row by row per partition, count(*), search ids."""
    kv, keys, backup = env
    src, new = f"x_{uuid.uuid4().hex[:8]}", f"y_{uuid.uuid4().hex[:8]}"
    pyrun(milvus_python, milvus_server.address, f"name = {src!r}\n" + textwrap.dedent(build))
    capture(milvus_server, s3_server, backup, src)
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=100, poll=0.5)
    report = restore.run(kv, keys, backup, target_of(other, s3_server), req)
    print("\nRESTORE 2.3.5 ->", _server_version(other.address), {k: v for k, v in report.items() if k != "problems"})
    assert report["state"] == "verified" and report["ok"], report["problems"]
    code = f"""
    OUT["rows"] = sorted(rows_of(NAME, {expr!r}, {fields!r}), key=lambda r: (r["_partition"], str(r[{pk!r}])))
    OUT["count"] = Collection(NAME).query(expr="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]
    """
    a = pyrun(milvus_python, milvus_server.address, f"NAME = {src!r}\n" + textwrap.dedent(code))
    b = pyrun(milvus_python, other.address, f"NAME = {new!r}\n" + textwrap.dedent(code))
    if expect_rows is not None:
        assert len(a["rows"]) == expect_rows
    assert a["rows"] == b["rows"], next(((x, y) for x, y in zip(a["rows"], b["rows"]) if x != y), "lengths")
    assert report["count"] == a["count"] == b["count"]
    known = [r[vec] for r in a["rows"][:: max(1, len(a["rows"]) // 7)]]
    s = f"""
    OUT["ids"] = [list(h.ids) for h in Collection(NAME).search({known!r}, {vec!r},
                  {{"metric_type": "L2", "params": {sparams or {}!r}}}, limit=3, consistency_level="Strong")]
    """
    sa = pyrun(milvus_python, milvus_server.address, f"NAME = {src!r}\n" + textwrap.dedent(s))
    sb = pyrun(milvus_python, other.address, f"NAME = {new!r}\n" + textwrap.dedent(s))
    assert sa["ids"] == sb["ids"] and [i[0] for i in sb["ids"]] == [r[pk] for r in a["rows"][:: max(1, len(a["rows"]) // 7)]]
    return src, new


@pytest.mark.parametrize("dynamic", [False, True])
def test_varchar_pk_json_array_dynamic_into_the_other_version(dynamic, env, other, milvus_server, milvus_python,
                                                              s3_server):
    """VarChar pks (the delete records' pks are strings), upserts of flushed and of growing
    rows, a pk deleted and inserted again before a flush, dynamic keys or not, 2 shards."""
    version = _server_version(other.address)
    if restore.filters_by_pk(version):
        pytest.skip(f"Milvus {version}'s bulk insert fails this schema in most runs here (\"fail to initialize "
                    f"in-memory segment data\", an InvalidType field in its import util), dynamic or not: the "
                    f"restore then stops naming it and 2.3.4 (README)")
    build = _VARCHAR if dynamic else \
        _VARCHAR.replace("enable_dynamic_field=True", "enable_dynamic_field=False").replace(
            ',\n                 "color": "red" if len(i) % 2 else "blue"}', "}")
    assert dynamic or "color" not in build
    _xround(env, other, milvus_server, milvus_python, s3_server, build, pk="id", expr='id != ""',
            fields=["*", "vec"], vec="vec", sparams={"ef": 64}, expect_rows=207)


_VARCHAR = """
    fields = [FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=64),
              FieldSchema("meta", DataType.JSON),
              FieldSchema("arr", DataType.ARRAY, element_type=DataType.INT64, max_capacity=4),
              FieldSchema("s", DataType.VARCHAR, max_length=200),
              FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4)]
    c = Collection(name, CollectionSchema(fields, enable_dynamic_field=True), shards_num=2)
    c.create_partition("p1")
    def rows(ids, add=0.0):
        return [{"id": i, "meta": {"k": i, "n": [1, len(i)]}, "arr": [len(i), 2, 3][: len(i) % 4],
                 "s": "h\\u00e9llo '\\"-" + i, "vec": [float(len(i)) + add, float(int(i[1:])), float(ord(i[0])), add],
                 "color": "red" if len(i) % 2 else "blue"} for i in ids]
    c.insert(rows([f"k{j:04d}" for j in range(0, 120)]))
    c.insert(rows([f"q{j}" for j in range(0, 50)]), partition_name="p1")
    c.flush()
    c.insert(rows([f"z{j}" for j in range(0, 40)]))
    c.delete('id in ["k0003", "q7", "z1", "z2"]')
    c.upsert(rows(["k0010", "z5"], add=100.0))
    c.insert(rows(["z2"], add=7.0))                     # deleted, then inserted again: same growing segment
    c.upsert(rows(["q11"], add=50.0), partition_name="p1")
    c.create_index("vec", {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 8, "efConstruction": 64}})
    c.flush()
    """


def test_partition_key_into_the_other_version(env, other, milvus_server, milvus_python, s3_server):
    _xround(env, other, milvus_server, milvus_python, s3_server, """
    fields = [FieldSchema("pk", DataType.INT64, is_primary=True),
              FieldSchema("tenant", DataType.VARCHAR, max_length=16, is_partition_key=True),
              FieldSchema("vec", DataType.FLOAT_VECTOR, dim=4)]
    c = Collection(name, CollectionSchema(fields), shards_num=1, num_partitions=4)
    c.insert([list(range(60)), [f"t{i % 5}" for i in range(60)], [[float(i), 0.0, 1.0, 2.0] for i in range(60)]])
    c.flush()
    c.delete("pk in [2, 7]")
    c.upsert([[9], ["t1"], [[9.5, 0.0, 1.0, 2.0]]])       # t4 -> t1: another partition
    c.upsert([[12], ["t2"], [[12.5, 0.0, 1.0, 2.0]]])     # same key: same partition
    c.flush()
    """, pk="pk", expr="pk >= 0", fields=["pk", "tenant", "vec"], vec="vec", expect_rows=58)
