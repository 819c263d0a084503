"""attack s22: symlinks planted in a backup target before an export, an import and a
restore from a bundle: nothing is written or read through them (the outside directory
is untouched), the step fails with a clear engine error or completes without using the
link, and nothing partial becomes a bundle, a snapshot or a collection."""

import hashlib
import os
import shutil
import uuid

import pytest
from fault_harness import seed_and_snapshot

from seglake.config import Settings
from seglake.errors import SeglakeError
from seglake.lifecycle import copyjob, restore
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import bundle_restore, export, imports, verify
from seglake.meta import Meta
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


def _tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out




@pytest.mark.parametrize("where", ["data", "bundles", "bundles/default/demo"])
def test_an_export_never_writes_through_a_symlinked_target_dir(meta, store, tmp_path, where):
    seed_and_snapshot(meta, store)
    path = tmp_path / "backup"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    link = path / where
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, link)
    before = _tree(outside)
    try:
        rep = export.export(meta, store, LocalStore(path), "demo", "s1", **quiet)
        outcome = rep["state"]
    except SeglakeError as e:
        outcome = f"{type(e).__name__}: {e}"
    print(outcome)
    assert _tree(outside) == before, f"the export wrote through the symlink {where}: {outcome}"
    if outcome == "committed":
        assert verify.verify(LocalStore(path), "demo", "s1", **quiet)["ok"]


@pytest.mark.parametrize("what", ["blob", "doc", "data_dir"])
@pytest.mark.parametrize("op", ["import", "restore"])
def test_a_symlink_in_the_bundle_is_never_read(meta, store, etcd_server, tmp_path, what, op):
    seed_and_snapshot(meta, store)
    path = tmp_path / "backup"
    target = LocalStore(path)
    export.export(meta, store, target, "demo", "s1", **quiet)
    doc = bundles.read(target, "default", "demo", "s1")
    outside = tmp_path / "outside"
    outside.mkdir()
    if what == "doc":
        victim = path / layout.bundle_doc("default", "demo", "s1")
    else:
        f = next(f for k, f in sorted(doc["files"].items()) if "/102/" in k)
        victim = path / layout.bundle_blob(f["sha256"])
        if what == "data_dir":
            victim = victim.parent
    moved = outside / victim.name
    shutil.move(str(victim), str(moved))        # same content, reached only through a link
    os.symlink(moved, victim)
    os.chmod(moved, 0o755)
    other = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                                "store_uri": str(tmp_path / "dr"), "etcd_timeout": 5})
    with Meta.from_settings(other) as meta2:
        store2 = open_store(other)
        try:
            if op == "import":
                imports.import_bundle(meta2, store2, LocalStore(path), "demo", "s1", **quiet)
                job = restore.restore(meta2, store2, "demo", "s1", "demo_r")
            else:
                job = bundle_restore.restore_from_bundle(meta2, store2, LocalStore(path), "demo", "s1", "demo_r",
                                                         engine="inline", **quiet)["job_id"]
            copyjob.plan(meta2, job)
            copyjob.run_inline(meta2, store2, job)
            state = copyjob.finalize(meta2, job).state
        except SeglakeError as e:
            state = f"{type(e).__name__}: {e}"
        print(state)
        assert state != "Completed", "a bundle read through a symlink"
        assert not [s for s in meta2.snapshots.list() if s.state == "COMMITTED"]
        for c in meta2.catalog.list("default"):
            assert c.state != "Created", c
