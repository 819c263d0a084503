"""The typed REST API (/seglake/api/v1) inside the real Airflow API app, in-process: every
read answers what etcd holds and matches its own OpenAPI schema; anonymous callers and bad
tokens are refused; bad input is one plain sentence (HTTP 400) before any change; pins
work; a browser session cannot change anything without the anti-CSRF header. Mutations
that create DAG runs are driven over real HTTP in tests/e2e/test_page_actions.py."""

import json

import pytest

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot

pytestmark = pytest.mark.airflow
API = "/seglake/api/v1"


@pytest.fixture(scope="module")
def client(airflow_home):
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app

    return TestClient(create_app())


@pytest.fixture
def h(client):
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def world(airflow_env, meta, store):
    demo.seed(meta, store, demo.SeedParams(name="api_coll", partitions=1, segments=2, rows=50, dim=4))
    snapshot.create(meta, store, "api_coll", "s1")
    job_id = restore.restore(meta, store, "api_coll", "s1", "api_copy")
    copyjob.plan(meta, job_id)
    return meta, store, job_id


@pytest.fixture
def triggered(monkeypatch) -> list:
    """The Airflow triggers the API sends (httpx.post stubbed to answer "queued"): a refusal
    before any run leaves it empty."""
    import httpx

    sent = []
    monkeypatch.setattr(httpx, "post", lambda url, **kw: sent.append(url) or httpx.Response(
        200, json={"dag_run_id": "manual__x", "state": "queued"}))
    return sent



def _check_schema(schema: dict, path: str, method: str, status: int, body) -> None:
    """The response body has every property its documented schema requires, with the
    documented JSON types (a light structural check of the API against its own OpenAPI)."""
    op = schema["paths"][path][method]
    content = op["responses"][str(status)]["content"]["application/json"]["schema"]
    comps = schema["components"]["schemas"]

    def resolve(s):
        return comps[s["$ref"].rsplit("/", 1)[1]] if "$ref" in s else s

    def check(s, value):
        s = resolve(s)
        if "anyOf" in s:
            assert any(_fits(resolve(x), value) for x in s["anyOf"]), (s, value)
            return
        if s.get("type") == "array":
            assert isinstance(value, list)
            for v in value:
                check(s["items"], v)
        elif s.get("type") == "object" or "properties" in s:
            assert isinstance(value, dict)
            for k in s.get("required", []):
                assert k in value, f"{path}: {k} missing"
            for k, sub in s.get("properties", {}).items():
                if k in value and value[k] is not None:
                    check(sub, value[k])
        else:
            assert _fits(s, value), (path, s, value)

    check(content, body)


def _fits(s: dict, v) -> bool:
    t = s.get("type")
    return {None: True, "integer": isinstance(v, int) and not isinstance(v, bool),
            "number": isinstance(v, (int, float)) and not isinstance(v, bool), "string": isinstance(v, str),
            "boolean": isinstance(v, bool), "null": v is None, "object": isinstance(v, dict),
            "array": isinstance(v, list)}.get(t, True)


def test_reads_answer_what_etcd_holds_and_match_the_openapi_schema(client, h, world):
    meta, store, job_id = world
    schema = client.get(f"{API}/openapi.json", headers=h).json()
    assert schema["info"]["title"] == "seglake API"
    for path, templ in ((f"{API}/collections", "/collections"), (f"{API}/collections/api_coll", "/collections/{name}"),
                        (f"{API}/snapshots", "/snapshots"), (f"{API}/snapshots/api_coll/s1", "/snapshots/{collection}/{name}"),
                        (f"{API}/pins", "/pins"), (f"{API}/jobs", "/jobs"), (f"{API}/jobs/{job_id}", "/jobs/{job_id}"),
                        (f"{API}/wal/status", "/wal/status"), (f"{API}/gc/report", "/gc/report")):
        r = client.get(path, headers=h)
        assert r.status_code == 200, (path, r.text)
        _check_schema(schema, templ, "get", 200, r.json())
    colls = {c["name"]: c for c in client.get(f"{API}/collections", headers=h).json()}
    assert colls["api_coll"]["segments"] == 2 and colls["api_copy"]["state"] == "Importing"
    (snap,) = client.get(f"{API}/snapshots?collection=api_coll", headers=h).json()
    assert (snap["name"], snap["state"]) == ("s1", "COMMITTED")
    job = client.get(f"{API}/jobs/{job_id}", headers=h).json()
    assert job["state"] == "Executing" and job["progress"]["total_segments"] == 2
    assert client.get(f"{API}/docs", headers=h).status_code == 200


def test_pin_and_unpin(client, h, world):
    meta, *_ = world
    r = client.post(f"{API}/snapshots/api_coll/s1/pins", json={"ttl_hours": 2, "by": "ops"}, headers=h)
    assert r.status_code == 201, r.text
    pin = r.json()
    assert meta.snapshots.find(meta.catalog.get_by_name("api_coll").collection_id, "s1").holds[0][0] == pin["pin_id"]
    assert [p["pin_id"] for p in client.get(f"{API}/pins", headers=h).json()] == [pin["pin_id"]]
    assert client.delete(f"{API}/pins/{pin['pin_id']}", headers=h).status_code == 200
    r = client.delete(f"{API}/pins/{pin['pin_id']}", headers=h)
    assert r.status_code == 404 and r.json()["detail"].startswith(f"pin {pin['pin_id']} not found")


def test_compaction_policy_set_get_clear_and_history(client, h, world):
    """The policy through the API: PUT records it (checked), GET shows it with the policy
    a run uses, the plan uses it, DELETE clears it; the history route reads etcd's."""
    from seglake.lifecycle import compaction

    meta, store, _ = world
    r = client.put(f"{API}/compaction/policies/api_coll", json={"min_segment_rows": 5000, "target_bytes": 1 << 20,
                                                                 "protection_seconds": 0, "scheduled": True},
                   headers=h)
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["policy"] == {"min_segment_rows": 5000, "target_bytes": 1 << 20, "protection": 0.0}
    assert doc["scheduled"] is True and doc["effective"]["min_segment_rows"] == 5000
    assert client.get(f"{API}/compaction/policies/api_coll", headers=h).json()["policy"] == doc["policy"]
    assert [d["collection"] for d in client.get(f"{API}/compaction/policies", headers=h).json()] == ["api_coll"]
    from seglake.config import Settings
    pol = compaction.policy_for(meta, Settings(), "api_coll")
    assert pol.min_segment_rows == 5000 and pol.target_bytes == 1 << 20 and pol.protection == 0.0
    # the scheduled run uses it: the two 25-row segments are merged
    before = sorted(s.segment_id for s in meta.segments.list(meta.catalog.get_by_name("api_coll").collection_id)
                    if s.state == "Flushed")
    reports = compaction.run_scheduled(meta, store, Settings())
    assert [r["collection"] for r in reports] == ["api_coll"]
    hist = client.get(f"{API}/compaction/history?collection=api_coll", headers=h).json()
    assert len(hist) == 1 and hist[0]["segments_before"] == len(before) and hist[0]["trigger"] == "scheduled"
    r = client.delete(f"{API}/compaction/policies/api_coll", headers=h)
    assert r.status_code == 200 and r.json()["cleared"] is True
    assert client.get(f"{API}/compaction/policies/api_coll", headers=h).status_code == 404


