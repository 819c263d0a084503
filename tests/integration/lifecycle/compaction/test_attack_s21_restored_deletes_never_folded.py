"""Attack s21 (LOW, liveness): a restored collection that is only read never folds the
delete logs it copied.

A carrier is foldable only at or below its vchannel's checkpoint (folding.foldable: "No
checkpoint yet: nothing folded"). A restore target gets no checkpoint until something is
written to it through the WAL, so a restored collection that is only read keeps every copied
delete log (and every reader applies it) however often it is compacted -- though a copied
delete can never hide a row written later (the copy advances the TSO past what it copied:
every WAL row of the target, retried calls included, is newer), so it is foldable as soon
as the rows it hides are rewritten.

Real etcd, files, WAL and flusher (the source), a real restore."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, rows, segments
from copy_model_helpers import snap_and_restore

pytestmark = pytest.mark.etcd


def test_a_restored_collection_folds_the_deletes_it_copied(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1"], shards=2)
    for p in ("_default", "p1"):
        w.insert("src", range(1, 41), p, 1.0)
    w.flush("src")
    w.delete("src", [1, 2, 3, 30])                  # collection-wide: L0 segments
    w.flush("src")
    w.delete("src", [5, 6], partition="p1")
    w.flush("src")
    snap_and_restore(meta, store, "src", "copy")
    before = exact(meta, store, "copy")
    pol = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    for _ in range(3):
        compaction.compact(meta, store, "copy", pol, now=time.time() + 5)
        assert exact(meta, store, "copy") == before
    assert rows(meta, store, "copy") == w.model.visible()
    carried = sum(b.entries for x in segments(meta, "copy") for b in x.deltalogs)
    assert carried == 0, f"after 3 compactions the restored collection still carries {carried} delete entries"
