"""A DAG's conf contract in Airflow terms (the contract itself: seglake.params).

`dag_params(dag_id)`: the Param form, validated by Airflow before a run exists (UI, REST,
`dags test -c`). `check_conf(dag_id)`: the DAG's first task; every other task runs after
it. It re-checks the run's raw `dag_run.conf` strictly (unknown keys, required keys,
NaN, ranges) and resolves the settings (SEGLAKE_* env, the `seglake_config` Variable,
connections: unknown keys, NaN, ranges), and fails at once (AirflowFailException: no
retry) before anything is written.
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

        with fail_fast():
            conf = check(dag_id, dag_run.conf if dag_run is not None else {})
            SeglakeHook().settings  # noqa: B018 - every config layer checked; connects to nothing
        return conf

    return check_conf_task()
