"""The cluster layer (issue 13): one scale-out cluster per pytest session -- 3 etcd
members, SeaweedFS S3, a Spark standalone master with 2 workers (seglake.dev.cluster) -- on
loopback, stopped at the end and tied to the test process.

Skipped only when the machine cannot start it (no etcd / weed binary, no Java, no
spark-class), with the reason printed in the summary. Any other failure to start fails.

- `cluster`: the ClusterStack (session).
- `csettings` / `cmeta` / `cstore`: this test's own etcd root and s3:// prefix on it.
- `cluster_airflow`: the cluster's connection profile (AIRFLOW_CONN_* with the three etcd
  endpoints, SeaweedFS, the standalone master; the Variable) for this test's root.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engine_fixtures import engine_fixtures

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "faults"))  # fault_harness: invariants, spawn, LostReplyProxy
sys.path.insert(0, str(HERE.parent / "dags"))  # dag_helpers
_REPORT: list[str] = []


def pytest_collection_modifyitems(items):
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.cluster)


def pytest_terminal_summary(terminalreporter):
    for line in _REPORT:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    from seglake.dev.cluster import ClusterStack, missing_prerequisites

    missing = missing_prerequisites()
    if missing:
        reason = "cluster layer skipped: this machine cannot start the cluster: " + "; ".join(missing)
        _REPORT.append(reason)
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    with open(f"/proc/{os.getpid()}/stat") as f:
        start = f.read().rsplit(") ", 1)[1].split()[19]
    reaper = subprocess.Popen([sys.executable, str(HERE / "reaper.py"), str(os.getpid()), start],
                              start_new_session=True, stdin=subprocess.DEVNULL)
    stack = ClusterStack(base=tmp_path_factory.mktemp("cluster"))
    t0 = time.time()
    try:
        stack.up(timeout=300)
        _REPORT.append(f"cluster layer: cluster up in {time.time() - t0:.1f} s "
                       f"(etcd {stack.etcd_endpoints}, s3 {stack.s3_endpoint}, spark {stack.spark_master_url})")
        yield stack
    finally:
        stack.down()
        reaper.kill()
        reaper.wait()


@pytest.fixture
def csettings(cluster, root_prefix):
    return cluster.settings(root=root_prefix, prefix=root_prefix, etcd_timeout=5)


cmeta, cstore = engine_fixtures("csettings", "cmeta", "cstore")


@pytest.fixture
def cluster_airflow(cluster, airflow_home, root_prefix, monkeypatch):
    for k, v in cluster.airflow_env(root=root_prefix, prefix=root_prefix).items():
        monkeypatch.setenv(k, v)
    return cluster


@pytest.fixture
def healthy_cluster(cluster):
    """The cluster; after the test every etcd member it killed is started again (same
    ports and data dir: it rejoins) and the whole cluster is healthy for the next test."""
    yield cluster
    for i, m in enumerate(cluster.etcd):
        if cluster.owned_pid(m) is None:
            cluster.restart_member(i)
    deadline = time.time() + 60
    while not cluster.healthy():
        assert time.time() < deadline, "cluster not healthy after the test"
        time.sleep(0.2)
