"""Backup and disaster recovery on the scale-out cluster (issue 19): snapshot (Spark) ->
export to a second S3 bucket with its own connection (`seglake_backup`) -> verify the
bundle on the Spark standalone cluster -> restore from the bundle (copy job on Spark) ->
equal visible rows; the scheduled export of a retention policy to the same target.
Configured only through the cluster's connection profile plus the backup connection."""

import json
import time

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import retention
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import verify
from seglake.storage.s3 import S3Store
from seglake.visibility import visible_rows

pytestmark = [pytest.mark.cluster, pytest.mark.spark, pytest.mark.airflow]
SMALL = demo.SeedParams(name="bk", partitions=2, segments=3, rows=300, dim=8)


def _run(dag_id: str, conf: dict, timings: dict):
    t0 = time.time()
    run = load_dag(dag_id).test(run_conf=conf)
    timings[dag_id] = round(time.time() - t0, 1)
    assert run.state == "success", f"{dag_id}: {task_states(run)}"
    return task_states(run)


def _rows(meta, store, name):
    t = visible_rows(meta, store, meta.catalog.get_by_name(name).collection_id, columns=["price"])
    return sorted(zip(t.column("pk").to_pylist(), t.column("price").to_pylist()))


def test_export_verify_restore_from_a_bundle_on_the_cluster(cluster_airflow, cmeta, cstore, csettings,
                                                            root_prefix, monkeypatch):
    cluster, timings = cluster_airflow, {}
    bucket = f"{cluster.state['bucket']}-backup"
    target = S3Store(f"s3://{bucket}/{root_prefix}", endpoint=csettings.s3_endpoint,
                     access_key=csettings.s3_access_key, secret_key=csettings.s3_secret_key)
    target.ensure_bucket()
    monkeypatch.setenv("AIRFLOW_CONN_SEGLAKE_BACKUP", json.dumps({
        "conn_type": "aws", "login": csettings.s3_access_key, "password": csettings.s3_secret_key,
        "extra": {"endpoint_url": csettings.s3_endpoint}}))
    variable = json.loads(cluster.airflow_env(root=root_prefix, prefix=root_prefix)["AIRFLOW_VAR_SEGLAKE_CONFIG"])
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({**variable, "backup_uri": target.uri}))

    demo.seed(cmeta, cstore, SMALL)
    want = _rows(cmeta, cstore, "bk")
    _run("snapshot_create", {"collection": "bk", "name": "s1", "engine": "spark"}, timings)
    _run("snapshot_export", {"collection": "bk", "snapshot": "s1", "bundle": "b1"}, timings)
    assert [b["bundle"] for b in bundles.list_bundles(target)] == ["b1"]

    states = _run("snapshot_verify", {"collection": "bk", "bundle": "b1", "engine": "spark"}, timings)
    assert states["check_spark"] == "success", states
    rec = verify.recorded(cmeta, "default", "bk", "b1")
    assert rec["ok"] and rec["engine"] == "spark" and rec["data_files"] > 0

    states = _run("snapshot_restore_external", {"collection": "bk", "bundle": "b1", "target": "bk_dr",
                                                "engine": "spark"}, timings)
    assert states["copy_job.copy_spark"] == "success", states
    assert _rows(cmeta, cstore, "bk_dr") == want

    # the scheduled export: a policy with export keeps its snapshot in the target too
    retention.set_policy(cmeta, "bk", {"keep_last": 1, "export": True})
    _run("snapshot_schedule", {"collection": "bk"}, timings)
    (sched,) = [r.name for r in cmeta.snapshots.list(cmeta.catalog.get_by_name("bk").collection_id)
                if retention.is_schedules(r)]
    assert {b["bundle"] for b in bundles.list_bundles(target)} == {"b1", sched}
    print(f"\ncluster backup: {timings} s")
