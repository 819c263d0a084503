"""
### Restore from a bundle (disaster recovery)

1. **restore**: reads a committed bundle from the backup target (its commit marker and
   SHA-256, every number, every timestamp against this store's clock, every data file
   present at its size: refused before anything is written) and sets up a copy-segment
   job into the new collection `target` whose files come straight from the backup
   target: each byte read once and written once, at its final key, its SHA-256 (and a
   log's rows and partitions) checked as it is copied. No import, no snapshot: the job
   holds the bundle in the target while it runs. Needs nothing but the bundle: not the
   source's etcd, not its store. A re-run resumes the same restore.
2. **copy_job**: tasks, progress, timeout, rollback, resume after a kill (as in
   `snapshot_restore`).
3. **verify**, **compare**: the target's rows against the bundle's, row by row, each
   through its own collection's partitions; any difference fails the run.

**A restore to a time from the target alone** (`as_of`: ISO-8601 with a time zone, or a TSO
timestamp; `bundle` optional): the latest bundle at or before the instant that recorded its
log positions is restored as above, then **replay** applies the collection's WAL archive in
the target (retention policy `archive`) up to the instant, and only then is the target
usable; refused before anything is created when no bundle precedes the instant, the
archive has a gap, or the instant is past what the archive holds (its recovery point).

REST: `conf = {"collection": "demo", "bundle": "nightly", "target": "demo_dr", "backup_uri": null}`,
or `{"collection": "demo", "as_of": "2026-11-27T12:00:00Z", "target": "demo_noon"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.taskgroups import copy_job_group, replay_step, verify_collection_group


@dag(
    dag_id="snapshot_restore_external",
    dag_display_name="Snapshot: restore from a bundle (backup)",
    description="Import a bundle from the backup target and restore it into a new collection",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot", "restore", "backup"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_restore_external"),
)
def snapshot_restore_external():
    @task
    def restore(params: dict, run_id: str | None = None) -> dict:
        from seglake.lifecycle import restore as restores
        from seglake.lifecycle.backup import bundle_restore
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        if params.get("as_of") is not None:   # a restore to a time from the target alone
            from seglake.lifecycle.pitr.from_target import restore_as_of_from_target

            with fail_fast():
                try:
                    job_id = restore_as_of_from_target(
                        hook.meta, hook.store, hook.backup_target(params["backup_uri"]), params["collection"],
                        params["target"], params["as_of"], db=params["db"], bundle=params["bundle"],
                        timeout=(hook.settings.copy_job_timeout if params["timeout_hours"] is None
                                 else float(params["timeout_hours"]) * 3600), owner=run_id or "",
                        engine=params["engine"], max_bytes_per_second=params["max_mib_per_second"] * (1 << 20),
                        max_requests_per_second=params["max_requests_per_second"],
                        origin={"dag_id": "snapshot_restore_external", "run_id": run_id} if run_id else None)
                except restores.RestoreRaceLost as e:
                    raise RuntimeError(f"{e}; retrying") from e
            print(f"restore of {params['db']}.{params['collection']} as of {params['as_of']} from the backup target "
                  f"into {params['target']!r}: copy job {job_id}")
            return {"job_id": job_id, "target": params["target"]}
        with fail_fast():
            try:
                out = bundle_restore.restore_from_bundle(
                    hook.meta, hook.store, hook.backup_target(params["backup_uri"]), params["collection"],
                    params["bundle"], params["target"], db=params["db"],
                    timeout=(hook.settings.copy_job_timeout if params["timeout_hours"] is None
                             else float(params["timeout_hours"]) * 3600), owner=run_id or "",
                    engine=params["engine"],
                    max_bytes_per_second=params["max_mib_per_second"] * (1 << 20),
                    max_requests_per_second=params["max_requests_per_second"], say=print,
                    origin={"dag_id": "snapshot_restore_external", "run_id": run_id} if run_id else None)
            except restores.RestoreRaceLost as e:  # a retry converges on the winner's job
                raise RuntimeError(f"{e}; retrying") from e
        print(f"restore of bundle {params['db']}.{params['collection']}/{params['bundle']} (uid {out['uid']}) into "
              f"{params['target']!r}: copy job {out['job_id']}")
        return {"job_id": out["job_id"], "target": params["target"], "uid": out["uid"]}

    @task
    def compare(params: dict, restored: dict) -> dict:
        """The target's rows against the bundle's, row by row (a restore to a time: the
        replay's account)."""
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle.backup.bundle_restore import check_restored_from_bundle
        from seglake.lifecycle.restore import RestoreDiffers
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        if params.get("as_of") is not None:
            from seglake.lifecycle import pitr
            return pitr.summary(hook.meta, hook.meta.catalog.get_by_name(params["target"], params["db"]))
        try:
            rows = check_restored_from_bundle(hook.meta, hook.store, hook.backup_target(params["backup_uri"]),
                                              params["collection"], params["bundle"], params["target"],
                                              db=params["db"])
        except RestoreDiffers as e:
            raise AirflowFailException(str(e)) from None
        return {k: list(v) for k, v in rows.items()}

    started = restore()
    check_conf("snapshot_restore_external") >> started
    copy = copy_job_group("{{ ti.xcom_pull(task_ids='restore')['job_id'] }}", "{{ params.engine }}")
    verify = verify_collection_group("{{ params.target }}", "{{ params.db }}", engine="{{ params.engine }}")
    started >> copy >> replay_step() >> verify >> compare(restored=started)
    run_note("snapshot_restore_external")


snapshot_restore_external()
