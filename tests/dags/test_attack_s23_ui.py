"""Attack s23 (issue 27): the operator is told the truth. In-process repros (dag.test, REST
test client)."""

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot

pytestmark = pytest.mark.airflow

NOTHING_RAN = r"^(?!check_conf$|run_note$).*"


def _world(meta, store):
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=40, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    job_id = restore.restore(meta, store, "demo", "s1", "demo_copy")
    return job_id


# held (coverage): every step but check_conf marked success, nothing ran -> the run is failed, for every
# lifecycle DAG that needs no Milvus or backup target (a one-step-marked sweep over 110 (DAG, task)
# pairs found F1 below; the other green ones had done their work anyway: branches not taken, a wait
# whose job the inline copy had completed, a wal_flush with nothing to flush)
SWEEP = {
    "snapshot_create": {"collection": "demo", "name": "s2", "engine": "inline"},
    "snapshot_drop": {"collection": "demo", "name": "s1"},
    "snapshot_restore": {"collection": "demo", "snapshot": "s1", "target": "t_sweep", "engine": "inline"},
    "copy_segment_job": {"job_id": "JOB", "engine": "inline"},
    "gc": {"dry_run": False, "engine": "inline"},
    "gc_dry": {"dry_run": True, "engine": "inline"},
    "compaction": {"collection": "demo", "engine": "inline"},
    "compaction_policy": {"collection": "demo"},
    "pitr_window": {"collection": "demo"},
    "snapshot_retention": {"collection": "demo"},
    "verify_collection": {"collection": "demo", "engine": "inline"},
    "drop_collection": {"collection": "demo", "wait_for_flush": False},
    "wal_flush": {"engine": "inline"},
    "snapshot_schedule": {},
    "wal_archive": {},
    "collection_undrop": {"collection": "demo", "target": "demo_back"},
    "snapshot_export": {"collection": "demo", "snapshot": "s1"},
    "snapshot_verify": {"collection": "demo", "bundle": "s1"},
    "restore_database": {"as_of": "2026-11-27T12:00:00Z", "suffix": "x"},
}


@pytest.mark.parametrize("kind", sorted(SWEEP))
def test_held_every_dag_whose_steps_were_all_marked_instead_of_run_ends_failed(airflow_env, meta, store, kind):
    job_id = _world(meta, store)
    conf = {k: (job_id if v == "JOB" else v) for k, v in SWEEP[kind].items()}
    dag_id = "gc" if kind == "gc_dry" else kind
    run = load_dag(dag_id).test(run_conf=conf, mark_success_pattern=NOTHING_RAN)
    states = task_states(run)
    assert states["check_conf"] == "success", states
    assert states["run_note"] == "failed" and run.state == "failed", states


# -- F1: a drop_collection run with wait_for_flush false whose `finish` was marked success (not run):
# the collection stays Dropping with NO vchannel held (finish would have dropped it), and the run was
# green with the note "Dropping (wait_for_flush is false: a run after wal_flush releases its vchannels
# finishes the drop)" -- nothing waits on wal_flush; the drop simply did not finish ---------------
def test_f1_a_drop_without_wait_whose_finish_was_marked_ends_failed(airflow_env, meta, store):
    coll, _ = demo.seed(meta, store, demo.SeedParams(name="nowait", partitions=1, segments=1, rows=10, dim=4))
    run = load_dag("drop_collection").test(run_conf={"collection": "nowait", "wait_for_flush": False},
                                           mark_success_pattern=r"^finish$")
    states = task_states(run)
    assert meta.catalog.get(coll.collection_id).state == "Dropping"   # the finish did not run
    assert states["run_note"] == "failed" and run.state == "failed", states
    # a real run of the same conf finishes the drop: green
    again = load_dag("drop_collection").test(run_conf={"collection": "nowait", "wait_for_flush": False})
    assert again.state == "success" and meta.catalog.get(coll.collection_id).state == "Dropped", task_states(again)