@pytest.mark.parametrize("method,path,body,status,words", [
    ("post", "/snapshots/api_coll/s1/pins", {"ttl_hours": 0}, 400, "field 'ttl_hours' (pin TTL, hours): 0.0 is not "
     "allowed; allowed: a finite number of hours from 0.000278 (1 second) to 8760 (365 days)"),
    ("post", "/snapshots/api_coll/s1/pins", {"ttl_hours": -1.0}, 400, "field 'ttl_hours' (pin TTL, hours): -1.0 is "
     "not allowed"),
    ("post", "/snapshots/api_coll/s1/pins", {"ttl_hours": 9000}, 400, "field 'ttl_hours' (pin TTL, hours): 9000"),
    ("post", "/gc/dry-run", {"collection": "no_such"}, 404, "collection 'no_such' not found in db 'default'"),
    ("post", "/snapshots/api_coll/s1/pins", {"ttl_hour": 2}, 400, "unknown field 'ttl_hour' (did you mean 'ttl_hours'?)"),
    ("post", "/snapshots/api_coll/nope/pins", {"ttl_hours": 1}, 404, "snapshot 'nope' not found"),
    ("post", "/snapshots", {"collection": "api_coll", "name": "my snap"}, 400, "field 'name': 'my snap' is not allowed"),
    ("post", "/snapshots", {"collection": "api_coll", "name": "ok", "ttl_hours": -1}, 400,
     "conf key 'ttl_hours' (TTL (hours)): -1.0 is not allowed; allowed: a finite number from 0 to 87600 hours"),
    ("post", "/snapshots/api_coll/s1/restore", {"tagret": "x"}, 400, "unknown field 'tagret' (did you mean 'target'?)"),
    ("post", "/snapshots/api_coll/s1/restore", {"target": "t", "engine": "fast"}, 400, "conf key 'engine'"),
    ("post", "/gc/dry-run", {"collection": "a b"}, 400, "field 'collection'"),
    ("post", "/jobs/999999999/resume", {}, 404, "copy job 999999999 not found"),
    ("get", "/collections/nope", None, 404, "collection 'nope' not found"),
    ("post", "/snapshots", {"collection": "api_coll", "name": "s1"}, 409, "snapshot 's1' already exists"),
    ("post", "/snapshots", {"collection": "nope", "name": "s9"}, 404, "nope"),
    ("post", "/snapshots/api_coll/s1/restore", {"target": "api_coll"}, 409, "collection 'api_coll' already exists"),
    ("post", "/snapshots/api_coll/nope/restore", {"target": "zz"}, 404, "snapshot 'nope' not found"),
    ("delete", "/snapshots/api_coll/s1", None, 409, "held by copy job"),
    ("delete", "/snapshots/api_coll/nope", None, 404, "snapshot 'nope' not found"),
    ("get", "/jobs/abc", None, 400, "field 'job_id'"),
    ("post", "/dags/example_bash/unpause", None, 404, "dag 'example_bash' is not one this API runs"),
    ("post", "/dags/snapshot_schedul/unpause", None, 404, "did you mean 'snapshot_schedule'?"),
    ("put", "/compaction/policies/api_coll", {"target_row": 5}, 400,
     "unknown field 'target_row' (did you mean 'target_rows'?)"),
    ("put", "/compaction/policies/api_coll", {"delete_ratio": 2.0}, 400, "delete_ratio: 2.0 is out of range"),
    ("put", "/compaction/policies/api_coll", {"min_segment_rows": 0}, 400, "min_segment_rows: 0 is out of range"),
    ("put", "/compaction/policies/api_coll", {"target_bytes": True}, 400, "field 'target_bytes'"),
    ("put", "/compaction/policies/api_coll", {"l0_age_seconds": "1h"}, 400, "field 'l0_age_seconds'"),
    ("put", "/compaction/policies/api_coll", {}, 400, "it sets nothing"),
    ("put", "/compaction/policies/nope", {"target_rows": 5}, 404, "collection 'nope' not found"),
    ("get", "/compaction/policies/api_coll", None, 404, "no compaction policy"),
    ("post", "/compaction", {"collection": "nope"}, 404, "collection 'nope' not found"),
    ("post", "/compaction", {"collection": "api_coll", "dry_rn": True}, 400, "did you mean 'dry_run'?"),
    ("post", "/collections/api_coll/restore", {"target": "t", "as_of": "2026-11-27T12:00:00"}, 400,
     "a time zone is required"),
    ("post", "/collections/api_coll/restore", {"target": "t", "as_of": "1970-01-01T00:00:00Z"}, 400, "year 1970"),
    ("post", "/collections/api_coll/restore", {"target": "t", "as_of": 470753162035462143}, 400,
     "before collection 'api_coll' existed"),
    ("post", "/collections/api_coll/restore", {"target": "api_coll", "as_of": 470753162035462143}, 409,
     "collection 'api_coll' already exists"),
    ("post", "/collections/nope/restore", {"target": "t", "as_of": 470753162035462143}, 404,
     "collection 'nope' not found"),
    ("put", "/collections/api_coll/pitr", {"window": "nan"}, 400, "is not a duration"),
    ("put", "/collections/api_coll/pitr", {"window": "3d", "windw": 1}, 400,
     "unknown field 'windw' (did you mean 'window'?)"),       # every body's model, not a path-suffix table
    ("put", "/collections/api_coll/pitr", {"windw": "3d"}, 400, "unknown field 'windw' (did you mean 'window'?)"),
    ("post", "/collections/api_coll/restore", {"target": "t", "as_of": 470753162035462143, "as_off": 1}, 400,
     "unknown field 'as_off' (did you mean 'as_of'?)"),
    ("delete", "/collections/nope/pitr", None, 404, "collection 'nope' not found"),
    ("post", "/collections/api_coll/undrop", {"target": "t"}, 409, "is Created, not dropped"),
    ("post", "/collections/nope/undrop", {"target": "t"}, 404, "collection 'nope' not found"),
    ("post", "/collections/api_coll/undrop", {"target": "api_copy"}, 409, "collection 'api_copy' already exists"),
    ("post", "/collections/api_coll/undrop", {"target": "t", "from_targt": True}, 400,
     "unknown field 'from_targt' (did you mean 'from_target'?)"),
    ("post", "/collections/api_coll/undrop", {"target": "t", "bundle": "s1"}, 400, "bundle goes with an undrop"),
    ("get", "/collections/api_coll/replay", None, 409, "is not the target of a restore to a time"),
    ("get", "/collections/nope/replay", None, 404, "not found"),
    ("post", "/runs/snapshot_export", {"colection": "api_coll", "snapshot": "s1"}, 400,
     "unknown conf key 'colection' (did you mean 'collection'?)"),
    ("post", "/runs/snapshot_export", {"collection": "api_coll"}, 400, "missing conf key 'snapshot'"),
    ("post", "/runs/milvus_backup", {"max_mib_per_second": -1}, 400, "max_mib_per_second"),
    ("post", "/runs/verify_collection", [1], 400, "must be a JSON object"),
    ("post", "/runs/gc", {"dry_run": False}, 404, "POST /gc/dry-run"),
    ("post", "/runs/snapshot_exprt", {}, 404, "did you mean 'snapshot_export'?"),
    # the window through the generic door: checked as PUT /collections/{c}/pitr checks it (was 201, a run)
    ("post", "/runs/snapshot_restore", {"collection": "api_coll", "as_of": "470753162035462143", "target": "t"}, 400,
     "before collection 'api_coll' existed"),    # as the typed door answers it (was 201, a run)
    ("post", "/runs/pitr_window", {"collection": "api_coll", "window": "nan"}, 400, "conf key 'window'"),
    ("post", "/runs/pitr_window", {"collection": "api_coll", "window": "-3d"}, 400, "is not a duration"),
    ("post", "/runs/pitr_window", {"collection": "api_coll", "window": "5"}, 400, "out of range: 1 minute"),
    ("post", "/runs/pitr_window", {"collection": "api_coll", "window": "9999d"}, 400, "to 365 days"),
])
def test_bad_input_is_one_plain_sentence_before_any_change(client, h, world, method, path, body, status, words):
    meta, *_ = world
    before = sorted(kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True))
    r = getattr(client, method)(API + path, headers=h, **({"json": body} if body is not None else {}))
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and words in detail and "\n" not in detail, detail
    assert sorted(kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True)) == before


