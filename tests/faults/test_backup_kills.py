"""Issue 19: an export and a restore from a bundle SIGKILLed at 10/50/90 % of their files
(and a restore killed in its copy job), then run again: the re-run completes, nothing is
duplicated, nothing partial is ever visible (no bundle before its commit marker, no
collection before its copy job completes), and the killed export's pin does not outlive
the re-run."""

import time
import uuid

import pytest
from fault_harness import price_rows
from fault_harness import seed_and_snapshot

from seglake.config import Settings
from seglake.errors import NotFound
from seglake.lifecycle import copyjob, restore
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup import export, imports, verify
from seglake.lifecycle.backup import bundle_restore
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


def _rows(meta, store, name):
    return price_rows(meta, store, name, read=("embedding", "price"))


def _other_seglake(etcd_endpoint: str, tmp_path):
    return Settings.from_dict({"etcd_endpoint": etcd_endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                               "store_uri": str(tmp_path / f"dr_{uuid.uuid4().hex[:6]}"), "etcd_timeout": 5})


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
def test_an_export_killed_mid_way_is_finished_by_a_re_run(meta, store, settings, spawn, tmp_path, at):
    _, snap = seed_and_snapshot(meta, store)
    path = tmp_path / "backup"
    k = max(1, int(snap.files * at))
    child = spawn("backup_export", {"collection": "demo", "snapshot": "s1", "target": str(path)}, settings,
                  faults=f"export.after_file:kill@{k}")
    out = child.wait(120)
    assert out.rc == -9, out.err[-2000:]
    target = LocalStore(path)
    with pytest.raises(NotFound):
        bundles.read(target, "default", "demo", "s1")   # nothing partial is a bundle
    assert 0 < len(bundles.blobs(target)) <= k
    held = meta.snapshots.get(snap.collection_id, "s1")[0].holds
    assert len(held) == 1, "the killed export's pin"
    assert held[0][1] <= time.time() + export.EXPORT_PIN_LEASE, "it expires within the export's lease, not days"
    rep = export.export(meta, store, target, "demo", "s1", **quiet)
    assert rep["state"] == "committed" and rep["copied_files"] + rep["deduplicated_files"] == snap.files
    assert rep["deduplicated_files"] >= len(bundles.blobs(target)) - rep["copied_files"] - 1
    assert verify.verify(target, "demo", "s1", **quiet)["ok"]
    assert meta.snapshots.get(snap.collection_id, "s1")[0].holds == (), "the dead run's pin went with the re-run"


def test_an_import_killed_half_way_is_taken_over_by_an_import_under_another_name(meta, store, settings, spawn,
                                                                                  etcd_server, tmp_path, monkeypatch):
    """Issue 26: the killed import's record used to refuse every other name ('already
    imported'). Now another name is refused only while the killed driver's heartbeat is
    fresh; once it has been silent for MIN_PENDING_TIMEOUT (the clock moved, no sleep) the
    new import takes its place and removes its snapshot and files."""
    from seglake.errors import Conflict
    from seglake.lifecycle import snapshot

    _, snap = seed_and_snapshot(meta, store)
    want = _rows(meta, store, "demo")
    path = tmp_path / "backup"
    export.export(meta, store, LocalStore(path), "demo", "s1", **quiet)
    other = _other_seglake(etcd_server.endpoint, tmp_path)
    child = spawn("backup_import", {"collection": "demo", "bundle": "s1", "target": str(path)}, other,
                  faults=f"import.after_file:kill@{snap.files // 2}")
    assert child.wait(120).rc == -9
    meta2, store2 = Meta.from_settings(other), open_store(other)
    try:
        (killed,) = meta2.snapshots.list()
        assert killed.state == "PENDING"
        with pytest.raises(Conflict, match="being imported"):
            imports.import_bundle(meta2, store2, LocalStore(path), "demo", "s1", as_collection="demo_b", **quiet)
        later = time.time() + snapshot.MIN_PENDING_TIMEOUT + 1
        monkeypatch.setattr(imports.time, "time", lambda: later)
        imp = imports.import_bundle(meta2, store2, LocalStore(path), "demo", "s1", as_collection="demo_b", **quiet)
        monkeypatch.undo()
        job_id = restore.restore(meta2, store2, "demo_b", "s1", "demo_dr", collection_id=imp["collection_id"])
        copyjob.plan(meta2, job_id)
        copyjob.run_inline(meta2, store2, job_id)
        assert copyjob.finalize(meta2, job_id).state == "Completed"
        assert _rows(meta2, store2, "demo_dr") == want
        assert [(s.collection_name, s.state) for s in meta2.snapshots.list()] == [("demo_b", "COMMITTED")]
        assert not [o.key for o in store2.list(f"insert_log/{killed.collection_id}/")], "the killed import's files"
    finally:
        meta2.close()


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
def test_a_restore_from_a_bundle_killed_in_its_copy_job_is_finished_by_a_re_run(meta, store, settings, spawn,
                                                                                etcd_server, tmp_path, at):
    """The copy job reads straight from the bundle: a re-run resumes the same job, keeps
    every file the killed one wrote whole, copies the rest once; no snapshot, no hold left."""
    _, snap = seed_and_snapshot(meta, store)
    want = _rows(meta, store, "demo")
    path = tmp_path / "backup"
    export.export(meta, store, LocalStore(path), "demo", "s1", **quiet)
    other = _other_seglake(etcd_server.endpoint, tmp_path)
    k = max(1, int(snap.files * at))
    child = spawn("backup_restore", {"collection": "demo", "bundle": "s1", "restore_to": "demo_dr",
                                     "target": str(path)}, other, faults=f"copy.after_file:kill@{k}")
    out = child.wait(120)
    assert out.rc == -9, out.err[-2000:]
    meta2, store2 = Meta.from_settings(other), open_store(other)
    try:
        assert meta2.catalog.get_by_name("demo_dr").state == "Importing"   # not usable yet
        r = bundle_restore.restore_from_bundle(meta2, store2, LocalStore(path), "demo", "s1", "demo_dr", engine="inline",
                                        **quiet)
        copyjob.plan(meta2, r["job_id"])
        copyjob.run_inline(meta2, store2, r["job_id"])
        assert copyjob.finalize(meta2, r["job_id"]).state == "Completed"
        tasks = meta2.copyjobs.tasks(r["job_id"])
        assert sum(t.copied_files + t.skipped_files for t in tasks) == snap.files
        assert _rows(meta2, store2, "demo_dr") == want
        assert list(meta2.snapshots.list()) == []
        assert holds.holders(LocalStore(path), "default", "demo", "s1") == []
    finally:
        meta2.close()
