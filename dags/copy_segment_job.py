"""
### Run (resume, re-drive) a copy-segment job

Runs the copy-job TaskGroup for an existing job id: plan (Pending -> Executing, tasks
created once) -> copy the unfinished tasks (Spark or inline) -> wait until every task is
terminal -> finalize (Completed, or Failed with rollback) -> verify the target.

Use it to continue a job whose `snapshot_restore` run died, or to re-drive one after an
outage. For a job that already finished it changes nothing. REST: `conf = {"job_id": 123}`.
Job ids: `seglake jobs list`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.taskgroups import copy_job_group, verify_collection_group


@dag(
    dag_id="copy_segment_job",
    dag_display_name="Copy-segment job: run / resume",
    description="Resume or re-drive a copy-segment job by id",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "restore"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("copy_segment_job"),
)
def copy_segment_job():
    @task
    def resolve(params: dict) -> dict:
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        with fail_fast():
            job, _ = SeglakeHook().meta.copyjobs.get(int(params["job_id"]))
        print(f"copy job {job.job_id}: {job.state}, {job.source_collection!r}/{job.snapshot!r} -> "
              f"{job.target_collection!r}")
        return {"job_id": job.job_id, "state": job.state, "target": job.target_collection, "db": job.db}

    resolved = resolve()
    check_conf("copy_segment_job") >> resolved
    copy = copy_job_group("{{ params.job_id }}", "{{ params.engine }}")
    xcom = "ti.xcom_pull(task_ids='resolve')"
    verify = verify_collection_group("{{ %s['target'] }}" % xcom, "{{ %s['db'] }}" % xcom,
                                     engine="{{ params.engine }}")
    resolved >> copy >> verify
    run_note("copy_segment_job")


copy_segment_job()
