"""atk-s25-edges, the REST doors (seglake's typed API in process; Airflow's own trigger route
with the plugins' root middlewares).

F1 through REST: a backup_uri with a NUL was an HTTP 500 (ValueError from the overlap
check), one with a newline created a run. F4: a key given twice in a JSON body was taken
silently, the last one winning (`{"name": "s2", "name": "s3"}` created s3; a gc trigger
`{"dry_run": true, "dry_run": false}` is a REAL gc), while config JSON refuses it. Each is
now a 400 naming the key, before any run or write."""

import json

import pytest
from dag_helpers import core_api_client

from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = pytest.mark.airflow
API = "/seglake/api/v1"


@pytest.fixture(scope="module")
def client(airflow_home):
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app

    return TestClient(create_app(), raise_server_exceptions=False)


@pytest.fixture
def h():
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


@pytest.fixture
def world(airflow_env, meta, store, monkeypatch):
    import httpx

    sent = []
    monkeypatch.setattr(httpx, "post", lambda url, **kw: sent.append(url) or httpx.Response(
        200, json={"dag_run_id": "manual__x", "state": "queued"}))
    demo.seed(meta, store, demo.SeedParams(name="c1", partitions=1, segments=1, rows=10, dim=4))
    snapshot.create(meta, store, "c1", "s1")
    return meta, sent


def _keys(meta) -> dict:
    return {kv.key: kv.value for kv in meta.kv.range(meta.keys.prefix)}


@pytest.mark.parametrize("uri", ["/tmp/a\\u0000b", "/tmp/a\\nb", "/tmp/a\\u001b[31m"])
def test_a_backup_uri_with_a_control_character_is_a_400_before_any_run(client, h, world, uri):
    meta, sent = world
    body = '{"collection": "c1", "snapshot": "s1", "backup_uri": "%s"}' % uri
    r = client.post(f"{API}/runs/snapshot_export", content=body.encode(), headers=h)
    assert r.status_code == 400, r.text
    assert "conf key 'backup_uri' (Backup target)" in r.json()["detail"], r.text
    assert sent == []


@pytest.mark.parametrize("method, path, body, key", [
    ("POST", "/snapshots", '{"collection": "c1", "name": "s2", "name": "s3"}', "name"),
    ("POST", "/snapshots/c1/s1/restore", '{"target": "t1", "target": "t2"}', "target"),
    ("POST", "/runs/snapshot_retention", '{"collection": "c1", "keep_last": 2, "keep_last": 3}', "keep_last"),
    ("POST", "/snapshots/c1/s1/pins", '{"ttl_hours": 1, "ttl_hours": 8000}', "ttl_hours"),
    ("PUT", "/milvus/sources/src1", '{"milvus_etcd": "127.0.0.1:2379", "bucket": "bkt", "collections": "c", '
                                    '"keep_last": 1, "keep_last": 5}', "keep_last"),
    ("PUT", "/compaction/policies/c1", '{"delete_ratio": 0.5, "delete_ratio": 0.9}', "delete_ratio"),
    ("PUT", "/collections/c1/pitr", '{"window": "3d", "window": "1d"}', "window"),
])
def test_a_key_given_twice_in_a_body_is_a_400_before_any_change(client, h, world, method, path, body, key):
    meta, sent = world
    before = _keys(meta)
    r = client.request(method, API + path, content=body.encode(), headers=h)
    assert r.status_code == 400, r.text
    assert r.json()["detail"] == f"the body gives key {key!r} more than once; each key may appear once", r.text
    assert sent == [] and _keys(meta) == before


def test_a_body_without_a_repeated_key_still_goes_through(client, h, world):
    meta, sent = world
    r = client.post(f"{API}/snapshots", content=b'{"collection": "c1", "name": "s2", "description": "a, b"}',
                    headers=h)
    assert r.status_code == 201, r.text
    assert len(sent) == 1


@pytest.fixture(scope="module")
def api(dagbag):
    with core_api_client(dagbag) as c:
        yield c


@pytest.mark.parametrize("dag_id, conf, key", [
    ("gc", '{"dry_run": true, "dry_run": false}', "dry_run"),
    ("snapshot_create", '{"collection": "demo", "name": "a", "name": "b"}', "name"),
])
def test_airflow_s_trigger_refuses_a_conf_key_given_twice_before_a_run(api, dag_id, conf, key):
    before = api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"]
    r = api.post(f"/api/v2/dags/{dag_id}/dagRuns", content='{"logical_date": null, "conf": %s}' % conf,
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["detail"] == (f"{dag_id}: refused conf before any run: key {key!r} is given more than once; "
                                  f"each key may appear once"), r.text
    assert api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"] == before


# -- F8: a number in a path or query is plain decimal ----------------------------------------------
@pytest.mark.parametrize("shape", ["+{n}", "0{n}", "{n}.0", "%20{n}", "{a}_{b}"])
def test_a_pin_id_in_the_path_is_plain_decimal_or_nothing_is_unpinned(client, h, world, shape):
    """pydantic's int() read '+N', '0N', 'N.0', ' N' and 'N_M' as numbers: `DELETE
    /pins/1_0` removed pin 10. The CLI's `snapshots unpin` refuses them (Limit.parse)."""
    meta, sent = world
    pin = client.post(f"{API}/snapshots/c1/s1/pins", json={"ttl_hours": 1}, headers=h).json()
    n = pin["pin_id"]
    path = shape.format(n=n, a=str(n)[:-1] or "0", b=str(n)[-1])
    r = client.delete(f"{API}/pins/{path}", headers=h)
    assert r.status_code == 400, (path, r.text)
    assert "plain decimal" in r.json()["detail"], r.text
    assert n in [p["pin_id"] for p in client.get(f"{API}/pins", headers=h).json()]
    assert client.delete(f"{API}/pins/{n}", headers=h).status_code == 200


@pytest.mark.parametrize("path", ["/jobs/+1", "/jobs/1.0", "/jobs/1_0", "/compaction/history?last=+5",
                                  "/compaction/history?last=05"])
def test_ids_and_counts_in_reads_are_plain_decimal(client, h, world, path):
    r = client.get(API + path, headers=h)
    assert r.status_code == 400 and "plain decimal" in r.json()["detail"], r.text
