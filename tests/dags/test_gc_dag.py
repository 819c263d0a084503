"""The gc DAG through dag.test() against the real stack, on both engines."""

import os
import time
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

from seglake import demo
from seglake.lifecycle import gc, snapshot

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=2, segments=2, rows=100, dim=4)





def _seed_with_orphans(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s")
    orphans = [f"insert_log/{coll.collection_id}/9/{i}/100/1" for i in range(3)] + ["index_files/1/1/9/9/x"]
    for k in orphans:
        store.put(k, b"orphan")
        t = time.time() - 3 * 86400
        os.utime(os.path.join(store.uri, k), (t, t))
    young = f"delta_log/{coll.collection_id}/9/9/1"
    store.put(young, b"young")
    return coll, orphans, young


@pytest.mark.parametrize("engine", ["inline", pytest.param("spark", marks=pytest.mark.spark)])
def test_gc_dag_dry_run_then_real_run(airflow_env, meta, store, engine):
    coll, orphans, young = _seed_with_orphans(meta, store)
    referenced = gc.load_references(meta, store).files
    dag = load_dag("gc")
    run = dag.test(run_conf={"dry_run": True, "engine": engine})
    states = task_states(run)
    assert run.state == "success", states
    assert states[f"mark_{engine}"] == "success" and states["sweep"] == "skipped"
    assert states["records"] == "skipped" and states["summary"] == "success"
    assert all(store.exists(k) for k in orphans)
    dry = gc.latest_summary(store)
    assert dry["candidates"] == 4 and dry["swept"] is None

    run = dag.test(run_conf={"dry_run": False, "engine": engine})
    assert run.state == "success", task_states(run)
    assert not any(store.exists(k) for k in orphans)
    assert store.exists(young) and all(store.exists(k) for k in referenced)
    assert gc.latest_summary(store)["swept"]["deleted"] == 4


def test_gc_dag_refuses_a_tolerance_below_the_floor(airflow_env, meta, store):
    coll, orphans, _ = _seed_with_orphans(meta, store)
    run = load_dag("gc").test(run_conf={"missing_tolerance_hours": 0.1})
    assert run.state == "failed" and task_states(run)["prepare"] == "failed"
    assert all(store.exists(k) for k in orphans)
    assert list(store.list("_gc")) == []


def test_gc_dag_bad_conf(airflow_env, meta):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="dry_run"):
        load_dag("gc").test(run_conf={"dry_run": "maybe"})
    with pytest.raises(ParamValidationError, match="collection"):
        load_dag("gc").test(run_conf={"collection": "no-such name"})
