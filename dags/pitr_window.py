"""
### Point-in-time window

Turn a collection's point-in-time window on (or change it), or off: while it is on, a
restore (the **Snapshot: restore** DAG with `as_of`, `seglake restore --as-of`) can bring the
collection back as it was at any instant of the window, and GC and retention keep the
log fragments and the base snapshot such restores need (`seglake wal status` and the
seglake page show what that costs). `window`: `3d`, `12h`, `90m` or seconds (1 minute to
365 days). Turning it off (`clear`) releases what it held at the next GC.
CLI: `seglake pitr set demo 3d`, `seglake pitr clear demo`.
REST: `conf = {"collection": "demo", "window": "3d"}` or `{"collection": "demo", "clear": true}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="pitr_window",
    dag_display_name="Point-in-time window",
    description="Set or clear a collection's point-in-time window",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "restore"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("pitr_window"),
)
def pitr_window():
    @task
    def set_window(params: dict) -> dict:
        from seglake.errors import ValidationError
        from seglake.lifecycle import pitr
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            if params["clear"]:
                gone = pitr.clear_window(hook.meta, params["collection"], db=params["db"])
                print(f"point-in-time window of {params['collection']!r} " + ("cleared" if gone else "was off"))
                return {"cleared": gone}
            if params["window"] is None:
                raise ValidationError("give conf key 'window' (e.g. 3d), or clear: true")
            doc = pitr.set_window(hook.meta, params["collection"], params["window"], db=params["db"])
        print(f"point-in-time window of {params['collection']!r}: {doc['window']}")
        return doc

    check_conf("pitr_window") >> set_window()
    run_note("pitr_window")


pitr_window()