def test_point_in_time_window_set_show_clear(client, h, world):
    r = client.put(f"{API}/collections/api_coll/pitr", json={"window": "3d"}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["window_s"] == 3 * 86400
    shown = client.get(f"{API}/collections/api_coll/pitr", headers=h).json()
    # api_coll is seeded (never written through the WAL): its rows are not in its log, so its
    # restores to a time start from its first snapshot, s1 (inside the window), held for them
    assert shown["window"] == "3d" and shown["holds"]["snapshot"] == "s1", shown
    s1 = client.get(f"{API}/snapshots/api_coll/s1", headers=h).json()
    assert shown["holds"]["restorable_from_ts"] == s1["consistent_ts"], (shown, s1)
    r = client.delete(f"{API}/collections/api_coll/pitr", headers=h)
    assert r.status_code == 200 and r.json()["cleared"] is True
    assert client.get(f"{API}/collections/api_coll/pitr", headers=h).json()["window"] is None


def test_a_replay_under_way_is_shown(client, h, airflow_env, meta, store, settings):
    from seglake.lifecycle import pitr
    from seglake.wal.client import WalClient, synthetic_rows

    schema = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
              {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4}]
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("wal_c", schema, shards=2)
        pitr.set_window(meta, "wal_c", "1h")
        c.insert("wal_c", synthetic_rows(coll, 30, 1))
    job = pitr.restore_as_of(meta, store, "wal_c", "wal_back", meta.tso.now())
    copyjob.plan(meta, job)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    r = client.get(f"{API}/collections/wal_back/replay", headers=h)
    assert r.status_code == 200, r.text
    p = r.json()
    assert p["state"] == "Importing" and p["vchannels"] == 2 and p["vchannels_done"] == 0
    assert p["bytes"] == 0 and p["bytes_total"] > 0 and p["percent"] == 0.0
    pitr.replay(meta, store, settings, meta.catalog.get_by_name("wal_back").collection_id)
    p = client.get(f"{API}/collections/wal_back/replay", headers=h).json()
    assert p["state"] == "Created" and p["percent"] == 100.0 and p["messages"] > 0


@pytest.mark.parametrize("path", ["/collections", "/openapi.json", "/docs", "/jobs"])
def test_anonymous_and_bad_tokens_are_refused(client, path):
    assert client.get(API + path).status_code == 401
    assert client.get(API + path, headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403


def test_a_browser_session_changes_nothing_without_the_anti_csrf_header(client, h, world):
    meta, *_ = world
    token = h["Authorization"].split()[1]
    cookie = {"Cookie": f"_token={token}"}
    assert client.get(f"{API}/collections", headers=cookie).status_code == 200      # reads: the session is enough
    r = client.post(f"{API}/snapshots/api_coll/s1/pins", json={"ttl_hours": 1}, headers=cookie)
    assert r.status_code == 403 and "X-Seglake-Request: 1" in r.json()["detail"]
    assert not meta.snapshots.find(meta.catalog.get_by_name("api_coll").collection_id, "s1").holds
    r = client.post(f"{API}/snapshots/api_coll/s1/pins", json={"ttl_hours": 1},
                    headers={**cookie, "X-Seglake-Request": "1"})
    assert r.status_code == 201, r.text


def test_a_viewer_may_read_but_not_change(client, world):
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    meta, *_ = world
    v = {"Authorization": "Bearer " + get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="v",
                                                                                           role="viewer"))}
    assert client.get(f"{API}/snapshots", headers=v).status_code == 200
    for method, path, body in (("post", "/snapshots/api_coll/s1/pins", {"ttl_hours": 1}),
                               ("post", "/snapshots", {"collection": "api_coll", "name": "x"}),
                               ("post", "/gc/dry-run", {}), ("delete", "/pins/1", None)):
        r = getattr(client, method)(API + path, headers=v, **({"json": body} if body is not None else {}))
        assert r.status_code == 403, (path, r.text)
    assert not meta.snapshots.find(meta.catalog.get_by_name("api_coll").collection_id, "s1").holds


def _keys(meta) -> list:
    return sorted(kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True))


