"""Snapshot manifests written before d313d27 (the Avro schema without the
delta_partitions field) must still read, restore and compare right.
(A) of a collection that wrote its own deletes: expected to work.
(B) of a collection that was itself a restore (taken before the change: no map, and
manifests never carry `source`): the delete scopes hold the ids of the collection two
hops up."""

from __future__ import annotations

import fastavro
import pytest

from seglake import manifest

from copy_model_helpers import Writer, rows, snap_and_restore, three_partitions_with_a_scoped_delete

OLD_SCHEMA = {**manifest.SCHEMA, "fields": [f for f in manifest.SCHEMA["fields"] if f["name"] != "delta_partitions"]}


@pytest.fixture
def old_manifests(monkeypatch):
    """Snapshots written with the manifest schema before d313d27 (no delta_partitions)."""
    orig = manifest.segment_entry

    def old_entry(seg):
        e = orig(seg)
        e.pop("delta_partitions")
        return e

    def use_old():
        monkeypatch.setattr(manifest, "_parsed", fastavro.parse_schema(OLD_SCHEMA))
        monkeypatch.setattr(manifest, "segment_entry", old_entry)

    def use_new():
        monkeypatch.setattr(manifest, "_parsed", None)
        monkeypatch.setattr(manifest, "segment_entry", orig)
    return use_old, use_new


def _src(meta, store, settings):
    w = Writer(meta, store, settings)
    three_partitions_with_a_scoped_delete(w)
    w.insert("src", [3], "p2", 33.0, upsert=True)
    w.flush("src")
    return w


def test_an_old_manifest_of_a_native_collection_restores(meta, store, settings, old_manifests):
    use_old, use_new = old_manifests
    w = _src(meta, store, settings)
    use_old()
    from seglake.lifecycle import snapshot
    snapshot.create(meta, store, "src", "old")
    use_new()
    from copy_model_helpers import run_restore
    run_restore(meta, store, "src", "old", "r")
    assert rows(meta, store, "r") == w.model.visible()
    snap_and_restore(meta, store, "r", "r2")
    assert rows(meta, store, "r2") == w.model.visible()


def test_an_old_manifest_of_a_restored_collection_is_refused_before_anything_is_written(
        meta, store, settings, old_manifests):
    """Such a manifest cannot say which collection's ids its copies' deletes hold: the
    restore reads the ids the delta logs hold, finds one that is not the collection's,
    and refuses up front, naming it (the target never exists); a NEW snapshot of the
    same collection names them and restores row-exact."""
    use_old, use_new = old_manifests
    w = _src(meta, store, settings)
    snap_and_restore(meta, store, "src", "cp")
    cp = meta.catalog.get_by_name("cp")
    meta.segments.save([s.replace(delta_partitions=None) for s in meta.segments.list(cp.collection_id)
                        if s.deltalogs])          # restored before the change
    assert rows(meta, store, "cp") == w.model.visible()
    use_old()
    from seglake.lifecycle import snapshot
    snapshot.create(meta, store, "cp", "old")
    use_new()
    from seglake.errors import NotFound
    from seglake.lifecycle import restore
    from seglake.visibility import PartitionUnmapped

    from copy_model_helpers import run_restore
    with pytest.raises(PartitionUnmapped, match="take a new snapshot"):
        restore.restore(meta, store, "cp", "old", "r")
    with pytest.raises(NotFound):
        meta.catalog.get_by_name("r")
    snapshot.create(meta, store, "cp", "new")
    run_restore(meta, store, "cp", "new", "r")
    assert rows(meta, store, "r") == w.model.visible()
