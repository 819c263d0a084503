"""Adversarial, row-exact against a model of every acknowledged write: a legacy bundle
(segments without delta_partitions, as an exporter before the map wrote them) restored
straight from the target; and one bundle restored into two roots at once, each then
restored again (a chain), with partition-scoped deletes and upserts."""

from __future__ import annotations

import copy
import sys
import threading
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup import bundle_restore
from seglake.storage import layout
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, snap_and_restore

PARTS = ["_default", "p1", "p2", "p3"]


def _writes(w: Writer, name: str, r: int):
    b = 1000 * r
    for i, p in enumerate(PARTS):
        w.insert(name, range(b, b + 10), p, float(10 * r + i))
    w.flush(name)
    w.delete(name, [b + 1, b + 2], partition="p1")
    w.delete(name, [b + 3], partition=None)
    w.insert(name, [b + 4, b + 5], "p2", 200.0 + r, upsert=True)
    w.delete(name, [1, 2], partition="p3")
    w.flush(name)
    assert rows(w.meta, w.store, name) == w.model.visible()


def _restore(meta, store, target, coll, bundle, to):
    out, _ = restore_bundle(meta, store, target, coll, bundle, to, tasks=1)
    cmp = bundle_restore.compare_with_bundle(meta, store, target, coll, bundle, to)
    assert cmp["visible_differing"] == (0, 0), cmp
    return out


def _exported_source(meta, store, settings, tmp_path):
    """(the Writer of collection src after round 0 of the workload, the backup target
    holding its bundle b)."""
    w = Writer(meta, store, settings)
    w.create("src", PARTS)
    _writes(w, "src", 0)
    snapshot.create(meta, store, "src", "b")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "src", "b", **quiet)
    return w, target


def test_a_legacy_bundle_without_delta_partitions_restores_row_exact(meta, store, settings, etcd_server, tmp_path):
    w, target = _exported_source(meta, store, settings, tmp_path)
    key = layout.bundle_doc("default", "src", "b")
    doc = msgspec.json.decode(target.get(key))
    n = 0
    for e in doc["segments"]:
        if "delta_partitions" in e:
            del e["delta_partitions"]
            n += 1
    assert n and any(e["deltalogs"] for e in doc["segments"])
    bundles.write(target, doc)
    meta2, store2, s2 = other_root(etcd_server, tmp_path)
    try:
        _restore(meta2, store2, target, "src", "b", "back")
        assert rows(meta2, store2, "back") == w.model.visible()
        w2 = Writer(meta2, store2, s2, copy.deepcopy(w.model))
        _writes(w2, "back", 1)
        snap_and_restore(meta2, store2, "back", "back2")
        assert rows(meta2, store2, "back2") == w2.model.visible()
    finally:
        meta2.close()


def test_one_bundle_into_two_roots_at_once_then_chained(meta, store, settings, etcd_server, tmp_path):
    w, target = _exported_source(meta, store, settings, tmp_path)
    roots = [other_root(etcd_server, tmp_path, t) for t in ("x", "y")]
    errs = []

    def go(m, s):
        try:
            _restore(m, s, target, "src", "b", "back")
        except BaseException as e:  # noqa: BLE001
            errs.append(e)
    try:
        ts = [threading.Thread(target=go, args=(m, s)) for m, s, _ in roots]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not errs, errs
        for m, s, st in roots:
            assert rows(m, s, "back") == w.model.visible()
        assert holds.holders(target, "default", "src", "b") == []
        # chain: root x writes, exports its own bundle into the same target, root y restores it
        (mx, sx, stx), (my, sy, sty) = roots
        wx = Writer(mx, sx, stx, copy.deepcopy(w.model))
        _writes(wx, "back", 1)
        snapshot.create(mx, sx, "back", "b2")
        exports.export(mx, sx, target, "back", "b2", **quiet)
        _restore(my, sy, target, "back", "b2", "back_x")
        assert rows(my, sy, "back_x") == wx.model.visible()
        wy = Writer(my, sy, sty, copy.deepcopy(wx.model))
        _writes(wy, "back_x", 2)
        snap_and_restore(my, sy, "back_x", "back_x2")
        assert rows(my, sy, "back_x2") == wy.model.visible()
    finally:
        for m, _, _ in roots:
            m.close()


def test_a_bundle_of_an_empty_collection_restores(meta, store, settings, etcd_server, tmp_path):
    w = Writer(meta, store, settings)
    w.create("empty", PARTS)
    snapshot.create(meta, store, "empty", "b")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "empty", "b", **quiet)
    meta2, store2, s2 = other_root(etcd_server, tmp_path)
    try:
        _restore(meta2, store2, target, "empty", "b", "back")
        assert rows(meta2, store2, "back") == w.model.visible()
        assert holds.holders(target, "default", "empty", "b") == []
        w2 = Writer(meta2, store2, s2, copy.deepcopy(w.model))
        _writes(w2, "back", 1)
    finally:
        meta2.close()
