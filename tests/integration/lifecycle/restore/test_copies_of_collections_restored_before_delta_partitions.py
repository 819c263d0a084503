"""A collection restored BEFORE delta_partitions existed (its copied segments
carry only their one-hop `source` record: what main's restore wrote before d313d27) is
readable after the upgrade (visibility's legacy translation), but restoring it again --
or exporting it -- loses that translation: snapshot manifests carry neither `source` nor
a map, and copied_delta_partitions labels the upstream ids with the intermediate
collection's own {id: name}. Expected: every hop shows the rows the model says."""

from __future__ import annotations

from copy_model_helpers import Writer, rows, snap_and_restore


def _legacy_restored(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1", "p2"])
    w.insert("src", range(1, 6), "_default", 1.0)
    w.insert("src", range(1, 6), "p1", 2.0)
    w.insert("src", range(1, 6), "p2", 3.0)
    w.flush("src")
    w.delete("src", [1, 2], partition="p1")     # scoped: hides pks 1, 2 of p1 only
    w.flush("src")
    assert rows(meta, store, "src") == w.model.visible()
    snap_and_restore(meta, store, "src", "old")
    # what the restore before d313d27 wrote: source records, no delta_partitions
    old = meta.catalog.get_by_name("old")
    segs = [s for s in meta.segments.list(old.collection_id) if s.deltalogs]
    assert segs and all(s.source for s in segs)
    meta.segments.save([s.replace(delta_partitions=None) for s in segs])
    assert rows(meta, store, "old") == w.model.visible()   # the legacy translation reads it right
    return w


def test_a_collection_restored_before_the_change_can_be_restored_again(meta, store, settings):
    w = _legacy_restored(meta, store, settings)
    snap_and_restore(meta, store, "old", "again")
    assert rows(meta, store, "again") == w.model.visible()


def test_the_copy_of_a_legacy_restored_collection_is_readable(meta, store, settings):
    """The same without restore's compare: the new target itself cannot be read."""
    w = _legacy_restored(meta, store, settings)
    snap_and_restore(meta, store, "old", "again", compare=False)
    assert rows(meta, store, "again") == w.model.visible()


def test_a_legacy_restored_collection_exports_and_imports(meta, store, settings, etcd_server, tmp_path):
    from seglake.lifecycle import snapshot
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore
    from bundle_restore_helpers import restore_bundle
    from copy_model_helpers import other_root, quiet

    w = _legacy_restored(meta, store, settings)
    snapshot.create(meta, store, "old", "b")
    backup = LocalStore(tmp_path / "backup")
    exports.export(meta, store, backup, "old", "b", **quiet)
    meta2, store2, _ = other_root(etcd_server, tmp_path)
    try:
        restore_bundle(meta2, store2, backup, "old", "b", "back")
        assert rows(meta2, store2, "back") == w.model.visible()
    finally:
        meta2.close()


def test_a_legacy_restored_collection_with_a_scoped_delete_into_an_empty_partition_reads(meta, store, settings):
    """A delete scoped to a partition that had no rows in the snapshot (an idempotent
    pipeline's delete, say): a legacy restore copied no segment of that partition, so
    its `source` records cannot name the id. It hides nothing (rows written into that
    partition of the copy later are newer than every copied delete): reading it as
    "nothing" is exact; reading it as an error makes the whole collection unreadable
    after the upgrade (before: read as every partition, hiding rows of _default and p1)."""
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1", "p2"])
    w.insert("src", range(1, 6), "_default", 1.0)
    w.insert("src", range(1, 6), "p1", 2.0)
    w.flush("src")
    w.delete("src", [1, 2], partition="p2")      # p2 is empty: hides nothing
    w.delete("src", [3], partition="p1")
    w.flush("src")
    assert rows(meta, store, "src") == w.model.visible()
    snap_and_restore(meta, store, "src", "old")
    old = meta.catalog.get_by_name("old")
    meta.segments.save([s.replace(delta_partitions=None) for s in meta.segments.list(old.collection_id)
                        if s.deltalogs])          # as restored before d313d27
    assert rows(meta, store, "old") == w.model.visible()
    # and a new snapshot of it carries "hides nothing" to its copies
    snap_and_restore(meta, store, "old", "again")
    assert rows(meta, store, "again") == w.model.visible()
