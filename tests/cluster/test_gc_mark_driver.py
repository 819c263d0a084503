"""The Spark GC mark keeps the rows out of the driver (issue 13 item 2: "the driver holds
only counts"), on the standalone cluster: the driver runs in this process, the executors
on the workers. Spark's adaptive execution turns a shuffled join into a broadcast join
when one side measures under 10 MB at run time, and a broadcast join first COLLECTS that
side into the driver: every referenced path at 10^5 objects. The mark must plan none:
every SQL execution of the run, as the driver's own REST API lists it, has joins and no
broadcast node."""

import json
import sys
import urllib.request
from pathlib import Path

import pytest
from fault_harness import seed_and_snapshot

from seglake.devstack import free_port
from seglake.lifecycle import gc
from seglake.storage import layout

pytestmark = [pytest.mark.cluster, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[2]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_the_spark_mark_on_the_cluster_broadcasts_nothing_through_the_driver(cluster, csettings, cmeta, cstore,
                                                                              monkeypatch):
    from pyspark.sql import SparkSession

    sys.path.insert(0, str(REPO / "spark" / "jobs"))
    import gc_scan

    assert SparkSession.getActiveSession() is None, "another session would be reused with its own master"
    coll, _ = seed_and_snapshot(cmeta, cstore)
    orphans = [layout.insert_log(coll.collection_id, coll.partitions[0].partition_id, 900_000_000 + i, 100, 1)
               for i in range(3)]
    for key in orphans:
        cstore.put(key, b"orphan")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    port = free_port()
    spark = (SparkSession.builder.master(cluster.spark_master_url).appName("test-gc-mark-driver")
             .config("spark.ui.enabled", "true").config("spark.ui.port", str(port))
             .config("spark.port.maxRetries", "0").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    try:
        sc = spark.sparkContext
        assert sc.master == cluster.spark_master_url
        opts = gc.GCOptions.from_settings(csettings, force=True, dry_run=True, missing_tolerance=0.0)
        m = gc_scan.spark_mark(spark, cmeta, cstore, opts, "gc-driver-test", csettings.to_env())
        assert m.counts.candidates == len(orphans)
        base = f"http://127.0.0.1:{port}/api/v1/applications/{sc.applicationId}"
        executions = _get(f"{base}/sql?details=true&planDescription=true&length=1000")
    finally:
        spark.stop()
    nodes = [n["nodeName"] for e in executions for n in e.get("nodes", [])]
    plans = " ".join(e.get("planDescription", "") for e in executions)
    joins = [n for n in nodes if "Join" in n]
    assert joins, f"no join in the mark's SQL executions (the check would be empty): {sorted(set(nodes))}"
    broadcast = sorted({n for n in nodes if "Broadcast" in n} | ({"(in a plan)"} if "Broadcast" in plans else set()))
    assert not broadcast, f"the mark broadcast through the driver: {broadcast}; joins {sorted(set(joins))}"
