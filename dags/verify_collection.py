"""
### Verify a collection

Reads every file that the collection's segment metadata references -- on Spark, or in
the task for a collection below `inline_threshold_bytes` (engine `auto`) -- and
reports per segment: missing files, size mismatches, and Parquet row counts that differ
from the recorded `num_rows`. The run **fails** with a readable summary when anything is
wrong; the full report is written to the store under `_reports/verify/`.

Trigger from the UI (form below) or REST: `conf = {"collection": "demo", "db": "default", "engine": "auto"}`.
This is also the check that runs after every restore.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.taskgroups import verify_collection_group


@dag(
    dag_id="verify_collection",
    dag_display_name="Verify collection",
    description="Check every file a collection's metadata references (inline or Spark)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "verify"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=15)},
    params=dag_params("verify_collection"),
)
def verify_collection():
    check_conf("verify_collection") >> verify_collection_group("{{ params.collection }}", "{{ params.db }}",
                                                                   engine="{{ params.engine }}")
    run_note("verify_collection")


verify_collection()
