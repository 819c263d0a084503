"""
### Export a snapshot to a backup target (a bundle)

Copies a COMMITTED snapshot to the **backup target** -- another store: a local directory
or `s3://bucket/prefix` with its own credentials (the `seglake_backup` connection) -- as
a self-contained, versioned bundle (docs/BUNDLE.md): the snapshot's metadata, its
segments, and every file they reference, each listed with its size and SHA-256.

* **Incremental**: files are stored by content (`data/{sha256}`); a file an earlier
  bundle of the collection already holds is not copied (nor read) again.
* **Safe**: the snapshot is pinned while the export runs (it cannot be dropped; GC keeps
  its files); a data file appears in the target only complete and checked; the bundle
  exists only once its commit marker (the SHA-256 of bundle.json) is written. A re-run
  after a kill resumes (data already in the target is kept).
* **Throttled**: `max_mib_per_second` / `max_requests_per_second`.

REST: `conf = {"collection": "demo", "snapshot": "nightly", "bundle": null, "backup_uri": null}`.
Restore with `snapshot_restore_external`; check with `snapshot_verify`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="snapshot_export",
    dag_display_name="Snapshot: export (backup)",
    description="Copy a snapshot to a backup target as a bundle (incremental, checked)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot", "backup"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_export"),
)
def snapshot_export():
    @task
    def export(params: dict, run_id: str | None = None) -> dict:
        from seglake.lifecycle.backup import export as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            return engine.export(hook.meta, hook.store, hook.backup_target(params["backup_uri"]),
                                 params["collection"], params["snapshot"], bundle=params["bundle"], db=params["db"],
                                 threads=hook.settings.copy_threads, by=run_id or "",
                                 max_bytes_per_second=params["max_mib_per_second"] * (1 << 20),
                                 max_requests_per_second=params["max_requests_per_second"], say=print)

    check_conf("snapshot_export") >> export()
    run_note("snapshot_export")


snapshot_export()
