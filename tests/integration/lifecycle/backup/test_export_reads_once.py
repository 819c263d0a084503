"""An export reads each source file once (files above bundles.SMALL too: hashed into a
private spool, the data file written from it, hashed again on the way); the bundle it
commits reads back whole, verifies, and its data tags are what the target lists."""

from __future__ import annotations

import collections

from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import verify
from seglake.storage import layout
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


def test_every_source_file_is_read_once_small_or_big(meta, store, tmp_path, monkeypatch):
    demo.seed(meta, store, demo.SeedParams(name="once", partitions=1, segments=3, rows=200, dim=4))
    snapshot.create(meta, store, "once", "s1")
    monkeypatch.setattr(bundles, "SMALL", 256)      # most files take the big-file path
    reads = collections.Counter()
    real_open, real_upto = type(store).open_read, type(store).read_upto

    def counting_open(self, key, *a, **kw):
        reads[key] += 1
        return real_open(self, key, *a, **kw)

    def counting_upto(self, key, *a, **kw):
        reads[key] += 1
        return real_upto(self, key, *a, **kw)
    monkeypatch.setattr(type(store), "open_read", counting_open)
    monkeypatch.setattr(type(store), "read_upto", counting_upto)
    target = LocalStore(tmp_path / "backup")
    rep = exports.export(meta, store, target, "once", "s1", **quiet)
    monkeypatch.undo()
    doc = bundles.read(target, "default", "once", "s1")
    big = [k for k, f in doc["files"].items() if f["size"] > 256]
    assert big and set(reads) == set(doc["files"]) and max(reads.values()) == 1, reads.most_common(3)
    assert rep["read_bytes"] == rep["bytes"] and rep["copied_files"] == len({f["sha256"] for f in doc["files"].values()})
    listed = bundles.blob_tags(target)
    assert all(listed[f["sha256"]][1] == f["data_tag"] for f in doc["files"].values())
    assert verify.verify(target, "once", "s1", **quiet)["ok"]
    for f in doc["files"].values():
        assert bundles.sha256_of(target, layout.bundle_blob(f["sha256"]))[0] == f["sha256"]
