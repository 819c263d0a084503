"""Issue 26 item 4 (an import checks before it writes), adversary rows4: a bundle's
document and commit marker copied from one bundle's place into another's (swapped
manifests between two bundles, or a bundle of another collection put under this one's
name) read as a valid bundle: an import, a restore from the bundle or a verify of
`src/b2` then carried the rows of `src/b1` (or of another collection), reported as b2's.
Every reader of a bundle compares the place it read the document from with the
(db, collection, bundle) the document names, and refuses a mismatch naming both, before
anything is written. Real etcd, real files on local disk."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import bundle_restore
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.lifecycle.backup import verify as verifies
from seglake.storage import layout
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows


@pytest.fixture
def two_bundles(meta, store, settings, tmp_path):
    """Bundles b1 (10 rows) and b2 (20 rows) of `src`, and c1 (5 rows) of `other`."""
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1"])
    w.insert("src", range(10), "p1", 1.0)
    w.flush("src")
    snapshot.create(meta, store, "src", "b1")
    w.insert("src", range(100, 110), "_default", 2.0)
    w.flush("src")
    snapshot.create(meta, store, "src", "b2")
    w.create("other", ["_default", "p1"])
    w.insert("other", range(5), "p1", 3.0)
    w.flush("other")
    snapshot.create(meta, store, "other", "c1")
    target = LocalStore(tmp_path / "backup")
    for coll, b in (("src", "b1"), ("src", "b2"), ("other", "c1")):
        exports.export(meta, store, target, coll, b, **quiet)
    return target


def _move(target, frm: tuple, to: tuple) -> None:
    """The document and commit marker of bundle `frm` in place of bundle `to`'s."""
    for key in (layout.bundle_doc, layout.bundle_commit):
        target.put(key("default", *to), target.get(key("default", *frm)))


def _untouched(meta2, store2) -> None:
    assert list(meta2.kv.range(meta2.keys.prefix, keys_only=True)) == [], "etcd records written"
    assert list(store2.list("")) == [], "store files written"


@pytest.mark.parametrize("frm,to", [(("src", "b1"), ("src", "b2")), (("other", "c1"), ("src", "b2"))],
                         ids=["another_bundle_of_the_collection", "a_bundle_of_another_collection"])
def test_a_document_read_from_another_bundles_place_is_refused_naming_both(two_bundles, etcd_server, tmp_path,
                                                                           frm, to):
    target = two_bundles
    keys = [k("default", *to) for k in (layout.bundle_doc, layout.bundle_commit)]
    kept = {k: target.get(k) for k in keys}
    _move(target, frm, to)
    meta2, store2, _ = other_root(etcd_server, tmp_path)
    try:
        want = f"names default.{frm[0]}/{frm[1]}"
        with pytest.raises(bundles.BundleError, match=want):
            bundles.read(target, "default", *to)
        with pytest.raises(bundles.BundleError, match=want):
            imports.import_bundle(meta2, store2, target, *to, **quiet)
        _untouched(meta2, store2)
        with pytest.raises(bundles.BundleError, match=want):
            bundle_restore.restore_from_bundle(meta2, store2, target, to[0], to[1], "back", engine="inline", **quiet)
        _untouched(meta2, store2)
        rep = verifies.verify(target, to[0], to[1], db="default", threads=1, **quiet)
        assert want in str(rep.get("problems")), rep
        # the bundle put back: the same restore goes through (a refusal blocks no retry)
        for k, raw in kept.items():
            target.put(k, raw)
        restore_bundle(meta2, store2, target, to[0], to[1], "back")
        assert sum(rows(meta2, store2, "back").values()) == 20
    finally:
        meta2.close()