@pytest.mark.parametrize("path,body,field", [
    ("/snapshots/api_coll/s1/pins", '{"ttl_hours": true}', "ttl_hours"),     # a bool is not a number
    ("/snapshots/api_coll/s1/pins", '{"ttl_hours": "2"}', "ttl_hours"),      # nor a numeric string
    ("/snapshots", '{"collection": "api_coll", "name": "n1", "ttl_hours": true}', "ttl_hours"),
    ("/snapshots", '{"collection": "api_coll", "name": "n1", "ttl_hours": "5"}', "ttl_hours"),
    ("/snapshots/api_coll/s1/restore", '{"target": "t9", "max_mib_per_second": true}', "max_mib_per_second"),
    ("/snapshots/api_coll/s1/restore", '{"target": "t9", "timeout_hours": "1"}', "timeout_hours"),
])
def test_numbers_are_json_numbers_not_bools_or_strings(client, h, world, path, body, field):
    """true would be 1 hour and "2" two hours: refused (400) before any pin or run."""
    meta, *_ = world
    before = _keys(meta)
    r = client.post(API + path, content=body, headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert f"field {field!r}" in r.json()["detail"], r.text
    assert _keys(meta) == before


@pytest.mark.parametrize("body,words", [
    ('{"target_rows": 5.0}', "field 'target_rows': 5.0 is not allowed; allowed: a JSON integer"),
    ('{"target_rows": 1e30}', "allowed: a JSON integer"),
    ('{"target_rows": "5"}', "allowed: a JSON integer"),
    ('{"delete_ratio": "0.5"}', "field 'delete_ratio': '0.5' is not allowed; allowed: a JSON number"),
])
def test_an_integer_field_says_integer_not_number(client, h, world, body, words):
    """`{"target_rows": 5.0}` was refused with "allowed: a JSON number" -- 5.0 is one: the
    refusal contradicted itself. An integer field says integer."""
    meta, *_ = world
    before = _keys(meta)
    r = client.put(API + "/compaction/policies/api_coll", content=body,
                   headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 400 and words in r.json()["detail"], r.text
    assert _keys(meta) == before


@pytest.mark.parametrize("method,path,words", [
    ("post", "/jobs/-1/resume", "field 'job_id'"),                          # was a 500 (ValueError)
    ("get", "/jobs/-1", "field 'job_id'"),
    ("get", f"/jobs/{2**63}", "field 'job_id'"),
    ("delete", f"/pins/{2**63}", "field 'pin_id'"),
    ("get", "/collections/a%20b", "field 'name'"),                          # was 404 "not found"
    ("get", "/collections/api_coll?db=..", "field 'db'"),
    ("get", "/snapshots?db=%0A", "field 'db'"),                             # was 200 with every snapshot
    ("get", "/snapshots/api_coll/s1?db=x%0A", "field 'db'"),
    ("get", "/pins?db=a%2Fb", "field 'db'"),
    ("delete", "/snapshots/api_coll/s1?db=a.b", "field 'db'"),
    ("get", "/snapshots?colection=api_coll", "unknown query parameter 'colection' (did you mean 'collection'?)"),
    ("delete", "/snapshots/api_coll/s1?bd=other", "unknown query parameter 'bd'"),
    ("delete", "/pins/1?force=true", "unknown query parameter 'force'"),
])
def test_path_and_query_parameters_are_checked_like_bodies(client, h, world, method, path, words):
    """A name in the path or the query full-matches the name rule, an id is 1..2**63-1 and a
    misspelt query parameter is refused (a DELETE must not fall back to db 'default')."""
    meta, *_ = world
    before = _keys(meta)
    r = getattr(client, method)(API + path, headers=h)
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert words in detail and "\n" not in detail, detail
    assert _keys(meta) == before


@pytest.mark.parametrize("body,words,absent", [
    ('{"collection": "api_coll", "name": "my snap"}', "a letter or '_', then letters", "[A-Za-z"),   # no regex
    ('{"collection": "api_coll", "name": "' + "a" * 5000 + '"}', "at most 255 characters", "a" * 100),
    ('"' + "x" * 5000 + '"', "JSON object", "x" * 100),                   # the input is not echoed whole
    ('{"collection": ', "not valid JSON", "field '0'"),
])
def test_refusals_say_the_rule_in_words_and_stay_short(client, h, world, body, words, absent):
    r = client.post(f"{API}/snapshots", content=body, headers={**h, "Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert words in detail and absent not in detail and len(detail) < 400, detail


def test_an_unreachable_airflow_api_is_a_plain_503(client, h, world, monkeypatch):
    """The run is created through Airflow's API; when that does not answer, one sentence
    (HTTP 503), not a 500 with a traceback."""
    from airflow.configuration import conf

    monkeypatch.setattr(conf, "get", lambda *a, **k: "http://127.0.0.1:9" if a[:2] == ("api", "base_url")
                        else type(conf).get(conf, *a, **k))
    r = client.post(f"{API}/gc/dry-run", json={}, headers=h)
    assert r.status_code == 503, r.text
    assert "Airflow" in r.json()["detail"] and "Traceback" not in r.text


def test_the_run_is_created_on_this_server_never_on_the_host_a_client_names(client, h, world, monkeypatch):
    """With [api] base_url unset the run is created through this server's own address:
    a client's Host header must not steer the server's request (and the caller's token
    with it) to another host (SSRF)."""
    import httpx

    seen = []

    def post(url, **kw):
        seen.append(url)
        return httpx.Response(200, json={"dag_run_id": "manual__x/1", "state": "queued"})

    monkeypatch.setattr(httpx, "post", post)
    r = client.post(f"{API}/gc/dry-run", json={"collection": "api_coll"}, headers={**h, "Host": "evil.example:1234"})
    assert r.status_code == 201, r.text
    assert seen and "evil.example" not in seen[0], seen
    assert seen[0].endswith("/api/v2/dags/gc/dagRuns"), seen
    assert r.json()["run_url"] == "/dags/gc/runs/manual__x%2F1"


def test_refusals_match_the_openapi_document(client, h, world):
    """A refusal is HTTP 400 {"detail": "..."}; the document says so (not FastAPI's 422
    with a list of validation errors, a status this API never answers)."""
    schema = client.get(f"{API}/openapi.json", headers=h).json()
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert "422" not in op["responses"], (method, path)
            assert "400" in op["responses"], (method, path)
            if method in ("post", "delete"):
                assert {"403", "404", "409"} <= set(op["responses"]), (method, path)
    assert "HTTPValidationError" not in schema["components"]["schemas"]
    for method, path, templ, body, status in (
            ("post", "/snapshots", "/snapshots", {"collection": "api_coll", "name": "a b"}, 400),
            ("get", "/jobs/0", "/jobs/{job_id}", None, 400),
            ("get", "/collections/nope", "/collections/{name}", None, 404),
            ("post", "/snapshots", "/snapshots", {"collection": "api_coll", "name": "s1"}, 409),
            ("delete", "/snapshots/api_coll/s1", "/snapshots/{collection}/{name}", None, 409)):
        r = getattr(client, method)(API + path, headers=h, **({"json": body} if body is not None else {}))
        assert r.status_code == status, r.text
        _check_schema(schema, templ, method, status, r.json())


def test_a_bad_server_config_is_not_the_clients_fault(client, h, world, monkeypatch):
    """The server's own seglake config (here the etcd connection) being invalid is a 503
    naming the key, not a 400 that tells the caller to fix a request that was fine."""
    import json

    monkeypatch.setenv("AIRFLOW_CONN_ETCD_DEFAULT", json.dumps({"conn_type": "etcd", "host": "bad host", "port": 1}))
    r = client.get(f"{API}/collections", headers=h)
    assert r.status_code == 503, r.text
    assert "etcd_endpoint" in r.json()["detail"], r.text


def test_the_docs_page_lists_every_operation_and_needs_nothing_from_the_internet(client, h):
    """Issue 27 item 4: Swagger UI from a CDN rendered nothing offline; the page is
    rendered from the OpenAPI document itself, with no script, style or font from elsewhere."""
    import re

    schema = client.get(f"{API}/openapi.json", headers=h).json()
    r = client.get(f"{API}/docs", headers=h)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    html = r.text
    ops = set(re.findall(r'data-op="([A-Z]+ [^"]+)"', html))
    assert ops == {f"{m.upper()} {p}" for p, o in schema["paths"].items() for m in o}, ops
    assert len(ops) >= 15
    assert not re.search(r"<script|(?:src|href)\s*=\s*\"?(?:https?:)?//", html, re.I), "an external asset"
    assert "/snapshots/{collection}/{name}/pins" in html and "ttl_hours" in html   # bodies are described


def test_milvus_sources_captures_and_restores_are_listed_typed_and_on_the_page(client, h, world, tmp_path):
    """GET /milvus: what seglake's etcd records of Milvus, as the engine writes it (a source
    registered, a capture recorded by the capture, a pin, a verification, a restore record
    in the milvus_restore's format), matching the OpenAPI schema; the page shows it, escaped.
    The capture against a real Milvus: tests/milvus/test_milvus_schedule.py."""
    import json
    import time

    from seglake.lifecycle.backup import verify
    from seglake.milvus import capture, sources

    meta, *_ = world
    sources.set_source(meta, "prod", {"milvus_etcd": "milvus-etcd:2379", "bucket": "milvus-bucket",
                                      "collections": "docs", "conn_id": "milvus_prod", "keep_daily": 7})
    # another source of the same Milvus (same roots and bucket), another collection: not docs' source
    sources.set_source(meta, "zz", {"milvus_etcd": "milvus-etcd:2379", "bucket": "milvus-bucket",
                                    "collections": "imgs", "keep_last": 1})
    now = time.time()
    report = {"bundle": "sched_20261127T1200Z", "uid": "a" * 32, "db": "default", "collection": "docs",
              "snapshot": None, "snapshot_id": None, "created_at": now - 60, "consistent_ts": 1, "segments": 2,
              "rows": 1234, "files": 15, "bytes": 8192, "unique_blobs": 15, "state": "committed", "already": False,
              "target": "/backup", "copied_files": 8, "copied_bytes": 4096, "read_bytes": 4096,
              "finished_at": now - 50, "milvus_version": "v2.3.5", "etcd_revision": 54, "throttle": {"x": 1}}
    capture.record(meta, report, {"etcd_root": "by-dev", "bucket": "milvus-bucket", "root_path": "files"})
    verify.record(meta, {"db": "default", "collection": "docs", "bundle": "sched_20261127T1200Z", "ok": True,
                         "checked_at": now - 40, "problems": [], "problem_count": 0})
    from seglake.storage import layout
    from seglake.storage.local import LocalStore

    target = LocalStore(tmp_path / "backup")   # a pin names a committed bundle of the target
    target.put(layout.bundle_commit("default", "docs", "sched_20261127T1200Z"), b"{}")
    sources.pin(meta, target, "default", "docs", "sched_20261127T1200Z", 3600, by="ops")
    meta.kv.put(meta.keys.milvus_restore("r" * 24), json.dumps(
        {"v": 1, "state": "verified", "bundle_uid": "a" * 32, "bundle": "default.docs/sched_20261127T1200Z",
         "name": "docs_<copy>", "target": {"address": "milvus:19530", "bucket": "b", "staging": "s"},
         "created_at": now - 30, "collection_id": 7, "verified_at": now - 10,
         "report": {"ok": True, "count": 1234, "visible_rows": 1234, "sampled": 100}}))
    schema = client.get(f"{API}/openapi.json", headers=h).json()
    r = client.get(f"{API}/milvus", headers=h)
    assert r.status_code == 200, r.text
    _check_schema(schema, "/milvus", "get", 200, r.json())
    body = r.json()
    src, _ = body["sources"]
    assert (src["name"], src["collections"], src["conn_id"], src["keep_daily"]) == ("prod", ["docs"], "milvus_prod", 7)
    (cap,) = body["captures"]
    assert (cap["source"], cap["bundle"], cap["rows"], cap["bytes"], cap["verified_ok"]) == \
        ("prod", "sched_20261127T1200Z", 1234, 8192, True)
    assert cap["pinned_until"] > now and cap["scheduled"] is True and "throttle" not in cap
    (rest,) = body["restores"]
    assert (rest["state"], rest["name"], rest["address"], rest["count"]) == ("verified", "docs_<copy>", "milvus:19530",
                                                                             1234)
    assert client.get(f"{API}/milvus?sorce=x", headers=h).status_code == 400   # an unknown query parameter
    page = client.get("/seglake/", headers=h).text
    assert '<section id="milvus">' in page and "sched_20261127T1200Z" in page and "docs_&lt;copy&gt;" in page
    assert "docs_<copy>" not in page and "1,234 of 1234" in page


def test_milvus_sources_are_set_and_cleared_through_the_api(client, h, world):
    """PUT /milvus/sources/{name} registers a source exactly as `seglake milvus source set`
    (the same checks: a misspelt key named with the closest valid one, every bad key at once,
    nothing written); DELETE forgets it; both need run rights and the anti-CSRF header."""
    meta, *_ = world
    good = {"milvus_etcd": "milvus-etcd:2379", "bucket": "milvus-bucket", "collections": ["docs", "imgs"],
            "keep_daily": 7, "conn_id": "milvus_prod"}
    before = sorted(kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True))
    for body, words in [({**good, "keep_dayly": 7}, "unknown key 'keep_dayly' (did you mean 'keep_daily'?)"),
                        ({**good, "max_mib_per_second": -1}, "max_mib_per_second"),
                        ({**good, "collections": [f"c{i}" for i in range(1025)]}, "at most 1024 per source"),
                        ({**good, "milvus_etcd": "not an endpoint"}, "milvus"),
                        ([1], "must be a JSON object")]:
        r = client.put(f"{API}/milvus/sources/prod", json=body, headers=h)
        assert r.status_code == 400 and words in r.json()["detail"], (body, r.text)
    r = client.put(f"{API}/milvus/sources/bad name", json=good, headers=h)
    assert r.status_code == 400, r.text
    assert sorted(kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True)) == before

    r = client.put(f"{API}/milvus/sources/prod", json=good, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["collections"] == ["docs", "imgs"] and r.json()["keep_daily"] == 7
    listed = client.get(f"{API}/milvus", headers=h).json()["sources"]
    assert [(s["name"], s["collections"], s["conn_id"]) for s in listed] == [("prod", ["docs", "imgs"], "milvus_prod")]
    r = client.put(f"{API}/milvus/sources/other", json={**good, "collections": ["imgs"]}, headers=h)
    assert r.status_code == 400 and "imgs" in r.json()["detail"], r.text      # one source per collection

    r = client.delete(f"{API}/milvus/sources/prod", headers={"Cookie": f"_token={h['Authorization'].split()[1]}"})
    assert r.status_code == 403, r.text                                          # a browser session, no header
    assert client.delete(f"{API}/milvus/sources/prod", headers=h).json() == {"name": "prod", "cleared": True}
    r = client.delete(f"{API}/milvus/sources/prod", headers=h)
    assert r.status_code == 404 and "no Milvus source 'prod'" in r.json()["detail"], r.text
    assert client.get(f"{API}/milvus", headers=h).json()["sources"] == []


@pytest.mark.parametrize("paused,expected", [
    (None, "created: run manual__x of gc is queued; whether the DAG gc is paused is unknown"),
    (True, "queued: the DAG gc is paused"),
    (False, "started: run manual__x of gc is queued"),
])
def test_the_answer_never_says_started_when_airflow_did_not_say_the_dag_runs(client, h, world, monkeypatch,
                                                                              paused, expected):
    """When Airflow does not answer whether the DAG is paused, the answer said "started"
    (a run of a paused DAG sits queued): it says it does not know instead."""
    import httpx

    monkeypatch.setattr(httpx, "post", lambda url, **kw: httpx.Response(
        200, json={"dag_run_id": "manual__x", "state": "queued"}))
    monkeypatch.setattr(httpx, "get", lambda url, **kw: httpx.Response(
        500, text="no") if paused is None else httpx.Response(200, json={"is_paused": paused}))
    r = client.post(f"{API}/gc/dry-run", json={"collection": "api_coll"}, headers=h)
    assert r.status_code == 201, r.text
    assert r.json()["dag_paused"] is paused and r.json()["message"].startswith(expected), r.json()


def test_a_json_body_sent_without_its_content_type_is_told_so(client, h, world):
    """`curl -d '{...}'` sends Content-Type application/x-www-form-urlencoded: the answer was
    "the body must be a JSON object, got b'{\"collection\": ...'" about a body that is one."""
    for headers in ({}, {"Content-Type": "application/x-www-form-urlencoded"}, {"Content-Type": "text/plain"}):
        r = client.post(f"{API}/snapshots", headers={**h, **headers},
                        content=json.dumps({"collection": "api_coll", "name": "n1"}))
        assert r.status_code == 400, r.text
        detail = r.json()["detail"]
        assert "Content-Type: application/json" in detail and "must be a JSON object" not in detail, detail
    r = client.post(f"{API}/snapshots", headers={**h, "Content-Type": "application/json"}, content="[1]")
    assert r.status_code == 400 and "the body must be a JSON object, got [1]" in r.json()["detail"], r.text


@pytest.mark.parametrize("dag_id,conf,words", [
    ("snapshot_export", {"collection": "nope", "snapshot": "s1", "bundle": "b"}, "'nope'"),
    ("snapshot_export", {"collection": "api_coll", "snapshot": "nope", "bundle": "b"}, "snapshot 'nope'"),
    ("snapshot_verify", {"collection": "api_coll", "bundle": "nope"}, "bundle default.api_coll/nope not found"),
    ("snapshot_restore_external", {"collection": "api_coll", "bundle": "nope", "target": "t"},
     "bundle default.api_coll/nope not found"),
    ("milvus_restore", {"collection": "api_coll", "bundle": "nope", "name": "x"},
     "bundle default.api_coll/nope not found"),
    ("snapshot_retention", {"collection": "nope", "keep_last": 2}, "collection 'nope' not found"),
    ("compaction_policy", {"collection": "nope", "target_rows": 100}, "collection 'nope' not found"),
    ("pitr_window", {"collection": "nope", "window": "3d"}, "collection 'nope' not found"),
    ("drop_collection", {"collection": "nope"}, "collection 'nope' not found"),
    ("verify_collection", {"collection": "nope"}, "collection 'nope' not found"),
    ("snapshot_schedule", {"collection": "nope"}, "collection 'nope' not found"),
    ("snapshot_schedule", {"milvus_source": "nope"}, "no Milvus source 'nope'"),
    ("snapshot_create", {"collection": "nope", "name": "s"}, "collection 'nope' not found"),
    ("snapshot_restore", {"collection": "nope", "snapshot": "s1", "target": "t"}, "'nope'"),
    ("snapshot_restore", {"collection": "api_coll", "snapshot": "nope", "target": "t"}, "snapshot 'nope'"),
    ("copy_segment_job", {"job_id": 99999}, "99999"),
    ("collection_undrop", {"collection": "nope", "target": "t"}, "collection 'nope' not found"),
    ("snapshot_drop", {"collection": "api_coll", "name": "nope"}, "snapshot 'nope'"),
    ("compaction", {"collection": "nope"}, "collection 'nope' not found"),
    ("restore_database", {"as_of": "2026-11-28T00:00:00Z", "suffix": "_x", "collections": "api_coll,nope"},
     "collection 'nope' not found"),
    # a clear of an unknown name: each run's set step looks the collection up and failed (was 201, a failed run)
    ("snapshot_retention", {"collection": "nope", "clear": True}, "collection 'nope' not found"),
    ("compaction_policy", {"collection": "nope", "clear": True}, "collection 'nope' not found"),
    ("pitr_window", {"collection": "nope", "clear": True}, "collection 'nope' not found"),
])
def test_the_generic_run_door_answers_404_for_an_unknown_name_before_any_run(triggered, client, h, world, tmp_path,
                                                                             monkeypatch, dag_id, conf, words):
    """POST /runs/{dag_id} (exports, verifies, restores from a bundle, Milvus restores, drops,
    policies...) checked only the conf's shape: an unknown collection, snapshot, bundle, job
    or Milvus source was accepted (201, a run triggered) and failed later in the run. Now 404
    naming it, as the typed endpoints answer, and no run is triggered."""
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))
    r = client.post(f"{API}/runs/{dag_id}", json=conf, headers=h)
    assert r.status_code == 404, r.text
    detail = r.json()["detail"]
    assert words in detail and "\n" not in detail, detail
    assert triggered == []


def test_the_generic_run_door_answers_409_where_the_typed_doors_do(triggered, client, h, world, monkeypatch):
    """A snapshot that exists (snapshot_create) or is pinned (snapshot_drop): the typed doors answer
    409 before any run; POST /runs/{dag_id} made a run that failed in its first step."""
    r = client.post(f"{API}/runs/snapshot_create", json={"collection": "api_coll", "name": "s1"}, headers=h)
    assert r.status_code == 409 and "snapshot 's1' already exists" in r.json()["detail"], r.text
    pin = client.post(f"{API}/snapshots/api_coll/s1/pins", json={"ttl_hours": 1, "by": "ops"}, headers=h).json()
    r = client.post(f"{API}/runs/snapshot_drop", json={"collection": "api_coll", "name": "s1"}, headers=h)
    assert r.status_code == 409 and "is held by" in r.json()["detail"], r.text
    assert triggered == []
    client.delete(f"{API}/pins/{pin['pin_id']}", headers=h)


@pytest.mark.parametrize("conf,status,words", [
    # a target name that is taken by another collection (here the source itself): the typed door
    # (POST /snapshots/{c}/{s}/restore) answers 409; the generic door made a run that failed in `restore`
    ({"collection": "api_coll", "snapshot": "s1", "target": "api_coll"}, 409, "collection 'api_coll' already exists"),
])
def test_the_generic_restore_door_refuses_a_taken_target_before_any_run(triggered, client, h, world, monkeypatch, conf,
                                                                        status, words):
    r = client.post(f"{API}/runs/snapshot_restore", json=conf, headers=h)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"], r.text
    assert triggered == []


def test_a_bundle_restore_into_a_taken_target_is_refused_before_any_run(triggered, client, h, world, tmp_path,
                                                                        monkeypatch):
    """snapshot_restore_external into a name another collection holds (here the source):
    its `restore` step refuses it, so the run was triggered and failed; now 409 first. The
    target of this same bundle restore stays allowed (a re-run resumes it)."""
    import httpx

    from seglake.lifecycle.backup import export
    from seglake.storage.local import LocalStore

    meta, store, _ = world
    backup = tmp_path / "backup"
    export.export(meta, store, LocalStore(str(backup)), "api_coll", "s1", bundle="b1")
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json={"is_paused": False}))
    conf = {"collection": "api_coll", "bundle": "b1", "backup_uri": str(backup)}
    for target in ("api_coll", "api_copy"):
        r = client.post(f"{API}/runs/snapshot_restore_external", json={**conf, "target": target}, headers=h)
        assert r.status_code == 409, r.text
        assert f"collection {target!r} already exists" in r.json()["detail"], r.text
    assert triggered == []
    r = client.post(f"{API}/runs/snapshot_restore_external", json={**conf, "target": "from_b1"}, headers=h)
    assert r.status_code == 201 and len(triggered) == 1, r.text


