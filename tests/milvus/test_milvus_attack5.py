"""Adversarial round 5 on issue 29: the Milvus side fails while seglake works. A target
Milvus SIGKILLed while its bulk inserts run (after every segment's import was submitted,
seglake's restore killed too), restarted, the restore re-run: it converges to exactly the
bundle's rows (nothing imported twice, nothing lost); a source Milvus SIGKILLed during a
capture: the capture (etcd + bucket only) is exact."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from bundle_helper import SessionClient, capture, close_sessions, milvus_client
from tests.milvus.conftest import own_milvus
from test_milvus_restore import _run_killed, all_rows, make_source, part_pks, target_of
from seglake.meta.kv import KV
from seglake.milvus import restore
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


# An import task whose data node died stays Pending/Started until Milvus expires it
# (rootCoord.importTaskExpiration, 900 s by default: seen here, a re-run 10 min after the
# restart still waiting on 3 Pending and 1 Started task); 60 s here so the test sees the whole
# path: expired -> Failed -> resubmitted by seglake -> Completed, nothing imported twice.
EXPIRE = 60


@pytest.fixture(scope="module")
def msrv(milvus_python, etcd_server, s3_server, tmp_path_factory):
    yield from own_milvus(etcd_server, s3_server, tmp_path_factory, "milvus-atk5", "atk5",
                          config={"rootCoord.importTaskExpiration": str(EXPIRE)})


@pytest.fixture
def env(etcd_server, tmp_path):
    kv = KV(etcd_server.endpoint, timeout=10, root=f"a5{uuid.uuid4().hex[:8]}")
    yield kv, kv.marker_keys, LocalStore(str(tmp_path / "backup"))
    kv.close()


def _sigkill_and_restart(srv) -> float:
    """SIGKILL the server (no graceful stop), then start it again on its ports."""
    close_sessions(srv.address)
    pid = srv.proc.pid
    os.kill(pid, signal.SIGKILL)
    srv.proc.wait(timeout=30)
    srv.stop()                      # its pid file and watchdog
    t0 = time.time()
    srv.start(timeout=180)
    return time.time() - t0


def test_varchar_pks_outside_the_basic_plane_and_with_control_characters(env, msrv, milvus_python, s3_server):
    """verify asks Milvus for sampled pks by an expression: an emoji (a character past
    U+FFFF), a newline, a DEL, leading/trailing blanks, a literal backslash-u must each be
    written as Milvus's parser reads them, and the restored rows equal the source's."""
    from bundle_helper import pyrun

    kv, keys, backup = env
    src, new = f"emo_{uuid.uuid4().hex[:8]}", f"emr_{uuid.uuid4().hex[:8]}"
    ids = ["😀", "a😀b", "line\nbreak", " lead", "trail ", "\\u0041", "del\x7f", "𝔘𝔫𝔦", "日本😀"] + \
        [f"n{i}" for i in range(12)]
    pyrun(milvus_python, msrv.address, f"""
fields = [FieldSchema("id", DataType.VARCHAR, is_primary=True, max_length=64),
          FieldSchema("vec", DataType.FLOAT_VECTOR, dim=2)]
c = Collection({src!r}, CollectionSchema(fields), shards_num=1)
ids = {ids!r}
c.insert([ids, [[float(i), 1.0] for i in range(len(ids))]])
c.flush()
c.delete('id in ["n3"]')
c.create_index("vec", {{"index_type": "FLAT", "metric_type": "L2", "params": {{}}}})
c.flush()
""")
    capture(msrv, s3_server, backup, src)
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=100, poll=0.5)
    report = restore.run(kv, keys, backup, target_of(msrv, s3_server), req)
    assert report["state"] == "verified" and report["ok"] and report["count"] == len(ids) - 1, report
    got = pyrun(milvus_python, msrv.address, f"""
