"""The drop_collection DAG through dag.test() against the real stack, with the wal_flush
DAG run in between (the drop's sensor triggers nothing: wal_flush releases the vchannels)."""

import pytest
from dag_helpers import load_dag, task_states, wal_ingest

from seglake.errors import NotFound
from seglake.meta.segments import DROPPED
from seglake.lifecycle.verify import segment_rows

pytestmark = pytest.mark.airflow


def test_drop_collection_dag_through_wal_flush_to_dropped(airflow_env, meta, store):
    coll = wal_ingest(meta, store, airflow_env, "d1", 120, deletes=[1, 2])
    drop_dag = load_dag("drop_collection")
    run = drop_dag.test(run_conf={"collection": "d1", "wait_for_flush": False})
    states = task_states(run)
    assert run.state == "success", states
    assert states["finish"] == "skipped" and states["summary"] == "success"
    assert meta.catalog.get(coll.collection_id).state == "Dropping"

    run = load_dag("wal_flush").test(run_conf={"engine": "inline"})
    assert run.state == "success", task_states(run)

    run = drop_dag.test(run_conf={"collection": "d1"})   # re-run on Dropping: continues
    states = task_states(run)
    assert run.state == "success", states
    assert states["wait_released"] == "success" and states["finish"] == "success"
    assert meta.catalog.get(coll.collection_id).state == "Dropped"
    with pytest.raises(NotFound):
        meta.catalog.get_by_name("d1")
    assert all(seg.state == DROPPED and seg.dropped_at for seg in meta.segments.list(coll.collection_id))
    assert segment_rows(meta, store, coll.collection_id) == (list(range(1, 121)), [1, 2])

    run = drop_dag.test(run_conf={"collection": "d1"})   # on Dropped: reports and succeeds
    assert run.state == "success", task_states(run)


def test_drop_collection_dag_refuses_bad_conf_before_any_change(airflow_env, meta, store):
    coll = wal_ingest(meta, store, airflow_env, "d1", 0, shards=1)
    for bad in ({"colection": "d1"}, {"collection": "d1", "timeout_hours": float("nan")},
                {"collection": "d1", "timeout_hours": 10**6}, {"collection": "d1", "wait": True}):
        try:
            run = load_dag("drop_collection").test(run_conf=bad)
            assert run.state == "failed"
        except Exception:   # Airflow may refuse the Param form before the run exists
            pass
        assert meta.catalog.get(coll.collection_id).state == "Created"
