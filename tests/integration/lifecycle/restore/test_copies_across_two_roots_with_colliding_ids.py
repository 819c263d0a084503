"""A chain of hops mixing restores and bundle round trips between two etcd roots
whose partition ids collide (both allocators start afresh: small ids name different partitions
on each side), with partition-scoped deletes, collection-wide deletes and upserts into
non-default partitions written into EVERY intermediate copy after it was made; a
collection of eight partitions. Every copy is compared with a model of every
acknowledged operation (pk, partition name, value)."""

from __future__ import annotations

import copy

from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, snap_and_restore

PARTS = ["_default"] + [f"p{i}" for i in range(1, 8)]


def _writes(w: Writer, name: str, round_: int):
    """Mixed ops into every partition; pks of round r start at 1000*r (and touch older pks)."""
    b = 1000 * round_
    for i, p in enumerate(PARTS):
        w.insert(name, range(b, b + 20), p, float(10 * round_ + i))
    w.flush(name)
    for i, p in enumerate(PARTS):
        w.delete(name, [b + i, b + i + 1], partition=p)              # scoped, different pks per partition
    w.delete(name, [b + 15], partition=None)                         # collection-wide
    w.insert(name, [b + 16, b + 17], "p5", 500.0 + round_, upsert=True)   # upsert into a non-default partition
    w.delete(name, [3, 4], partition="p3")                           # reaches rows written by earlier hops
    w.insert(name, [5], "p6", 600.0 + round_, upsert=True)
    w.flush(name)
    assert rows(w.meta, w.store, name) == w.model.visible(), f"{name} differs from the model after round {round_}"


def _bundle_to(meta, store, source: str, meta2, store2, backup, target: str, tag: str):
    snapshot.create(meta, store, source, tag)
    exports.export(meta, store, backup, source, tag, **quiet)
    restore_bundle(meta2, store2, backup, source, tag, target)


def test_chain_of_restores_and_bundles_across_colliding_roots(meta, store, settings, etcd_server, tmp_path):
    w = Writer(meta, store, settings)
    w.create("src", PARTS)
    _writes(w, "src", 0)

    snap_and_restore(meta, store, "src", "r1")
    assert rows(meta, store, "r1") == w.model.visible()
    _writes(w, "r1", 1)

    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "b")
    try:
        backup = LocalStore(tmp_path / "backup")
        _bundle_to(meta, store, "r1", meta2, store2, backup, "b1", "x1")
        w2 = Writer(meta2, store2, settings2, copy.deepcopy(w.model))
        # b1's delta logs hold root A's partition ids, none of them b1's own: read by name
        b1 = meta2.catalog.get_by_name("b1")
        held = {i for s in meta2.segments.list(b1.collection_id) for i in (s.delta_partitions or {})}
        assert held and not held & {p.partition_id for p in b1.partitions}
        assert rows(meta2, store2, "b1") == w2.model.visible()
        _writes(w2, "b1", 2)

        snap_and_restore(meta2, store2, "b1", "b2")
        assert rows(meta2, store2, "b2") == w2.model.visible()
        _writes(w2, "b2", 3)

        _bundle_to(meta2, store2, "b2", meta, store, LocalStore(tmp_path / "backup2"), "a4", "x2")
        w4 = Writer(meta, store, settings, copy.deepcopy(w2.model))
        assert rows(meta, store, "a4") == w4.model.visible()
        _writes(w4, "a4", 4)
        snap_and_restore(meta, store, "a4", "a5")
        assert rows(meta, store, "a5") == w4.model.visible()
        _writes(w4, "a5", 5)
        snap_and_restore(meta, store, "a5", "a6")
        assert rows(meta, store, "a6") == w4.model.visible()
    finally:
        meta2.close()
