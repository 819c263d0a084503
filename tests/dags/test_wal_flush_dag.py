"""The wal_flush DAG through dag.test() against the real stack: inline and Spark, and a
run held by a paused pchannel that completes once consumption resumes."""

import threading
import time

import pytest
from dag_helpers import WAL_SCHEMA, load_dag, task_states, wal_ingest

from seglake.meta.segments import FLUSHED
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import set_pause
from seglake.lifecycle.verify import segment_rows

pytestmark = pytest.mark.airflow


def _ingest(meta, store, settings):
    return wal_ingest(meta, store, settings, "w1", 200, deletes=[1, 2, 3])


@pytest.mark.parametrize("engine", ["inline", pytest.param("spark", marks=pytest.mark.spark)])
def test_wal_flush_dag_flushes_every_pchannel_once(airflow_env, meta, store, engine):
    coll = _ingest(meta, store, airflow_env)
    dag = load_dag("wal_flush")
    run = dag.test(run_conf={"engine": engine, "flush_all": True})
    states = task_states(run)
    assert run.state == "success", states
    assert states[f"flush_{engine}"] == "success" and states["summary"] == "success"
    assert segment_rows(meta, store, coll.collection_id, [FLUSHED])[0] == list(range(1, 201))
    run = dag.test(run_conf={"engine": engine, "flush_all": True})   # again: nothing new
    assert run.state == "success"
    assert segment_rows(meta, store, coll.collection_id, [FLUSHED])[0] == list(range(1, 201))


def test_wal_flush_dag_waits_while_paused_then_completes(airflow_env, meta, store):
    coll = _ingest(meta, store, airflow_env)
    set_pause(meta, None, True, reason="test")
    released = []

    def resume():
        time.sleep(4)
        assert list(meta.segments.list(coll.collection_id)) == []     # nothing flushed while paused
        released.append(True)
        set_pause(meta, None, False)

    t = threading.Thread(target=resume)
    t.start()
    try:
        run = load_dag("wal_flush").test(run_conf={"engine": "inline", "flush_all": True})
    finally:
        t.join()
        set_pause(meta, None, False)
    assert released and run.state == "success", task_states(run)
    assert segment_rows(meta, store, coll.collection_id, [FLUSHED])[0] == list(range(1, 201))


def test_bad_conf_is_refused_before_any_run(airflow_env):
    from airflow.sdk.definitions.param import ParamValidationError

    for bad in ({"pchannel": "seglake-dml_99"}, {"engine": "fast"}, {"max_seconds": -1}):
        with pytest.raises(ParamValidationError):
            load_dag("wal_flush").test(run_conf=bad)


@pytest.mark.spark
def test_a_spark_flush_killed_mid_way_then_rerun_is_exactly_once(airflow_env, meta, store):
    """The executor's Python worker is SIGKILLed after its 2nd commit (fault point
    flush.after_commit): the job fails half done; an inline DAG run finishes the work,
    every row exactly once."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    s = airflow_env.replace(flush_seal_rows=40)
    with WalClient(meta, store, s) as c:
        coll = c.create_collection("w1", WAL_SCHEMA, shards=1)
        for i in range(5):
            c.insert("w1", synthetic_rows(coll, 50, 1 + 50 * i))
    p = coll.vchannels[0].rsplit("_", 1)[0]
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, **s.to_env(), "SEGLAKE_FAULTS": "flush.after_commit:kill@2",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
           "--conf", "spark.ui.enabled=false", str(repo / "spark" / "jobs" / "flush_wal.py"),
           "--pchannels", p, "--report-key", "_reports/wal_flush/killed.json", "--flush-all", "1"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    half = segment_rows(meta, store, coll.collection_id, [FLUSHED])[0]
    assert 0 < len(half) < 250 and len(half) == len(set(half))
    run = load_dag("wal_flush").test(run_conf={"engine": "inline", "flush_all": True, "pchannel": p})
    assert run.state == "success", task_states(run)
    assert segment_rows(meta, store, coll.collection_id, [FLUSHED])[0] == list(range(1, 251))


def test_wal_flush_dag_with_no_log_succeeds_doing_nothing(airflow_env, meta):
    run = load_dag("wal_flush").test(run_conf={"engine": "inline"})
    assert run.state == "success", task_states(run)
    assert list(meta.segments.list()) == []