def test_a_milvus_restore_into_a_connection_airflow_lacks_is_refused_before_any_run(triggered, client, h, world,
                                                                                   tmp_path, monkeypatch):
    """milvus_restore's first step reads the Airflow connection `milvus_conn_id` (the Milvus
    to restore into): one Airflow did not have was accepted (201) and the run failed there.
    Now 404 naming it, no run; once the connection exists the same request runs."""
    import httpx

    from seglake.lifecycle.backup import export
    from seglake.storage.local import LocalStore

    meta, store, _ = world
    backup = tmp_path / "backup"
    export.export(meta, store, LocalStore(str(backup)), "api_coll", "s1", bundle="b1")
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json={"is_paused": False}))
    monkeypatch.delenv("AIRFLOW_CONN_MILVUS_DEFAULT", raising=False)
    conf = {"collection": "api_coll", "bundle": "b1", "name": "into_milvus", "backup_uri": str(backup)}
    for extra, cid in (({}, "milvus_default"), ({"milvus_conn_id": "milvus_prod"}, "milvus_prod")):
        r = client.post(f"{API}/runs/milvus_restore", json={**conf, **extra}, headers=h)
        assert r.status_code == 404, r.text
        detail = r.json()["detail"]
        assert f"Airflow connection {cid!r}" in detail and "milvus_conn_id" in detail and "\n" not in detail, detail
    assert triggered == []
    monkeypatch.setenv("AIRFLOW_CONN_MILVUS_PROD", json.dumps({"conn_type": "generic", "host": "127.0.0.1",
                                                               "port": 19530, "extra": {"bucket": "b"}}))
    r = client.post(f"{API}/runs/milvus_restore", json={**conf, "milvus_conn_id": "milvus_prod"}, headers=h)
    assert r.status_code == 201 and len(triggered) == 1, r.text


