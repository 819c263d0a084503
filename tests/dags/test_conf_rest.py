"""The REST edge (issue 8, item 3 and "Conf"): Airflow's own trigger route, in process
(FastAPI TestClient on the core API app, real SQLite metadata DB), answers a bad conf
with HTTP 400 naming the param, before any run exists. Python's json accepts NaN, so
NaN reaches the Param schema; the `not` clause of seglake.limits refuses it."""

import pytest
from dag_helpers import core_api_client

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def api(dagbag):
    with core_api_client(dagbag) as client:
        yield client


@pytest.mark.parametrize("dag_id,conf,param", [
    ("snapshot_create", '{"collection": "demo", "name": "s", "ttl_hours": NaN}', "ttl_hours: nan"),
    ("snapshot_create", '{"collection": "demo", "name": "s", "ttl_hours": Infinity}', "ttl_hours"),
    ("snapshot_create", '{"collection": "demo", "name": "s\\n"}', "param name"),
    ("snapshot_restore", '{"collection": "demo", "snapshot": "s", "target": "t", "timeout_hours": NaN}',
     "timeout_hours: nan"),
    ("snapshot_restore", '{"collection": "demo", "snapshot": "s"}', "param target"),
    ("snapshot_drop", '{"collection": "demo", "snapshot": "s"}', "did you mean 'name'?"),  # seglake ConfGuard
    ("copy_segment_job", '{}', "param job_id"),
    ("gc", '{"missing_tolerance_hours": NaN}', "missing_tolerance_hours: nan"),
    ("gc", '{"drop_tolerance_hours": -Infinity}', "drop_tolerance_hours"),
])
def test_rest_refuses_bad_conf_with_400_before_a_run_exists(api, dag_id, conf, param):
    before = api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"]
    r = api.post(f"/api/v2/dags/{dag_id}/dagRuns", content='{"logical_date": null, "conf": %s}' % conf,
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert param in r.json()["detail"]
    assert api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"] == before
