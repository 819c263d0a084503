"""A DAG's conf contract in Airflow terms (the contract itself: seglake.contract).

`dag_params(dag_id)`: the Param form, validated by Airflow before a run exists (UI, REST,
`dags test -c`). `check_conf(dag_id)`: the DAG's first task; every other task runs after
it. It re-checks the run's raw `dag_run.conf` strictly (unknown keys, required keys,
NaN, ranges) and resolves the settings (SEGLAKE_* env, the `seglake_config` Variable,
connections: unknown keys, NaN, ranges), and fails at once (AirflowFailException: no
retry) before anything is written. For gc it also refuses tolerances below the floor
(unless force), and a run that was not triggered by hand (scheduled, backfill, asset)
takes its conf from the operator's record (`seglake gc schedule set`), never from the
form's defaults, and is refused until there is one; a backfill of gc is refused outright
(GC has no past intervals; the API refuses creating one, this is the backstop). It then prints the effective
options and where each came from (seglake.runinfo.gc_options_lines): the first lines of
every gc run. The task returns the conf the run uses; gc's tasks read it from here.
"""

from __future__ import annotations

from airflow.sdk import Param, task


def dag_params(dag_id: str, notes: dict[str, str] | None = None) -> dict[str, Param]:
    """`notes`: text appended to a key's description (what only the DAG file knows at
    parse time, e.g. gc's schedule)."""
    from seglake.contract import SPECS
    from seglake_airflow.params import param_schema

    out = {}
    for key, spec in SPECS[dag_id].items():
        schema = param_schema(spec)
        if (notes or {}).get(key):
            schema["description"] = f"{schema['description']} {notes[key]}".strip()
        out[key] = Param(**schema) if spec.required else Param(spec.default, **schema)
    return out


def check_conf(dag_id: str):
    """The check task (task_id `check_conf`); wire it upstream of the DAG's first task."""

    @task(task_id="check_conf")
    def check_conf_task(dag_run=None) -> dict:
        from seglake.contract import check_conf as check
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        raw = dag_run.conf if dag_run is not None else {}
        run_type = getattr(getattr(dag_run, "run_type", None), "value", getattr(dag_run, "run_type", None))
        record = None
        with fail_fast():
            conf = check(dag_id, raw)
            hook = SeglakeHook()
            hook.settings  # noqa: B018 - every config layer checked; connects to nothing
            if dag_id == "gc":
                from seglake.contract import check_gc_floor, refuse_gc_backfill, scheduled_gc_conf

                refuse_gc_backfill(run_type)   # before the record: a backfill never runs, whatever it says
                if run_type not in (None, "manual"):   # scheduled, backfill, asset: the operator's record
                    from seglake.lifecycle import gc

                    record = gc.get_schedule(hook.meta)
                    conf = scheduled_gc_conf(record)
                check_gc_floor(conf, hook.settings.tolerance_floor)
        if dag_id == "gc":   # the effective options, first thing in every gc run's logs
            from seglake.runinfo import gc_options_lines

            print("\n".join(gc_options_lines(conf, raw, hook.settings, hook.sources, run_type, record)), flush=True)
        return conf

    return check_conf_task()