# -- F2: a copy job left Pending (its snapshot_restore run marked failed, or its worker killed, right after
# `restore` created it and before copy_job.plan) is shown "running" for ever: no stall, no *resume*
# (stalled_for looked at Executing jobs only); the REST API's health says "running" --------------
def test_f2_a_pending_job_nothing_plans_is_shown_stalled_and_resumable(airflow_env, meta, store):
    import time

    from seglake import console
    from seglake_airflow.ui.render import _jobs

    demo.seed(meta, store, demo.SeedParams(name="pend", partitions=1, segments=2, rows=10, dim=4))
    snapshot.create(meta, store, "pend", "s1")
    job_id = restore.restore(meta, store, "pend", "s1", "pend_copy", owner="manual__stopped",
                             now=time.time() - 600)   # created 10 min ago; its run stopped before plan
    (j,) = [d for d in console.copy_jobs(meta, time.time()) if d["job_id"] == job_id]
    assert j["state"] == "Pending"
    # observed: health 'running', stalled_s None, no resume button, for ever
    assert j["health"] == "stalled" and j["stalled_s"] >= 590, (j["health"], j["stalled_s"])
    assert "resume" in _jobs([j])
    # and the resume (a copy_segment_job run, what the button starts) drives it to the end
    run = load_dag("copy_segment_job").test(run_conf={"job_id": job_id, "engine": "inline"})
    assert run.state == "success", task_states(run)
    assert copyjob.describe_job(meta, job_id)["state"] == "Completed"
    # a job just created (its plan a few seconds away) is not called stalled
    young = restore.restore(meta, store, "pend", "s1", "pend_young")
    (y,) = [d for d in console.copy_jobs(meta, time.time()) if d["job_id"] == young]
    assert y["health"] == "running" and y["stalled_s"] is None


# -- F3: a restore into Milvus whose run stopped (marked failed, worker killed) mid-import shows its last
# state ("importing") on the page for ever, like any live one: nothing says no run holds it (the run's
# claim restore_runs/{rid} is leased and kept alive while a run lasts) ------------------------------
def test_f3_a_milvus_restore_no_run_holds_is_said_stopped(airflow_env, meta, store):
    import json
    import time

    from seglake import console
    from seglake_airflow.ui.render import _milvus

    rec = {"v": 2, "state": "importing", "bundle": "default.demo/b1", "bundle_uid": "u", "name": "m1",
           "target": {"address": "127.0.0.1:19530", "bucket": "b"}, "created_at": time.time() - 3600}
    meta.kv.put(meta.keys.milvus_restore("r1"), json.dumps(rec))
    meta.kv.put(meta.keys.milvus_restore("r2"), json.dumps({**rec, "name": "m2"}))
    meta.kv.put(meta.keys.milvus_restore_run("r2"), json.dumps({"pid": 1}), lease=meta.kv.grant_lease(60))
    meta.kv.put(meta.keys.milvus_restore("r3"), json.dumps({**rec, "name": "m3", "state": "verified"}))
    m = console.milvus(meta, time.time())
    by = {r["restore_id"]: r for r in m["restores"]}
    assert by["r1"]["stopped"] and not by["r2"]["stopped"] and not by["r3"]["stopped"], by
    html = _milvus(m)
    assert html.count("no run holds it") == 1, html


# -- F4: a refusal echoed a credential the caller put in a URI: `POST /runs/snapshot_export
# {"backup_uri": "s3://AKIA...:secret@b/p"}` answered `"s3://k:secret@b/p" is not allowed` (also the
# config layer's refusal of such a store_uri / backup_uri, shown on the page and in task logs) ------
@pytest.fixture(scope="module")
def api_client(airflow_home):
    from fastapi.testclient import TestClient

    from airflow.api_fastapi.app import create_app

    return TestClient(create_app())


def _admin():
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    token = get_auth_manager().generate_jwt(SimpleAuthManagerUser(username="admin", role="admin"))
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/runs/snapshot_export", {"collection": "demo", "snapshot": "s1", "backup_uri": "s3://AKIAX:s3cr3tZ@b/p"}),
    ("POST", "/runs/snapshot_export", {"collection": "demo", "snapshot": "s1",
                                       "backup_uri": "https://AKIAX:s3cr3tZ@host/b"}),
    ("POST", "/collections/demo/undrop", {"target": "back", "backup_uri": "s3://AKIAX:s3cr3tZ@b/p",
                                          "from_target": True}),
])
def test_f4_a_refusal_never_echoes_a_uri_credential(api_client, airflow_env, meta, store, method, path, body):
    import json

    from seglake.config import _check_store_uri
    from seglake.errors import ConfigError

    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=1, rows=10, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    r = api_client.request(method, "/seglake/api/v1" + path, content=json.dumps(body), headers=_admin())
    assert r.status_code in (400, 404, 409), r.text
    assert "s3cr3tZ" not in r.text, r.text   # observed: "s3://AKIAX:s3cr3tZ@b/p" is not allowed
    with pytest.raises(ConfigError) as e:
        _check_store_uri(body.get("backup_uri"), "backup_uri")
    assert "s3cr3tZ" not in str(e.value), str(e.value)


