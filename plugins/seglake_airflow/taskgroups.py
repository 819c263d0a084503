"""TaskGroup factories shared by DAGs (a phase that chains reuses the group instead of
triggering another DAG, which never runs under `airflow dags test`)."""

from __future__ import annotations

import re

from airflow.sdk import TaskGroup, task

from seglake_airflow import spark_job
from seglake_airflow.operators.spark import SeglakeSparkSubmitOperator


def _safe(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", run_id).strip(".") or "run"


def verify_collection_group(collection: str, db: str = "default", group_id: str = "verify") -> TaskGroup:
    """resolve -> check_files (Spark) -> summarize. `collection` and `db` may be templates.
    The group fails with a readable summary when any referenced file is missing, has the
    wrong size, or holds a different number of rows than its metadata says."""
    with TaskGroup(group_id=group_id, tooltip="verify every file of a collection") as group:

        @task(task_id="resolve")
        def resolve(collection: str, db: str, run_id: str | None = None) -> dict:
            from seglake.storage import layout
            from seglake_airflow.failfast import fail_fast
            from seglake_airflow.hooks.engine import SeglakeHook

            hook = SeglakeHook()
            with fail_fast():
                coll = hook.meta.catalog.get_by_name(collection, db)  # nothing written yet
            key = layout.report("verify", f"{coll.collection_id}/{_safe(run_id or 'manual')}")
            return {"collection": coll.name, "collection_id": coll.collection_id, "db": db, "report_key": key}

        resolved = resolve(collection, db, run_id="{{ run_id }}")
        xcom = f"ti.xcom_pull(task_ids='{group_id}.resolve')"
        check = SeglakeSparkSubmitOperator(
            task_id="check_files",
            application=spark_job("verify_collection"),
            name="seglake-verify",
            application_args=[
                "--collection", "{{ %s['collection'] }}" % xcom,
                "--db", "{{ %s['db'] }}" % xcom,
                "--report-key", "{{ %s['report_key'] }}" % xcom,
            ],
        )

        @task(task_id="summarize")
        def summarize(resolved: dict) -> dict:
            import json

            from airflow.sdk.exceptions import AirflowFailException
            from seglake.lifecycle.verify import format_report
            from seglake_airflow.hooks.engine import SeglakeHook

            report = json.loads(SeglakeHook().store.get(resolved["report_key"]))
            text = format_report(report)
            print(text)
            if not report["ok"]:
                raise AirflowFailException("verification failed:\n" + text)
            return {k: report[k] for k in ("collection", "segments_checked", "files_checked", "rows", "ok")}

        resolved >> check >> summarize(resolved)
    return group
