"""snapshot_create keeps its PENDING record alive from the wait beside the write, and
gives up cleanly (the wait fails at once, GC may reclaim) when the write fails for good."""

import time

import pytest
from dag_helpers import load_dag, task_states

from seglake import faults
from seglake.dev import demo
from seglake.lifecycle import gc, snapshot

pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=1, segments=2, rows=50, dim=4)


def test_a_write_that_fails_for_good_fails_the_wait_and_leaves_a_reclaimable_record(airflow_env, meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    dag = load_dag("snapshot_create")
    for t in dag.tasks:
        t.retries = 0  # no 10 s retry delays in the test
    with faults.inject("snapshot.after_manifests"):
        run = dag.test(run_conf={"collection": coll.name, "name": "doomed", "engine": "inline"})
    states = task_states(run)
    assert run.state == "failed", states
    assert states["write_inline"] == "failed" and states["give_up"] == "success"
    assert states["wait_committed"] == "failed" and states["report"] == "upstream_failed"
    rec, _ = meta.snapshots.get(coll.collection_id, "doomed")
    assert rec.state == "PENDING" and rec.failed and "injected fault" in rec.error
    status, message = snapshot.keep_alive_status(meta, coll.collection_id, "doomed", rec.snapshot_id)
    assert status == "error" and "injected fault" in message
    # nobody beats any more: GC reclaims it after the timeout, files first claimed
    assert gc.clean_records(meta, store, gc.GCOptions(), now=time.time() + 3600)["stale_pending_snapshots"] == 1
    assert meta.snapshots.find(coll.collection_id, "doomed") is None and list(store.list("snapshots")) == []


def test_the_wait_refreshes_the_heartbeat_while_the_write_has_not_started(airflow_env, meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    rec = snapshot.begin(meta, coll.name, "queued", now=time.time() - 7200)  # e.g. Spark pool full for 2 h
    dag = load_dag("snapshot_create")
    wait = dag.get_task("wait_committed")
    assert wait.mode == "reschedule" and not wait.upstream_task_ids - {"begin"}  # beside the write
    before = meta.snapshots.last_beat(rec)[0]
    status, _ = snapshot.keep_alive_status(meta, coll.collection_id, "queued", rec.snapshot_id, by="dag run x")
    assert status == "waiting" and meta.snapshots.last_beat(rec)[0] > before + 7000
    assert gc.clean_records(meta, store, gc.GCOptions()).get("stale_pending_snapshots", 0) == 0
    assert meta.snapshots.get(coll.collection_id, "queued")[0].state == "PENDING"
