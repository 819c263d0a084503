"""Two copies side by side: SEGLAKE_ETCD_ENDPOINT moves this copy's etcd (make up) and the
CLI, and the Makefile points the DAG runs' etcd_default connection at the same etcd (the
connection beats the environment: without it `make demo` of a second copy ran its DAGs
against the first copy's etcd on 23790 while the CLI used its own)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SHOW = 'show-conn: ; @echo "[$$AIRFLOW_CONN_ETCD_DEFAULT]"'


def _conn(**env) -> str:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("SEGLAKE_", "AIRFLOW_CONN_"))}
    full.update(env)
    out = subprocess.run(["make", "-s", "-C", str(REPO), "--eval", SHOW, "show-conn"], env=full,
                         capture_output=True, text=True, check=True).stdout.strip()
    return out[1:-1]


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_etcd_endpoint_moves_the_dag_runs_connection_too():
    conn = json.loads(_conn(SEGLAKE_ETCD_ENDPOINT="127.0.0.1:24790"))
    assert conn == {"conn_type": "etcd", "host": "127.0.0.1", "port": 24790, "extra": {"root": "seglake"}}
    conn = json.loads(_conn(SEGLAKE_ETCD_ENDPOINT="127.0.0.1:24790", SEGLAKE_ETCD_ROOT="copy2"))
    assert conn["extra"] == {"root": "copy2"}


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_default_copy_keeps_the_imported_connection():
    assert _conn() == ""
