"""Issue 20 items 2 and 5 end to end against `airflow standalone`:

* the typed REST API over real HTTP (httpx, a bearer token): create a snapshot, pin and
  unpin it, drop it, a GC dry run, resume a copy job, a verify through the generic
  POST /runs/{dag_id} -- each change a DAG run that
  finishes; bad input is one sentence (HTTP 400) and no run; no token is 401;
* the page's actions in headless Chromium, opened directly and inside Airflow's
  navigation (a sandboxed iframe): restore a snapshot from its row (the run link
  appears; the page follows the copy live: Executing with a rate, then Completed; the
  new collection holds the rows), a GC dry run from the frame, a refusal shown as one
  sentence.

The module leaves the shared standalone as it found it (every etcd key and store file it
created is removed at its end)."""

from __future__ import annotations

import time

import pytest
from pages import seeded

from seglake.visibility import visible_count

pytestmark = [pytest.mark.airflow]
COLL = "act_demo"
API = "/seglake/api/v1"
DAGS = ("snapshot_create", "snapshot_drop", "snapshot_restore", "gc", "copy_segment_job", "verify_collection")


@pytest.fixture(scope="module")
def engine(standalone, etcd_server):
    with seeded(standalone, etcd_server, COLL, segments=3, rows=60) as (meta, store, coll):
        for dag_id in DAGS:
            r = standalone.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
            assert r.status_code == 200, r.text
        yield meta, store, coll


def _api(standalone, method: str, path: str, body=None, token=None):
    return standalone.request(method, API + path, body, token=token)


def _finished(standalone, run: dict, timeout: float = 240) -> None:
    state = standalone.wait_run(run["dag_id"], run["dag_run_id"], timeout)
    assert state == "success", (run, standalone.task_states(run["dag_id"], run["dag_run_id"]))


def test_the_rest_api_changes_things_through_dag_runs(standalone, engine):
    meta, store, coll = engine
    r = _api(standalone, "POST", "/snapshots", {"collection": COLL, "name": "s2"})
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["dag_id"] == "snapshot_create" and run["run_url"].startswith("/dags/snapshot_create/runs/")
    assert run["object"] == {"collection": COLL, "snapshot": "s2"}
    _finished(standalone, run)
    snap = _api(standalone, "GET", f"/snapshots/{COLL}/s2").json()
    assert snap["state"] == "COMMITTED" and snap["segments"] == 3

    pin = _api(standalone, "POST", f"/snapshots/{COLL}/s2/pins", {"ttl_hours": 1, "by": "e2e"})
    assert pin.status_code == 201, pin.text
    assert [p["pin_id"] for p in _api(standalone, "GET", f"/pins?collection={COLL}").json()] == [pin.json()["pin_id"]]
    assert _api(standalone, "DELETE", f"/pins/{pin.json()['pin_id']}").status_code == 200

    r = _api(standalone, "DELETE", f"/snapshots/{COLL}/s2")
    assert r.status_code == 202, r.text
    _finished(standalone, r.json())
    assert _api(standalone, "GET", f"/snapshots/{COLL}/s2").status_code == 404

    r = _api(standalone, "POST", "/gc/dry-run", {"collection": COLL, "engine": "inline"})
    assert r.status_code == 201 and r.json()["conf"]["dry_run"] is True, r.text
    _finished(standalone, r.json())

    before = standalone.run_count("snapshot_restore")
    r = _api(standalone, "POST", f"/snapshots/{COLL}/s1/restore", {"target": "bad name"})
    assert r.status_code == 400 and "field 'target'" in r.json()["detail"], r.text
    r = _api(standalone, "POST", f"/snapshots/{COLL}/s1/restore", {"target": "act_ok", "max_mib_per_second": -1})
    assert r.status_code == 400 and "max_mib_per_second" in r.json()["detail"], r.text
    assert standalone.run_count("snapshot_restore") == before
    assert _api(standalone, "GET", "/collections", token="").status_code == 401

    # any other seglake DAG: POST /runs/{dag_id} with its conf, checked before the run exists
    before = standalone.run_count("verify_collection")
    r = _api(standalone, "POST", "/runs/verify_collection", {"colection": COLL})
    assert r.status_code == 400 and "did you mean 'collection'?" in r.json()["detail"], r.text
    assert standalone.run_count("verify_collection") == before
    r = _api(standalone, "POST", "/runs/verify_collection", {"collection": COLL, "engine": "inline"})
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["dag_id"] == "verify_collection" and run["object"] == {"collection": COLL}
    assert run["conf"] == {"collection": COLL, "db": "default", "engine": "inline"} and run["dag_paused"] is False
    _finished(standalone, run)
    assert standalone.run_count("verify_collection") == before + 1


