"""Helpers shared by the DAG tests."""

from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_dag(dag_id: str, file: str | None = None):
    """Parse one DAG file (named after the DAG unless given) and return the DAG."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS / f"{file or dag_id}.py")).dags[dag_id]


def task_states(run) -> dict:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}