# -- F5: an action whose DAG already runs max_active_runs runs (snapshot_restore: 4) answers "started:
# run ... is queued" while the run sits queued until one ends -- as silent as a paused DAG was (issue 27
# item 3): the answer (and so the page's result line) says it waits and why --------------------------
def test_f5_a_run_queued_behind_max_active_runs_is_said_to_wait(api_client, airflow_env, meta, store, monkeypatch):
    import json

    import httpx

    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=1, rows=10, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    running = {"n": 4}

    def get(url, **kw):
        if url.endswith("/dagRuns"):
            return httpx.Response(200, json={"dag_runs": [], "total_entries": running["n"]})
        return httpx.Response(200, json={"dag_id": "snapshot_restore", "is_paused": False, "max_active_runs": 4,
                                         "timetable_summary": None})

    monkeypatch.setattr(httpx, "post", lambda url, **kw: httpx.Response(
        200, json={"dag_run_id": "manual__5th", "state": "queued"}))
    monkeypatch.setattr(httpx, "get", get)
    r = api_client.post("/seglake/api/v1/snapshots/demo/s1/restore", content=json.dumps({"target": "fifth"}),
                        headers=_admin())
    assert r.status_code == 201, r.text
    msg = r.json()["message"]
    # observed: "started: run manual__5th of snapshot_restore is queued"
    assert not msg.startswith("started") and "max_active_runs 4" in msg, msg
    assert "max_active_runs 4" in r.json()["waits"]
    from seglake_airflow.ui.actions import SCRIPT   # the page's result line shows it (not "started")
    assert "d.waits" in SCRIPT
    running["n"] = 1
    r = api_client.post("/seglake/api/v1/snapshots/demo/s1/restore", content=json.dumps({"target": "sixth"}),
                        headers=_admin())
    assert r.json()["message"].startswith("started") and r.json()["waits"] is None, r.json()


# -- F6: a clear of an old green collection_undrop run, after its target was dropped and a NEWER
# collection of the same name was created and dropped, undrops that newer one into the target: the
# run (conf by name) re-resolves the name's newest dropped collection (drop_collection's twin, atk s20
# F10, was pinned to the id it began on; the undrop was not) ------------------------------------
def test_f6_a_cleared_undrop_run_never_brings_back_a_later_namesake(airflow_env, meta, store, settings):
    import sys
    from pathlib import Path

    from seglake.lifecycle import drop

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_undrop_and_database_dags import _write_and_drop, flush_all

    _write_and_drop(meta, store, settings)
    first_id = max(c.collection_id for c in meta.catalog.list(include_dropped=True) if c.name == "src")
    dag = load_dag("collection_undrop")
    conf = {"collection": "src", "target": "back", "engine": "inline"}
    r1 = dag.test(run_conf=conf)
    assert r1.state == "success", task_states(r1)
    back = meta.catalog.get_by_name("back")
    assert back.properties["restored_from"]["collection_id"] == first_id
    undrop = dag.task_dict["undrop"].python_callable
    params = {"collection": "src", "target": "back", "db": "default", "engine": "inline", "from_target": False,
              "backup_uri": None, "bundle": None, "timeout_hours": None}
    first_job = back.properties["restore_job_id"]
    assert undrop(params, run_id=r1.run_id)["job_id"] == first_job   # a clear now: the same undrop, converged
    drop.begin_drop(meta, store, settings, "back")          # the operator dropped the undropped copy
    flush_all(meta, store, settings, back, flush_all=False)
    assert drop.finish_drop(meta, "back", collection_id=back.collection_id)["state"] == "Dropped"
    _write_and_drop(meta, store, settings)                  # a NEW "src", written and dropped since
    try:   # what a clear of r1 re-runs first (same conf, same run id)
        undrop(params, run_id=r1.run_id)
    except Exception:   # noqa: BLE001 - a refusal is fine; what it must not do is below
        pass
    try:
        again = meta.catalog.get_by_name("back")
    except Exception:   # noqa: BLE001
        again = None
    # observed: a new "back" restored from the LATER src (another collection id than r1 brought back)
    assert again is None or again.properties["restored_from"]["collection_id"] == first_id, \
        again.properties["restored_from"]
