"""
### Garbage collection

**A run from the form is a dry run unless you switch *Dry run* off**: it marks and
reports what a real run would delete, and deletes nothing. A real run deletes the
unreferenced files older than the orphan tolerance and the files of segments Dropped
longer than the dropped-segment tolerance, then their records, expired or abandoned
snapshots, old copy jobs and empty Dropped collections.

Manual only by default. A schedule is set with `SEGLAKE_GC_SCHEDULE` (a cron expression
or an @preset) in the dag-processor's environment (read at parse time, so not from the
Variable); a scheduled run then does what an operator recorded with
`seglake gc schedule set --dry-run|--execute [...]` (never the form's defaults) and is
refused, with the reason in its note, until that is set. Unpausing a scheduled gc (also
the form's *Unpause on trigger* box) starts the latest interval's scheduled run at once;
the *Dry run* field's help says so when a schedule is set. A backfill of gc is refused
(HTTP 400 when it is created through the API; a backfill run made otherwise fails in
`check_conf`, deleting nothing): GC has no past intervals to replay. Every refusal of a triggered
run (a bad value, a tolerance below the 1 h floor without `force`) is an HTTP 400 from
the trigger itself, before a run exists. Fail closed, mark then sweep, never a
referenced file, never a file that is not seglake's own:

1. **prepare**: tolerances below the floor (1 h) are refused unless `force`; every
   reference (segment records, snapshot manifests) must load completely.
2. **mark** (Spark `spark/jobs/gc_scan.py`: segment records read by etcd key range and
   snapshot manifests one per task on the executors, the listing split by collection
   prefix (large ones in key ranges), joined and judged on the executors, which write the
   report parts; the driver holds counts only. Or inline): candidate report under `_gc/{run}/`:
   old orphans and the files of segments Dropped longer than `drop_tolerance` (never
   one a snapshot references). Only keys of seglake's own layout are ever candidates;
   anything else is reported as `unrecognised` and left alone. The age cutoff is fixed
   when the listing starts. A dry run stops here: its report is what a real run deletes.
3. **sweep** (skipped on `dry_run`; Spark `spark/jobs/gc_sweep.py`, one task per report
   part, when the mark ran on Spark): deletes candidates in batches of 1,000, each
   re-checked against references refreshed from etcd right before deleting, each file
   only if it is still the one the mark saw, never through a symlink; then removes the
   records of the Dropped segments whose files are gone.
4. **records** (skipped on `dry_run`): stale PENDING / unfinished DELETING / expired
   snapshots, copy jobs past retention, empty Dropped collections.
5. **summary**: files and bytes per collection and reason (task log and XCom).

A refusal (unreadable references, a scheduled run without settings) fails the run at
once, without retries; the run's note says why. A dry run's note starts with
"gc DRY RUN".
Collections with a PENDING snapshot, and paused scopes (`seglake gc pause`), are skipped
and reported. REST: `conf = {"dry_run": true, "collection": null, "engine": "auto"}`.
CLI: `seglake gc run` (dry run unless `--execute`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake.config import gc_schedule
from seglake.contract import gc_schedule_note
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

PREP = "ti.xcom_pull(task_ids='prepare')"


SCHEDULE = gc_schedule()


@dag(
    dag_id="gc",
    dag_display_name="Garbage collection",
    description="Fail-closed mark-then-sweep GC of the segment store",
    schedule=SCHEDULE,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["seglake", "gc"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(minutes=1)},
    params=dag_params("gc", notes={"dry_run": gc_schedule_note(SCHEDULE)}),
)
def gc():
    @task
    def prepare(conf: dict, run_id: str | None = None) -> dict:
        """`conf`: what check_conf resolved (a scheduled run: the operator's record), never
        the Params directly. The options are parsed and checked here, once; the later
        steps rebuild them from this task's XCom only. Records the Airflow run beside the
        report (the page links it)."""
        import json

        from seglake.lifecycle import gc as engine
        from seglake.storage import layout
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook
        from seglake_airflow.taskgroups import safe_run_id

        hook = SeglakeHook()
        with fail_fast(engine.GCError):
            cid = (hook.meta.catalog.get_by_name(conf["collection"], conf["db"]).collection_id
                   if conf["collection"] else None)
            opts = engine.GCOptions.from_conf(conf, hook.settings, cid)
            chosen, why = engine.choose_engine(hook.meta, hook.store, conf["engine"], hook.settings)
        print(why)
        safe = safe_run_id(run_id or "manual")
        # which Airflow run made this report (the seglake page links to it); _gc/ is never collected
        hook.store.put(layout.gc_run_file(safe, "airflow.json"),
                       json.dumps({"dag_id": "gc", "run_id": run_id, "dry_run": opts.dry_run}).encode())
        return {**opts.to_xcom(), "run_id": safe, "engine": chosen}

    @task
    def mark_inline(prep: dict) -> dict:
        from seglake.lifecycle import gc as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast(engine.GCError):
            m = engine.mark(hook.meta, hook.store, engine.GCOptions.from_xcom(prep), run_id=prep["run_id"])
        return {k: v for k, v in m.summary().items() if k != "by_collection_reason"}

    mark_spark = spark_submit_task("mark_spark", "gc_scan", [
        "--run-id", "{{ %s['run_id'] }}" % PREP,
        "--collection-id", "{{ %s['collection_id'] or 0 }}" % PREP,
        "--missing-tolerance", "{{ %s['missing_tolerance'] }}" % PREP,
        "--drop-tolerance", "{{ %s['drop_tolerance'] }}" % PREP,
        "--force", "{{ 1 if %s['force'] else 0 }}" % PREP,
        "--dry-run", "{{ 1 if %s['dry_run'] else 0 }}" % PREP,
    ])

    @task.branch(trigger_rule="none_failed_min_one_success")
    def choose_sweep(prep: dict) -> list[str]:
        """A dry run sweeps nothing; otherwise the mark's engine sweeps."""
        if prep["dry_run"]:
            return []
        return ["sweep_spark" if prep["engine"] == "spark" else "sweep"]

    sweep_spark = spark_submit_task("sweep_spark", "gc_sweep", ["--run-id", "{{ %s['run_id'] }}" % PREP])

    @task
    def sweep(prep: dict) -> dict:
        from airflow.sdk.exceptions import AirflowSkipException
        from seglake.lifecycle import gc as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        if prep["dry_run"]:
            raise AirflowSkipException("dry run: nothing is deleted")
        hook = SeglakeHook()
        with fail_fast(engine.GCError):
            s = engine.sweep(hook.meta, hook.store, prep["run_id"]).summary()
        if s["error_count"]:
            print(f"{s['error_count']} objects could not be deleted, first: {s['errors'][:5]}")
        return {k: s[k] for k in ("deleted", "deleted_bytes", "already_gone", "rechecked_kept", "changed_kept",
                                  "error_count")}

    @task(trigger_rule="none_failed_min_one_success")
    def records(prep: dict) -> dict:
        from airflow.sdk.exceptions import AirflowSkipException
        from seglake.lifecycle import gc as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        if prep["dry_run"]:
            raise AirflowSkipException("dry run: no record is removed")
        hook = SeglakeHook()
        with fail_fast(engine.GCError):
            return engine.clean_records(hook.meta, hook.store, engine.GCOptions.from_xcom(prep))

    @task(trigger_rule="none_failed_min_one_success")
    def summary(prep: dict) -> dict:
        import json

        from seglake.lifecycle import gc as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        from seglake.storage import layout

        store = SeglakeHook().store
        doc = json.loads(store.get(layout.gc_run_file(prep["run_id"], "summary.json")))
        result = {"mark": doc, "dry_run": prep["dry_run"]}
        partial = bool(doc.get("swept")) and bool(doc["swept"].get("partial"))   # stopped part-way
        if doc.get("swept"):
            result["sweep"] = doc["swept"]
        print(engine.format_summary(result))
        return {"run_id": prep["run_id"], "dry_run": prep["dry_run"], "swept": bool(doc.get("swept")) and not partial,
                "swept_partial": partial,
                "candidates": doc["candidates"],
                "candidate_bytes": doc["candidate_bytes"], "by_collection_reason": doc["by_collection_reason"],
                "unrecognised": doc["unrecognised"]["files"], "dropped": doc["dropped"],
                **{k: (doc.get("swept") or {}).get(k, 0) for k in ("deleted", "deleted_bytes", "error_count")}}

    prep = prepare(check_conf("gc"))
    inline = mark_inline(prep=prep)
    engine_step(prep, inline, mark_spark)
    pick = choose_sweep(prep)
    swept = sweep(prep)
    recs = records(prep=prep)
    done = summary(prep)
    # a dry run skips the sweeps and records: the mark's counts (what a real run deletes) still report
    [inline, mark_spark] >> pick >> [swept, sweep_spark] >> recs >> done
    [inline, mark_spark] >> done
    run_note("gc")


gc()
