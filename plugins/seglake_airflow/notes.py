"""The run's note: a one-line summary set on the DAG run when it ends.

Airflow 3.3 has no Task SDK call that sets a DAG run's note (apache/airflow#64890; the
Execution API only reads it), so the supported way is the public REST API:
`PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}?update_mask=note`. `run_note(kind)` adds
a teardown task `run_note` downstream of every leaf of the DAG: it runs when everything
else is done, failed and stopped runs included. It computes the line from the run's
XComs and etcd (seglake.runinfo), prints it (the task log always has it), and sets it through the `airflow_api` connection:
host/port/schema of the API server (or extra {"base_url": ...}), login/password of a
user who may edit DAG runs (no login: GET /auth/token, the simple auth manager's
all-admins development mode). Without that connection the note is only logged. A
failure to set the note is logged, never fails anything; the token is never logged.

The same task decides the run's state (issue 27): it is the one leaf that counts
(`on_failure_fail_dagrun`), and it fails when the lifecycle's work did not finish -- the
note says FAILED (its result is missing in XCom/etcd), or a task of the run ended failed,
or the summary could not be read -- whatever was marked, skipped or cleared. Without it a
run marked failed mid-copy skips its unfinished tasks, the teardown succeeds as the only
leaf that ran, and Airflow reports `success` beside a note that says FAILED.

The same task sends the run's counters through Airflow's Stats (`seglake.restore.copied_bytes`,
`seglake.gc.deleted_bytes`, ...; statsd or OpenTelemetry when Airflow's metrics are on):
once per run, from what the run did.
"""

from __future__ import annotations

import time
from urllib.parse import quote

NOTE_CONN_ID = "airflow_api"
ERROR_KEY = "seglake_failure"   # XCom a failed task leaves for the note: why it failed
# the small lifecycles: the task whose result says the work was done (no result: not done)
RESULT_TASKS = {"snapshot_drop": "drop", "snapshot_retention": "set_policy", "snapshot_schedule": "run_policies",
                "verify_collection": "verify.summarize", "wal_archive": "archive", "compaction_policy": "set_policy",
                "pitr_window": "set_window", "restore_database": "drive",
                "milvus_backup": "summary", "milvus_restore": "restore_and_verify"}
KINDS = ("snapshot_restore", "copy_segment_job", "gc", "snapshot_create", "wal_flush", "drop_collection",
         "snapshot_export", "snapshot_restore_external", "snapshot_verify", "compaction", "collection_undrop", *RESULT_TASKS)


