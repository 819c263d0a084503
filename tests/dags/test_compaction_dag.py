"""compaction through dag.test() against the real stack (etcd, files; inline engine): a dry
run changes nothing, a run compacts row-exactly and its note and summary say what it
did, a bad conf is refused before any run."""

import sys
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))

pytestmark = [pytest.mark.airflow, pytest.mark.etcd]


def test_dry_run_then_run(airflow_env, meta, store, settings):
    from compaction_helpers import Writer, exact, mixed_workload, segments

    from seglake.lifecycle import compaction

    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "c", step)
    before, segs = exact(meta, store, "c"), {s.segment_id for s in segments(meta, "c")}
    conf = {"collection": "c", "min_segment_rows": 1000, "target_rows": 10000, "protection_seconds": 0,
            "engine": "inline"}
    dag = load_dag("compaction")
    run = dag.test(run_conf={**conf, "dry_run": True})
    assert run.state == "success", task_states(run)
    assert {s.segment_id for s in segments(meta, "c")} == segs
    run = dag.test(run_conf={**conf, "dry_run": False})   # explicit, as the gc DAG tests pass it
    states = task_states(run)
    assert run.state == "success", states
    assert states["compact_inline"] == "success" and states["compact_spark"] == "skipped"
    assert exact(meta, store, "c") == before
    coll = meta.catalog.get_by_name("c")
    last = compaction.last_run(meta, coll.collection_id)
    assert last["counts"]["committed"] == len(last["plan"]["units"]) > 0 and last["counts"]["lost"] == 0
    assert compaction.plan(meta, store, "c", compaction.Policy(min_segment_rows=1000, target_rows=10000,
                                                               protection=0)).units == []


def test_bad_conf_is_refused_before_any_run(airflow_env):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="delete_ratio"):
        load_dag("compaction").test(run_conf={"collection": "c", "delete_ratio": 1.5})
