"""Helpers shared by the DAG tests (and the fault and cluster layers that run DAGs)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_dag(dag_id: str, file: str | None = None):
    """Parse one DAG file (named after the DAG unless given) and return the DAG."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS / f"{file or dag_id}.py")).dags[dag_id]


def task_states(run) -> dict:
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


@contextmanager
def core_api_client(bag):
    """Airflow's core API app in process (FastAPI TestClient, the session's SQLite DB)
    with the DAGs of `bag` synced to the DB, every caller an admin (simple auth manager)
    while the block runs; the setting is removed afterwards."""
    os.environ["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS"] = "True"
    try:
        from airflow.api_fastapi.app import create_app
        from airflow.dag_processing.bundles.manager import DagBundlesManager
        from airflow.dag_processing.dagbag import sync_bag_to_db
        from fastapi.testclient import TestClient

        DagBundlesManager().sync_bundles_to_db()   # the bundle row the DAG rows point to (a fresh DB has none)
        sync_bag_to_db(bag, bundle_name="dags-folder", bundle_version=None)
        client = TestClient(create_app("core"))
        assert client.get("/auth/token").status_code == 201   # every caller is an admin
        yield client
    finally:
        os.environ.pop("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", None)


WAL_SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
              {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 4},
              {"field_id": 102, "name": "price", "dtype": "Float"}]


def wal_ingest(meta, store, settings, name: str, rows: int, deletes=(), shards: int = 2):
    """A WAL collection `name` with pks 1..rows inserted, then `deletes` deleted (one
    client, closed at the end); returns the collection record."""
    from seglake.wal.client import WalClient, synthetic_rows

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(name, WAL_SCHEMA, shards=shards)
        if rows:
            c.insert(name, synthetic_rows(coll, rows, 1))
        if deletes:
            c.delete(name, list(deletes))
    return coll
