"""
### Compaction schedule

Compacts, inline, every collection whose compaction policy says `scheduled`
(`seglake compaction policy set demo --scheduled`, the **Compaction: policy** DAG, the REST
API), each with its policy over config; one collection's failure is reported and does not
stop the others (the run then fails, naming it). Nothing scheduled, or nothing to compact:
the run succeeds and changes nothing. Each collection's run is recorded in its compaction
history (trigger `scheduled`), shown on the seglake page.

Scheduled by the config key `compaction_schedule` (`SEGLAKE_COMPACTION_SCHEDULE` on the
scheduler: a cron expression, an @preset, or `none` -- the default: manual only). A manual
run of one collection is the **Compaction** DAG's.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake.config import compaction_schedule
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="compaction_schedule",
    dag_display_name="Compaction: schedule",
    description="Compact every collection whose compaction policy says scheduled",
    schedule=compaction_schedule(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["seglake", "compaction"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=30)},
    params=dag_params("compaction_schedule"),
)
def compaction_schedule_dag():
    @task
    def run_scheduled(params: dict) -> list[dict]:
        from seglake.lifecycle import compaction
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            reports = compaction.run_scheduled(hook.meta, hook.store, hook.settings, dry_run=params["dry_run"],
                                               say=print)
        if not reports:
            print("no collection has a scheduled compaction policy: nothing to do")
        failed = [r for r in reports if "error" in r]
        if failed:
            raise RuntimeError(f"compaction failed for {len(failed)} collection(s): "
                               + "; ".join(f"{r['collection']}: {r['error']}" for r in failed))
        return reports

    check_conf("compaction_schedule") >> run_scheduled()
    run_note("compaction_schedule")


compaction_schedule_dag()