def test_an_export_to_a_bundle_name_another_snapshot_holds_is_refused_before_any_run(triggered, client, h, world,
                                                                                     tmp_path, monkeypatch):
    """snapshot_export of s2 as bundle b1 when b1 is s1's in the target: the run's export
    refused it (a failed run); now 409 first. s1 as b1 again (already there) still runs."""
    import httpx

    from seglake.lifecycle.backup import export
    from seglake.storage.local import LocalStore

    meta, store, _ = world
    backup = tmp_path / "backup"
    export.export(meta, store, LocalStore(str(backup)), "api_coll", "s1", bundle="b1")
    snapshot.create(meta, store, "api_coll", "s2")
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json={"is_paused": False}))
    conf = {"collection": "api_coll", "bundle": "b1", "backup_uri": str(backup)}
    r = client.post(f"{API}/runs/snapshot_export", json={**conf, "snapshot": "s2"}, headers=h)
    assert r.status_code == 409, r.text
    assert "bundle default.api_coll/b1 already exists in the backup target" in r.json()["detail"], r.text
    assert triggered == []
    r = client.post(f"{API}/runs/snapshot_export", json={**conf, "snapshot": "s1"}, headers=h)
    assert r.status_code == 201 and len(triggered) == 1, r.text


@pytest.mark.parametrize("conf,status,words", [
    # no window on api_coll: the run's `restore` step refused the whole set (a failed run)
    ({"as_of": "{now}", "suffix": "_x"}, 400, "point-in-time window"),
    ({"as_of": "{now}", "suffix": "_x", "collections": "api_coll"}, 400, "point-in-time window"),
    ({"db": "nodb", "as_of": "{now}", "suffix": "_x"}, 404, "database 'nodb' has no collection to restore"),
    ({"as_of": "2020-01-01T00:00:00Z", "suffix": "_x"}, 404, "database 'default' has no collection to restore"),
    ({"as_of": "{now}", "suffix": "_copy", "collections": "api"}, 404, "collection 'api' not found"),
])
def test_a_database_restore_the_run_would_refuse_is_refused_before_any_run(triggered, client, h, world, monkeypatch,
                                                                           conf, status, words):
    """restore_database plans every collection before it creates anything; the generic door
    checked only the names, so a set its first step refuses (no window, no collection at the
    instant, an unknown database) was a run that failed. Now the same plan answers first."""
    meta, *_ = world
    now = str(meta.catalog.get_by_name("api_coll").created_ts + 1)   # an instant the collection existed at
    conf = {k: (v.replace("{now}", now) if isinstance(v, str) else v) for k, v in conf.items()}
    r = client.post(f"{API}/runs/restore_database", json=conf, headers=h)
    assert r.status_code == status, r.text
    assert words in r.json()["detail"], r.text
    assert triggered == []


