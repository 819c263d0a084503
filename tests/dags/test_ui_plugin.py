"""The seglake plugin inside the real Airflow API app (in-process): every route refuses an
anonymous request and a bad token, serves the page and /metrics to an authenticated user
with what etcd holds, and the nav entry is registered."""

import pytest

from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = pytest.mark.airflow
ROUTES = ["/seglake/", "/seglake/metrics", "/seglake/api/overview"]


@pytest.fixture(scope="module")
def client(airflow_home):
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app

    return TestClient(create_app())


@pytest.fixture
def token(client):
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    return get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))


@pytest.mark.parametrize("path", ROUTES)
def test_anonymous_and_bad_tokens_are_refused(client, path):
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer not-a-jwt"}).status_code == 403
    assert client.get(path, headers={"Cookie": "_token=forged"}).status_code == 403


def test_page_metrics_and_json_show_the_store(client, token, airflow_env, meta, store):
    demo.seed(meta, store, demo.SeedParams(name="ui_coll", partitions=1, segments=2, rows=50, dim=4))
    snapshot.create(meta, store, "ui_coll", "ui_snap", description="<b>not markup</b>")
    h = {"Authorization": f"Bearer {token}"}
    page = client.get("/seglake/", headers=h)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "ui_coll" in page.text and "ui_snap" in page.text and "COMMITTED" in page.text
    assert "&lt;b&gt;not markup&lt;/b&gt;" in page.text and "<b>not markup</b>" not in page.text
    assert 'data-path="snapshots/ui_coll/ui_snap/restore"' in page.text and "no WAL channels" in page.text
    # one inline script (the actions), no external asset; values never reach it unescaped
    assert page.text.count("<script") == 1 and "src=" not in page.text
    assert "http://" not in page.text.replace('xmlns="http://www.w3.org/2000/svg"', "")
    m = client.get("/seglake/metrics", headers=h)
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'seglake_snapshots{state="COMMITTED"} 1' in m.text
    assert 'seglake_collections{state="Created"} 1' in m.text
    o = client.get("/seglake/api/overview", headers=h).json()
    assert [c["name"] for c in o["collections"]["rows"]] == ["ui_coll"]


def test_a_browser_without_a_session_is_sent_to_the_login_page(client, token):
    """Issue 20: /seglake/ without a login answered raw 401 JSON. A page request (Accept:
    text/html) goes to Airflow's login with the way back; an API client keeps its 401/403."""
    html = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
    for headers in (html, {**html, "Cookie": "_token=forged"}):
        r = client.get("/seglake/", headers=headers, follow_redirects=False)
        assert r.status_code == 303, (r.status_code, r.text)
        assert r.headers["location"].startswith("/auth/login?next=") and "%2Fseglake%2F" in r.headers["location"]
    assert client.get("/seglake/api/overview", headers={"Accept": "application/json"}).status_code == 401
    r = client.get("/seglake/", headers={**html, "Authorization": f"Bearer {token}"}, follow_redirects=False)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")


def test_the_gc_section_links_the_dag_run_and_marks_a_dry_run(client, token, airflow_env, meta, store):
    from dag_helpers import load_dag, task_states

    from seglake.lifecycle import gc

    demo.seed(meta, store, demo.SeedParams(name="ui_gc", partitions=1, segments=1, rows=10, dim=4))
    gc.clear_schedule(meta)
    run = load_dag("gc").test(run_conf={"engine": "inline"})          # the form's default: a dry run
    assert run.state == "success", task_states(run)
    page = client.get("/seglake/", headers={"Authorization": f"Bearer {token}"}).text
    from urllib.parse import quote

    assert f'<a class="runid" href="../dags/gc/runs/{quote(run.run_id, safe="")}">{run.run_id}</a>' in page, page
    assert 'data-gc-kind="dry">DRY RUN: nothing deleted' in page
    assert 'data-gc-schedule="unset"' in page


def test_nav_entry_is_registered(client, token):
    r = client.get("/api/v2/plugins", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200
    (plugin,) = [p for p in r.json()["plugins"] if p["name"] == "seglake_ui"]
    assert plugin["external_views"][0]["url_route"] == "seglake"
    assert plugin["external_views"][0]["href"] == "seglake/"
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/seglake"


def test_loading_the_plugin_does_not_import_the_api_stack():
    """Every Airflow process loads plugins; only the API server should pay for FastAPI."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import sys, seglake_ui; heavy = [m for m in ('fastapi', 'airflow.api_fastapi.core_api.security') "
            "if m in sys.modules]; assert not heavy, heavy; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ,
                              "PYTHONPATH": f"{repo / 'include'}:{repo / 'plugins'}"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_the_conf_guard_tells_anonymous_callers_nothing(client, token):
    """Unknown keys get the guard's 400 only with a token that may trigger the DAG;
    anonymous or forged callers get Airflow's own 401/403 and learn no key names."""
    body = {"logical_date": None, "conf": {"dryrun": True}}
    r = client.post("/api/v2/dags/gc/dagRuns", json=body)
    assert r.status_code == 401 and "dry_run" not in r.text
    r = client.post("/api/v2/dags/gc/dagRuns", json=body, headers={"Authorization": "Bearer forged"})
    assert r.status_code == 403 and "dry_run" not in r.text
    r = client.post("/api/v2/dags/gc/dagRuns", json=body, headers={"Cookie": "_token=forged"})
    assert r.status_code in (401, 403) and "dry_run" not in r.text
    r = client.post("/api/v2/dags/gc/dagRuns", json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 400 and "did you mean 'dry_run'?" in r.json()["detail"]
    r = client.post("/api/v2/dags/gc/dagRuns", json=body, headers={"Cookie": f"_token={token}"})
    assert r.status_code == 400 and "did you mean 'dry_run'?" in r.json()["detail"]