def summarize(kind: str, params: dict, ti) -> tuple[str, dict[str, int]]:
    """(the note, Stats counters) of a run of `kind`, from its XComs (and etcd where they
    do not say enough). Counters only for work that happened."""
    from seglake import runinfo
    from seglake_airflow.hooks.engine import SeglakeHook

    if kind == "snapshot_schedule":   # seglake's policies and the Milvus sources: two tasks
        return runinfo.schedule_note(ti.xcom_pull(task_ids="run_policies"), ti.xcom_pull(task_ids="milvus_sources"),
                                     dry_run=bool(params.get("dry_run"))), {}
    if kind in RESULT_TASKS:
        return runinfo.result_note(kind, params, ti.xcom_pull(task_ids=RESULT_TASKS[kind])), {}
    if kind == "snapshot_export":
        report = ti.xcom_pull(task_ids="export")
        counters = ({"seglake.backup.exports": 1, "seglake.backup.copied_bytes": int(report.get("copied_bytes", 0))}
                    if report else {})
        return runinfo.export_note(params, report), counters
    if kind == "compaction":
        done = ti.xcom_pull(task_ids="summary")
        counts = (done or {}).get("counts") or {}
        counters = ({"seglake.compaction.units": int(counts["committed"]),
                     "seglake.compaction.rows_dropped": int(counts["rows_dropped"])}
                    if done and not done.get("dry_run") and counts else {})
        return runinfo.compaction_note(params, done), counters
    if kind == "snapshot_verify":
        report = ti.xcom_pull(task_ids="verify")
        return runinfo.verify_bundle_note(params, report), ({"seglake.backup.verified": 1} if report else {})
    if kind in ("snapshot_restore", "copy_segment_job", "snapshot_restore_external", "collection_undrop"):
        from seglake.lifecycle import copyjob

        if kind == "collection_undrop":
            started = ti.xcom_pull(task_ids="undrop")
            job_id, done = (started or {}).get("job_id"), ti.xcom_pull(task_ids="summary")
            params = {"collection": params.get("collection"), "snapshot": "just before its drop",
                      "target": params.get("target")}
        elif kind == "snapshot_restore_external":
            started = ti.xcom_pull(task_ids="restore")
            # its last check, as snapshot_restore's: the rows against the bundle's, or (as_of) the replay's
            # account; verify.summarize passed with the compare, or the replay, marked instead of run
            job_id, done = (started or {}).get("job_id"), ti.xcom_pull(task_ids="compare")
            params = {"collection": f"bundle {params.get('collection')}",
                      "snapshot": params.get("bundle") if params.get("as_of") is None else
                      f"as of {params.get('as_of')} (bundle + WAL archive)", "target": params.get("target")}
        elif kind == "snapshot_restore":
            started = ti.xcom_pull(task_ids="restore")
            job_id, done = (started or {}).get("job_id"), ti.xcom_pull(task_ids="compare")
        else:
            job_id = params["job_id"] if ti.xcom_pull(task_ids="resolve") else None
            done = ti.xcom_pull(task_ids="verify.summarize")
        job = copyjob.describe_job(SeglakeHook(quiet=True).meta, int(job_id)) if job_id is not None else None
        if kind == "copy_segment_job" and job:
            params = {"collection": job.get("source_collection"), "snapshot": job.get("snapshot"),
                      "target": job.get("target_collection")}
        replay = None
        unreplayed = isinstance(done, dict) and "as_of_utc" in done and done.get("state") != "Created"
        if (done is None or unreplayed) and job and job.get("state") == "Completed" and kind != "copy_segment_job":
            replay = _replay_progress(job)
        counters = {}
        if job and job.get("state") in ("Completed", "Failed"):
            counters = {f"seglake.restore.jobs_{job['state'].lower()}": 1,
                        "seglake.restore.copied_bytes": int(job["progress"]["copied_bytes"]),
                        "seglake.restore.copied_files": int(job["progress"]["copied_files"])}
        return runinfo.restore_note(params, done, job, replay), counters
    if kind == "gc":
        summary, swept = ti.xcom_pull(task_ids="summary"), ti.xcom_pull(task_ids="sweep")
        names = {}
        if summary:
            names = {c.collection_id: c.name for c in
                     SeglakeHook(quiet=True).meta.catalog.list(include_dropped=True)}
        counters = {}
        if summary:
            counters = {"seglake.gc.runs": 1, "seglake.gc.candidate_files": int(summary.get("candidates", 0)),
                        "seglake.gc.candidate_bytes": int(summary.get("candidate_bytes", 0))}
        done = swept or (summary if summary and not summary.get("dry_run") else None)  # the Spark sweep: the summary
        if done:
            counters.update({"seglake.gc.deleted_files": int(done.get("deleted", 0)),
                             "seglake.gc.deleted_bytes": int(done.get("deleted_bytes", 0))})
        cleaned = bool(summary) and (summary.get("dry_run") or ti.xcom_pull(task_ids="records") is not None)
        return runinfo.gc_note(summary, swept, names, cleaned=cleaned), counters
    if kind == "snapshot_create":
        report = ti.xcom_pull(task_ids="report")
        counters = {"seglake.snapshot.created": 1, "seglake.snapshot.bytes": int(report["bytes"])} if report else {}
        return runinfo.snapshot_note(params, report), counters
    if kind == "wal_flush":
        summary = ti.xcom_pull(task_ids="summary")
        counters = ({"seglake.wal_flush.segments": int(summary.get("segments", 0)),
                     "seglake.wal_flush.rows": int(summary.get("rows", 0)),
                     "seglake.wal_flush.bytes": int(summary.get("bytes", 0))} if summary else {})
        listed = ti.xcom_pull(task_ids="list_pchannels") if not summary else None
        return runinfo.wal_flush_note(summary, listed if isinstance(listed, list) else None), counters
    if kind == "drop_collection":
        summary = ti.xcom_pull(task_ids="summary")
        counters = {"seglake.drop.collections": 1} if summary and summary.get("state") == "Dropped" else {}
        return runinfo.drop_note(params, summary), counters
    raise ValueError(f"no run note for {kind!r}")


