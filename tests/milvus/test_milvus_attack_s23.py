"""Adversarial cases of session 23 against seglake's Milvus capture / restore (issue 29).
A real Milvus 2.3.5 (the worker's milvus_server), its etcd and SeaweedFS."""

from __future__ import annotations

import textwrap
import uuid

import pytest

from bundle_helper import TOY, SessionClient, attack_env, capture, pyrun, target_of
from seglake import faults
from seglake.milvus import restore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


@pytest.fixture
def env(etcd_server, milvus_server, s3_server, tmp_path):
    kv, keys, backup = attack_env(etcd_server, tmp_path)
    yield kv, keys, backup
    kv.close()


@pytest.fixture
def pm(milvus_python, milvus_server):
    return lambda code, **kw: pyrun(milvus_python, milvus_server.address, code, **kw)


def rows_of(name):
    c = SessionClient_for[0]
    c.one({"op": "load", "name": name})
    return sorted((r["pk"], r["v"]) for r in c.one({"op": "query", "name": name, "expr": "pk >= 0",
                                                    "output_fields": ["pk", "v"], "limit": 16384}))


SessionClient_for: list = []


def _three_captures(pm, milvus_server, s3_server, backup, a: str, dbn: str) -> None:
    """`a` captured as b1 (40 rows) and b2 (50 rows) in `default`, and another `a` in database
    `dbn` (30 rows) as b1."""
    pm(TOY + f"c = toy({a!r}); put(c, range(0, 40), 'a'); c.flush()")
    capture(milvus_server, s3_server, backup, a, bundle="b1")
    pm(TOY + f"c = Collection({a!r}); put(c, range(40, 50), 'a'); c.flush()")
    capture(milvus_server, s3_server, backup, a, bundle="b2")
    pm(TOY + f"db.create_database({dbn!r}); db.using_database({dbn!r}); c = toy({a!r}); put(c, range(100, 130), 'b'); "
             f"c.flush()")
    capture(milvus_server, s3_server, backup, a, bundle="b1", db=dbn)


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
    _three_captures(pm, milvus_server, s3_server, backup, a, dbn)
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