def test_page_actions_directly_and_inside_airflows_frame(standalone, engine, browser):
    meta, store, coll = engine
    b = browser
    b.open(f"{standalone.base}/seglake/")
    form = f'form[data-path="snapshots/{COLL}/s1/restore"]'
    b.wait(f"!!document.querySelector('{form}')", what="the restore form of the snapshot")
    b.js(f"document.querySelector('{form} input[name=target]').value = 'act_restored'")
    b.js(f"document.querySelector('{form} button').click()")
    b.wait("!!document.querySelector('#action-result a.action-run')", what="the link to the restore run")
    link = b.js("document.querySelector('#action-result a.action-run').textContent")
    dag_id, run_id = link.split(" ", 1)
    assert dag_id == "snapshot_restore", link
    # live progress: the page follows the copy (each file slowed by 0.2 s) as it reloads itself
    row = ("Array.from(document.querySelectorAll('#copy-jobs tr'))"
           ".map(r => r.innerText).find(t => t.includes('act_restored')) || ''")
    seen = set()
    deadline = time.time() + 240
    while time.time() < deadline and "Completed" not in seen:
        try:
            text = b.js(row) or ""
        except RuntimeError:   # a reload in between
            continue
        seen |= {s for s in ("Pending", "Executing", "Completed") if s in text}
        if "Executing" in text and "/s" in text:
            seen.add("rate")
        time.sleep(0.2)
    assert {"Executing", "rate", "Completed"} <= seen, seen
    assert standalone.wait_run(dag_id, run_id, 240) == "success", standalone.task_states(dag_id, run_id)
    restored = meta.catalog.get_by_name("act_restored")
    assert visible_count(meta, store, restored.collection_id) == visible_count(meta, store, coll.collection_id) > 0
    b.act_until("document.querySelector('#action-result a.action-run').click()",   # the run's page in Airflow
                "location.pathname.startsWith('/dags/snapshot_restore/runs/')", what="the run's page")

    # inside Airflow's navigation: a GC dry run from the frame, and a refusal in one sentence
    b.open(f"{standalone.base}/plugin/seglake")
    frame = "document.querySelector('iframe')"
    doc = f"{frame}.contentDocument"
    b.wait(f"!!({frame} && {doc} && {doc}.querySelector('form[data-path=\"gc/dry-run\"]'))",
           what="the seglake page in Airflow's frame")
    b.js(f"{doc}.querySelector('form[data-path=\"gc/dry-run\"] button').click()")
    # (the page keeps the last action's result across reloads: the restore's link may show until
    # the GC request is answered -- wait for the GC's own link, not any link)
    b.wait(f"({doc}.querySelector('#action-result a.action-run')?.textContent || '').startsWith('gc ')",
           what="the GC run link in the frame")
    dag_id, run_id = b.js(f"{doc}.querySelector('#action-result a.action-run').textContent").split(" ", 1)
    assert dag_id == "gc" and standalone.wait_run(dag_id, run_id, 240) == "success"
    before = standalone.run_count("snapshot_restore")
    b.js(f"{doc}.querySelector('{form} input[name=target]').value = '{COLL}'")   # taken: the source itself
    b.js(f"{doc}.querySelector('{form} button').click()")
    b.wait(f"{doc}.querySelector('#action-result').className === 'err'", what="the refusal")
    text = b.js(f"{doc}.querySelector('#action-result').textContent")
    assert text == f"restore {COLL}/s1: collection '{COLL}' already exists in db 'default'; choose another target", text
    assert standalone.run_count("snapshot_restore") == before
    # issue 27: a run link in the frame opens the run in Airflow's own view, not Airflow nested in the frame
    b.act_until(f"{doc}.querySelector('#copy-jobs a[href*=\"/runs/\"]').click()",
                "location.pathname.startsWith('/dags/snapshot_restore/runs/')", what="the run's page in Airflow's view")
    b.wait("!Array.from(document.querySelectorAll('iframe')).some(f => f.src.includes('/seglake'))",
           timeout=30, what="Airflow's router showing the run instead of the seglake frame")
