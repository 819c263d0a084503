"""The same DAGs on the scale-out cluster (issue 13 item 1): seed -> snapshot ->
restore (copy + verify) -> GC dry run through dag.test(), engine=spark for every step,
against 3 etcd members, SeaweedFS S3 and the Spark standalone master with 2 workers --
configured only through the cluster's connection profile (AIRFLOW_CONN_* env)."""

import time

import pytest
from dag_helpers import load_dag, task_states

from seglake import demo
from seglake.lifecycle import gc, verify
from seglake.meta.snapshots import COMMITTED
from seglake.storage import layout

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.airflow]
SMALL = demo.SeedParams(partitions=2, segments=3, rows=300, dim=8)  # 6 segments, 6 x 300 rows


def _run(dag_id: str, conf: dict, timings: dict, label: str):
    t0 = time.time()
    run = load_dag(dag_id).test(run_conf=conf)
    timings[label] = round(time.time() - t0, 1)
    assert run.state == "success", f"{dag_id}: {task_states(run)}"
    return task_states(run)


def test_seed_snapshot_restore_verify_gc_on_the_standalone_cluster(cluster_airflow, cmeta, cstore, csettings):
    cluster, timings = cluster_airflow, {}
    assert csettings.etcd_endpoint.count(",") == 2 and cstore.uri.startswith("s3://")
    before = {a["id"] for a in cluster.spark_apps()}

    coll, _ = demo.seed(cmeta, cstore, SMALL)
    _run("snapshot_create", {"collection": "demo", "name": "s1", "engine": "spark"}, timings, "snapshot")
    snap = cmeta.snapshots.get(coll.collection_id, "s1")[0]
    assert snap.state == COMMITTED and snap.segments == 6 and snap.rows == 1800

    states = _run("snapshot_restore", {"collection": "demo", "snapshot": "s1", "target": "r1", "engine": "spark"},
                  timings, "restore")
    assert states["copy_job.copy_spark"] == "success" and states["verify.summarize"] == "success"
    assert states["compare"] == "success"
    target = cmeta.catalog.get_by_name("r1")
    job = next(j for j in cmeta.copyjobs.list() if j.target_collection == "r1")
    assert job.state == "Completed" and job.total_rows == 1800
    report = verify.verify_collection(cmeta, cstore, "r1")  # and again from here, inline
    assert report["ok"] and report["rows"] == 1800, report

    # an orphan that parses as seglake's own layout: the dry run must report it, delete nothing
    orphan = layout.insert_log(coll.collection_id, coll.partitions[0].partition_id, 999_999_999, demo.PK, 1)
    cstore.put(orphan, b"orphan")
    _run("gc", {"dry_run": True, "engine": "spark", "force": True, "missing_tolerance_hours": 0}, timings, "gc")
    summary = gc.latest_summary(cstore)
    assert summary["dry_run"] and summary["candidates"] == 1 and summary["candidate_bytes"] == len(b"orphan")
    assert cstore.head(orphan) is not None
    assert verify.verify_collection(cmeta, cstore, "demo")["ok"] and verify.verify_collection(cmeta, cstore, "r1")["ok"]
    assert target.state != "Dropped"

    # where it ran: every Spark step was an application of the standalone master, with
    # executors started by the cluster's workers
    apps = [a for a in cluster.spark_apps() if a["id"] not in before]
    names = [a["name"] for a in apps]
    for prefix in ("seglake-snapshot-", "seglake-copy-", "seglake-verify-", "seglake-gc-scan-"):
        assert any(n.startswith(prefix) for n in names), (prefix, names)
    worker_hosts = {f"127.0.0.1:{w.ports['rpc']}" for w in cluster.spark_workers}
    for a in apps:
        assert a["executors"] and {e["host"] for e in a["executors"]} <= worker_hosts, a
    assert {e["host"] for a in apps for e in a["executors"]} == worker_hosts  # both workers ran executors
    print(f"\ncluster smoke: {timings} s; apps: " + "; ".join(
        f"{a['id']} {a['name']} on {sorted({e['host'] for e in a['executors']})}" for a in apps))
