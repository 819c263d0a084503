"""The run's note (issue 12, item 3): a `run_note` teardown sets a one-line summary on the
DAG run through Airflow's REST API when the run ends, failed runs included, without
deciding the run's state. Here: dag.test() runs against this session's SQLite DB while
the real core API app serves the PATCH on a loopback port (uvicorn in a thread)."""

import json
import os
import socket
import threading
import time

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def api_server(airflow_home):
    import uvicorn

    os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"
    from airflow.api_fastapi.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app("core"), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "API server did not start"
        time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)
    os.environ.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", None)


@pytest.fixture
def with_api(api_server, airflow_env, monkeypatch):
    host, _, port = api_server.removeprefix("http://").rpartition(":")
    monkeypatch.setenv("AIRFLOW_CONN_AIRFLOW_API", json.dumps({"conn_type": "http", "host": host,
                                                               "port": int(port), "schema": "http"}))
    return airflow_env


def _note(run) -> str | None:
    from airflow.models import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(DagRun).filter_by(dag_id=run.dag_id, run_id=run.run_id).one().note


def test_snapshot_and_gc_runs_get_their_summary_as_the_note(with_api, meta, store):
    demo.seed(meta, store, demo.SeedParams(name="notes", partitions=1, segments=2, rows=30, dim=4))
    run = load_dag("snapshot_create").test(run_conf={"collection": "notes", "name": "n1", "engine": "inline"})
    assert run.state == "success", task_states(run)
    rec = meta.snapshots.find(meta.catalog.get_by_name("notes").collection_id, "n1")
    assert _note(run) == "snapshot notes/n1: COMMITTED, 2 segments, 60 rows, " + \
        __import__("seglake.progress", fromlist=["x"]).human_bytes(rec.bytes)

    cid = meta.catalog.get_by_name("notes").collection_id
    orphan = f"insert_log/{cid}/9/9/100/1"
    store.put(orphan, b"x" * 2048)
    old = time.time() - 3 * 86400
    os.utime(os.path.join(store.uri, orphan), (old, old))
    run = load_dag("gc").test(run_conf={"dry_run": True, "engine": "inline"})
    assert run.state == "success", task_states(run)
    assert _note(run) == ("gc DRY RUN (nothing deleted): a real run would delete 1 files (2.0 KiB) -- notes: would "
                          "delete 1 files, 2.0 KiB")
    assert store.exists(orphan)


def test_a_failed_run_gets_a_failed_note_and_stays_failed(with_api, meta, store):
    run = load_dag("snapshot_create").test(run_conf={"collection": "no_such", "name": "n1", "engine": "inline"})
    states = task_states(run)
    assert run.state == "failed" and states["run_note"] == "failed", states   # the leaf that decides the state
    # the reason, not "see the task logs": the first failed task's message
    assert _note(run) == ("FAILED: snapshot no_such/n1 was not committed: task begin failed: collection "
                          "'no_such' not found in db 'default'"), _note(run)


def test_a_refused_gc_run_note_carries_the_reason(with_api, meta, store):
    run = load_dag("gc").test(run_conf={"dry_run": False, "drop_tolerance_hours": 0.25})
    assert run.state == "failed" and task_states(run)["check_conf"] == "failed"
    note = _note(run)
    assert note == ("FAILED: gc did not finish, nothing was deleted unless the sweep ran: task check_conf failed: "
                    "gc: refused conf before any change: conf key 'drop_tolerance_hours' (Dropped-segment tolerance "
                    "(hours)): 0.25 is below the GC floor of 1 hour; allowed: at least 1, or set force to true to go "
                    "below the floor"), note


def test_without_the_connection_the_note_is_only_logged(airflow_env, meta, store, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)
    demo.seed(meta, store, demo.SeedParams(name="quiet", partitions=1, segments=1, rows=10, dim=4))
    run = load_dag("snapshot_create").test(run_conf={"collection": "quiet", "name": "q", "engine": "inline"})
    assert run.state == "success" and task_states(run)["run_note"] == "success"
    assert _note(run) is None


