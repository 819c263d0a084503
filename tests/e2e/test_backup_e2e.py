"""Issue 19 end to end, against `airflow standalone` over REST: export a snapshot to a
backup target (snapshot_export), verify the bundle (snapshot_verify), restore from it into
a new collection (snapshot_restore_external); the runs' notes; the seglake page lists the
export with its verification. The module leaves the shared standalone as it found it:
every etcd key and store file it created is removed at its end (other modules count
collections, snapshots, copy tasks and GC candidates)."""

from __future__ import annotations

import shutil
import time

import pytest

from seglake.dev import demo
from seglake.visibility import visible_count

pytestmark = [pytest.mark.airflow]
COLL, SNAP, DR = "bk_e2e", "s1", "bk_e2e_dr"
DAGS = ("snapshot_export", "snapshot_verify", "snapshot_restore_external")


@pytest.fixture(scope="module")
def engine(standalone, etcd_server):
    from seglake.config import Settings
    from seglake.lifecycle import snapshot
    from seglake.meta import Meta
    from seglake.storage import open_store

    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": standalone.root,
                            "store_uri": standalone.store_uri, "etcd_timeout": 5})
    meta, store = Meta.from_settings(s), open_store(s)
    keys_before = {kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True)}
    files_before = {o.key for o in store.list("")}
    backup = standalone.home.parent / "backup"
    coll, _ = demo.seed(meta, store, demo.SeedParams(name=COLL, partitions=1, segments=2, rows=50, dim=4))
    snapshot.create(meta, store, COLL, SNAP)
    for dag_id in DAGS:
        r = standalone.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        assert r.status_code == 200, r.text
    yield meta, store, coll, str(backup)
    assert not store.delete_many([o.key for o in store.list("") if o.key not in files_before])
    for kv in meta.kv.range(meta.keys.prefix, keys_only=True):
        if kv.key not in keys_before:
            meta.kv.delete(kv.key)
    shutil.rmtree(backup, ignore_errors=True)
    meta.close()


def _run(standalone, dag_id: str, conf: dict, timeout: float = 240) -> tuple[str, str]:
    r = standalone.trigger(dag_id, conf)
    assert r.status_code == 200, f"{dag_id}: HTTP {r.status_code} {r.text}"
    run_id = r.json()["dag_run_id"]
    state = standalone.wait_run(dag_id, run_id, timeout)
    deadline = time.time() + 60
    while not (note := standalone.run(dag_id, run_id).get("note")) and time.time() < deadline:
        time.sleep(0.5)
    return state, note or ""


def test_export_verify_restore_from_the_bundle_and_the_page(standalone, engine):
    meta, store, coll, backup = engine
    state, note = _run(standalone, "snapshot_export", {"collection": COLL, "snapshot": SNAP, "backup_uri": backup})
    assert state == "success" and note.startswith(f"export {COLL}/{SNAP}: bundle {SNAP} committed"), note
    state, note = _run(standalone, "snapshot_verify", {"collection": COLL, "bundle": SNAP, "backup_uri": backup})
    assert state == "success" and note.startswith(f"verify bundle {COLL}/{SNAP}: OK"), note
    state, note = _run(standalone, "snapshot_restore_external", {
        "collection": COLL, "bundle": SNAP, "target": DR, "backup_uri": backup,
        "engine": "inline"})
    assert state == "success", (note, standalone.task_states("snapshot_restore_external", "?"))
    assert note.startswith(f"restore bundle {COLL}/{SNAP} -> {DR}"), note
    dr = meta.catalog.get_by_name(DR)
    assert visible_count(meta, store, dr.collection_id) == visible_count(meta, store, coll.collection_id) > 0
    # a conf Airflow cannot check (a relative target) is refused at trigger time, before any run
    r = standalone.trigger("snapshot_export", {"collection": COLL, "snapshot": SNAP, "bundle": "x",
                                               "backup_uri": "relative/dir"})
    assert r.status_code == 400 and "backup_uri" in r.text and "absolute local path" in r.text, r.text
    # the page lists the export and its verification
    r = standalone.request("GET", "/seglake/")
    assert r.status_code == 200, r.text
    section = r.text[r.text.index('<section id="backups">'):]
    assert f"default.{COLL}" in section and SNAP in section and ">OK<" in section, section[:2000]
