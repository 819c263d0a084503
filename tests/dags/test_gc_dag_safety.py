"""The gc DAG: a fail-closed refusal fails at once (no retries a minute apart); the dry
run's report is what the real run deletes, unrecognised keys survive both."""

import os
import time

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import gc, snapshot
from seglake.meta.segments import DROPPED
from seglake.storage import layout

pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=2, segments=2, rows=100, dim=4)


def _old(store, key, data=b"orphan"):
    store.put(key, data)
    t = time.time() - 3 * 86400
    os.utime(os.path.join(store.uri, key), (t, t))


def test_a_gc_refusal_fails_the_run_at_once(airflow_env, meta, store):
    demo.seed(meta, store, SMALL)
    rec = snapshot.create(meta, store, "demo", "s")
    key = snapshot.read_metadata(store, rec)["manifests"][0]["key"]
    store.put(key, store.get(key)[:20])  # unreadable manifest: GC must refuse
    orphan = "insert_log/1/9/9/100/1"
    _old(store, orphan)
    run = load_dag("gc").test(run_conf={"engine": "inline"})
    assert run.state == "failed" and task_states(run)["prepare"] == "failed"
    ti = next(t for t in run.get_task_instances() if t.task_id == "prepare")
    assert ti.try_number == 1  # failed at once: not retried (no timed bound: the try number says it)
    assert store.exists(orphan)


def test_gc_dag_dry_run_reports_what_the_real_run_deletes(airflow_env, meta, store):
    c, _ = demo.seed(meta, store, SMALL)
    segs = sorted(meta.segments.list(c.collection_id), key=lambda s: s.segment_id)
    meta.segments.transition([segs[0].ref], DROPPED, now=time.time() - 86400)
    orphans = [f"insert_log/{c.collection_id}/9/{i}/100/1" for i in range(3)]
    odd = ["notes/readme.txt", "insert_log/README.md", f"insert_log/{c.collection_id}/9/9/100/01"]
    for k in orphans + odd:
        _old(store, k)
    dag = load_dag("gc")
    run = dag.test(run_conf={"dry_run": True, "engine": "inline"})
    assert run.state == "success", task_states(run)
    dry = gc.latest_summary(store)
    dropped_files = {f.key for f in layout.segment_files(segs[0])}
    assert dry["candidates"] == len(orphans) + len(dropped_files) and dry["dropped"]["segments"] == 1
    assert dry["unrecognised"]["files"] == len(odd) and all(store.exists(k) for k in dropped_files)
    run = dag.test(run_conf={"dry_run": False, "engine": "inline"})
    assert run.state == "success", task_states(run)
    real = gc.latest_summary(store)
    assert real["swept"]["deleted"] == dry["candidates"] and real["swept"]["deleted_bytes"] == dry["candidate_bytes"]
    assert real["swept"]["dropped"]["segments"] == 1
    assert all(store.exists(k) for k in odd) and not any(store.exists(k) for k in orphans + sorted(dropped_files))
