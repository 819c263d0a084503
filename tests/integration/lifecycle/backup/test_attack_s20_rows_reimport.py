"""Adversary s20 (issue 26 #5 / deliver 4): an import checks before it writes -- also
the SECOND import of a bundle whose first import completed and whose snapshot was
dropped since.

The import record of a completed import stays ("imported") after its snapshot is dropped.
A re-import under the same names then skips the data-file check (`_check_and_import`:
only when the record is not "imported") and writes etcd records (a PENDING snapshot) and
store files before the copy meets the damaged file; under other names it is refused as
"already imported as ...; restore from that one" although that snapshot no longer exists.

Real etcd, real files on local disk."""

from __future__ import annotations

import uuid

import pytest

from seglake.config import Settings
from seglake.dev import demo
from seglake.errors import Conflict
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.meta import Meta
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore
from etcd_root import root_changes, root_state

quiet = dict(say=lambda line: None)


@pytest.fixture
def exported(meta, store, tmp_path):
    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=2, segments=2, rows=200, dim=4))
    snapshot.create(meta, store, "bk", "s1")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    return target, bundles.read(target, "default", "bk", "s1")


@pytest.fixture
def other(etcd_server, tmp_path):
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / f"store_{uuid.uuid4().hex[:6]}"), "etcd_timeout": 5})
    meta2 = Meta.from_settings(s)
    yield meta2, open_store(s)
    meta2.close()


def _imported_then_dropped(exported, other):
    target, doc = exported
    meta2, store2 = other
    imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    snapshot.drop(meta2, store2, "bk", "s1")
    assert not [r for r in meta2.snapshots.list() if r.name == "s1"]
    # what GC does to the files of a dropped snapshot of a collection not in the catalog
    store2.delete_many([o.key for o in store2.list("")])


def test_a_reimport_after_the_snapshot_was_dropped_checks_before_it_writes(exported, other, monkeypatch):
    target, doc = exported
    meta2, store2 = other
    _imported_then_dropped(exported, other)
    shas = {doc["files"][k]["sha256"]: doc["files"][k]["size"] for k in doc["files"] if k.startswith("insert_log/")}
    big = max(shas, key=lambda s: shas[s])
    raw = bytearray(target.get(layout.bundle_blob(big)))
    raw[len(raw) // 2] ^= 0x01
    target.put(layout.bundle_blob(big), bytes(raw))
    copies = []
    real = bundles.copy_verified
    monkeypatch.setattr(bundles, "copy_verified", lambda *a, **kw: (copies.append(a[3]), real(*a, **kw))[1])
    rev = root_state(meta2)
    with pytest.raises(bundles.BundleError):
        imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
    assert copies == [] and root_state(meta2) == rev, (
        f"refused after writing: {len(copies)} store files copied, etcd keys changed {root_changes(rev, root_state(meta2))}")


def test_a_bundle_whose_imported_snapshot_was_dropped_can_be_imported_under_another_name(exported, other):
    target, doc = exported
    meta2, store2 = other
    _imported_then_dropped(exported, other)
    try:
        out = imports.import_bundle(meta2, store2, target, "bk", "s1", as_collection="bk2", **quiet)
    except Conflict as e:
        pytest.fail(f"refused: {e}")
    assert out["rows"] == doc["totals"]["rows"]


def test_a_rate_limited_import_of_a_damaged_bundle_writes_no_etcd_key(exported, other):
    """(nit) With a rate limit, the import's own throttle clock is put in etcd before the
    data files are checked, and deleted when it is refused: no key stays, but etcd was
    written (revisions) before the refusal."""
    target, doc = exported
    meta2, store2 = other
    shas = {doc["files"][k]["sha256"]: doc["files"][k]["size"] for k in doc["files"] if k.startswith("insert_log/")}
    big = max(shas, key=lambda s: shas[s])
    raw = bytearray(target.get(layout.bundle_blob(big)))
    raw[len(raw) // 2] ^= 0x01
    target.put(layout.bundle_blob(big), bytes(raw))
    rev = root_state(meta2)
    with pytest.raises(bundles.BundleError):
        imports.import_bundle(meta2, store2, target, "bk", "s1", max_bytes_per_second=50_000_000, **quiet)
    left = [kv.key[len(meta2.keys.prefix):] for kv in meta2.kv.range(meta2.keys.prefix, keys_only=True)]
    assert not left and not list(store2.list("")) and root_state(meta2) == rev, (
        f"refused import left {len(left)} etcd keys {left[:4]}; changed {root_changes(rev, root_state(meta2))}")
