"""Restore of a Milvus capture into a real Milvus 2.3.5 (seglake.milvus.restore): a round trip
under a new name into the same server, a SIGKILL mid-import then a re-run, and bad input.

Every bundle is a real capture of the test's Milvus by the project's capture
(seglake.milvus.capture, through tests/milvus/bundle_helper.py); the bad-input cases damage
such a capture (a flipped byte, an altered bundle.json) to craft their input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bundle_helper import SessionClient, capture, close_sessions, s3_client
from seglake.errors import Conflict
from seglake.meta.kv import KV
from seglake.milvus import restore
from seglake.milvus.client import MilvusUnreachable
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]
REPO = Path(__file__).resolve().parents[2]
DIM = 4
IVF = {"index_type": "IVF_FLAT", "metric_type": "L2", "params": {"nlist": 4}}


def target_of(milvus_server, s3_server, **kw) -> restore.MilvusTarget:
    return restore.MilvusTarget(address=milvus_server.address, bucket=milvus_server.s3.bucket,
                                s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                                s3_secret_key=s3_server.secret_key, **kw)


def make_source(milvus, name: str) -> None:
    """2 partitions, 2 shards, deletes across both, upserts, an IVF index; flushed."""
    milvus({"op": "create", "name": name, "partitions": ["p1", "p2"], "shards": 2, "dim": DIM},
           {"op": "insert", "name": name, "partition": "p1", "pks": list(range(0, 120))},
           {"op": "insert", "name": name, "partition": "p2", "pks": list(range(120, 200))},
           {"op": "flush", "name": name},
           {"op": "insert", "name": name, "partition": "p2", "pks": list(range(200, 230))},
           {"op": "delete", "name": name, "pks": [3, 4, 50, 125, 210]},
           {"op": "upsert_by", "name": name, "partition": "p1", "pks": [5, 6, 7], "add": 0.25},
           {"op": "upsert_by", "name": name, "partition": "p2", "pks": [130, 215], "add": 0.5},
           {"op": "create_index", "name": name, "field": "vec", "index_name": "vec_ivf", "params": IVF},
           {"op": "flush", "name": name})


def part_pks(client, name, part):
    return sorted(r["pk"] for r in client.one({"op": "query", "name": name, "expr": "pk >= 0", "output_fields": ["pk"],
                                               "limit": 16384, "partitions": [part]}))


def all_rows(client, name):
    rows = client.one({"op": "query", "name": name, "expr": "pk >= 0", "output_fields": ["pk", "v", "vec"],
                       "limit": 16384})
    return sorted(rows, key=lambda r: r["pk"])


@pytest.fixture
def env(etcd_server, milvus_server, s3_server, tmp_path):
    kv = KV(etcd_server.endpoint, timeout=10, root=f"mr{uuid.uuid4().hex[:8]}")
    yield kv, kv.marker_keys, LocalStore(str(tmp_path / "backup"))
    kv.close()


def test_round_trip_same_server(env, milvus, milvus_server, s3_server):
    kv, keys, backup = env
    src, new = f"src_{uuid.uuid4().hex[:8]}", f"dst_{uuid.uuid4().hex[:8]}"
    make_source(milvus, src)
    doc = capture(milvus_server, s3_server, backup, src)
    assert len(doc["segments"]) >= 4 and any(e["deltalogs"] for e in doc["segments"])
    target = target_of(milvus_server, s3_server)
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=50, poll=0.5)
    report = restore.run(kv, keys, backup, target, req)
    print("\nRESTORE", {k: v for k, v in report.items() if k != "problems"})
    assert report["state"] == "verified" and report["ok"], report["problems"]
    # 230 inserted - 5 deleted; upserts replace
    assert report["count"] == report["visible_rows"] == 225 and report["sampled"] == 50

    c = SessionClient(milvus_server.address)
    c.one({"op": "load", "name": src})
    a, b = all_rows(c, src), all_rows(c, new)
    assert len(a) == 225 and a == b                       # row by row, every field
    assert {r["pk"]: r["v"] for r in b}[5] == pytest.approx(0.75) and 3 not in {r["pk"] for r in b}
    sch = c.one({"op": "schema", "name": new})
    assert sch["shards"] == 2 and set(sch["partitions"]) == {"_default", "p1", "p2"}
    assert [(i["field"], i["params"]["index_type"]) for i in sch["indexes"]] == [("vec", "IVF_FLAT")]
    for part in ("p1", "p2"):   # rows stay in their partition
        assert part_pks(c, src, part) == part_pks(c, new, part) != []
    known = [r["vec"] for r in a[::37]]
    s_src = c.one({"op": "search", "name": src, "field": "vec", "vectors": known, "limit": 5, "params": {"nprobe": 4}})
    s_new = c.one({"op": "search", "name": new, "field": "vec", "vectors": known, "limit": 5, "params": {"nprobe": 4}})
    assert s_src == s_new and [ids[0] for ids in s_new] == [r["pk"] for r in a[::37]]
    # the staging copies are gone; the record says verified
    s3 = s3_client(s3_server)
    left = s3.list_objects_v2(Bucket=target.bucket, Prefix=f"{target.staging}/{report['restore_id']}/")
    assert left.get("KeyCount", 0) == 0
    rec = json.loads(kv.get(keys.milvus_restore(report["restore_id"])).value)
    assert rec["state"] == "verified"
    # a re-run is a no-op: nothing imported again
    n_tasks = len(c.one({"op": "list_imports", "name": new}))
    again = restore.run(kv, keys, backup, target, req)
    assert again["state"] == "verified" and len(c.one({"op": "list_imports", "name": new})) == n_tasks
    assert c.one({"op": "count_loaded", "name": new})["count"] == 225


def _run_killed(milvus_server, s3_server, etcd_server, kv, backup, req, faults: str):
    """The restore in a child process (the CLI's engine call), SIGKILLed at a fault point."""
    spec = {"etcd": etcd_server.endpoint, "root": kv.marker_keys.root, "backup": str(backup.root),
            "address": milvus_server.address, "bucket": milvus_server.s3.bucket, "s3": s3_server.endpoint,
            "ak": s3_server.access_key, "sk": s3_server.secret_key, "req": req.__dict__}
    code = """
import json, sys
from seglake.meta.kv import KV
from seglake.milvus import restore
from seglake.storage.local import LocalStore
s = json.load(sys.stdin)
kv = KV(s["etcd"], root=s["root"])
t = restore.MilvusTarget(address=s["address"], bucket=s["bucket"], s3_endpoint=s["s3"], s3_access_key=s["ak"], s3_secret_key=s["sk"])
print(restore.run(kv, kv.marker_keys, LocalStore(s["backup"]), t, restore.Request(**s["req"])))
"""
    env = dict(os.environ, SEGLAKE_FAULTS=faults, PYTHONPATH=f"{REPO / 'include'}:{os.environ.get('PYTHONPATH', '')}")
    return subprocess.run([sys.executable, "-c", code], input=json.dumps(spec), env=env, capture_output=True,
                          text=True, timeout=600)


# each kill point once (after_submit at 10 % and 90 % as well took the same adoption path
# with more or fewer imports before it: two more Milvus restores for no new path)
@pytest.mark.parametrize("point,frac", [("after_submit", 0.5), ("after_stage", 0.5), ("waiting", None)])
def test_sigkill_mid_import_then_rerun_converges(env, milvus, milvus_server, s3_server, etcd_server, point, frac):
    """Killed after the k-th import reached Milvus but before its task id was recorded (the
    worst moment: k = half the imports, each a partition's segments), after the k-th unit
    was staged, or while waiting for the imports."""
    kv, keys, backup = env
    src, new = f"src_{uuid.uuid4().hex[:8]}", f"dst_{uuid.uuid4().hex[:8]}"
    make_source(milvus, src)
    doc = capture(milvus_server, s3_server, backup, src)
    n = len(restore.units(doc, {"rid": "r"}))        # one import per partition here
    assert 2 <= n < len(doc["segments"])
    fault = f"milvus_restore.{point}:kill@{max(1, min(n - 1, round(n * frac))) if frac else 1}"
    req = restore.Request(db="default", collection=src, bundle="b1", name=new, sample=20, poll=0.5)
    r = _run_killed(milvus_server, s3_server, etcd_server, kv, backup, req, fault)
    assert r.returncode == -9, r.stderr[-2000:]
    c = SessionClient(milvus_server.address)
    before = c.one({"op": "list_imports", "name": new})
    print(f"\nKILLED at {fault}: {len(before)} import task(s) in Milvus of {n} ({len(doc['segments'])} segments)")
    if point == "after_submit":   # the k-th import is in Milvus, its id not in etcd
        assert len(before) == int(fault.rsplit("@", 1)[1]) < n
    elif point == "after_stage":
        assert before == []
    else:
        assert len(before) == n
    report = restore.run(kv, keys, backup, target_of(milvus_server, s3_server), req)
    assert report["state"] == "verified" and report["ok"], report["problems"]
    tasks = c.one({"op": "list_imports", "name": new})
    # one import per unit, none twice (the one killed before its id was recorded was adopted)
    assert len(tasks) == n == report["imports"] and all(t["state"] == "Completed" for t in tasks)
    assert len({tuple(t["files"]) for t in tasks}) == n
    assert report["count"] == 225
    c.one({"op": "load", "name": src})
    assert all_rows(c, src) == all_rows(c, new)


def test_bad_input_refused_before_anything_is_created(env, milvus, milvus_server, s3_server):
    kv, keys, backup = env
    src = f"src_{uuid.uuid4().hex[:8]}"
    milvus({"op": "create", "name": src, "partitions": ["p1"], "shards": 1, "dim": DIM},
           {"op": "insert", "name": src, "partition": "p1", "pks": list(range(0, 30))},
           {"op": "flush", "name": src})
    doc = capture(milvus_server, s3_server, backup, src)
    c = SessionClient(milvus_server.address)
    target = target_of(milvus_server, s3_server)

    def nothing_created(name):
        assert not c.one({"op": "has", "name": name})["exists"]
        assert list(kv.range(keys.prefix)) == []
        s3 = s3_client(s3_server)
        assert s3.list_objects_v2(Bucket=target.bucket, Prefix=f"{target.staging}/").get("KeyCount", 0) == 0 \
            or all(restore.restore_id(target, restore.Request("default", src, "b1", name)) not in o["Key"]
                   for o in s3.list_objects_v2(Bucket=target.bucket, Prefix=f"{target.staging}/").get("Contents", []))

    # an unreachable Milvus
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    name = f"dst_{uuid.uuid4().hex[:8]}"
    bad_target = restore.MilvusTarget(address=dead, bucket=target.bucket, s3_endpoint=s3_server.endpoint)
    req = restore.Request(db="default", collection=src, bundle="b1", name=name)
    with pytest.raises(MilvusUnreachable, match="cannot connect"):
        restore.run(kv, keys, backup, bad_target, req)
    nothing_created(name)
    # the name is taken
    with pytest.raises(Conflict, match="already exists"):
        restore.run(kv, keys, backup, target, restore.Request(db="default", collection=src, bundle="b1", name=src))
    assert list(kv.range(keys.prefix)) == []
    # a bad name, a bad number
    with pytest.raises(Exception, match="collection"):
        restore.run(kv, keys, backup, target, restore.Request("default", src, "b1", "1-bad"))
    with pytest.raises(Exception, match="sample"):
        restore.run(kv, keys, backup, target, restore.Request("default", src, "b1", name, sample=-1))
    nothing_created(name)
    # a damaged data file (one byte flipped, same size)
    path = next(p for p in doc["files"] if p.startswith("insert_log/"))
    sha = doc["files"][path]["sha256"]
    from seglake.storage import layout
    raw = bytearray(backup.get(layout.bundle_blob(sha)))
    raw[len(raw) // 2] ^= 0xFF
    backup.put(layout.bundle_blob(sha), bytes(raw))
    with pytest.raises(restore.MilvusRestoreError, match="damaged.*nothing was written"):
        restore.run(kv, keys, backup, target, req)
    nothing_created(name)
    # a damaged bundle.json
    key = layout.bundle_doc("default", src, "b1")
    backup.put(key, backup.get(key).replace(b'"num_rows"', b'"num_rowz"'))
    with pytest.raises(Exception, match="SHA-256"):
        restore.run(kv, keys, backup, target, req)
    nothing_created(name)


def test_round_trip_into_a_second_fresh_server(env, milvus, milvus_server, s3_server, etcd_server, tmp_path):
    """The same capture restored into another, fresh Milvus (own etcd root, own bucket on the
    same S3 server): rows equal row by row, the same search ids, the same count."""
    from seglake.dev.milvus import MilvusServer, S3Target

    kv, keys, backup = env
    src, new = f"src_{uuid.uuid4().hex[:8]}", f"dst_{uuid.uuid4().hex[:8]}"
    make_source(milvus, src)
    capture(milvus_server, s3_server, backup, src)
    tgt = S3Target(endpoint=s3_server.endpoint, bucket="milvus-second", root_path=f"files-{uuid.uuid4().hex[:8]}",
                   access_key=s3_server.access_key, secret_key=s3_server.secret_key)
    other = MilvusServer(state_dir=tmp_path / "m2", etcd_endpoint=etcd_server.endpoint,
                         etcd_root=f"milvus2-{uuid.uuid4().hex[:8]}", s3=tgt)
    other.prepare()
    other.start(timeout=120)
    try:
        target = restore.MilvusTarget(address=other.address, bucket=tgt.bucket, s3_endpoint=s3_server.endpoint,
                                      s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key)
        report = restore.run(kv, keys, backup, target,
                             restore.Request(db="default", collection=src, bundle="b1", name=new, sample=50, poll=0.5))
        print("\nRESTORE second server", {k: v for k, v in report.items() if k != "problems"})
        assert report["state"] == "verified" and report["ok"] and report["count"] == 225
        c1, c2 = SessionClient(milvus_server.address), SessionClient(other.address)
        c1.one({"op": "load", "name": src})
        a, b = all_rows(c1, src), all_rows(c2, new)
        assert len(a) == 225 and a == b
        known = [r["vec"] for r in a[::37]]
        search = {"op": "search", "field": "vec", "vectors": known, "limit": 5, "params": {"nprobe": 4}}
        assert c1.one(dict(search, name=src)) == c2.one(dict(search, name=new))
        assert not c1.one({"op": "has", "name": new})["exists"]    # nothing written to the source server
    finally:
        close_sessions(other.address)
        other.stop()
