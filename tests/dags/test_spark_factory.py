"""Every Spark task of every DAG comes from the one factory (operators.spark.spark_submit_task):
same pool, connection, application path and name scheme, settings and secrets by the
environment only; the task ids of the DAGs are unchanged by it."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow

# (dag_id, task_id) -> the spark/jobs module it runs: the DAGs' Spark tasks before the factory
SPARK_TASKS = {
    ("gc", "mark_spark"): "gc_scan",
    ("gc", "sweep_spark"): "gc_sweep",
    ("snapshot_create", "write_spark"): "write_manifests",
    ("wal_flush", "flush_spark"): "flush_wal",
    ("verify_collection", "verify.check_files"): "verify_collection",
    ("snapshot_restore", "copy_job.copy_spark"): "copy_segments",
    ("snapshot_restore", "verify.check_files"): "verify_collection",
    ("snapshot_restore_external", "copy_job.copy_spark"): "copy_segments",
    ("snapshot_restore_external", "verify.check_files"): "verify_collection",
    ("collection_undrop", "copy_job.copy_spark"): "copy_segments",
    ("collection_undrop", "verify.check_files"): "verify_collection",
    ("copy_segment_job", "copy_job.copy_spark"): "copy_segments",
    ("copy_segment_job", "verify.check_files"): "verify_collection",
    ("snapshot_verify", "check_spark"): "verify_bundle",
    ("compaction", "compact_spark"): "compact",
    ("milvus_backup", "capture_spark"): "milvus_capture",
}


@pytest.fixture(scope="module")
def dagbag(airflow_home):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert not bag.import_errors, bag.import_errors
    return bag


def test_every_spark_task_is_the_factorys(dagbag):
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from seglake_airflow.operators.spark import SPARK_CONN_ID, SPARK_POOL, SeglakeSparkSubmitOperator

    seen = {}
    for dag_id, dag in dagbag.dags.items():
        for t in dag.tasks:
            if isinstance(t, SparkSubmitOperator):
                seen[(dag_id, t.task_id)] = t
    assert set(seen) == set(SPARK_TASKS)
    for key, t in seen.items():
        job = SPARK_TASKS[key]
        assert type(t) is SeglakeSparkSubmitOperator, key
        assert t.pool == SPARK_POOL and t._conn_id == SPARK_CONN_ID, key
        assert Path(t.application) == REPO / "spark" / "jobs" / f"{job}.py" and Path(t.application).is_file(), key
        assert t.name == "seglake-" + job.replace("_", "-"), key
        assert not t.env_vars and not t.conf, key           # filled at execute time, from the settings
        argv = " ".join(t.application_args)
        assert "SEGLAKE" not in argv and "secret" not in argv.lower() and "password" not in argv.lower(), key


def test_no_dag_builds_a_spark_task_by_hand():
    """One factory: a DAG file or task group that builds the operator itself repeats the pool,
    connection and path (the duplication this replaced)."""
    files = sorted((REPO / "dags").glob("*.py")) + [REPO / "plugins" / "seglake_airflow" / "taskgroups.py"]
    direct = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in ("SeglakeSparkSubmitOperator", "SparkSubmitOperator"):
                    direct.append(f"{f.name}:{node.lineno}")
    assert not direct, direct


def test_the_factory_refuses_an_unknown_job_and_its_own_settings(airflow_home):
    from seglake_airflow.operators.spark import spark_submit_task

    with pytest.raises(ValueError, match="no Spark job 'gc_scna'.*did you mean 'gc_scan'"):
        spark_submit_task("t", "gc_scna", [])
    with pytest.raises(TypeError, match="'pool'"):
        spark_submit_task("t", "gc_scan", [], pool="default_pool")
