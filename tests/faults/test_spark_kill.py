"""The Spark copy engine SIGKILLed at 10%, then at 50%, then at 90% of the copy (each
kill a fresh spark-submit of spark/jobs/copy_segments.py resuming the last), then
re-driven through the copy_segment_job DAG on Spark: Completed, exact, nothing twice.

One Spark job per kill point: ~10 s each here, so the three points share one job."""

import sys

import pytest
from dag_helpers import load_dag, task_states
from fault_harness import REPO, assert_invariants, assert_restored, copy_progress, kill_when, seed_and_snapshot

from seglake.lifecycle import copyjob, restore

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def _spark_copy(spawn, settings, job_id):
    from pathlib import Path

    argv = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
            "--conf", "spark.ui.enabled=false", str(REPO / "spark" / "jobs" / "copy_segments.py"),
            "--job-id", str(job_id)]
    return spawn("spark", {}, settings, faults="copy.after_file:sleep=0.1", argv=argv,
                 extra_env={"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})


def test_spark_copy_killed_at_10_50_90_percent_is_re_driven(airflow_env, meta, store, settings, spawn):
    _, snap = seed_and_snapshot(meta, store)
    job_id = restore.restore(meta, store, "demo", "s1", "r")
    copyjob.plan(meta, job_id, 2)
    progress = copy_progress(meta, store, "r", snap.files)
    for at in (0.1, 0.5, 0.9):
        child = _spark_copy(spawn, settings, job_id)
        assert kill_when(child, progress, at, timeout=180) < 1.0
        assert meta.copyjobs.get(job_id)[0].state == "Executing"
        assert_invariants(meta, store)

    run = load_dag("copy_segment_job").test(run_conf={"job_id": job_id, "engine": "spark"})
    states = task_states(run)
    assert run.state == "success", states
    assert states["copy_job.copy_spark"] == "success"
    assert_restored(meta, store, job_id, snap)
    assert_invariants(meta, store)
