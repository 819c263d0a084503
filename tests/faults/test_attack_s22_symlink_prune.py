"""attack s22: a symlink planted in a backup target before a data sweep.

The guide: GC never deletes on a partial view of the references (fail closed).
The target's data sweep (`prune.sweep_data`) builds its references from
`target.list("bundles/")`, and a local store's list() skips symlinks silently. So a
bundle whose directory (or bundle.json) is a symlink -- an operator who moved a bundle
to another disk and linked it back, or anyone with write access to the target -- is not
seen at all: the sweep takes its data files for unreferenced and deletes them. The
bundle is then unrestorable. Expected: the sweep refuses (SweepRefused, nothing
deleted) when a bundle entry cannot be read, like it does for an unreadable bundle.json.
"""

import os
import shutil
import time

import pytest
from fault_harness import seed_and_snapshot

from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export, prune
from seglake.storage import layout
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)
LATER = time.time() + 30 * 86400      # every data file is past any min_age


@pytest.mark.parametrize("what", ["bundle_dir", "bundle_doc"])
def test_a_symlinked_bundle_is_not_a_partial_view_for_the_data_sweep(meta, store, tmp_path, what):
    _, snap = seed_and_snapshot(meta, store)
    path = tmp_path / "backup"
    target = LocalStore(path)
    export.export(meta, store, target, "demo", "s1", **quiet)
    blobs_before = len(bundles.blobs(target))
    assert blobs_before > 0
    bdir = path / layout.bundle_prefix("default", "demo", "s1")
    elsewhere = tmp_path / "other_disk"
    if what == "bundle_dir":           # the bundle's directory moved to another disk, linked back
        shutil.move(str(bdir), str(elsewhere))
        os.symlink(elsewhere, bdir)
    else:                              # only its bundle.json
        elsewhere.mkdir()
        doc = bdir / layout.BUNDLE_DOC
        shutil.move(str(doc), str(elsewhere / layout.BUNDLE_DOC))
        os.symlink(elsewhere / layout.BUNDLE_DOC, doc)
    try:
        rep = prune.sweep_data(target, min_age=prune.MIN_AGE_FLOOR, now=LATER, **quiet)
    except prune.SweepRefused:
        rep = None                     # fail closed: what the guide promises
    left = len(bundles.blobs(target))
    assert left == blobs_before, (
        f"the sweep deleted {blobs_before - left} of {blobs_before} data files of a bundle it could not see "
        f"(a symlinked {what}); report: {rep}")


def test_a_hold_that_cannot_be_read_holds(meta, store, tmp_path):
    """A reader's hold on a bundle whose holds directory is a symlink (or unreadable): a
    plain listing skips it, and the prune dropped the held bundle. It holds now."""
    from seglake.lifecycle.backup import holds

    seed_and_snapshot(meta, store)
    path = tmp_path / "backup"
    target = LocalStore(path)
    export.export(meta, store, target, "demo", "s1", **quiet)
    with holds.held(target, "default", "demo", "s1", by="a verify"):
        hdir = path / layout.bundle_holds_prefix("default", "demo", "s1")
        elsewhere = tmp_path / "holds_elsewhere"
        shutil.move(str(hdir), str(elsewhere))
        os.symlink(elsewhere, hdir)
        who = holds.drop_unless_held(target, "default", "demo", "s1")
        assert who and "cannot be read" in who[0], who
        assert any(done for _, _, b, done in bundles.find(target, "default", "demo") if b == "s1")
