"""
### Snapshot schedule (retention policies)

Runs hourly by default (the config key `retention_schedule`, set as
`SEGLAKE_RETENTION_SCHEDULE` in the dag-processor's environment; read at parse time) and
from the form. For every collection with a retention policy (`seglake retention set`, or
the **Snapshot: retention policy** form), at the run's time:

1. takes the snapshot the policy calls for, named `sched_YYYYMMDDTHHMMZ` after the run's
   time (a retried run finds it instead of taking a second one), unless one of the
   schedule's already falls in the current hour / day / week / month (the finest unit
   the policy keeps);
2. drops the schedule's snapshots the policy no longer keeps (newest `keep_last`; the
   newest of each of the last `keep_hourly` hours, `keep_daily` days, `keep_weekly` ISO
   weeks, `keep_monthly` months) -- never one a pin or a copy job holds, never one made
   by hand, never the collection's last;
3. for a policy with `export: true`: exports every kept schedule snapshot the backup
   target (config key `backup_uri`, the `seglake_backup` connection) lacks, as a bundle
   of the same name (incremental), and prunes the schedule's bundles there by the same
   policy (then sweeps the data files no bundle needs).

**Milvus sources** (`seglake milvus source set`: a Milvus's etcd and bucket, which
collections, a retention policy) run here too, in their own task, at the same time
(seglake.milvus.sources): for each collection, the capture the policy calls for
(`sched_YYYYMMDDTHHMMZ`, incremental: files an earlier bundle holds are not copied),
its verification, and the pruning of the schedule's captures the policy no longer keeps
(never the newest, a pinned or held one, or one made by hand). The Milvus bucket's
credentials come from each source's Airflow connection (`conn_id`, default
`seglake_milvus`), never from etcd or the conf.

`dry_run` lists what would be created and dropped, and changes nothing. One collection's
failure is reported and fails the run after the others were done. `milvus_source`
names one source: then only it runs (and no seglake collection unless `collection` is
named); `collection` alone runs only that collection's policy.
REST: `conf = {"collection": null, "dry_run": true}`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake.config import retention_schedule
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="snapshot_schedule",
    dag_display_name="Snapshot: schedule (retention)",
    description="Take and prune snapshots as each collection's retention policy says",
    schedule=retention_schedule(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["seglake", "snapshot"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=30)},
    params=dag_params("snapshot_schedule"),
)
def snapshot_schedule():
    @task
    def run_policies(params: dict, dag_run=None) -> list[dict]:
        from seglake.lifecycle.backup import scheduled
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        if params["milvus_source"] and not params["collection"]:
            print("only the Milvus source was named: no seglake collection's policy runs")
            return []
        hook = SeglakeHook()
        at = (dag_run.run_after or dag_run.logical_date).timestamp()   # the run's time: retries agree on it
        with fail_fast():
            reports = scheduled.run(hook.meta, hook.store, hook.backup_target, now=at, dry_run=params["dry_run"],
                                    collection=params["collection"], db=params["db"],
                                    threads=hook.settings.copy_threads, by=dag_run.run_id, say=print)
        for r in reports:
            print(scheduled.report_line(r))
        failed = [r for r in reports if "error" in r]
        if failed:
            raise RuntimeError(f"retention failed for {len(failed)} collection(s): "
                               + "; ".join(f"{r['collection']}: {r['error']}" for r in failed))
        return reports

    @task
    def milvus_sources(params: dict, dag_run=None) -> list[dict]:
        """Every registered Milvus source (or the one named): capture, verify, prune."""
        from seglake.milvus import sources
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook, milvus_source_settings

        if params["collection"] and not params["milvus_source"]:
            print("only a seglake collection was named: no Milvus source runs")
            return []
        hook = SeglakeHook()
        at = (dag_run.run_after or dag_run.logical_date).timestamp()
        with fail_fast():
            reports = sources.run_all(hook.meta, hook.backup_target,
                                      milvus_source_settings, now=at,
                                      dry_run=params["dry_run"], source=params["milvus_source"], say=print)
        for r in reports:
            print(sources.report_line(r))
        failed = [r for r in reports if "error" in r]
        if failed:
            raise RuntimeError(f"Milvus schedule failed for {len(failed)} collection(s): "
                               + "; ".join(f"{r['source']} {r.get('collection')}: {r['error']}" for r in failed))
        return reports

    check_conf("snapshot_schedule") >> [run_policies(), milvus_sources()]
    run_note("snapshot_schedule")


snapshot_schedule()
