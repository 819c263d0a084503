"""The trigger forms (issue 12, "Forms and conf"): optional fields are optional in the
UI, i.e. nullable in the schema the form is built from (`/api/v2/dags/{id}/details`),
and an empty value is accepted by Param validation and by REST: an empty GC collection
is a whole-store run, a snapshot needs no description."""

import pytest
from dag_helpers import core_api_client, load_dag

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def api(dagbag):
    with core_api_client(dagbag) as client:
        yield client


@pytest.mark.parametrize("dag_id,key", [("gc", "collection"), ("snapshot_create", "description"),
                                        ("snapshot_restore", "timeout_hours"), ("snapshot_restore", "deferrable"),
                                        ("copy_segment_job", "engine")])
def test_optional_fields_are_nullable_in_the_form_schema(api, dag_id, key):
    r = api.get(f"/api/v2/dags/{dag_id}/details")
    assert r.status_code == 200, r.text
    p = r.json()["params"][key]
    assert "null" in p["schema"]["type"], p
    assert p["value"] in (None, ""), p


@pytest.mark.parametrize("dag_id,conf", [
    ("gc", {}), ("gc", {"collection": None, "dry_run": True}),
    ("snapshot_create", {"collection": "demo", "name": "s1"}),
    ("snapshot_create", {"collection": "demo", "name": "s1", "description": None}),
])
def test_empty_optional_fields_pass_param_validation_and_rest(api, dag_id, conf):
    from airflow.sdk.definitions.param import ParamsDict

    params = ParamsDict(load_dag(dag_id).params)
    params.update(conf)
    resolved = params.validate()
    assert resolved.get("collection" if dag_id == "gc" else "description") in (None, "")
    r = api.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    assert r.status_code == 200, r.text
    assert r.json()["conf"] == conf


def test_an_empty_gc_collection_means_the_whole_store():
    from seglake.contract import check_conf

    for conf in ({}, {"collection": None}):
        assert check_conf("gc", conf)["collection"] is None
    with pytest.raises(Exception, match="collection"):
        check_conf("gc", {"collection": ""})   # "" is not a name: the form sends null for an empty field


@pytest.mark.parametrize("dag_id,conf,hint", [
    ("snapshot_restore", {"collection": "demo", "snapshot": "s", "tagret": "t"}, "did you mean 'target'?"),
    ("gc", {"dryrun": True}, "did you mean 'dry_run'?"),
    ("gc", {"dry_run": True, "zzz": 1}, "valid keys: dry_run"),
    ("snapshot_create", {"collection": "demo", "name": "s", "snapshot": "x"}, "did you mean 'name'?"),
])
def test_unknown_conf_keys_get_400_and_no_run(api, dag_id, conf, hint):
    before = api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"]
    for path in (f"/api/v2/dags/{dag_id}/dagRuns", f"/api/v2/dags/{dag_id}/dagRuns/"):
        r = api.post(path, json={"logical_date": None, "conf": conf})
        assert r.status_code == 400, r.text
        assert "unknown conf key" in r.json()["detail"] and hint in r.json()["detail"]
    assert api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"] == before


def test_the_guard_passes_everything_else_through(api):
    """Known keys reach Airflow's own validation (its 400 names the param); other routes,
    other DAGs and malformed bodies are Airflow's to answer."""
    r = api.post("/api/v2/dags/gc/dagRuns", json={"logical_date": None, "conf": {"missing_tolerance_hours": -1}})
    assert r.status_code == 400 and "missing_tolerance_hours" in r.json()["detail"]
    r = api.post("/api/v2/dags/gc/dagRuns", content=b'{"logical_date": null, "conf": ', 
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    r = api.post("/api/v2/dags/no_such_dag/dagRuns", json={"logical_date": None, "conf": {"x": 1}})
    assert r.status_code == 404
    r = api.post("/api/v2/dags/gc/dagRuns", json={"logical_date": None, "conf": {"dry_run": True}})
    assert r.status_code == 200 and r.json()["conf"] == {"dry_run": True}
