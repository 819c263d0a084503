"""
### Snapshot retention policy

Set (or clear) a collection's retention policy, which the scheduled **Snapshot:
schedule** DAG then follows: `keep_last` (the newest N of the schedule's snapshots),
`keep_hourly` / `keep_daily` / `keep_weekly` / `keep_monthly` (the newest snapshot of each
of the last N hours / days / ISO weeks / months that have one). Counts are integers
0..100000, at least one above 0. Snapshots made by hand are never dropped by a schedule.
CLI: `seglake retention set demo --keep-daily 7 --keep-weekly 4`.
REST: `conf = {"collection": "demo", "keep_daily": 7, "keep_weekly": 4}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="snapshot_retention",
    dag_display_name="Snapshot: retention policy",
    description="Set or clear a collection's snapshot retention policy",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_retention"),
)
def snapshot_retention():
    @task
    def set_policy(params: dict) -> dict:
        from seglake.lifecycle import retention
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            if params["clear"]:
                gone = retention.clear_policy(hook.meta, params["collection"], db=params["db"])
                print(f"retention of {params['collection']!r} " + ("cleared" if gone else "was not set"))
                return {"cleared": gone}
            doc = retention.set_policy(hook.meta, params["collection"],
                                       {k: params[k] for k in retention.POLICY_KEYS}, db=params["db"])
        print(f"retention of {params['collection']!r}: " + ", ".join(f"{k} {doc[k]}" for k in retention.POLICY_KEYS))
        return doc

    check_conf("snapshot_retention") >> set_policy()
    run_note("snapshot_retention")


snapshot_retention()
