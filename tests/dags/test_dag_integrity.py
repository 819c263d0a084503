"""Every DAG imports, has tags, owner, retries >= 2, docs; plugins import cleanly."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow


def test_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {"verify_collection", "snapshot_create", "snapshot_drop", "snapshot_restore",
            "copy_segment_job", "gc"} <= set(dagbag.dag_ids)


def test_every_dag_has_tags_owner_retries_and_docs(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.tags, f"{dag_id} has no tags"
        assert dag.doc_md and len(dag.doc_md) > 100, f"{dag_id} has no docs"
        assert dag.catchup is False, dag_id
        for t in dag.tasks:
            assert t.retries >= 2, f"{dag_id}.{t.task_id} retries={t.retries}"
            assert t.owner == "seglake", f"{dag_id}.{t.task_id}"


def test_manual_dags_validate_their_params(dagbag):
    from airflow.sdk.definitions.param import ParamsDict

    dag = dagbag.dags["verify_collection"]
    params = ParamsDict(dag.params)
    with pytest.raises(Exception, match="collection"):
        params.update({"collection": "bad-name!"})
        params.validate()


def test_dag_files_do_no_work_at_parse_time():
    """Parsing must not touch etcd or the store: parse with etcd unreachable, quickly."""
    code = ("import os, time; os.environ['SEGLAKE_ETCD_ENDPOINT']='127.0.0.1:1';"
            "from airflow.dag_processing.dagbag import DagBag; t=time.time();"
            f"b=DagBag(dag_folder={str(REPO / 'dags')!r});"
            "assert not b.import_errors, b.import_errors; print(round(time.time()-t,2))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) < 10


def test_plugins_package_is_not_loaded_as_loose_modules():
    """Airflow imports every top-level plugins/*.py under its file name; our package
    must be ignored by that loader (it would shadow `seglake` otherwise)."""
    assert "seglake_airflow/" in (REPO / "plugins" / ".airflowignore").read_text()


def test_the_test_airflow_pokes_every_sensor_every_second(dagbag):
    """tests/airflow_policy (Airflow's cluster-policy hook) is loaded in the test process:
    every sensor of every DAG pokes every 1 s here instead of its 5-10 s, same mode. Without
    it, each snapshot_create run idles 10 s (its wait pokes once before the write starts)."""
    from airflow.sdk import BaseSensorOperator
    from airflow_local_settings import POKE_S

    sensors = {f"{d.dag_id}.{t.task_id}": (t.poke_interval, t.mode) for d in dagbag.dags.values()
               for t in d.tasks if isinstance(t, BaseSensorOperator)}
    assert {"snapshot_create.wait_committed", "snapshot_restore.copy_job.wait",
            "drop_collection.wait_released"} <= set(sensors), sensors
    assert all(p == POKE_S for p, _ in sensors.values()), sensors
    assert sensors["snapshot_create.wait_committed"][1] == "reschedule"


def test_the_bundle_sync_is_skipped_only_while_nothing_changed(monkeypatch):
    """airflow_fixtures.sync_once (installed by the airflow_home fixture): dag.test()'s
    per-run re-sync of the dags bundle is skipped only when it would write the same thing."""
    from datetime import datetime

    import pytest
    from airflow_fixtures import sync_once

    synced = []

    def real(bag, bundle_name, bundle_version, **kwargs):
        if bag.fail:
            raise RuntimeError("db down")
        synced.append(bundle_name)

    class Bag:
        bundle_path, dag_ids, import_errors, fail = "/dags", ["a", "b"], {}, False

        def __init__(self, mtime=1):
            self.file_last_changed = {"/dags/a.py": datetime.fromtimestamp(mtime)}

    sync = sync_once(real)
    sync(Bag(), "dags-folder", None)
    sync(Bag(), "dags-folder", None)
    assert synced == ["dags-folder"]                     # the same bag again: skipped
    sync(Bag(mtime=2), "dags-folder", None)              # a DAG file changed
    monkeypatch.setenv("SEGLAKE_GC_SCHEDULE", "none")   # what a DAG file reads at parse
    sync(Bag(mtime=2), "dags-folder", None)
    sync(Bag(mtime=2), "other", None)
    assert len(synced) == 4
    failing = Bag(mtime=3)
    failing.fail = True
    with pytest.raises(RuntimeError):
        sync(failing, "dags-folder", None)
    sync(Bag(mtime=3), "dags-folder", None)             # a failed sync is not remembered
    assert len(synced) == 5