def test_one_restore_run_twice_at_once_through_two_addresses_of_one_milvus(env, pm, milvus_server, s3_server,
                                                                           monkeypatch):
    """The same restore (bundle, name) started at the same time through two addresses of one
    Milvus (the DAG's connection says localhost:P, an operator's CLI 127.0.0.1:P): two restore
    ids, two claims, and the first-for-name rule compares address strings. Interleaved as:
    both pass check, A creates X, B meets X while creating and adopts it (same schema, no
    import yet). Expected: one import into X, the other run refused; not both."""
    import threading
    kv, keys, backup = env
    a = f"al_{uuid.uuid4().hex[:8]}"
    pm(TOY + f"c = toy({a!r}); put(c, range(0, 40), 'a'); c.flush()")
    capture(milvus_server, s3_server, backup, a)
    x = f"x_{uuid.uuid4().hex[:8]}"
    host, port = milvus_server.address.rsplit(":", 1)
    addrs = {"A": milvus_server.address, "B": f"localhost:{port}"}
    real = restore._create
    b_arrived, a_created, b_created = threading.Event(), threading.Event(), threading.Event()

    def create(recs, client, target, req, plan):
        if target.address == addrs["A"]:
            b_arrived.wait(60)
            out = real(recs, client, target, req, plan)
            a_created.set()
            b_created.wait(60)
            return out
        b_arrived.set()
        a_created.wait(60)
        try:
            return real(recs, client, target, req, plan)
        finally:
            b_created.set()

    monkeypatch.setattr(restore, "_create", create)
    out = {}

    def go(who):
        t = restore.MilvusTarget(address=addrs[who], bucket=milvus_server.s3.bucket, s3_endpoint=s3_server.endpoint,
                                 s3_access_key=s3_server.access_key, s3_secret_key=s3_server.secret_key)
        try:
            out[who] = restore.run(kv, keys, backup, t, restore.Request("default", a, "b1", x, poll=0.2))
        except Exception as e:  # noqa: BLE001
            out[who] = e
    ts = [threading.Thread(target=go, args=(w,)) for w in ("A", "B")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(600)
    res = {k: (v["state"], v["count"]) if isinstance(v, dict) else f"{type(v).__name__}: {str(v)[:200]}"
           for k, v in out.items()}
    imps = pm(f"OUT['t'] = [[t.task_id, t.state_name, t.row_count] for t in "
              f"utility.list_bulk_insert_tasks(limit=0, collection_name={x!r})]")["t"]
    import time
    time.sleep(5)        # the other run's segments handed off to the query node
    n = pm(f"c = Collection({x!r}); c.release(); c.load(); "
           f"OUT['n'] = c.query(expr='', output_fields=['count(*)'], consistency_level='Strong')[0]['count(*)']")["n"]
    print("\nTWO ADDRESSES", res, "imports", imps, "X count", n)
    done = [t for t in imps if t[1] == "Completed"]
    assert len(done) == 1 and n == 40, (f"{len(done)} imports went into X (count {n}), one per run of the same "
                                        f"restore through two addresses ({res})")
    assert sum(isinstance(v, dict) and v["state"] == "verified" for v in out.values()) == 1, res


def test_a_restore_whose_create_milvus_refused_leaves_no_claim_on_the_name(env, pm, milvus_server, s3_server,
                                                                           monkeypatch):
    """Milvus refuses the create call of a restore (a quota, a property, a name limit of that
    server: here simulated at the client) after check passed: the restore stops with its record
    in `creating` and nothing in Milvus. The operator then restores another bundle into that
    name (a newer capture of the same db: the same restore id; a bundle of another db: another
    id). Nothing holds the name in Milvus and no run of the refused restore is going on: each
    should restore, not be refused for ever by the record of a restore that made nothing."""
    from seglake.milvus.client import MilvusClient, MilvusError

    kv, keys, backup = env
    a = f"cr_{uuid.uuid4().hex[:8]}"
    dbn = f"d{uuid.uuid4().hex[:6]}"
    _three_captures(pm, milvus_server, s3_server, backup, a, dbn)
    t = target_of(milvus_server, s3_server)
    real_call = MilvusClient.call

    def refusing(self, *ops):
        if any(o["op"] == "create_full" for o in ops):
            raise MilvusError(f"Milvus at {self.address}, op 'create_full': MilvusException: (code=65535, "
                              f"message=quota exceeded[limit=...])")
        return real_call(self, *ops)

    x, y = f"x_{uuid.uuid4().hex[:8]}", f"y_{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(MilvusClient, "call", refusing)
    for req in (restore.Request("default", a, "b1", x, poll=0.2), restore.Request(dbn, a, "b1", y, poll=0.2)):
        with pytest.raises(MilvusError, match="quota"):
            restore.run(kv, keys, backup, t, req)
    monkeypatch.setattr(MilvusClient, "call", real_call)
    assert not pm(f"OUT['x'] = utility.has_collection({x!r}) or utility.has_collection({y!r})")["x"]
    got = {}
    for req, n in ((restore.Request("default", a, "b2", x, poll=0.2), 50),
                   (restore.Request("default", a, "b1", y, poll=0.2), 40)):
        try:
            rep = restore.run(kv, keys, backup, t, req)
            got[req.name] = (rep["state"], rep["count"])
        except Exception as e:  # noqa: BLE001
            got[req.name] = f"{type(e).__name__}: {str(e)[:300]}"
    print("\nAFTER A REFUSED CREATE", got)
    assert got == {x: ("verified", 50), y: ("verified", 40)}, got


def test_autoindex_and_scalar_indexes_created_without_a_type_round_trip(env, pm, milvus_server, s3_server):
    """How users often make indexes on 2.3: AUTOINDEX on the vector (Milvus stores its own HNSW
    params beside the user's), and scalar indexes with no index_type (Milvus picks one). The
    restore rebuilds each index as the capture recorded it: same names, same params seen
    through describe, rows and searches equal."""
    from test_milvus_schemas_attack import restore_and_compare

    src = f"ai_{uuid.uuid4().hex[:8]}"
    pm(f"""
    c = Collection({src!r}, CollectionSchema([FieldSchema("pk", DataType.INT64, is_primary=True),
                                              FieldSchema("n", DataType.INT64),
                                              FieldSchema("s", DataType.VARCHAR, max_length=20),
                                              FieldSchema("vec", DataType.FLOAT_VECTOR, dim=3)]), shards_num=1)
    c.insert([list(range(60)), [i * 3 for i in range(60)], [f"s{{i}}" for i in range(60)],
              [[float(i + 1), 1.0, float(i % 7)] for i in range(60)]])
    c.flush()
    c.create_index("vec", {{"index_type": "AUTOINDEX", "metric_type": "L2"}}, index_name="auto_vec")
    c.create_index("n", {{}}, index_name="n_default")
    c.create_index("s", {{}}, index_name="s_default")
    """)
    shown = pm(f"OUT['ix'] = [[i.field_name, i.index_name, i.params] for i in Collection({src!r}).indexes]")
    print("\nSOURCE INDEXES", shown)
    restore_and_compare(env, pm, milvus_server, s3_server, src, pk="pk", expr="pk >= 0",
                        fields=["pk", "n", "s", "vec"], vec="vec", metric="L2", sparams={"ef": 32}, expect_rows=60)