def _replay_progress(job: dict) -> dict | None:
    """The replay progress of the copy job's target when it is a restore to a time (None
    otherwise, or when it cannot be read: the note still says the rest)."""
    from seglake_airflow.hooks.engine import SeglakeHook

    try:
        from seglake.lifecycle import pitr

        meta = SeglakeHook(quiet=True).meta
        coll = meta.catalog.get(int(job["target_collection_id"]))
        if not isinstance(coll.properties.get("restored_from", {}).get("replay"), dict):
            return None
        return pitr.progress(meta, coll.collection_id)
    except Exception as e:  # noqa: BLE001 - a note never fails a run
        print(f"replay progress not read: {type(e).__name__}: {e}", flush=True)
        return None


def failure_reason(error: BaseException | None) -> str:
    """One line from a task's exception: the message, without the exception class prefix
    fail_fast adds (`ValidationError: ...`), short."""
    import re

    if error is None:
        return "failed (no exception recorded)"
    text = " ".join(str(error).split()) or type(error).__name__
    text = re.sub(r"^(?:[A-Z][A-Za-z]*(?:Error|Exception|Conflict|NotFound|Lost)|Conflict|NotFound): ", "", text)
    return text[:600]


def record_failure(context) -> None:
    """on_failure_callback of every task of a DAG with a run note: leaves the reason as
    an XCom (key ERROR_KEY) for the note. Never raises."""
    try:
        context["ti"].xcom_push(key=ERROR_KEY, value=failure_reason(context.get("exception")))
    except Exception as e:  # noqa: BLE001 - a note never fails a run
        print(f"failure reason not recorded: {type(e).__name__}: {e}", flush=True)


def failures(ti, task_ids) -> list[tuple[str, str]]:
    """(task_id, reason) of the run's tasks that failed and left a reason, in DAG order."""
    out = []
    for task_id in task_ids:
        try:
            value = ti.xcom_pull(task_ids=task_id, key=ERROR_KEY)
        except Exception:  # noqa: BLE001 - a mapped or missing task: no reason
            value = None
        if isinstance(value, list):
            value = next((v for v in value if v), None)
        if value:
            out.append((task_id, str(value)))
    return out


def with_reason(text: str, reasons: list[tuple[str, str]]) -> str:
    """The note with the first failure's reason in it (instead of "see the task logs")."""
    from seglake.runinfo import _short

    if not reasons:
        return text
    task_id, why = reasons[0]
    more = f" (and {len(reasons) - 1} more failed tasks)" if len(reasons) > 1 else ""
    if text.startswith("FAILED"):
        head = text.replace(" (see the task logs)", "")
        return _short(f"{head}: task {task_id} failed: {why}{more}")
    return _short(f"FAILED: task {task_id} failed: {why}{more}; {text}")


FAILED_STATES = frozenset({"failed", "upstream_failed"})


def run_states(ti, dag_run) -> dict[str, str | None]:
    """{task_id: state} of this run's task instances (the Task SDK's read of the metadata
    DB through the execution API); {} when the API does not answer."""
    try:
        found = ti.get_task_states(dag_id=dag_run.dag_id, run_ids=[dag_run.run_id])
    except Exception as e:  # noqa: BLE001 - the note still decides from XCom/etcd
        print(f"task states not read: {type(e).__name__}: {e}", flush=True)
        return {}
    return {str(k): (None if v is None else str(v)) for k, v in (found.get(dag_run.run_id) or {}).items()}


def outcome(text: str, states: dict[str, str | None], *, summarized: bool = True,
            note_task: str = "run_note") -> tuple[bool, str]:
    """(finished, note) of a run: finished only when the summary was read, the note does
    not say FAILED and no other task of the run ended failed or upstream_failed. An
    unfinished run's note starts with FAILED (naming the failed tasks when the note did
    not already)."""
    failed = sorted(t for t, s in states.items() if t != note_task and s in FAILED_STATES)
    if summarized and not text.startswith("FAILED") and not failed:
        return True, text
    if text.startswith("FAILED"):
        return False, text
    from seglake.runinfo import _short

    why = f"task {', '.join(failed[:3])}{' ...' if len(failed) > 3 else ''} ended failed" if failed \
        else "the outcome could not be read"
    return False, _short(f"FAILED: {why}; {text}")


def _stats():
    from airflow.sdk.observability.stats import Stats

    return Stats


def emit_counters(counters: dict[str, int]) -> None:
    """Airflow's Stats (statsd / OpenTelemetry when configured, a no-op otherwise)."""
    stats = _stats()
    for name, value in counters.items():
        if value > 0:
            stats.incr(name, count=int(value))


