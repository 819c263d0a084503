"""The run's note: a one-line summary set on the DAG run when it ends.

Airflow 3.3 has no Task SDK call that sets a DAG run's note (apache/airflow#64890; the
Execution API only reads it), so the supported way is the public REST API:
`PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}?update_mask=note`. `run_note(kind)` adds
a teardown task `run_note` downstream of every leaf of the DAG: it runs when everything
else is done, failed runs included, and as a teardown it does not decide the run's
state. It computes the line from the run's XComs and etcd (seglake.runinfo), prints it
(the task log always has it), and sets it through the `airflow_api` connection:
host/port/schema of the API server (or extra {"base_url": ...}), login/password of a
user who may edit DAG runs (no login: GET /auth/token, the simple auth manager's
all-admins development mode). Without that connection the note is only logged. A
failure to set the note is logged, never fails anything; the token is never logged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

NOTE_CONN_ID = "airflow_api"
KINDS = ("snapshot_restore", "copy_segment_job", "gc", "snapshot_create", "wal_flush", "drop_collection")


def compute_note(kind: str, params: dict, ti) -> str:
    """The note of a run of `kind`, from its XComs (and etcd where they do not say enough)."""
    from seglake import runinfo
    from seglake_airflow.hooks.engine import SeglakeHook

    if kind == "snapshot_restore":
        started = ti.xcom_pull(task_ids="restore")
        job = None
        if started:
            from seglake.lifecycle import copyjob

            job = copyjob.describe_job(SeglakeHook(quiet=True).meta, int(started["job_id"]))
        return runinfo.restore_note(params, ti.xcom_pull(task_ids="compare"), job)
    if kind == "copy_segment_job":
        from seglake.lifecycle import copyjob

        resolved = ti.xcom_pull(task_ids="resolve")
        job = copyjob.describe_job(SeglakeHook(quiet=True).meta, int(params["job_id"])) if resolved else None
        done = ti.xcom_pull(task_ids="verify.summarize")
        return runinfo.restore_note({"collection": (job or {}).get("source_collection"),
                                     "snapshot": (job or {}).get("snapshot"),
                                     "target": (job or {}).get("target_collection")}, done, job)
    if kind == "gc":
        summary = ti.xcom_pull(task_ids="summary")
        names = {}
        if summary:
            names = {c.collection_id: c.name for c in
                     SeglakeHook(quiet=True).meta.catalog.list(include_dropped=True)}
        return runinfo.gc_note(summary, ti.xcom_pull(task_ids="sweep"), names)
    if kind == "snapshot_create":
        return runinfo.snapshot_note(params, ti.xcom_pull(task_ids="report"))
    if kind == "wal_flush":
        return runinfo.wal_flush_note(ti.xcom_pull(task_ids="summary"))
    if kind == "drop_collection":
        return runinfo.drop_note(params, ti.xcom_pull(task_ids="summary"))
    raise ValueError(f"no run note for {kind!r}")


def _base_url(conn) -> str:
    extra = conn.extra_dejson
    if extra.get("base_url"):
        return str(extra["base_url"]).rstrip("/")
    host = conn.host or "127.0.0.1"
    if "://" in host:
        return host.rstrip("/")
    return f"{conn.schema or 'http'}://{host}" + (f":{conn.port}" if conn.port else "")


def set_run_note(dag_id: str, run_id: str, text: str, conn_id: str = NOTE_CONN_ID) -> str:
    """Set the note through the REST API; returns what happened (for the log)."""
    import httpx

    from seglake_airflow.hooks.engine import _connection

    conn = _connection(conn_id)
    if conn is None:
        return f"not set: no connection {conn_id!r} (the note is in this log only)"
    base = _base_url(conn)
    try:
        with httpx.Client(base_url=base, timeout=20) as client:
            if conn.login:
                r = client.post("/auth/token", json={"username": conn.login, "password": conn.password or ""})
            else:
                r = client.get("/auth/token")
            if r.status_code not in (200, 201):
                return f"not set: {base}/auth/token answered HTTP {r.status_code}"
            token = r.json()["access_token"]
            r = client.patch(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}",
                             params={"update_mask": "note"}, json={"note": text},
                             headers={"Authorization": f"Bearer {token}"})
    except (httpx.HTTPError, ValueError, KeyError) as e:
        return f"not set: {type(e).__name__} talking to {base}"
    if r.status_code != 200:
        return f"not set: PATCH dagRun answered HTTP {r.status_code}: {r.text[:200]}"
    return f"set on {dag_id} {run_id}"


def run_note(kind: str):
    """Add the `run_note` teardown downstream of every current leaf of the DAG being defined."""
    from airflow.sdk import task, teardown
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    if kind not in KINDS:
        raise ValueError(f"no run note for {kind!r}")
    dag = DagContext.get_current()
    leaves = [t for t in dag.tasks if not t.downstream_list]

    @teardown
    @task(task_id="run_note", retries=2)
    def run_note_task(params: dict, dag_run=None, ti=None) -> str:
        try:
            text = compute_note(kind, params, ti)
        except Exception as e:  # noqa: BLE001 - a note never fails a run
            text = f"{kind}: no summary ({type(e).__name__}: {e})"[:1000]
        print(f"run note: {text}", flush=True)
        print(f"run note {set_run_note(dag_run.dag_id, dag_run.run_id, text)}", flush=True)
        return text

    note = run_note_task()
    for leaf in leaves:
        leaf >> note
    return note
