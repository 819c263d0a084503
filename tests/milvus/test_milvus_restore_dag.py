"""The milvus_restore DAG (dag.test(), target from an Airflow connection) and the CLI
`seglake milvus restore` (a subprocess, secrets from its environment) against the real
Milvus: both restore a capture and verify it; no secret in the CLI's argv or output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bundle_helper import SessionClient, capture
from seglake.storage.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "dags"))
pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus, pytest.mark.airflow]


def _source(milvus, name):
    milvus({"op": "create", "name": name, "partitions": ["p1", "p2"], "shards": 2, "dim": 4},
           {"op": "insert", "name": name, "partition": "p1", "pks": list(range(0, 40))},
           {"op": "insert", "name": name, "partition": "p2", "pks": list(range(40, 70))},
           {"op": "delete", "name": name, "pks": [1, 41]},
           {"op": "flush", "name": name})


def test_dag_restores_from_a_connection(airflow_env, milvus, milvus_server, s3_server, tmp_path, monkeypatch, capfd):
    from dag_helpers import load_dag, task_states

    src, new = f"src_{uuid.uuid4().hex[:8]}", f"dag_{uuid.uuid4().hex[:8]}"
    _source(milvus, src)
    backup = LocalStore(str(tmp_path / "backup"))
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))
    capture(milvus_server, s3_server, backup, src)
    host, _, port = milvus_server.address.rpartition(":")
    monkeypatch.setenv("AIRFLOW_CONN_MILVUS_TARGET", json.dumps({
        "conn_type": "generic", "host": host, "port": int(port),
        "extra": {"bucket": milvus_server.s3.bucket, "s3_endpoint": s3_server.endpoint,
                  "s3_access_key": s3_server.access_key, "s3_secret_key": s3_server.secret_key}}))
    run = load_dag("milvus_restore").test(run_conf={"collection": src, "bundle": "b1", "name": new,
                                                     "milvus_conn_id": "milvus_target", "sample": 10})
    assert run.state == "success", task_states(run)
    c = SessionClient(milvus_server.address)
    assert c.one({"op": "count_loaded", "name": new})["count"] == 68
    out, err = capfd.readouterr()
    assert s3_server.secret_key not in out + err
    # bad conf: refused before anything (unknown key, closest named)
    run = load_dag("milvus_restore").test(run_conf={"collection": src, "bundle": "b1", "name": "x_" + new,
                                                     "conn_id": "milvus_target"})
    assert run.state == "failed"
    assert not c.one({"op": "has", "name": "x_" + new})["exists"]


def test_cli_restores_with_secrets_from_the_environment(settings, milvus, milvus_server, s3_server, tmp_path):
    src, new = f"src_{uuid.uuid4().hex[:8]}", f"cli_{uuid.uuid4().hex[:8]}"
    _source(milvus, src)
    backup = LocalStore(str(tmp_path / "backup"))
    capture(milvus_server, s3_server, backup, src)
    env = dict(os.environ, **settings.to_env(), SEGLAKE_BACKUP_URI=str(tmp_path / "backup"),
               SEGLAKE_MILVUS_S3_ACCESS_KEY=s3_server.access_key, SEGLAKE_MILVUS_S3_SECRET_KEY=s3_server.secret_key,
               PYTHONPATH=f"{REPO / 'include'}:{os.environ.get('PYTHONPATH', '')}")
    argv = [sys.executable, "-m", "seglake.cli", "milvus", "restore", src, "b1", new, "--address", milvus_server.address,
            "--bucket", milvus_server.s3.bucket, "--s3-endpoint", s3_server.endpoint, "--sample", "10", "--json"]
    assert s3_server.secret_key not in " ".join(argv)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rep = json.loads(r.stdout)
    assert rep["state"] == "verified" and rep["count"] == rep["visible_rows"] == 68
    assert s3_server.secret_key not in r.stdout + r.stderr
    # the same command again: resumes to the same verified state, nothing imported again
    r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "verified"
    c = SessionClient(milvus_server.address)
    assert len(c.one({"op": "list_imports", "name": new})) == rep["imports"]
    # the name is taken now: a clear error, exit 2
    r = subprocess.run(argv[:7] + [src] + argv[8:], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "already exists" in r.stderr, r.stderr[-2000:]
