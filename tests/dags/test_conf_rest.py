"""The REST edge (issue 8, item 3 and "Conf"; issue 20, items 1 and 3): Airflow's own
trigger route, in process (FastAPI TestClient on the core API app with the plugins'
root middlewares, real SQLite metadata DB), answers a bad conf with HTTP 400 and one
plain sentence naming the key, the value and what is allowed, before any run exists
(seglake's ConfGuard checks the whole contract, the GC floor included, before Airflow's
per-Param jsonschema check, whose message would dump the schema). Python's json accepts
NaN, so NaN reaches the check."""

import pytest
from dag_helpers import core_api_client

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def api(dagbag):
    with core_api_client(dagbag) as client:
        yield client


@pytest.mark.parametrize("dag_id,conf,message", [
    ("snapshot_create", '{"collection": "demo", "name": "s", "ttl_hours": NaN}',
     "conf key 'ttl_hours' (TTL (hours)): NaN is not allowed; allowed: a finite number from 0 to 87600 hours"),
    ("snapshot_create", '{"collection": "demo", "name": "s", "ttl_hours": Infinity}',
     "conf key 'ttl_hours' (TTL (hours)): Infinity is not allowed"),
    ("snapshot_create", '{"collection": "demo", "name": "s\\n"}', "conf key 'name' (Snapshot name): \"s\\n\" is not allowed"),
    ("snapshot_create", '{"collection": "demo", "name": "my snap"}',
     "conf key 'name' (Snapshot name): \"my snap\" is not allowed; allowed: a letter or '_', then letters, digits "
     "or '_' (at most 255 characters, no spaces), e.g. nightly_1"),
    ("snapshot_restore", '{"collection": "demo", "snapshot": "s", "target": "t", "timeout_hours": NaN}',
     "conf key 'timeout_hours' (Job timeout (hours)): NaN is not allowed"),
    ("snapshot_restore", '{"collection": "demo", "snapshot": "s"}', "missing conf key 'target' (Target collection)"),
    ("snapshot_drop", '{"collection": "demo", "snapshot": "s"}', "did you mean 'name'?"),
    ("copy_segment_job", '{}', "missing conf key 'job_id' (Copy job id)"),
    # an integral float for an integer key: accepted, then the run failed in copy_job.plan on int('391.0')
    ("copy_segment_job", '{"job_id": 391.0}', "conf key 'job_id' (Copy job id): 391.0 is not allowed; allowed: an integer"),
    ("compaction", '{"collection": "demo", "target_rows": 1e6}', "conf key 'target_rows'"),
    ("gc", '{"missing_tolerance_hours": NaN}',
     "conf key 'missing_tolerance_hours' (Orphan tolerance (hours)): NaN is not allowed"),
    ("gc", '{"drop_tolerance_hours": -Infinity}', "conf key 'drop_tolerance_hours'"),
    ("gc", '{"missing_tolerance_hours": 0.1}',
     "conf key 'missing_tolerance_hours' (Orphan tolerance (hours)): 0.1 is below the GC floor of 1 hour; "
     "allowed: at least 1, or set force to true to go below the floor"),
    ("gc", '{"dry_run": false, "drop_tolerance_hours": 0.5, "force": false}', "drop_tolerance_hours"),
])
def test_rest_refuses_bad_conf_with_a_plain_400_before_a_run_exists(api, dag_id, conf, message):
    before = api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"]
    r = api.post(f"/api/v2/dags/{dag_id}/dagRuns", content='{"logical_date": null, "conf": %s}' % conf,
                 headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert message in detail, detail
    assert detail.startswith(f"{dag_id}: refused conf before any run: "), detail
    for dump in ("(?!", "Failed validating", "should not be valid under", "{'", "On instance"):
        assert dump not in detail, detail
    assert api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"] == before


def test_the_gc_floor_follows_the_settings_and_force(api, monkeypatch):
    """The floor a run would check (here raised to 2 h through the environment) is the
    one the trigger checks; force lets a tolerance below it through to a run."""
    monkeypatch.setenv("SEGLAKE_TOLERANCE_FLOOR", "2h")
    r = api.post("/api/v2/dags/gc/dagRuns", json={"logical_date": None, "conf": {"drop_tolerance_hours": 1.5}})
    assert r.status_code == 400 and "below the GC floor of 2 hours" in r.json()["detail"], r.text
    r = api.post("/api/v2/dags/gc/dagRuns",
                 json={"logical_date": None, "conf": {"drop_tolerance_hours": 0.1, "force": True}})
    assert r.status_code == 200, r.text
    assert r.json()["conf"] == {"drop_tolerance_hours": 0.1, "force": True}


@pytest.mark.parametrize("path", ["/api/v2/backfills/dry_run", "/api/v2/backfills"])
def test_a_backfill_of_gc_is_a_plain_400_and_other_backfills_go_to_airflow(api, path):
    """gc: refused with the reason before Airflow sees it (and before any run); another
    DAG's backfill is Airflow's to answer (here: 422, it has no periodic schedule)."""
    from seglake.contract import GC_BACKFILL_REFUSED

    window = {"from_date": "2026-11-20T00:00:00Z", "to_date": "2026-11-23T00:00:00Z"}
    before = api.get("/api/v2/dags/gc/dagRuns").json()["total_entries"]
    r = api.post(path, json={"dag_id": "gc", **window})
    assert r.status_code == 400 and r.json()["detail"] == GC_BACKFILL_REFUSED, r.text
    assert api.get("/api/v2/dags/gc/dagRuns").json()["total_entries"] == before
    r = api.post(path, json={"dag_id": "verify_collection", **window})
    assert r.status_code != 400 and "gc" not in str(r.json().get("detail")), r.text


def test_a_seglake_run_is_not_marked_success_by_hand(api):
    """Issue 27: the run's state is the lifecycle's outcome, decided by its run_note task.
    Marking the whole run success by hand (Airflow marks every unfinished task success, the
    run_note included, so it never runs) made a run green whose work never ran; so did
    marking a failed run_note success. Both are refused with a plain 400 before any change;
    marking it failed, setting its note and other DAGs stay Airflow's."""
    r = api.post("/api/v2/dags/snapshot_drop/dagRuns",
                 json={"logical_date": None, "conf": {"collection": "demo", "name": "s"}})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    run = f"/api/v2/dags/snapshot_drop/dagRuns/{run_id}"
    r = api.patch(run, json={"state": "success"})
    assert r.status_code == 400, r.text
    detail = r.json()["detail"]
    assert detail.startswith("snapshot_drop: a run is not marked success by hand"), detail
    assert api.get(run).json()["state"] == "queued"
    r = api.patch(run, params={"update_mask": "state"}, json={"state": "success", "note": "x"})
    assert r.status_code == 400, r.text
    for mark in ("", "/dry_run"):   # the task's mark and its preview (what the UI's dialog asks first)
        r = api.patch(f"{run}/taskInstances/run_note{mark}", json={"new_state": "success"})
        assert r.status_code == 400 and "run_note" in r.json()["detail"], r.text
    r = api.patch(run, params={"update_mask": "note"}, json={"note": "looked at it"})   # the note is free
    assert r.status_code == 200 and r.json()["note"] == "looked at it", r.text
    r = api.patch(run, json={"state": "failed"})   # stopping a run is Airflow's to do (here: 200)
    assert r.status_code == 200, r.text
    r = api.patch(f"{run}/taskInstances/drop/dry_run", json={"new_state": "success"})   # another task alone
    assert r.status_code != 400, r.text
    r = api.patch(f"{run}/taskInstances/drop/dry_run", json={"new_state": "success", "include_downstream": True})
    assert r.status_code == 400 and "with its downstream" in r.json()["detail"], r.text
    r = api.patch(f"{run}/taskInstances", json={"actions": [{"action": "update", "entities": [
        {"task_id": "run_note", "new_state": "success"}]}]})   # the bulk door (the grid's multi-select)
    assert r.status_code == 400 and "run_note" in r.json()["detail"], r.text


def test_the_bulk_doors_do_not_mark_a_seglake_run_or_its_run_note_success(api):
    """Two more doors around the rule: the bulk dag-run update (PATCH .../dags/{id}/dagRuns,
    entities with their own dag_id, the path's id "~" or another DAG's) and the bulk task
    update with a wildcard or another DAG in the path (each entity names its dag_id and
    dag_run_id, which override the path's). Both marked a queued snapshot_drop run, or its
    run_note, success (200) with the drop never run. Refused with the same 400."""
    r = api.post("/api/v2/dags/snapshot_drop/dagRuns",
                 json={"logical_date": None, "conf": {"collection": "demo", "name": "s"}})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    run = f"/api/v2/dags/snapshot_drop/dagRuns/{run_id}"
    for path_dag in ("snapshot_drop", "~", "example_bash"):
        r = api.patch(f"/api/v2/dags/{path_dag}/dagRuns", json={"actions": [{"action": "update", "entities": [
            {"dag_run_id": run_id, "dag_id": "snapshot_drop", "state": "success"}]}]})
        assert r.status_code == 400, (path_dag, r.text)
        assert r.json()["detail"].startswith("snapshot_drop: a run is not marked success by hand"), r.text
    r = api.patch("/api/v2/dags/snapshot_drop/dagRuns", json={"actions": [{"action": "update", "entities": [
        {"dag_run_id": run_id, "state": "success"}]}]})   # the path's dag_id
    assert r.status_code == 400, r.text
    for path in ("/api/v2/dags/~/dagRuns/~/taskInstances", "/api/v2/dags/example_bash/dagRuns/x/taskInstances"):
        r = api.patch(path, json={"actions": [{"action": "update", "entities": [
            {"task_id": "run_note", "dag_id": "snapshot_drop", "dag_run_id": run_id, "new_state": "success"}]}]})
        assert r.status_code == 400 and "run_note" in r.json()["detail"], (path, r.text)
    assert api.get(run).json()["state"] == "queued"
    r = api.patch("/api/v2/dags/snapshot_drop/dagRuns", json={"actions": [{"action": "update", "entities": [
        {"dag_run_id": run_id, "state": "failed"}]}]})   # stopping it stays free
    assert r.status_code == 200 and not r.json()["update"]["errors"], r.text   # passed on to Airflow


def test_the_page_says_which_scheduled_dags_are_paused(api, airflow_env):
    """Airflow creates DAGs paused: on a fresh install wal_flush, snapshot_schedule,
    compaction ... never run on their schedule, and the page (WAL lag growing, no
    scheduled snapshot) did not say why. It names the paused scheduled DAGs; once one is
    unpaused it is no longer named."""
    import re

    page = api.get("/seglake/", headers={"Accept": "text/html"})
    assert page.status_code == 200, page.text[:300]
    line = re.search(r'<p class="warn" id="paused-schedules">(.*?)</p>', page.text)
    assert line and "wal_flush" in line.group(1) and "snapshot_schedule" in line.group(1), page.text[:2000]
    assert "verify_collection" not in line.group(1)   # no schedule: paused or not, nothing waits for it
    r = api.patch("/api/v2/dags/wal_flush", params={"update_mask": "is_paused"}, json={"is_paused": False})
    assert r.status_code == 200, r.text
    try:
        line = re.search(r'<p class="warn" id="paused-schedules">(.*?)</p>', api.get("/seglake/").text)
        assert line and "wal_flush" not in line.group(1) and "snapshot_schedule" in line.group(1)
    finally:
        api.patch("/api/v2/dags/wal_flush", params={"update_mask": "is_paused"}, json={"is_paused": True})


def test_clearing_a_failed_task_clears_the_run_note_that_decides_the_run(api):
    """Clearing only the failed task of a seglake run (Airflow's default: no downstream)
    left the failed run_note as it was: the task re-ran and did the work, and the run
    still ended failed under the old FAILED note. The run_note is cleared with any task
    cleared, so it decides again from what the run did."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    r = api.post("/api/v2/dags/snapshot_drop/dagRuns",
                 json={"logical_date": None, "conf": {"collection": "demo", "name": "s"}})
    run_id = r.json()["dag_run_id"]
    with create_session() as s:   # what a run whose drop failed leaves: drop and run_note failed
        dr = s.query(DagRun).filter_by(dag_id="snapshot_drop", run_id=run_id).one()
        dr.dag = DBDagBag().get_dag_for_run(dr, session=s)
        dr.verify_integrity(session=s, dag_version_id=dr.created_dag_version_id)
        s.flush()
        for ti in s.query(TaskInstance).filter_by(dag_id="snapshot_drop", run_id=run_id):
            ti.state = "failed" if ti.task_id in ("drop", "run_note") else "success"
        dr.state = "failed"
    for extra in ({}, {"include_downstream": False}, {"task_ids": [["drop", -1]]}):
        body = {"dag_run_id": run_id, "task_ids": ["drop"], "dry_run": True, "only_failed": True, **extra}
        r = api.post("/api/v2/dags/snapshot_drop/clearTaskInstances", json=body)
        assert r.status_code == 200, r.text
        assert sorted(t["task_id"] for t in r.json()["task_instances"]) == ["drop", "run_note"], r.text


def test_a_seglake_run_note_is_not_marked_skipped_by_hand(api):
    """Marking run_note *skipped* (new_state "skipped" is one of Airflow's three) made the
    run green as surely as marking it success: its only leaf skipped, Airflow's next look
    at the run counts it a success, while the work (here a drop that failed) never got
    done. Shown on the run's task states as a scheduler pass sees them (update_state);
    then refused with the 400 through the single, dry-run and bulk doors, and with
    include_downstream from any task. Skipping a task alone stays free (the run_note
    then decides)."""
    from airflow.models.dagbag import DBDagBag
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session

    r = api.post("/api/v2/dags/snapshot_drop/dagRuns",
                 json={"logical_date": None, "conf": {"collection": "demo", "name": "s"}})
    run_id = r.json()["dag_run_id"]
    with create_session() as s:   # what Airflow makes of it: drop failed, the run_note skipped
        dr = s.query(DagRun).filter_by(dag_id="snapshot_drop", run_id=run_id).one()
        dr.dag = DBDagBag().get_dag_for_run(dr, session=s)
        dr.verify_integrity(session=s, dag_version_id=dr.created_dag_version_id)
        s.flush()
        for ti in s.query(TaskInstance).filter_by(dag_id="snapshot_drop", run_id=run_id):
            ti.state = {"drop": "skipped", "run_note": "skipped"}.get(ti.task_id, "success")
        dr.state = "running"
        s.flush()
        dr.update_state(session=s)
        assert dr.state == "success"   # green: why the mark is refused
        s.rollback()
    run = f"/api/v2/dags/snapshot_drop/dagRuns/{run_id}"
    for mark in ("", "/dry_run"):
        r = api.patch(f"{run}/taskInstances/run_note{mark}", json={"new_state": "skipped"})
        assert r.status_code == 400 and "run_note" in r.json()["detail"], r.text
        assert "skipped" in r.json()["detail"], r.text
    r = api.patch(f"{run}/taskInstances/drop/dry_run", json={"new_state": "skipped", "include_downstream": True})
    assert r.status_code == 400 and "with its downstream" in r.json()["detail"], r.text
    r = api.patch("/api/v2/dags/~/dagRuns/~/taskInstances", json={"actions": [{"action": "update", "entities": [
        {"task_id": "run_note", "dag_id": "snapshot_drop", "dag_run_id": run_id, "new_state": "skipped"}]}]})
    assert r.status_code == 400, r.text
    r = api.patch(f"{run}/taskInstances/drop/dry_run", json={"new_state": "skipped"})   # a task alone
    assert r.status_code != 400, r.text


@pytest.mark.parametrize("dag_id,conf,status,words", [
    ("snapshot_export", {"collection": "nope", "snapshot": "s1", "bundle": "b"}, 404, "'nope'"),
    ("snapshot_drop", {"collection": "nope", "name": "s"}, 404, "'nope'"),
    ("copy_segment_job", {"job_id": 987654}, 404, "987654"),
    ("gc", {"collection": "nope"}, 404, "collection 'nope' not found"),
    ("collection_undrop", {"collection": "nope", "target": "t"}, 404, "collection 'nope' not found"),
    ("verify_collection", {"collection": "nope"}, 404, "collection 'nope' not found"),
    # a backup target that holds the store: every run's open_target refuses it (was a run that failed)
    ("snapshot_export", {"collection": "nope", "snapshot": "s1", "backup_uri": "/"}, 400,
     "conf key 'backup_uri' (Backup target): '/' is (or is inside, or holds) the store"),
])
def test_airflow_s_own_trigger_answers_an_unknown_name_before_a_run_exists(api, airflow_env, dag_id, conf, status,
                                                                          words):
    """The trigger form and POST /api/v2/dags/{id}/dagRuns (Airflow's own door) checked the
    conf's shape only: an unknown collection, snapshot, job ... made a run that failed in
    its first step. Now the same answer as the seglake API (404 naming it), no run."""
    before = api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"]
    r = api.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert detail.startswith(f"{dag_id}: refused before any run: ") and words in detail, detail
    assert api.get(f"/api/v2/dags/{dag_id}/dagRuns").json()["total_entries"] == before
