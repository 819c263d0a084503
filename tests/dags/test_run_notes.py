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

from seglake import demo
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
    assert _note(run) == f"snapshot notes/n1: COMMITTED, 2 segments, 60 rows, " + \
        __import__("seglake.progress", fromlist=["x"]).human_bytes(rec.bytes)

    cid = meta.catalog.get_by_name("notes").collection_id
    orphan = f"insert_log/{cid}/9/9/100/1"
    store.put(orphan, b"x" * 2048)
    old = time.time() - 3 * 86400
    os.utime(os.path.join(store.uri, orphan), (old, old))
    run = load_dag("gc").test(run_conf={"dry_run": True, "engine": "inline"})
    assert run.state == "success", task_states(run)
    assert _note(run) == "gc dry run: would delete 1 files (2.0 KiB) -- notes: would delete 1 files, 2.0 KiB"
    assert store.exists(orphan)


def test_a_failed_run_gets_a_failed_note_and_stays_failed(with_api, meta, store):
    run = load_dag("snapshot_create").test(run_conf={"collection": "no_such", "name": "n1", "engine": "inline"})
    states = task_states(run)
    assert run.state == "failed" and states["run_note"] == "success", states
    assert _note(run) == "FAILED: snapshot no_such/n1 was not committed (see the task logs)"


def test_without_the_connection_the_note_is_only_logged(airflow_env, meta, store, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_AIRFLOW_API", raising=False)
    demo.seed(meta, store, demo.SeedParams(name="quiet", partitions=1, segments=1, rows=10, dim=4))
    run = load_dag("snapshot_create").test(run_conf={"collection": "quiet", "name": "q", "engine": "inline"})
    assert run.state == "success" and task_states(run)["run_note"] == "success"
    assert _note(run) is None
