"""
### Verify a bundle in the backup target

Reads every data file of a bundle and checks its size and SHA-256; for insert and delete
logs also the Parquet row count against the bundle's segment records. The run **fails**
naming every bad file; the result is recorded (the seglake page shows the last
verification of each bundle). A bundle that verifies is restorable byte for byte.

`engine`: `inline` (a thread pool in the task), `spark` (the data files spread over the
executors: `spark/jobs/verify_bundle.py`), `auto` (Spark from `inline_threshold_bytes`
of data, 256 MiB by default).

REST: `conf = {"collection": "demo", "bundle": "nightly", "backup_uri": null, "engine": "auto"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

RESOLVE = "ti.xcom_pull(task_ids='resolve')"


@dag(
    dag_id="snapshot_verify",
    dag_display_name="Snapshot: verify a bundle (backup)",
    description="Read every file of a bundle and check it (inline or Spark)",
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
    def resolve(params: dict) -> dict:
        """Read the bundle document (a bad one is a finding, judged by `verify`) and pick
        the engine from its size."""
        import time

        from seglake.lifecycle.backup import verify as engine
        from seglake.runners import choose
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            planned = engine.plan(hook.backup_target(params["backup_uri"]), params["collection"], params["bundle"],
                                  db=params["db"])
        chosen = "inline" if "problem" in planned else choose("verify_bundle", params["engine"],
                                                               planned["bytes"], hook.settings)
        print(f"bundle {params['db']}.{params['collection']}/{params['bundle']}: {len(planned['units'])} data files, "
              f"{planned['bytes']} bytes -> {chosen}")
        return {"engine": chosen, "bytes": planned["bytes"], "data_files": len(planned["units"]),
                "at": time.time(), "backup_uri": params["backup_uri"] or "", "target": planned["target"],
                "uid": planned.get("uid")}

    @task
    def check_inline(params: dict) -> dict:
        from seglake.lifecycle.backup import verify as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        return engine.verify(hook.backup_target(params["backup_uri"]), params["collection"], params["bundle"],
                             db=params["db"], threads=hook.settings.copy_threads, meta=hook.meta, say=print)

    check_spark = spark_submit_task("check_spark", "verify_bundle", [
        "--collection", "{{ params.collection }}", "--bundle", "{{ params.bundle }}", "--db", "{{ params.db }}",
        "--backup-uri={{ %s['backup_uri'] }}" % RESOLVE,
    ])

    @task(trigger_rule="none_failed_min_one_success")
    def verify(params: dict, resolved: dict) -> dict:
        """The verdict, from the report the chosen engine recorded: fails naming bad files."""
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle.backup import verify as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        report = engine.recorded(hook.meta, params["db"], params["collection"], params["bundle"])
        # this run's report: not older than resolve, of the same target and bundle document (the key is
        # per bundle name: an overlapping run of another target, or of a re-exported bundle, records there too)
        if (report is None or report.get("checked_at", 0) < resolved["at"] - 1
                or report.get("target") != resolved.get("target") or report.get("uid") != resolved.get("uid")):
            raise AirflowFailException(f"bundle {params['db']}.{params['collection']}/{params['bundle']}: the "
                                       f"{resolved['engine']} check recorded no report for this run")
        if not report["ok"]:
            bad = "; ".join(f"{p['file']}: {p['problem']}" for p in report["problems"][:5])
            raise AirflowFailException(f"bundle {params['db']}.{params['collection']}/{params['bundle']}: "
                                       f"{report.get('problem_count', len(report['problems']))} bad files: {bad}")
        return report

    resolved = resolve()
    check_conf("snapshot_verify") >> resolved
    inline = check_inline()
    engine_step(resolved, inline, check_spark)
    [inline, check_spark] >> verify(resolved=resolved)
    run_note("snapshot_verify")


snapshot_verify()
