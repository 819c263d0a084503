"""Every SparkSubmit task of every DAG runs in the `seglake_spark` pool (so restores and
GC cannot start unbounded JVMs), and every Spark job lowers Spark's own INFO logging."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow


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
def test_every_spark_job_builds_its_session_through_job_session(job):
    """Executors on a standalone cluster get the seglake env (secrets included) only
    through spark.executorEnv.* on the job's builder: every job uses the one builder
    that sets it (and lowers Spark's INFO logging), none builds its own."""
    tree = ast.parse((REPO / "spark" / "jobs" / job).read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert "SparkSession" not in names and "getOrCreate" not in attrs, \
        f"{job} builds its own SparkSession: use seglake.sparksession.job_session"
    assert "job_session" in names, f"{job} has no Spark session"


def test_job_session_sets_executor_env_and_lowers_logging():
    tree = ast.parse((REPO / "include" / "seglake" / "sparksession.py").read_text())
    calls = [n.func.attr for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert calls.index("getOrCreate") < calls.index("setLogLevel")


def test_executor_env_conf_carries_every_seglake_variable_and_resolves_the_secrets_file(tmp_path):
    import json

    from seglake.sparksession import executor_env_conf

    secrets = tmp_path / "s.json"
    secrets.write_text(json.dumps({"s3_secret_key": "sk-1"}))
    conf = executor_env_conf({"SEGLAKE_CONFIG": "{}", "SEGLAKE_FAULTS": "x:sleep=1", "SEGLAKE_SECRETS_FILE": str(secrets),
                              "PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "other"})
    assert conf == {"spark.executorEnv.SEGLAKE_CONFIG": "{}", "spark.executorEnv.SEGLAKE_FAULTS": "x:sleep=1",
                    "spark.executorEnv.SEGLAKE_S3_SECRET_KEY": "sk-1"}


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