def _base_url(conn) -> str:
    extra = conn.extra_dejson
    if extra.get("base_url"):
        return str(extra["base_url"]).rstrip("/")
    host = conn.host or "127.0.0.1"
    if "://" in host:
        return host.rstrip("/")
    return f"{conn.schema or 'http'}://{host}" + (f":{conn.port}" if conn.port else "")


NOTE_ATTEMPTS = 5   # ~15 s of retries on a server error before the note stays in the log only


def set_run_note(dag_id: str, run_id: str, text: str, conn_id: str = NOTE_CONN_ID) -> str:
    """Set the note through the REST API; returns what happened (for the log)."""
    import httpx

    from seglake_airflow.hooks.engine import _connection

    conn = _connection(conn_id)
    if conn is None:
        return f"not set: no connection {conn_id!r} (the note is in this log only)"
    base = _base_url(conn)
    said = ""
    for attempt in range(NOTE_ATTEMPTS):   # a busy API server (SQLite locked: HTTP 500) answers again later
        if attempt:
            time.sleep(min(8.0, 0.5 * 2 ** attempt))
        try:
            with httpx.Client(base_url=base, timeout=20) as client:
                if conn.login:
                    r = client.post("/auth/token", json={"username": conn.login, "password": conn.password or ""})
                else:
                    r = client.get("/auth/token")
                if r.status_code not in (200, 201):
                    said = f"not set: {base}/auth/token answered HTTP {r.status_code}"
                    if r.status_code >= 500:
                        continue
                    return said
                token = r.json()["access_token"]
                r = client.patch(f"/api/v2/dags/{quote(dag_id, safe='')}/dagRuns/{quote(run_id, safe='')}",
                                 params={"update_mask": "note"}, json={"note": text},
                                 headers={"Authorization": f"Bearer {token}"})
        except (httpx.HTTPError, ValueError, KeyError) as e:
            said = f"not set: {type(e).__name__} talking to {base}"
            continue
        if r.status_code == 200:
            return f"set on {dag_id} {run_id}" + (f" (attempt {attempt + 1})" if attempt else "")
        said = f"not set: PATCH dagRun answered HTTP {r.status_code}: {r.text[:200]}"
        if r.status_code < 500:
            return said
    return said + f" ({NOTE_ATTEMPTS} attempts)"


def run_note(kind: str):
    """Add the `run_note` teardown downstream of every current leaf of the DAG being defined."""
    from airflow.sdk import task, teardown
    from airflow.sdk.definitions._internal.contextmanager import DagContext

    if kind not in KINDS:
        raise ValueError(f"no run note for {kind!r}")
    dag = DagContext.get_current()
    leaves = [t for t in dag.tasks if not t.downstream_list]
    for t in dag.tasks:   # every task leaves its failure's reason for the note
        callbacks = t.on_failure_callback or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        t.on_failure_callback = [*callbacks, record_failure]
    task_ids = [t.task_id for t in dag.tasks]

    @teardown(on_failure_fail_dagrun=True)   # the leaf that decides the run's state
    @task(task_id="run_note", retries=2)
    def run_note_task(params: dict, dag_run=None, ti=None) -> str:
        from airflow.sdk.exceptions import AirflowFailException

        counters: dict[str, int] = {}
        summarized = True
        try:
            text, counters = summarize(kind, params, ti)
        except Exception as e:  # noqa: BLE001 - the run fails below, the note is still set
            summarized = False
            text = f"{kind}: no summary ({type(e).__name__}: {e})"[:1000]
        text = with_reason(text, failures(ti, task_ids))
        finished, text = outcome(text, run_states(ti, dag_run), summarized=summarized)
        print(f"run note: {text}", flush=True)
        try:
            emit_counters(counters)
        except Exception as e:  # noqa: BLE001 - metrics never fail a run
            print(f"Stats counters not sent: {type(e).__name__}: {e}", flush=True)
        print(f"run note {set_run_note(dag_run.dag_id, dag_run.run_id, text)}", flush=True)
        if not summarized:   # etcd or XCom did not answer: ask again (the task's retries), then fail
            raise RuntimeError(f"the {kind} run's outcome could not be read: {text}")
        if not finished:   # no retry: the answer would be the same
            raise AirflowFailException(f"the {kind} run did not finish its work: {text}")
        return text

    note = run_note_task()
    for leaf in leaves:
        leaf >> note
    return note