@pytest.mark.parametrize("dag_id,conf", [
    ("snapshot_export", {"collection": "api_coll", "snapshot": "s1", "backup_uri": "{store}/inside"}),
    ("snapshot_export", {"collection": "api_coll", "snapshot": "s1", "backup_uri": "/"}),
    ("snapshot_verify", {"collection": "api_coll", "bundle": "b", "backup_uri": "{store}"}),
    ("wal_archive", {"backup_uri": "{store}/x"}),
])
def test_a_backup_target_inside_the_store_is_refused_before_any_run(triggered, client, h, world, monkeypatch, dag_id,
                                                                    conf):
    """backup_uri in the store (or holding it): every run's open_target refuses it, so the run
    was triggered (201) and failed in its first step; now 400 naming the conf key, no run."""
    meta, store, _ = world
    conf = {k: (v.replace("{store}", store.uri) if isinstance(v, str) else v) for k, v in conf.items()}
    r = client.post(f"{API}/runs/{dag_id}", json=conf, headers=h)
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert "conf key 'backup_uri'" in detail and "a backup must live in another store" in detail, detail
    assert triggered == []


def test_resuming_a_copy_job_whose_target_was_dropped_is_refused_before_any_run(triggered, client, h, world, settings,
                                                                                monkeypatch):
    """A copy job whose target collection was dropped since (a finished restore, its target
    dropped later): POST /jobs/{id}/resume and POST /runs/copy_segment_job made a run whose
    finalize failed three times ("collection 'x' is Dropped, expected Importing"). Now 409
    naming the job and its target, no run."""
    from seglake.lifecycle import drop

    meta, store, job_id = world
    copyjob.run_inline(meta, store, job_id, threads=1)
    copyjob.finalize(meta, job_id)
    drop.begin_drop(meta, store, settings, "api_copy")
    drop.finish_drop(meta, "api_copy")
    for r in (client.post(f"{API}/jobs/{job_id}/resume", json={}, headers=h),
              client.post(f"{API}/runs/copy_segment_job", json={"job_id": job_id}, headers=h)):
        assert r.status_code == 409, r.text
        assert f"copy job {job_id}" in r.json()["detail"] and "'api_copy'" in r.json()["detail"], r.text
        assert "Dropp" in r.json()["detail"], r.text
    assert triggered == []


