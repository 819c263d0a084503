"""
### Drop a snapshot

COMMITTED -> DELETING -> manifests and metadata removed -> record removed. A drop that
was interrupted in DELETING resumes where it stopped; a retry (or a cleared run) that finds
the snapshot already gone succeeds, saying so: its earlier attempt may have dropped it. Refused (clear error, nothing
changed) while a restore job still reads the snapshot, and for a PENDING snapshot.

The segment files a snapshot referenced are not deleted here: once no snapshot and no
segment references them, garbage collection reclaims them.

REST: `conf = {"collection": "demo", "name": "nightly"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="snapshot_drop",
    dag_display_name="Snapshot: drop",
    description="Drop a snapshot (COMMITTED -> DELETING -> removed)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_drop"),
)
def snapshot_drop():
    @task
    def drop(params: dict, ti=None) -> dict:
        from seglake.lifecycle import snapshot
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        retry = ti is not None and (ti.try_number or 1) > 1   # retried or cleared: it may have dropped it already
        with fail_fast():
            result = snapshot.drop(hook.meta, hook.store, params["collection"], params["name"], db=params["db"],
                                   gone_ok=retry)
        if result.get("already_gone"):
            print(f"snapshot {params['name']!r} of {params['collection']!r} was already gone when attempt "
                  f"{ti.try_number} ran (dropped by an earlier attempt of this run, or by another drop)")
        else:
            print(f"dropped snapshot {params['name']!r} of {params['collection']!r}: "
                  f"{result['files_removed']} snapshot files removed")
        return result

    check_conf("snapshot_drop") >> drop()
    run_note("snapshot_drop")


snapshot_drop()
