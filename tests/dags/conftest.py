"""Fixtures of the DAG layer (helpers in dag_helpers.py)."""

import pytest
from dag_helpers import DAGS


@pytest.fixture(scope="session")
def dagbag(airflow_home):
    """Every DAG of dags/, parsed once per session (read only: a test that changes a DAG
    parses its own with dag_helpers.load_dag)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))