def test_counters_go_to_airflow_stats(with_api, meta, store, monkeypatch):
    """A Stats stand-in records what the run_note task sends (no statsd needed)."""
    from seglake_airflow import notes

    sent = []

    class Recorder:
        @staticmethod
        def incr(name, count=1, rate=1, tags=None):
            sent.append((name, count))

    monkeypatch.setattr(notes, "_stats", lambda: Recorder)
    coll, _ = demo.seed(meta, store, demo.SeedParams(name="stats", partitions=1, segments=1, rows=10, dim=4))
    orphans = [f"insert_log/{coll.collection_id}/9/9/100/{i}" for i in (1, 2)]
    old = time.time() - 3 * 86400
    for k in orphans:
        store.put(k, b"y" * 1000)
        os.utime(os.path.join(store.uri, k), (old, old))
    run = load_dag("gc").test(run_conf={"dry_run": False, "engine": "inline", "collection": "stats"})
    assert run.state == "success", task_states(run)
    got = dict(sent)
    assert got["seglake.gc.deleted_bytes"] == 2000 and got["seglake.gc.deleted_files"] == 2, sent
    assert got["seglake.gc.candidate_bytes"] == 2000 and got["seglake.gc.runs"] == 1
    assert _note(run).startswith("gc: deleted 2 files (2.0 KiB) of 2 candidates -- stats: candidates 2 files")
    assert not any(store.exists(k) for k in orphans)


def test_restore_summary_and_counters_from_etcd(airflow_env, meta, store):
    """The restore note and counters from the run's XComs plus the copy job in etcd."""
    from seglake.lifecycle import copyjob, restore
    from seglake_airflow.notes import summarize

    demo.seed(meta, store, demo.SeedParams(name="src", partitions=1, segments=2, rows=25, dim=4))
    snapshot.create(meta, store, "src", "s1")
    job_id = restore.restore(meta, store, "src", "s1", "dst")
    copyjob.plan(meta, job_id, 10)
    copyjob.run_inline(meta, store, job_id)
    job = copyjob.finalize(meta, job_id)
    d = copyjob.describe_job(meta, job_id)

    class TI:
        def __init__(self, xcoms):
            self.xcoms = xcoms

        def xcom_pull(self, task_ids):
            return self.xcoms.get(task_ids)

    params = {"collection": "src", "snapshot": "s1", "target": "dst"}
    text, counters = summarize("snapshot_restore", params, TI({"restore": {"job_id": job_id}, "compare": {}}))
    assert text.startswith(f"restore src/s1 -> dst: {job.total_rows} rows, 2/2 segments, ") and \
        f"(copy job {job_id}, auto)" in text and "FAILED" not in text
    assert counters == {"seglake.restore.jobs_completed": 1,
                        "seglake.restore.copied_bytes": d["progress"]["copied_bytes"],
                        "seglake.restore.copied_files": d["progress"]["copied_files"]}
    assert counters["seglake.restore.copied_bytes"] > 0
    text, _ = summarize("snapshot_restore", params, TI({"restore": {"job_id": job_id}}))
    assert text.startswith("FAILED: restore src/s1 -> dst: copy job Completed but verify/compare did not pass")
    text, counters = summarize("snapshot_restore", params, TI({}))
    assert text == "FAILED: restore src/s1 -> dst: no copy job was created (see the task logs)" and counters == {}


def test_a_busy_api_server_is_asked_again(monkeypatch):
    """The API server answering a server error (SQLite locked under parallel runs: HTTP
    500) is asked again a few times; a 4xx is final; the answer says what happened."""
    import httpx

    from seglake_airflow import notes

    class Conn:
        login, password, host, port, schema = "admin", "pw", "127.0.0.1", 9, "http"
        extra_dejson: dict = {}

    answers = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/auth/token":
            return httpx.Response(201, json={"access_token": "t"})
        return httpx.Response(answers.pop(0), json={"detail": "x"})

    real = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **kw: real(transport=httpx.MockTransport(handler), **kw))
    monkeypatch.setattr("seglake_airflow.hooks.engine._connection", lambda conn_id: Conn())
    monkeypatch.setattr(notes.time, "sleep", lambda s: None)
    answers[:] = [500, 500, 200]
    assert notes.set_run_note("d", "r", "text") == "set on d r (attempt 3)"
    answers[:] = [404]
    assert notes.set_run_note("d", "r", "text").startswith("not set: PATCH dagRun answered HTTP 404")
    answers[:] = [500] * notes.NOTE_ATTEMPTS
    assert notes.set_run_note("d", "r", "text").endswith(f"({notes.NOTE_ATTEMPTS} attempts)")
    assert answers == []
