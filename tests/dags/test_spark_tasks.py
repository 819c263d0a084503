"""Every SparkSubmit task of every DAG runs in the `seglake_spark` pool (so restores and
GC cannot start unbounded JVMs), and every Spark job lowers Spark's own INFO logging."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def dagbag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_every_spark_submit_task_is_in_the_spark_pool(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    seen = []
    for dag_id, dag in dagbag.dags.items():
        for t in dag.tasks:
            if isinstance(t, SparkSubmitOperator):
                seen.append(f"{dag_id}.{t.task_id}")
                assert t.pool == "seglake_spark", f"{dag_id}.{t.task_id} runs in pool {t.pool!r}"
    assert "verify_collection.verify.check_files" in seen and len(seen) >= 5, seen


@pytest.mark.parametrize("job", sorted(p.name for p in (REPO / "spark" / "jobs").glob("*.py")))
def test_every_spark_job_lowers_spark_logging(job):
    """The session's log level is set right after the session is created."""
    tree = ast.parse((REPO / "spark" / "jobs" / job).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    if not any(c.func.attr == "getOrCreate" for c in calls):
        pytest.skip("no Spark session in this module")
    levels = [c for c in calls if c.func.attr == "setLogLevel"]
    assert levels, f"{job} leaves Spark at INFO"


@pytest.mark.parametrize("value,expected", [("none", None), ("@hourly", "@hourly")])
def test_scheduled_dags_accept_the_schedules_the_config_accepts(airflow_home, monkeypatch, value, expected):
    """SEGLAKE_WAL_FLUSH_SCHEDULE=none (valid config) made wal_flush fail to parse (found by the e2e)."""
    from airflow.dag_processing.dagbag import DagBag

    for key, dag_id in (("SEGLAKE_WAL_FLUSH_SCHEDULE", "wal_flush"), ("SEGLAKE_GC_SCHEDULE", "gc")):
        monkeypatch.setenv(key, value)
        bag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py"))
        assert not bag.import_errors, bag.import_errors
        manual = type(bag.dags[dag_id].timetable).__name__ == "NullTimetable"
        assert manual == (expected is None), (dag_id, bag.dags[dag_id].timetable)
