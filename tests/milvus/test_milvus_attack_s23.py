"""Adversarial cases of session 23 against seglake's Milvus capture / restore (issue 29).
A real Milvus 2.3.5 (the worker's milvus_server), its etcd and SeaweedFS."""

from __future__ import annotations

import textwrap
import uuid

import pytest

from bundle_helper import SessionClient, capture, pyrun
from seglake import faults
from seglake.meta.kv import KV
from seglake.milvus import restore
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


def target_of(milvus_server, s3_server) -> restore.MilvusTarget:
    return restore.MilvusTarget(address=milvus_server.address, bucket=milvus_server.s3.bucket,
                                s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                                s3_secret_key=s3_server.secret_key)


@pytest.fixture
def env(etcd_server, milvus_server, s3_server, tmp_path):
    kv = KV(etcd_server.endpoint, timeout=10, root=f"ms{uuid.uuid4().hex[:8]}")
    yield kv, kv.marker_keys, LocalStore(str(tmp_path / "backup"))
    kv.close()


@pytest.fixture
def pm(milvus_python, milvus_server):
    return lambda code, **kw: pyrun(milvus_python, milvus_server.address, code, **kw)


TOY = """
def toy(name, parts=(), shards=1):
    c = Collection(name, CollectionSchema([FieldSchema("pk", DataType.INT64, is_primary=True),
                                           FieldSchema("v", DataType.VARCHAR, max_length=32),
                                           FieldSchema("vec", DataType.FLOAT_VECTOR, dim=2)]), shards_num=shards)
    for p in parts:
        c.create_partition(p)
    return c
def put(c, pks, tag, partition=None):
    c.insert([list(pks), [f"{tag}-{p}" for p in pks], [[float(p), float(len(tag))] for p in pks]], partition_name=partition)
"""


def rows_of(name):
    c = SessionClient_for[0]
    c.one({"op": "load", "name": name})
    return sorted((r["pk"], r["v"]) for r in c.one({"op": "query", "name": name, "expr": "pk >= 0",
                                                    "output_fields": ["pk", "v"], "limit": 16384}))


SessionClient_for: list = []


@pytest.mark.parametrize("killed_at", ["milvus_restore.after_stage", "milvus_restore.waiting"])
def test_a_killed_restore_whose_half_made_collection_was_dropped_can_be_run_again(env, pm, milvus_server, s3_server,
                                                                                  killed_at):
    """A restore dies mid-import (a stage done, or waiting on Milvus's import); the operator
    drops the half-made collection to start clean and runs the same restore again (or a
    restore of a newer capture into that name). The name is free in Milvus: the re-run should
    restore from the start (one import per unit, rows equal), not be refused for ever."""
    kv, keys, backup = env
    SessionClient_for[:] = [SessionClient(milvus_server.address)]
    src = f"hk_{uuid.uuid4().hex[:8]}"
    pm(TOY + textwrap.dedent(f"""
    c = toy({src!r}, parts=["p1"])
    put(c, range(0, 40), "a")
    put(c, range(40, 70), "a", partition="p1")
    c.flush()
    c.delete("pk in [3, 41]")
    c.flush()
    c.create_index("vec", {{"index_type": "FLAT", "metric_type": "L2", "params": {{}}}})
    """))
    capture(milvus_server, s3_server, backup, src, bundle="b1")
    x = f"x_{uuid.uuid4().hex[:8]}"
    req = restore.Request("default", src, "b1", x, poll=0.2, sample=20)
    with faults.inject(killed_at), pytest.raises(faults.InjectedFault):
        restore.run(kv, keys, backup, target_of(milvus_server, s3_server), req)
    pm(f"utility.drop_collection({x!r})")
    try:
        rep = restore.run(kv, keys, backup, target_of(milvus_server, s3_server), req)
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"the same restore into {x!r} after its half-made collection was dropped: "
                    f"{type(e).__name__}: {str(e)[:400]}")
    assert rep["state"] == "verified" and rep["count"] == 68, rep
    tasks = SessionClient_for[0].one({"op": "list_imports", "name": x})
    assert len(tasks) == rep["imports"] and all(t["state"] == "Completed" for t in tasks), tasks
    assert rows_of(x) == rows_of(src)


def test_after_a_killed_restore_and_its_collection_dropped_other_bundles_restore_into_the_name(env, pm, milvus_server,
                                                                                               s3_server):
    """b1 of default.A restored into X, killed while importing; the operator drops X and
    restores the newer capture b2 (same restore id: the other-bundle check) and, once that is
    dropped as well after another killed run, a bundle of another database (another restore
    id: the first-for-name check). Each should restore; none is refused for a name Milvus
    does not have."""
    kv, keys, backup = env
    SessionClient_for[:] = [SessionClient(milvus_server.address)]
    a = f"ob_{uuid.uuid4().hex[:8]}"
    dbn = f"d{uuid.uuid4().hex[:6]}"
    pm(TOY + f"c = toy({a!r}); put(c, range(0, 40), 'a'); c.flush()")
    capture(milvus_server, s3_server, backup, a, bundle="b1")
    pm(TOY + f"c = Collection({a!r}); put(c, range(40, 50), 'a'); c.flush()")
    capture(milvus_server, s3_server, backup, a, bundle="b2")
    pm(TOY + f"db.create_database({dbn!r}); db.using_database({dbn!r}); c = toy({a!r}); put(c, range(100, 130), 'b'); "
             f"c.flush()")
    capture(milvus_server, s3_server, backup, a, bundle="b1", db=dbn)
    x = f"x_{uuid.uuid4().hex[:8]}"
    t = target_of(milvus_server, s3_server)
    with faults.inject("milvus_restore.waiting"), pytest.raises(faults.InjectedFault):
        restore.run(kv, keys, backup, t, restore.Request("default", a, "b1", x, poll=0.2))
    pm(f"utility.drop_collection({x!r})")
    try:
        rep = restore.run(kv, keys, backup, t, restore.Request("default", a, "b2", x, poll=0.2))
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"b2 into {x!r} after b1's killed restore's collection was dropped: {type(e).__name__}: "
                    f"{str(e)[:400]}")
    assert rep["state"] == "verified" and rep["count"] == 50, rep
    # b2's restore killed in turn (a new name: b2's run into x is finished), then a bundle of
    # another database into that second name once its half-made collection is dropped
    y = f"y_{uuid.uuid4().hex[:8]}"
    with faults.inject("milvus_restore.waiting"), pytest.raises(faults.InjectedFault):
        restore.run(kv, keys, backup, t, restore.Request("default", a, "b2", y, poll=0.2))
    pm(f"utility.drop_collection({y!r})")
    try:
        rep = restore.run(kv, keys, backup, t, restore.Request(dbn, a, "b1", y, poll=0.2))
    except Exception as e:  # noqa: BLE001
        pytest.fail(f"{dbn}.{a}/b1 into {y!r} after another restore's collection there was dropped: "
                    f"{type(e).__name__}: {str(e)[:400]}")
    assert rep["state"] == "verified" and rep["count"] == 30, rep
    assert [p for p, _ in rows_of(y)] == list(range(100, 130))
