"""
### Restore a snapshot into a new collection

1. **restore**: the snapshot must be COMMITTED and the target name free. Creates the
   target collection (same schema, partitions, shards), registers the target segments as
   *Importing* with pre-allocated ids, and saves a *Pending* copy-segment job that pins
   the snapshot (it cannot be dropped while the job reads it).
2. **copy_job** (the same TaskGroup as the `copy_segment_job` DAG): plan tasks of at most
   `max_segments_per_task` segments -> copy every file (Spark or inline) -> wait until all
   tasks are terminal -> finalize: *Completed* (targets Flushed) or *Failed* (rollback:
   targets Dropped, target collection removed).
3. **verify**: `verify_collection` on the target; the run fails if a file or row count differs.
4. **compare**: source (snapshot) and target side by side: segments, stored rows, bytes,
   and visible rows (seglake.visibility, the one visibility function: the rows no delete
   hides, counted like count(*)).

**A restore to a time** (`as_of` instead of `snapshot`: ISO-8601 with a time zone, or a TSO
timestamp): the latest COMMITTED snapshot at or before the instant is restored (none when the
collection was born inside its point-in-time window), then **replay** applies the source's log
up to the instant (committed transactions only) and only then is the target usable; the
compare step reports what the replay used. Refused before anything is created: no window, an
instant outside it, before the collection, in the future, or in a gap of the log.

Re-running a run that died, or triggering a new run with the same collection, snapshot
(or as_of) and target, resumes the same job (a finished one is left as it is). REST:
`conf = {"collection": "demo", "snapshot": "nightly", "target": "demo_restored", "engine": "auto"}`,
or `{"collection": "demo", "as_of": "2026-11-27T12:00:00Z", "target": "demo_noon"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.taskgroups import copy_job_group, replay_step, verify_collection_group


@dag(
    dag_id="snapshot_restore",
    dag_display_name="Snapshot: restore",
    description="Restore a snapshot into a new collection through a copy-segment job",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot", "restore"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_restore"),
)
def snapshot_restore():
    @task
    def restore(params: dict, run_id: str | None = None) -> dict:
        from seglake.lifecycle import restore as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        from seglake.lifecycle import pitr

        hook = SeglakeHook()
        kw = dict(db=params["db"], owner=run_id or "", engine=params["engine"],
                  timeout=(hook.settings.copy_job_timeout if params["timeout_hours"] is None
                           else float(params["timeout_hours"]) * 3600),
                  max_bytes_per_second=params["max_mib_per_second"] * (1 << 20),
                  max_requests_per_second=params["max_requests_per_second"],
                  origin={"dag_id": "snapshot_restore", "run_id": run_id} if run_id else None)
        with fail_fast():
            try:
                if params.get("as_of") is not None:   # a restore to a time (lifecycle/pitr)
                    job_id = pitr.restore_as_of(hook.meta, hook.store, params["collection"], params["target"],
                                                params["as_of"], **kw)
                else:
                    job_id = engine.restore(hook.meta, hook.store, params["collection"], params["snapshot"],
                                            params["target"], **kw)
            except engine.RestoreRaceLost as e:  # a retry converges on the winner's job
                raise RuntimeError(f"{e}; retrying") from e
        what = f"as of {params['as_of']}" if params.get("as_of") is not None else repr(params["snapshot"])
        print(f"restore of {params['collection']!r} {what} into {params['target']!r}: copy job {job_id}")
        return {"job_id": job_id, "target": params["target"]}

    @task
    def compare(params: dict) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle.restore import RestoreDiffers, check_restored
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        if params.get("as_of") is not None:   # its source is an instant, not a snapshot: the replay's account
            from seglake.lifecycle import pitr
            target = hook.meta.catalog.get_by_name(params["target"], params["db"])
            return pitr.summary(hook.meta, target)
        try:
            rows = check_restored(hook.meta, hook.store, params["collection"], params["snapshot"],
                                  params["target"], db=params["db"])
        except RestoreDiffers as e:
            raise AirflowFailException(str(e)) from None
        return {k: list(v) for k, v in rows.items()}

    started = restore()
    check_conf("snapshot_restore") >> started
    copy = copy_job_group("{{ ti.xcom_pull(task_ids='restore')['job_id'] }}", "{{ params.engine }}")
    verify = verify_collection_group("{{ params.target }}", "{{ params.db }}", engine="{{ params.engine }}")
    started >> copy >> replay_step() >> verify >> compare()
    run_note("snapshot_restore")


snapshot_restore()
