"""A DAG's conf contract in Airflow terms (the contract itself: seglake.params).

`dag_params(dag_id)`: the Param form, validated by Airflow before a run exists (UI, REST,
`dags test -c`). `check_conf(dag_id)`: the DAG's first task; every other task runs after
it. It re-checks the run's raw `dag_run.conf` strictly (unknown keys, required keys,
NaN, ranges) and resolves the settings (SEGLAKE_* env, the `seglake_config` Variable,
connections: unknown keys, NaN, ranges), and fails at once (AirflowFailException: no
retry) before anything is written. For gc it then prints the effective options and where
each came from (seglake.runinfo.gc_options_lines): the first lines of every gc run.
"""

from __future__ import annotations

from airflow.sdk import Param, task


def dag_params(dag_id: str) -> dict[str, Param]:
    from seglake.params import SPECS

    out = {}
    for key, spec in SPECS[dag_id].items():
        schema = spec.schema()
        out[key] = Param(**schema) if spec.required else Param(spec.default, **schema)
    return out


def check_conf(dag_id: str):
    """The check task (task_id `check_conf`); wire it upstream of the DAG's first task."""

    @task(task_id="check_conf")
    def check_conf_task(dag_run=None) -> dict:
        from seglake.params import check_conf as check
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        raw = dag_run.conf if dag_run is not None else {}
        with fail_fast():
            conf = check(dag_id, raw)
            hook = SeglakeHook()
            hook.settings  # noqa: B018 - every config layer checked; connects to nothing
        if dag_id == "gc":   # the effective options, first thing in every gc run's logs
            from seglake.runinfo import gc_options_lines

            run_type = getattr(getattr(dag_run, "run_type", None), "value", getattr(dag_run, "run_type", None))
            print("\n".join(gc_options_lines(conf, raw, hook.settings, hook.sources, run_type)), flush=True)
        return conf

    return check_conf_task()
