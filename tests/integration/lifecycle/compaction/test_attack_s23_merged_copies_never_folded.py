"""Attack s23 (LOW, liveness; s21 F5's class again): a restored collection that is only
read, whose copied delete logs were MERGED before they were old enough to fold, never folds
them: the merge output carries the copied deletes but not the copy's `source`, so
folding._floor's copy rule no longer applies, and the target's vchannels have no
checkpoint until it is written through the WAL.

Real etcd, files, WAL and flusher (the source), a real restore."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, rows, segments
from copy_model_helpers import snap_and_restore

pytestmark = pytest.mark.etcd


def test_a_restored_collection_folds_copied_deletes_after_they_were_merged(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1"], shards=2)
    for p in ("_default", "p1"):
        w.insert("src", range(1, 41), p, 1.0)
    w.flush("src")
    w.delete("src", [1, 2, 3, 30])
    w.flush("src")
    w.delete("src", [5, 6], partition="p1")
    w.flush("src")
    w.insert("src", range(50, 53), "p1", 2.0)
    w.flush("src")
    snap_and_restore(meta, store, "src", "copy")
    before = exact(meta, store, "copy")
    young = compaction.Policy(min_segment_rows=1000, target_rows=10**6, delete_ratio=1.0, protection=0.0,
                              l0_age=3600.0)
    compaction.compact(meta, store, "copy", young)          # merges only: the deletes are too young to fold
    assert exact(meta, store, "copy") == before
    assert any(x.source is None and x.deltalogs for x in segments(meta, "copy")), "nothing merged"
    old = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    for _ in range(3):
        compaction.compact(meta, store, "copy", old, now=time.time() + 5)
        assert exact(meta, store, "copy") == before
    assert rows(meta, store, "copy") == w.model.visible()
    carried = sum(b.entries for x in segments(meta, "copy") for b in x.deltalogs)
    assert carried == 0, f"after 3 compactions the restored collection still carries {carried} delete entries"
