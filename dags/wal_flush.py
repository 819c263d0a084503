"""
### WAL flush

Turns each pchannel's write-ahead log into Flushed segments (`seglake.lifecycle.flush`),
exactly once: files first, then one etcd transaction per segment guarded by the
pchannel's flusher term, which also advances the vchannel checkpoint.

Scheduled every 5 minutes by default (`SEGLAKE_WAL_FLUSH_SCHEDULE` on the scheduler
overrides, e.g. `@continuous` to run back to back; max one active run either way) and
triggerable with the form below.

1. **list_pchannels**: the requested pchannel, or every pchannel with a log.
2. **wait** (one mapped sensor per pchannel, reschedule mode, with a timeout): waits
   while the pchannel's consumption is paused (`seglake wal pause`) or its scanner
   startup delay since the run started has not passed.
3. **flush**: inline, one mapped task per pchannel; or one Spark job
   (`spark/jobs/flush_wal.py`) with one partition per pchannel for large backlogs.
   `engine=auto` picks Spark when the backlog above the checkpoints exceeds
   `inline_threshold_bytes`. Each run reads from the minimum checkpoint to the log's end
   (or `max_seconds`); `flush_all` seals every growing segment first.
4. **summary**: segments, rows, bytes, delta logs and checkpoint lag per vchannel.

Two runs on one pchannel cannot both commit: the later one takes the flusher term, the
earlier one fails fenced (its files become orphans for GC). REST:
`conf = {"pchannel": "all", "engine": "auto", "max_seconds": 240, "flush_all": false}`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake.config import Settings
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

PREP = "ti.xcom_pull(task_ids='prepare')"


@dag(
    dag_id="wal_flush",
    dag_display_name="WAL flush",
    description="Flush each pchannel's WAL into Flushed segments (inline or Spark), exactly once",
    schedule=None if (_sched := Settings.from_env().wal_flush_schedule) == "none" else _sched,  # "none": manual only
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["seglake", "wal"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=20)},
    params=dag_params("wal_flush"),
)
def wal_flush():
    @task
    def list_pchannels(params: dict) -> list[str]:
        from seglake.lifecycle.flush import pchannels_with_log
        from seglake.wal.log import validate_pchannel
        from seglake_airflow.hooks.engine import SeglakeHook

        if params["pchannel"] != "all":
            return [validate_pchannel(params["pchannel"])]
        found = pchannels_with_log(SeglakeHook().meta)
        print(f"pchannels with a log: {found or 'none'}")
        return found

    @task.sensor(mode="reschedule", poke_interval=5, timeout=86400)
    def wait(pchannel: str, params: dict, dag_run=None):
        import time

        from airflow.sdk import PokeReturnValue
        from airflow.sdk.exceptions import AirflowFailException
        from seglake.lifecycle.flush import flush_ready
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        started = dag_run.start_date.timestamp()
        ready, why = flush_ready(hook.meta, pchannel, hook.settings, started)
        print(why)
        if not ready and time.time() - started > params["wait_timeout_seconds"]:
            raise AirflowFailException(f"gave up after {params['wait_timeout_seconds']} s: {why}")
        return PokeReturnValue(is_done=ready, xcom_value=pchannel)

    @task
    def prepare(pchannels: list[str], params: dict, run_id: str | None = None) -> dict:
        from seglake.lifecycle.flush import backlog
        from seglake.wal.log import expire_producers
        from seglake.storage import layout
        from seglake.runners import choose
        from seglake_airflow.hooks.engine import SeglakeHook
        from seglake_airflow.taskgroups import safe_run_id

        hook = SeglakeHook()
        pchannels = list(pchannels)
        sizes = [backlog(hook.meta, p) for p in pchannels]
        # once per run, not per flusher: named producers idle for two retry windows go
        gone = sum(expire_producers(hook.meta, p, hook.settings.wal_producer_expiry) for p in pchannels)
        if gone:
            print(f"{gone} idle producer record(s) removed or shrunk to their floor")
        total = sum(s["bytes"] for s in sizes)
        chosen = choose("flush", params["engine"], total, hook.settings) if pchannels else "inline"
        print(f"backlog {total} bytes over {len(pchannels)} pchannel(s): engine {chosen}")
        return {"pchannels": pchannels, "engine": chosen, "max_seconds": float(params["max_seconds"]),
                "flush_all": bool(params["flush_all"]),
                "report_key": layout.report("wal_flush", safe_run_id(run_id or "manual"))}

    @task
    def flush_inline(pchannel: str, prep: dict) -> dict:
        from seglake.lifecycle.flush import flush_pchannel
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        # the sensor already waited out the startup delay for this run
        settings = hook.settings.replace(wal_scanner_startup_delay=0)
        return flush_pchannel(hook.meta, hook.store, pchannel, settings, max_seconds=prep["max_seconds"],
                              flush_all=prep["flush_all"])

    flush_spark = spark_submit_task("flush_spark", "flush_wal", [
        "--pchannels", "{{ %s['pchannels'] | join(',') }}" % PREP,
        "--report-key", "{{ %s['report_key'] }}" % PREP,
        "--max-seconds", "{{ %s['max_seconds'] }}" % PREP,
        "--flush-all", "{{ 1 if %s['flush_all'] else 0 }}" % PREP,
    ], settings_overrides={"wal_scanner_startup_delay": 0})

    @task(trigger_rule="none_failed_min_one_success")
    def summary(prep: dict, ti=None) -> dict:
        import json

        from seglake.lifecycle.flush import format_summary
        from seglake_airflow.hooks.engine import SeglakeHook

        if prep["engine"] == "spark":
            results = json.loads(SeglakeHook().store.get(prep["report_key"]))
        else:
            pulled = ti.xcom_pull(task_ids="flush_inline")   # one mapped instance: its dict
            results = [pulled] if isinstance(pulled, dict) else [r for r in (pulled or []) if r]
        print(format_summary(results))
        return {"pchannels": len(results), "expected": len(prep["pchannels"]), "segments": sum(r["segments"] for r in results),
                "rows": sum(r["rows"] for r in results), "bytes": sum(r["bytes"] for r in results),
                "delta_logs": sum(r["delta_logs"] for r in results),
                "checkpoints": {v: cp for r in results for v, cp in r["checkpoints"].items()}}

    listed = list_pchannels()
    check_conf("wal_flush") >> listed
    ready = wait.expand(pchannel=listed)
    prep = prepare(ready)
    inline = flush_inline.partial(prep=prep).expand(pchannel=ready)
    engine_step(prep, inline, flush_spark)
    [inline, flush_spark] >> summary(prep)
    run_note("wal_flush")


wal_flush()
