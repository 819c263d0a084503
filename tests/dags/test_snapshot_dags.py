"""snapshot_create / snapshot_drop through dag.test() against the real stack, on both
engines; the state trigger against real etcd; bad conf refused before any run."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import snapshot

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=2, segments=3, rows=200, dim=8)





@pytest.mark.parametrize("engine", ["inline", pytest.param("spark", marks=pytest.mark.spark)])
def test_create_then_drop_through_the_dags(airflow_env, meta, store, engine):
    coll, _ = demo.seed(meta, store, SMALL)
    run = load_dag("snapshot_create").test(run_conf={"collection": coll.name, "name": f"s_{engine}",
                                                 "description": "dag", "ttl_hours": 2, "engine": engine})
    states = task_states(run)
    assert run.state == "success", states
    assert states[f"write_{engine}"] == "success"
    assert states["write_spark" if engine == "inline" else "write_inline"] == "skipped"
    rec, _ = meta.snapshots.get(coll.collection_id, f"s_{engine}")
    assert rec.state == "COMMITTED" and rec.segments == 6 and rec.rows == 1200 and rec.expires_at
    assert {s.segment_id for s in snapshot.read_segments(store, rec)} == \
        {s.segment_id for s in meta.segments.list(coll.collection_id)}

    run = load_dag("snapshot_drop").test(run_conf={"collection": coll.name, "name": f"s_{engine}"})
    assert run.state == "success", task_states(run)
    assert meta.snapshots.find(coll.collection_id, f"s_{engine}") is None
    assert list(store.list("snapshots")) == []


def test_create_of_a_duplicate_name_fails_without_retries_or_side_effects(airflow_env, meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, coll.name, "taken")
    before = sorted(o.key for o in store.list("snapshots"))
    run = load_dag("snapshot_create").test(run_conf={"collection": coll.name, "name": "taken", "engine": "inline"})
    states = task_states(run)
    assert run.state == "failed" and states["begin"] == "failed"
    assert sorted(o.key for o in store.list("snapshots")) == before


def test_a_drop_whose_first_attempt_died_after_removing_the_snapshot_ends_green(airflow_env, meta, store,
                                                                               monkeypatch):
    """The first attempt removed the snapshot and died before it could record so; its retry
    finds it gone while the run's intent key names it: the run is the drop's outcome
    (success, saying so), not a NotFound. A new run that finds no such snapshot still fails
    (an unknown name)."""
    from datetime import timedelta

    from seglake import runinfo

    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, coll.name, "once")
    monkeypatch.setenv("SEGLAKE_FAULTS", "snapshot.drop_after_record:raise@1")   # dag.test: one process
    dag = load_dag("snapshot_drop")
    dag.get_task("drop").retry_delay = timedelta(0)
    run = dag.test(run_conf={"collection": coll.name, "name": "once"})
    tis = {ti.task_id: ti for ti in run.get_task_instances()}
    assert run.state == "success", task_states(run)
    assert tis["drop"].try_number == 2 and meta.snapshots.find(coll.collection_id, "once") is None
    result = tis["drop"].xcom_pull(task_ids="drop")
    assert result["already"] is True and result["files_removed"] == 0
    assert "by this run's earlier try" in runinfo.result_note("snapshot_drop", {"collection": coll.name, "name": "once"},
                                                              result)

    monkeypatch.delenv("SEGLAKE_FAULTS")
    run = load_dag("snapshot_drop").test(run_conf={"collection": coll.name, "name": "once"})
    assert run.state == "failed" and task_states(run)["drop"] == "failed"


def test_drop_of_a_pending_snapshot_fails_and_changes_nothing(airflow_env, meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.begin(meta, coll.name, "half")
    run = load_dag("snapshot_drop").test(run_conf={"collection": coll.name, "name": "half"})
    assert run.state == "failed"
    assert meta.snapshots.get(coll.collection_id, "half")[0].state == "PENDING"


@pytest.mark.parametrize("dag_id,conf,param", [
    ("snapshot_create", {"collection": "demo", "name": "bad name"}, "name"),
    ("snapshot_create", {"collection": "demo", "name": "ok", "ttl_hours": "soon"}, "ttl_hours"),
    ("snapshot_create", {"collection": "demo", "name": "ok", "ttl_hours": -1}, "ttl_hours"),
    ("snapshot_create", {"collection": "demo", "name": "ok", "engine": "gpu"}, "engine"),
    ("snapshot_drop", {"collection": 5, "name": "x"}, "collection"),
])
def test_wrong_typed_conf_is_refused_before_any_run(airflow_env, meta, dag_id, conf, param):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match=param):
        load_dag(dag_id).test(run_conf=conf)
    assert meta.kv.count(meta.keys.prefix) == 0


def test_state_trigger_fires_on_commit_and_on_failure(airflow_env, meta, store):
    from seglake_airflow.triggers.state import SeglakeStateTrigger

    coll, _ = demo.seed(meta, store, SMALL)
    rec = snapshot.begin(meta, coll.name, "trig")
    kwargs = {"collection": coll.name, "snapshot": "trig", "db": "default", "target_state": "COMMITTED"}
    trigger = SeglakeStateTrigger("snapshot_state", kwargs, poll_interval=0.1)

    async def first_event():
        async def commit_soon():
            await asyncio.sleep(0.5)
            await asyncio.to_thread(snapshot.write_all, meta, store, rec)
        task = asyncio.create_task(commit_soon())
        event = await asyncio.wait_for(trigger.run().__anext__(), 30)
        await task
        return event

    event = asyncio.run(first_event())
    assert event.payload["status"] == "success" and "COMMITTED" in event.payload["message"]

    snapshot.begin(meta, coll.name, "broken")
    snapshot.record_failure(meta, meta.snapshots.get(coll.collection_id, "broken")[0], "disk on fire")
    bad = SeglakeStateTrigger("snapshot_state", {**kwargs, "snapshot": "broken"}, poll_interval=0.1)
    event = asyncio.run(asyncio.wait_for(bad.run().__anext__(), 30))
    assert event.payload == {"status": "error", "message": "snapshot 'broken' failed while PENDING: disk on fire"}


def test_every_trigger_serializes_and_imports_in_a_fresh_interpreter():
    from seglake_airflow.triggers.state import SeglakeStateTrigger

    classpath, kwargs = SeglakeStateTrigger("snapshot_state", {"collection": "c", "snapshot": "s"}).serialize()
    code = ("import importlib, json, sys; mod, cls = sys.argv[1].rsplit('.', 1);"
            "T = getattr(importlib.import_module(mod), cls); t = T(**json.loads(sys.argv[2]));"
            "print(json.dumps(t.serialize()[1]))")
    out = subprocess.run([sys.executable, "-c", code, classpath, json.dumps(kwargs)], capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(REPO / "plugins"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == json.loads(json.dumps(kwargs))
