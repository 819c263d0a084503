"""
### WAL archive (continuous backup)

Ships every committed WAL fragment of the collections whose retention policy says
`archive` (`seglake retention set NAME --archive`, or the **Snapshot: retention policy**
form) to the backup target (config key `backup_uri`, the `seglake_backup` connection), as
it is committed: `seglake.lifecycle.backup.archive`. Together with the bundles a schedule
exports, the target then holds what a restore needs after the source store and its etcd
are lost.

Scheduled every 5 minutes by default (`SEGLAKE_WAL_ARCHIVE_SCHEDULE`; `none`: manual
only), max one active run; each run keeps shipping new fragments for `seconds` (240 by
default), so the archive runs seconds behind the log. Idempotent and resumable: a killed
run's successor re-ships at most the fragments after the cursor; a fragment the target
already holds under another content is refused, never overwritten. GC never truncates
what is not shipped yet. `seglake wal status` shows how far behind the archive is.
REST: `conf = {"seconds": 240, "backup_uri": null, "max_mib_per_second": 0}`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake.config import Settings
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="wal_archive",
    dag_display_name="WAL archive (continuous backup)",
    description="Ship the WAL of archived collections to the backup target as it is written",
    schedule=None if (_sched := Settings.from_env().wal_archive_schedule) == "none" else _sched,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["seglake", "wal", "backup"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("wal_archive"),
)
def wal_archive():
    @task
    def archive(params: dict) -> dict:
        from seglake.lifecycle.backup import archive as archives
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            return archives.run(hook.meta, hook.store, hook.backup_target(params["backup_uri"]),
                                seconds=params["seconds"],
                                max_bytes_per_second=params["max_mib_per_second"] * (1 << 20), say=print)

    check_conf("wal_archive") >> archive()
    run_note("wal_archive")


wal_archive()