OUT["a"] = sorted(rows_of({src!r}, 'id != "~"', ["id", "vec"]), key=lambda r: r["id"])
OUT["b"] = sorted(rows_of({new!r}, 'id != "~"', ["id", "vec"]), key=lambda r: r["id"])
""")
    assert got["a"] == got["b"] and {r["id"] for r in got["b"]} == set(ids) - {"n3"}


def test_sixteen_shards_three_partitions_deletes_and_upserts(env, msrv, milvus_python, s3_server):
    """The most shards Milvus 2.3 takes by default (16 vchannels, a segment per shard and
    partition): same shard count, every row back in its partition, search ids equal."""
    kv, keys, backup = env
    src, new = f"sh_{uuid.uuid4().hex[:8]}", f"shr_{uuid.uuid4().hex[:8]}"
    run = lambda *ops: milvus_client(milvus_python, msrv.address, *ops, timeout=300)   # noqa: E731
    run({"op": "create", "name": src, "partitions": ["p1", "p2"], "shards": 16, "dim": 4},
        {"op": "insert", "name": src, "partition": "p1", "pks": list(range(0, 300))},
        {"op": "insert", "name": src, "partition": "p2", "pks": list(range(300, 500))},
        {"op": "insert", "name": src, "pks": list(range(500, 560))},
        {"op": "flush", "name": src},
        {"op": "delete", "name": src, "pks": [1, 2, 299, 300, 555]},
        {"op": "upsert_by", "name": src, "partition": "p2", "pks": [301, 302], "add": 0.5},
        {"op": "upsert_by", "name": src, "partition": "p1", "pks": [10, 11], "add": 0.5},
        {"op": "create_index", "name": src, "field": "vec", "index_name": "ix", "params": {
            "index_type": "IVF_FLAT", "metric_type": "L2", "params": {"nlist": 4}}},
        {"op": "flush", "name": src})
    doc = capture(msrv, s3_server, backup, src)
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=100, poll=0.5)
    t0 = time.time()
    report = restore.run(kv, keys, backup, target_of(msrv, s3_server), req)
    print(f"\n16 SHARDS: {len(doc['segments'])} segments restored in {time.time() - t0:.1f}s", report["count"])
    assert report["state"] == "verified" and report["ok"] and report["count"] == 555, report
    c = SessionClient(msrv.address)
    c.one({"op": "load", "name": src})
    a, b = all_rows(c, src), all_rows(c, new)
    assert len(a) == 555 and a == b
    for part in ("_default", "p1", "p2"):
        assert part_pks(c, src, part) == part_pks(c, new, part) != []
    assert c.one({"op": "schema", "name": new})["shards"] == 16
    known = [r["vec"] for r in a[::61]]
    q = {"field": "vec", "vectors": known, "limit": 3, "params": {"nprobe": 4}}
    assert c.one({"op": "search", "name": src, **q}) == c.one({"op": "search", "name": new, **q})


# The two SIGKILL tests run last (pytest runs a file in order): after a kill with imports
# in flight the server dealt with them only on its 5-minute clean-up loop, and a restore
# run after them on the same server waited that long too (306 s against ~60 s).

def test_target_milvus_killed_while_importing_then_restore_rerun(env, msrv, milvus_python, s3_server, etcd_server):
    kv, keys, backup = env
    src, new = f"src_{uuid.uuid4().hex[:8]}", f"dst_{uuid.uuid4().hex[:8]}"
    make_source(lambda *ops, **kw: milvus_client(milvus_python, msrv.address, *ops, **kw), src)
    doc = capture(msrv, s3_server, backup, src)
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=50, poll=1.0,
                          import_timeout=4 * EXPIRE + 120)
    r = _run_killed(msrv, s3_server, etcd_server, kv, backup, req, "milvus_restore.waiting:kill@1")
    assert r.returncode == -9, r.stderr[-2000:]
    c = SessionClient(msrv.address)
    at_kill = c.one({"op": "list_imports", "name": new})
    took = _sigkill_and_restart(msrv)
    after = c.one({"op": "list_imports", "name": new})
    print(f"\nMILVUS SIGKILLED with imports {sorted(t['state'] for t in at_kill)}; restarted in {took:.1f}s; "
          f"then {sorted(t['state'] for t in after)}")
    t0 = time.time()
    report = restore.run(kv, keys, backup, target_of(msrv, s3_server), req)
    print("RERUN", round(time.time() - t0, 1), "s", {k: v for k, v in report.items() if k != "problems"})
    assert report["state"] == "verified" and report["ok"], report["problems"]
    assert report["count"] == report["visible_rows"] == 225
    c.one({"op": "load", "name": src})
    a, b = all_rows(c, src), all_rows(c, new)
    assert len(a) == 225 and a == b
    for part in ("p1", "p2"):
        assert part_pks(c, src, part) == part_pks(c, new, part) != []
    tasks = c.one({"op": "list_imports", "name": new})
    done = [t for t in tasks if t["state"] == "Completed"]
    assert len({tuple(t["files"]) for t in done}) == len(done) == report["imports"] == len(restore.units(doc, {"rid": "r"})), tasks


def test_source_milvus_killed_during_a_capture(env, msrv, milvus_python, s3_server):
    """The capture reads etcd and the bucket only: Milvus SIGKILLed (and restarted) between
    a capture's plan and its copy changes nothing it reads; the bundle's visible rows are
    Milvus's."""
    import threading

    from seglake.milvus import bundledoc, capture as captures
    from bundle_helper import MilvusS3Settings

    kv, keys, backup = env
    src = f"src_{uuid.uuid4().hex[:8]}"
    make_source(lambda *ops, **kw: milvus_client(milvus_python, msrv.address, *ops, **kw), src)
    killed = threading.Event()
    real_plan = captures.plan

    def plan_then_kill(*a, **kw):
        out = real_plan(*a, **kw)
        pid = msrv.proc.pid
        os.kill(pid, signal.SIGKILL)        # Milvus dies after the plan, before the files are read
        msrv.proc.wait(timeout=30)
        killed.set()
        return out

    captures.plan = plan_then_kill
    try:
        bucket = captures.open_bucket(MilvusS3Settings(s3_server), msrv.s3.bucket, msrv.s3.root_path)
        with KV(msrv.etcd_endpoint, timeout=10) as mkv:
            captures.capture(mkv, bucket, backup, msrv.etcd_root, [src], bundle="b1", db="default", threads=4,
                             source={"bucket": msrv.s3.bucket, "root_path": msrv.s3.root_path})
    finally:
        captures.plan = real_plan
        if killed.is_set():
            msrv.stop()
            msrv.start(timeout=180)
    assert killed.is_set()
    from seglake.lifecycle.backup import bundle as bundles

    doc = bundles.read(backup, "default", src, "b1")
    vis = bundledoc.visible_rows(backup, doc)
    # make_source: pks 0..229, 5 deleted, upserts replace (a load right after the restart
    # may answer "unrecoverable error" while Milvus recovers: the source's rows are known)
    assert vis["visible"] == 225 and vis["pks"] == sorted(set(range(230)) - {3, 4, 50, 125, 210})
