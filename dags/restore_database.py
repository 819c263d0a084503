"""
### Restore a whole database at one instant

Every collection of a database (or the named ones) restored as of the SAME timestamp into
new collections `{name}{suffix}` (`seglake restore-database`): one TSO orders every write of
every collection, so the restores are one consistent cut across all of them.

1. **restore**: every collection planned first -- one refusal (outside a window, a gap of
   the log, a target name taken, no bundle before the instant) refuses the whole set
   before anything is created -- then each restore set up with its plan (Importing target
   and copy job). `from_target`: from the backup target alone (bundles + WAL archive).
2. **drive**: each restore to its end, one after another, inline: its copy job, the
   replay up to the instant, verify. The run note lists each collection with its visible
   rows at the instant; any collection not Created fails the run.

A re-run resumes every restore of the set. REST:
`conf = {"db": "default", "as_of": "2026-11-27T12:00:00Z", "suffix": "_noon"}`,
or with `"collections": "a,b"` and `"from_target": true`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="restore_database",
    dag_display_name="Database: restore at one instant",
    description="Restore every collection of a database as of one instant into new collections",
    schedule=None,
    catchup=False,
    max_active_runs=2,
    tags=["seglake", "restore"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("restore_database"),
)
def restore_database():
    @task
    def restore(params: dict, run_id: str | None = None) -> list[dict]:
        from seglake.lifecycle.pitr.database import restore_database_as_of
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        names = [c.strip() for c in (params["collections"] or "").split(",") if c.strip()] or None
        with fail_fast():
            jobs = restore_database_as_of(
                hook.meta, hook.store, params["db"], params["as_of"], suffix=params["suffix"], collections=names,
                target=hook.backup_target(params["backup_uri"]) if params["from_target"] else None,
                owner=run_id or "", engine="inline",
                timeout=(hook.settings.copy_job_timeout if params["timeout_hours"] is None
                         else float(params["timeout_hours"]) * 3600))
        print(f"restore of {params['db']} as of {params['as_of']}: "
              + ", ".join(f"{j['collection']} -> {j['target']} (copy job {j['job_id']})" for j in jobs))
        return jobs

    @task
    def drive(params: dict, jobs: list[dict]) -> list[dict]:
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle.pitr.database import drive as drive_all
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        rows = drive_all(hook.meta, hook.store, hook.settings, jobs, params["db"])
        for r in rows:
            print(f"{r['collection']} -> {r['target']}: {r['state']}, {r['rows']} rows")
        bad = [r for r in rows if r["state"] != "Created"]
        if bad:
            raise AirflowFailException("not restored: " + "; ".join(
                f"{r['target']} {r['state']}{(': ' + r['reason']) if r.get('reason') else ''}" for r in bad))
        return rows

    started = restore()
    check_conf("restore_database") >> started
    drive(jobs=started)
    run_note("restore_database")


restore_database()