def test_a_snapshot_of_a_collection_that_is_not_live_is_refused_before_any_run(triggered, client, h, world,
                                                                               monkeypatch):
    """api_copy is Importing (a restore under way): snapshot_create's begin refuses it, but
    POST /snapshots and POST /runs/snapshot_create answered 201 and the run failed. Now 409."""
    for r in (client.post(f"{API}/snapshots", json={"collection": "api_copy", "name": "half"}, headers=h),
              client.post(f"{API}/runs/snapshot_create", json={"collection": "api_copy", "name": "half"}, headers=h)):
        assert r.status_code == 409, r.text
        assert "collection 'api_copy' is Importing" in r.json()["detail"], r.text
    # a verify of it: its files are still being copied, so the run failed with "PROBLEMS ... 36 missing" as
    # if the data were damaged (seen on a real standalone: r2 restored at 0.01 MiB/s, verified mid-copy)
    r = client.post(f"{API}/runs/verify_collection", json={"collection": "api_copy"}, headers=h)
    assert r.status_code == 409 and "collection 'api_copy' is Importing" in r.json()["detail"], r.text
    # a drop of it: begin_drop refuses a restore target under way (was 201 and a failed run too)
    r = client.post(f"{API}/runs/drop_collection", json={"collection": "api_copy"}, headers=h)
    assert r.status_code == 409 and "api_copy" in r.json()["detail"], r.text
    assert "restore" in r.json()["detail"], r.text
    assert triggered == []


@pytest.mark.parametrize("dag_id,conf", [
    ("snapshot_export", {"collection": "api_coll", "snapshot": "s1", "bundle": "zz"}),
    ("snapshot_verify", {"collection": "api_coll", "bundle": "s1"}),
    ("snapshot_restore_external", {"collection": "api_coll", "bundle": "s1", "target": "t"}),
    ("wal_archive", {}),
    ("collection_undrop", {"collection": "api_coll", "target": "t", "from_target": True}),
])
def test_a_run_that_needs_a_backup_target_when_none_is_set_is_refused_before_any_run(triggered, client, h, world,
                                                                                     monkeypatch, dag_id, conf):
    """A fresh install has no config backup_uri: an export (or a verify, a restore from the
    target, the WAL archive...) with no conf backup_uri was a run that failed in its first
    step ("no backup target"). Now 400 saying to pass conf key 'backup_uri' or set it."""
    monkeypatch.delenv("SEGLAKE_BACKUP_URI", raising=False)
    r = client.post(f"{API}/runs/{dag_id}", json=conf, headers=h)
    assert r.status_code == 400, r.text
    assert "no backup target" in r.json()["detail"] and "conf key 'backup_uri'" in r.json()["detail"], r.text
    assert triggered == []


@pytest.mark.parametrize("flag", ["export", "archive"])
def test_a_retention_policy_that_exports_without_a_backup_target_is_refused(triggered, client, h, world, tmp_path,
                                                                            monkeypatch, flag):
    """`export: true` (or `archive: true`) on an install with no config backup_uri: the
    policy was set (a green run) and every scheduled snapshot_schedule run then failed
    ("no backup target") until someone noticed. Refused when set; with a target it runs."""
    import httpx

    monkeypatch.delenv("SEGLAKE_BACKUP_URI", raising=False)
    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json={"is_paused": False}))
    conf = {"collection": "api_coll", "keep_last": 2, flag: True}
    r = client.post(f"{API}/runs/snapshot_retention", json=conf, headers=h)
    assert r.status_code == 400, r.text
    assert f"conf key {flag!r}" in r.json()["detail"] and "backup_uri" in r.json()["detail"], r.text
    assert triggered == []
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))
    r = client.post(f"{API}/runs/snapshot_retention", json=conf, headers=h)
    assert r.status_code == 201 and len(triggered) == 1, r.text


def test_the_generic_run_door_still_creates_a_run_for_names_that_exist(triggered, client, h, world, tmp_path,
                                                                       monkeypatch):
    import httpx

    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))

    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(200, json={"is_paused": False}))
    meta, _, job_id = world
    for dag_id, conf in (("snapshot_export", {"collection": "api_coll", "snapshot": "s1", "bundle": "b"}),
                         ("copy_segment_job", {"job_id": job_id}),
                         ("snapshot_retention", {"collection": "api_coll", "clear": True}),   # none set: cleared=false
                         ("verify_collection", {"collection": "api_coll"}),
                         # the target of this same restore: a re-run resumes it
                         ("snapshot_restore", {"collection": "api_coll", "snapshot": "s1", "target": "api_copy"})):
        r = client.post(f"{API}/runs/{dag_id}", json=conf, headers=h)
        assert r.status_code == 201, (dag_id, r.text)
    assert len(triggered) == 5
