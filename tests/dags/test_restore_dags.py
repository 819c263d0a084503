"""snapshot_restore and copy_segment_job through dag.test() against the real stack:
both engines, a killed Spark job re-driven to completion, a finished job left alone."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot, verify
from seglake.storage import layout

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=2, segments=4, rows=200, dim=8)


def _target_keys(meta, store, coll_id):
    keys = [o.key for p in layout.collection_prefixes(coll_id) for o in store.list(p)]
    for s in meta.segments.list(coll_id):
        for d in {layout.index_dir(f.build_id, f.version, s.partition_id, s.segment_id) for f in s.index_files}:
            keys += [o.key for o in store.list(d)]
    return sorted(keys)


def _expected_keys(meta, coll_id):
    return sorted(f.key for s in meta.segments.list(coll_id) for f in layout.segment_files(s))


@pytest.fixture
def snap(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    return coll


@pytest.mark.parametrize("engine", ["inline", pytest.param("spark", marks=pytest.mark.spark)])
def test_restore_dag_restores_verifies_and_compares(airflow_env, meta, store, snap, engine):
    run = load_dag("snapshot_restore").test(run_conf={"collection": "demo", "snapshot": "s1",
                                                  "target": f"r_{engine}", "engine": engine})
    states = task_states(run)
    assert run.state == "success", states
    assert states[f"copy_job.copy_{engine}"] == "success"
    assert states["verify.summarize"] == "success" and states["compare"] == "success"
    target = meta.catalog.get_by_name(f"r_{engine}")
    job = next(meta.copyjobs.list())
    assert job.state == "Completed" and job.total_rows == 1600
    assert _target_keys(meta, store, target.collection_id) == _expected_keys(meta, target.collection_id)


def test_a_killed_spark_copy_is_re_driven_to_completion(airflow_env, meta, store, snap, settings):
    job_id = restore.restore(meta, store, "demo", "s1", "killed")
    copyjob.plan(meta, job_id, 2)
    job = meta.copyjobs.get(job_id)[0]
    env = {**os.environ, **settings.to_env(), "SEGLAKE_FAULTS": "copy.after_file:sleep=0.1",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
           "--conf", "spark.ui.enabled=false", str(REPO / "spark" / "jobs" / "copy_segments.py"),
           "--job-id", str(job_id)]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    try:
        while time.time() < deadline:
            copied = len(_target_keys(meta, store, job.target_collection_id))
            if copied >= job.total_files // 2:
                break
            assert proc.poll() is None, "the Spark job ended before it could be killed"
            time.sleep(0.1)
        else:
            pytest.fail("the Spark copy never reached half of the files")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert len(_target_keys(meta, store, job.target_collection_id)) < job.total_files
    assert meta.copyjobs.get(job_id)[0].state == "Executing"

    run = load_dag("copy_segment_job").test(run_conf={"job_id": job_id, "engine": "inline"})
    assert run.state == "success", task_states(run)
    job = meta.copyjobs.get(job_id)[0]
    assert job.state == "Completed"
    assert [t.task_id for t in meta.copyjobs.tasks(job_id)] == list(range(job.total_tasks))
    assert _target_keys(meta, store, job.target_collection_id) == _expected_keys(meta, job.target_collection_id)
    assert verify.verify_collection(meta, store, "killed")["ok"]


def test_copy_segment_job_on_a_finished_job_changes_nothing(airflow_env, meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "done")
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id)
    copyjob.finalize(meta, job_id)
    before = (meta.copyjobs.get(job_id)[0], meta.copyjobs.tasks(job_id))
    run = load_dag("copy_segment_job").test(run_conf={"job_id": job_id})
    assert run.state == "success", task_states(run)
    assert task_states(run)["copy_job.copy_inline"] == "skipped"
    assert (meta.copyjobs.get(job_id)[0], meta.copyjobs.tasks(job_id)) == before


def test_copy_segment_job_without_an_engine_keeps_the_jobs_own(airflow_env, meta, store, snap, monkeypatch):
    """A re-drive with no engine uses the one the restore recorded, not `auto` (which,
    with a zero inline threshold, would pick Spark)."""
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({"store_uri": airflow_env.store_uri,
                                                                 "inline_threshold_bytes": 0}))
    job_id = restore.restore(meta, store, "demo", "s1", "kept", engine="inline")
    run = load_dag("copy_segment_job").test(run_conf={"job_id": job_id})
    assert run.state == "success", task_states(run)
    states = task_states(run)
    assert states["copy_job.copy_inline"] == "success" and states["copy_job.copy_spark"] == "skipped", states
    assert meta.copyjobs.get(job_id)[0].state == "Completed"


def test_a_failing_restore_rolls_back_and_fails_the_run(airflow_env, meta, store, snap):
    seg = next(meta.segments.list(snap.collection_id))
    store.delete_many([next(layout.segment_files(seg)).key])
    run = load_dag("snapshot_restore").test(run_conf={"collection": "demo", "snapshot": "s1", "target": "bad",
                                                  "engine": "inline"})
    assert run.state == "failed"
    assert task_states(run)["copy_job.finalize"] == "failed"
    job = next(meta.copyjobs.list())
    assert job.state == "Failed" and "source file missing" in job.reason
    assert [c.name for c in meta.catalog.list()] == ["demo"]


@pytest.mark.parametrize("dag_id,conf,param", [
    ("snapshot_restore", {"collection": "demo", "snapshot": "s1", "target": "no way"}, "target"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "s1", "target": "t", "timeout_hours": 0}, "timeout_hours"),
    ("copy_segment_job", {"job_id": "abc"}, "job_id"),
    ("copy_segment_job", {"job_id": 0}, "job_id"),
])
def test_bad_conf_is_refused_before_any_run(airflow_env, meta, dag_id, conf, param):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match=param):
        load_dag(dag_id).test(run_conf=conf)
    assert meta.kv.count(meta.keys.copy_jobs_prefix()) == 0


def test_a_killed_restore_is_resumed_by_re_triggering_the_same_conf(airflow_env, meta, store, snap, settings):
    """The restore task is SIGKILLed between the target and the job; a NEW run with the
    same conf resumes the same target and job to completion (no "already exists")."""
    env = {**os.environ, **settings.to_env(), "SEGLAKE_FAULTS": "restore.before_job_txn:kill"}
    code = ("from seglake.config import Settings; from seglake.meta import Meta; "
            "from seglake.storage import open_store; from seglake.lifecycle import restore; "
            "s = Settings.load(); restore.restore(Meta.from_settings(s), open_store(s), 'demo', 's1', 'again', "
            "owner='manual__first_run')")
    assert subprocess.run([sys.executable, "-c", code], env=env, timeout=120).returncode == -signal.SIGKILL
    target = meta.catalog.get_by_name("again")
    assert target.state == "Importing"
    run = load_dag("snapshot_restore").test(run_conf={"collection": "demo", "snapshot": "s1", "target": "again",
                                                  "engine": "inline"})
    assert run.state == "success", task_states(run)
    (job,) = list(meta.copyjobs.list())
    assert job.job_id == target.properties["restore_job_id"] and job.state == "Completed"
    again = meta.catalog.get_by_name("again")
    assert again.collection_id == target.collection_id and again.state == "Created"
    assert _target_keys(meta, store, again.collection_id) == _expected_keys(meta, again.collection_id)


def test_restore_dag_to_a_time_replays_the_log(airflow_env, meta, store, settings):
    """snapshot_restore with as_of: the base snapshot copied, the log replayed up to the
    instant, the target verified and equal to the model of the acknowledged operations."""
    sys.path.insert(0, str(REPO / "tests" / "integration" / "lifecycle" / "pitr"))
    from pitr_model import SCHEMA, Model, flush_all, rows, visible_of

    from seglake.lifecycle import pitr
    from seglake.wal.client import WalClient

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 100), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.delete("src", list(range(1, 20))), 2.0)
        model.record(c.upsert("src", rows(range(50, 60), 3.0)), 3.0)
        t = meta.tso.now()
        model.record(c.delete("src", list(range(60, 70))), 4.0)
    run = load_dag("snapshot_restore").test(run_conf={"collection": "src", "as_of": str(t), "target": "src_t",
                                                      "engine": "inline"})
    states = task_states(run)
    assert run.state == "success", states
    assert states["replay"] == "success" and states["verify.summarize"] == "success"
    target = meta.catalog.get_by_name("src_t")
    assert target.state == "Created"
    assert visible_of(meta, store, target) == model.visible(t)
