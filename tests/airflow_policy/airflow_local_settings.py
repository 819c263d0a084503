"""The test Airflow's cluster policy: every sensor pokes at most every POKE_S seconds.

Loaded by Airflow itself as `airflow_local_settings` (its documented hook for cluster
policies) in every process of the test Airflow: the in-process DAG tests (tests/conftest.py
puts this directory on sys.path before Airflow is imported) and every process of the e2e
`airflow standalone` (tests/e2e/conftest.py puts it on PYTHONPATH). Same sensors, same mode
(reschedule or deferred to the triggerer), same conditions: only the pause between two
pokes is shorter than the DAGs' 5-10 s, which dag.test() and the scheduler otherwise
spend idle (snapshot_create's wait_committed pokes once before the write has started).
"""

POKE_S = 1.0


def task_policy(task) -> None:
    from airflow.sdk import BaseSensorOperator

    if isinstance(task, BaseSensorOperator) and task.poke_interval > POKE_S:
        task.poke_interval = POKE_S
