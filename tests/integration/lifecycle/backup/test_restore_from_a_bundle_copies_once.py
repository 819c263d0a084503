"""Issue 26 Deliver 5: a restore from a bundle copies each byte once and leaves no stray
snapshot. The copy job reads straight from the backup target; what it must still refuse
(a file damaged in place, a bundle gone under it) fails the job, which rolls its target
back, and a later restore of the repaired bundle works; ids of the bundle's root (index
builds) are mapped, never kept."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seglake.errors import NotFound
from seglake.lifecycle import copyjob
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup import bundle_restore
from seglake.meta.copyjobs import JOB_COMPLETED, JOB_FAILED
from seglake.storage import layout
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from test_export_import_verify import _fresh, _rows, _seed, _stored_bytes, quiet


def _run(meta, store, target, to: str):
    return restore_bundle(meta, store, target, "bk", "s1", to, completed=False)[1]


@pytest.fixture
def bundle(meta, store, tmp_path):
    _seed(meta, store)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    return target, _rows(meta, store, "bk")


def test_a_file_damaged_in_place_fails_the_job_and_a_repaired_bundle_restores(bundle, etcd_server, tmp_path):
    target, want = bundle
    doc = bundles.read(target, "default", "bk", "s1")
    key = sorted(k for k in doc["files"] if k.startswith("insert_log/"))[-1]
    blob = layout.bundle_blob(doc["files"][key]["sha256"])
    good = target.get(blob)
    target.put(blob, good[:-1] + bytes([good[-1] ^ 0xFF]))        # same size: only its content tells
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        job = _run(meta2, store2, target, "back")
        assert job.state == JOB_FAILED and key in job.reason and "SHA-256" in job.reason, job.reason
        with pytest.raises(NotFound):
            meta2.catalog.get_by_name("back")                        # rolled back: nothing visible
        assert list(meta2.snapshots.list()) == [] and holds.holders(target, "default", "bk", "s1") == []
        target.put(blob, good)                                       # repaired: the same name restores
        assert _run(meta2, store2, target, "back").state == JOB_COMPLETED
        assert _rows(meta2, store2, "back") == want
    finally:
        meta2.close()


def test_a_bundle_gone_under_its_job_fails_it_and_nothing_is_visible(bundle, etcd_server, tmp_path):
    """The job's hold keeps a prune away; a bundle removed anyway (by hand, or after the
    hold expired with the job idle) fails the copy: nothing is copied from elsewhere."""
    target, _ = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        assert holds.holders(target, "default", "bk", "s1") == [f"restore copy job {out['job_id']}"]
        target.delete_many([layout.bundle_commit("default", "bk", "s1")])
        copyjob.plan(meta2, out["job_id"])
        copyjob.run_inline(meta2, store2, out["job_id"])
        job = copyjob.finalize(meta2, out["job_id"])
        assert job.state == JOB_FAILED and "not found in the backup target" in job.reason, job.reason
        with pytest.raises(NotFound):
            meta2.catalog.get_by_name("back")
    finally:
        meta2.close()


def test_index_build_ids_of_the_bundle_are_mapped_and_each_byte_is_stored_once(meta, bundle, etcd_server,
                                                                                tmp_path):
    target, want = bundle
    doc = bundles.read(target, "default", "bk", "s1")
    theirs = {x["build_id"] for e in doc["segments"] for x in e["index_files"]}
    assert theirs, "the seed writes index files"
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        meta2.ids.allocate(max(theirs))      # this root has used the bundle's build ids too
        assert _run(meta2, store2, target, "back").state == JOB_COMPLETED
        coll = meta2.catalog.get_by_name("back")
        segs = meta2.segments.list(coll.collection_id)
        ours = {x.build_id for s in segs for x in s.index_files}
        assert ours and not ours & theirs
        assert _rows(meta2, store2, "back") == want
        assert _stored_bytes(store2) == doc["totals"]["bytes"]
        rows = bundle_restore.compare_with_bundle(meta2, store2, target, "bk", "s1", "back")
        assert rows["visible_differing"] == (0, 0) and rows["visible"][0] == rows["visible"][1] > 0, rows
    finally:
        meta2.close()
