"""
### Verify a bundle in the backup target

Reads every data file of a bundle and checks its size and SHA-256; for insert and delete
logs also the Parquet row count against the bundle's segment records. The run **fails**
naming every bad file; the result is recorded (the seglake page shows the last
verification of each bundle). A bundle that verifies is restorable byte for byte.

REST: `conf = {"collection": "demo", "bundle": "nightly", "backup_uri": null}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="snapshot_verify",
    dag_display_name="Snapshot: verify a bundle (backup)",
    description="Read every file of a bundle and check it",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot", "backup", "verify"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_verify"),
)
def snapshot_verify():
    @task
    def verify(params: dict) -> dict:
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle.backup import verify as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            report = engine.verify(hook.backup_target(params["backup_uri"]), params["collection"], params["bundle"],
                                   db=params["db"], threads=hook.settings.copy_threads, meta=hook.meta, say=print)
        if not report["ok"]:
            bad = "; ".join(f"{p['file']}: {p['problem']}" for p in report["problems"][:5])
            count = report.get("problem_count", len(report["problems"]))
            raise AirflowFailException(f"bundle {params['db']}.{params['collection']}/{params['bundle']}: "
                                       f"{count} bad files: {bad}")
        return report

    check_conf("snapshot_verify") >> verify()
    run_note("snapshot_verify")


snapshot_verify()
