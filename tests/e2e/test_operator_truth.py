"""Issue 27 end to end against `airflow standalone` and headless Chromium: the operator
is told the truth.

* A restore whose run is marked failed mid-copy ends `failed` (the run_note teardown is
  the leaf that decides); its copy job, with no runner left, shows "stalled" on the page
  with a resume button; the resume from the page completes the job, and the job's
  progress read through the API never goes below what it was before the resume.
* The first action on a DAG that is paused (as a fresh install creates them) answers
  "queued" and says the DAG is paused, with an unpause button for an admin; the button
  unpauses it and the run finishes.
* The REST API's docs page renders every operation with the network blocked (every
  request to anything but loopback fails).

The copies are paced by the session's fault (0.2 s per file) and the restore's own
request limit, so the run is caught mid-copy by polling its state, never by timing."""

from __future__ import annotations

import time

import pytest
from pages import logged_in, seeded

pytestmark = [pytest.mark.airflow]
COLL = "truth_demo"
API = "/seglake/api/v1"
DAGS = ("snapshot_create", "snapshot_restore", "copy_segment_job")


@pytest.fixture(scope="module")
def engine(standalone, etcd_server):
    with seeded(standalone, etcd_server, COLL, segments=12, rows=40) as seed:
        yield seed


def _paused(standalone, dag_id: str, paused: bool) -> None:
    r = standalone.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": paused})
    assert r.status_code == 200, r.text


def _job(standalone, job_id: int) -> dict:
    r = standalone.request("GET", f"{API}/jobs/{job_id}")
    assert r.status_code == 200, r.text
    return r.json()


def _done(job: dict) -> tuple[int, int]:
    return job["progress"]["done_files"], job["progress"]["done_bytes"]


def test_a_restore_marked_failed_mid_copy_ends_failed_stalls_and_resumes_without_going_back(standalone, engine):
    meta, store, coll = engine
    for dag_id in DAGS:
        _paused(standalone, dag_id, False)
    r = standalone.request("POST", f"{API}/snapshots/{COLL}/s1/restore",
                           {"target": "truth_restored", "engine": "inline", "max_requests_per_second": 2})
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["dag_paused"] is False and run["message"].startswith("started"), run

    # caught mid-copy: some files done, many left (2 requests/s)
    deadline = time.time() + 240
    job = None
    while time.time() < deadline:
        job = next((j for j in standalone.request("GET", f"{API}/jobs").json()
                    if j["target_collection"] == "truth_restored"), None)
        if job and 2 <= job["progress"]["done_files"] <= job["progress"]["total_files"] - 8:
            break
        time.sleep(0.2)
    else:
        pytest.fail(f"the copy was not caught mid-way: {job}")
    r = standalone.request("PATCH", f"/api/v2/dags/snapshot_restore/dagRuns/{run['dag_run_id']}", {"state": "failed"})
    assert r.status_code == 200, r.text
    # item 1: the run's state is the lifecycle's outcome, not the teardown's success
    assert standalone.wait_run("snapshot_restore", run["dag_run_id"], 240) == "failed", \
        standalone.task_states("snapshot_restore", run["dag_run_id"])
    states = standalone.task_states("snapshot_restore", run["dag_run_id"])
    assert states.get("run_note") == "failed" and states.get("compare") in ("skipped", None), states

    job_id = job["job_id"]
    before = _done(_job(standalone, job_id))
    assert _job(standalone, job_id)["state"] == "Executing"

    # item 2: nothing copies it now: the page says "stalled", and offers resume (only now)
    with logged_in(standalone) as b:
        b.open(f"{standalone.base}/seglake/")
        row = ("Array.from(document.querySelectorAll('#copy-jobs tr'))"
               ".map(r => r.innerText).find(t => t.includes('truth_restored')) || ''")
        b.wait(f"({row}).includes('stalled for')", timeout=150, what="the job row saying stalled")
        assert _job(standalone, job_id)["health"] == "stalled"
        assert _job(standalone, job_id)["eta_s"] is None
        resume = f'form[data-path="jobs/{job_id}/resume"] button'
        b.click(resume)
        b.wait("!!document.querySelector('#action-result a.action-run')", what="the resume run link")
        dag_id, resume_run = b.js("document.querySelector('#action-result a.action-run').textContent").split(" ", 1)
        assert dag_id == "copy_segment_job"

    # the resumed job's progress never goes below what it was, and ends whole
    seen = [before]
    deadline = time.time() + 300
    while time.time() < deadline:
        j = _job(standalone, job_id)
        seen.append(_done(j))
        if j["state"] != "Executing":
            break
        time.sleep(0.2)
    assert all(b2 >= b1 and f2 >= f1 for (f1, b1), (f2, b2) in zip(seen, seen[1:])), seen
    assert j["state"] == "Completed" and _done(j) == (j["progress"]["total_files"], j["progress"]["total_bytes"])
    assert len(set(seen)) > 2, seen   # it was watched moving, not only before and after
    assert standalone.wait_run("copy_segment_job", resume_run, 240) == "success", \
        standalone.task_states("copy_segment_job", resume_run)


def test_the_first_action_on_a_paused_dag_says_so_and_offers_unpause(standalone, engine):
    _paused(standalone, "snapshot_create", True)   # as a fresh install creates every DAG
    r = standalone.request("POST", f"{API}/snapshots", {"collection": COLL, "name": "while_paused"})
    assert r.status_code == 201, r.text
    run = r.json()
    assert run["dag_paused"] is True and run["can_unpause"] is True, run
    assert run["message"].startswith("queued: the DAG snapshot_create is paused"), run

    with logged_in(standalone) as b:
        b.open(f"{standalone.base}/seglake/")
        form = f'form[data-path="snapshots"][data-label="snapshot {COLL}"]'
        b.wait(f"!!document.querySelector('{form}')", what="the snapshot form of the collection")
        b.js(f"document.querySelector('{form} input[name=name]').value = 'from_page'")
        b.js(f"document.querySelector('{form} button').click()")
        b.wait("!!document.querySelector('#action-result .paused')", what="the paused note")
        text = b.text("#action-result")
        assert "queued" in text and "the DAG snapshot_create is paused" in text, text
        b.click('#action-result form[data-path="dags/snapshot_create/unpause"] button')
        b.wait("!!document.querySelector('#action-result .unpaused')", what="the unpaused note")
        dag_id, run_id = b.js("document.querySelector('#action-result a.action-run').textContent").split(" ", 1)
    assert standalone.request("GET", "/api/v2/dags/snapshot_create").json()["is_paused"] is False
    for rid in (run["dag_run_id"], run_id):   # both queued runs start once it is unpaused
        assert standalone.wait_run("snapshot_create", rid, 240) == "success", standalone.task_states(dag_id, rid)


def test_the_docs_page_renders_its_operations_with_the_network_blocked(standalone):
    schema = standalone.request("GET", f"{API}/openapi.json").json()
    ops = sum(len(o) for o in schema["paths"].values())
    with logged_in(standalone, offline=True) as b:
        b.open(f"{standalone.base}{API}/docs")
        # the block is real: a CDN cannot be reached from this browser
        blocked = b.js("fetch('https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css')"
                       ".then(() => 'reached').catch(() => 'blocked')")
        assert blocked == "blocked"
        assert b.js("document.querySelectorAll('.op').length") == ops >= 15
        assert "/snapshots/{collection}/{name}/restore" in b.text()
