"""The same DAGs on the scale-out cluster (issue 13 item 1): seed -> snapshot ->
restore (copy + verify) -> GC dry run through dag.test(), engine=spark for every step,
against 3 etcd members, SeaweedFS S3 and the Spark standalone master with 2 workers --
configured only through the cluster's connection profile (AIRFLOW_CONN_* env)."""

import subprocess
import threading
import time
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
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


class PsSampler:
    """Samples `ps -ww -eo pid,args` (full width) every 50 ms while the DAGs run: records every command
    line holding the secret, and whether an executor JVM (started by a worker daemon,
    not by spark-submit) had the secret in its environment -- the spark.executorEnv path."""

    def __init__(self, secret: str):
        self.secret, self.leaks, self.samples = secret, [], 0
        self.executors: set[int] = set()
        self.executors_with_secret: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        want = f"SEGLAKE_S3_SECRET_KEY={self.secret}".encode()
        while not self._stop.is_set():
            out = subprocess.run(["ps", "-ww", "-eo", "pid,args", "--no-headers"], capture_output=True, text=True).stdout
            self.samples += 1
            for line in out.splitlines():
                pid, _, args = line.strip().partition(" ")
                if self.secret in args:
                    self.leaks.append(args[:300])
                if "CoarseGrainedExecutorBackend" in args and int(pid) not in self.executors_with_secret:
                    self.executors.add(int(pid))
                    try:
                        if want in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                            self.executors_with_secret.add(int(pid))
                    except OSError:
                        pass
            time.sleep(0.05)


def test_seed_snapshot_restore_verify_gc_on_the_standalone_cluster(cluster_airflow, cmeta, cstore, csettings):
    with PsSampler(csettings.s3_secret_key) as ps:
        _smoke(cluster_airflow, cmeta, cstore, csettings)
    # the secret reached the executors of the standalone cluster through their
    # environment, and no process had it on its command line, at any sample
    assert ps.samples > 100 and ps.executors, (ps.samples, ps.executors)
    assert ps.executors_with_secret, "no executor JVM had the S3 secret in its environment"
    assert ps.leaks == []
    logs = [p for p in cluster_airflow.base.rglob("*")  # server logs; executors' stdout/stderr in the work dirs
            if p.is_file() and (p.suffix in (".log", ".out") or p.name in ("stdout", "stderr"))]
    assert any(p.name == "stderr" for p in logs), "no executor output found to check"
    assert not [p for p in logs if csettings.s3_secret_key.encode() in p.read_bytes()], \
        "a cluster log or work file holds the secret"
    print(f"ps sampled {ps.samples} times, {len(ps.executors)} executor JVMs, "
          f"{len(ps.executors_with_secret)} with the secret in their environment, 0 command lines with it")


def _smoke(cluster, cmeta, cstore, csettings):
    timings = {}
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
