"""verify_collection through dag.test() against the real stack (etcd, files, Spark)."""

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.storage import layout

pytestmark = [pytest.mark.airflow, pytest.mark.spark]
SMALL = demo.SeedParams(partitions=1, segments=3, rows=300, dim=8)





@pytest.mark.parametrize("engine, ran", [("spark", "verify.check_files"), ("inline", "verify.check_inline")])
def test_passes_on_a_good_collection_and_fails_on_a_damaged_one(airflow_env, meta, store, engine, ran):
    """The same report from either engine (auto: inline for a collection this small)."""
    coll, _ = demo.seed(meta, store, SMALL)
    dag = load_dag("verify_collection")
    run = dag.test(run_conf={"collection": coll.name, "engine": engine})
    assert run.state == "success", task_states(run)
    assert task_states(run)[ran] == "success"
    import json

    from seglake.visibility import visible_count
    (first,) = [json.loads(store.get(o.key)) for o in store.list("_reports/verify")]
    assert first["ok"] and first["visible_rows"] == visible_count(meta, store, coll.collection_id) > 0

    seg = next(meta.segments.list(coll.collection_id))
    files = list(layout.segment_files(seg))
    store.delete_many([files[0].key])                      # a deleted file
    store.put(files[2].key, store.get(files[2].key)[:100])  # a truncated file
    run = dag.test(run_conf={"collection": coll.name, "engine": engine})
    states = task_states(run)
    assert run.state == "failed"
    assert states[ran] == "success" and states["verify.summarize"] == "failed"
    reports = [o.key for o in store.list("_reports/verify")]
    latest = json.loads(store.get(sorted(reports, key=lambda k: store.head(k).mtime)[-1]))
    assert latest["problem_counts"] == {"missing": 1, "size_mismatch": 1}
    assert latest["visible_rows"] is None      # not counted over damaged files
    assert {p["key"] for p in latest["problems"]} == {files[0].key, files[2].key}


def test_bad_conf_is_refused_before_any_run(airflow_env):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="collection"):
        load_dag("verify_collection").test(run_conf={"collection": "no such-name"})
