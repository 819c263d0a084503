"""Attack s23 (LOW, liveness; the class of s21 F5, not closed): a collection made by a
restore to a time or an undrop, that is then only read, never folds the deletes its
REPLAY wrote.

s21 F5's fix (folding._floor) lets a copied segment (`source` set) fold without a
checkpoint: its deletes are older than every WAL row of the copy. A point-in-time target
also gets segments from the REPLAY of the source's log (source unset, written directly as
Flushed records while the target is Importing); its vchannels have no checkpoint until
something is written to it through the WAL, so those delete logs -- every delete between
the base snapshot and the instant -- stay for good, and every reader applies them. They
are as safe to fold as the copied ones: `finish` moves the TSO past the instant before
the target is Created, so every later row of the target is newer than every replayed delete.

Real etcd, files, WAL, flusher, copy job and replay."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, pitr, snapshot

from compaction_helpers import Writer, exact, rows, segments
from pitr_model import copy_and_replay, drop_now

pytestmark = pytest.mark.etcd

POL = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)


def _source(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1"], shards=2)
    pitr.set_window(meta, "src", "1h")
    for p in ("_default", "p1"):
        w.insert("src", range(1, 41), p, 1.0)
    w.flush("src")
    snapshot.create(meta, store, "src", "base")
    w.delete("src", [1, 2, 3, 30])                  # after the base: replayed
    w.delete("src", [5, 6], partition="p1")
    w.insert("src", [7, 8], "p1", 2.0, upsert=True)
    w.flush("src")
    return w


def _folds_everything(meta, store, w, name):
    before = exact(meta, store, name)
    assert rows(meta, store, name) == w.model.visible()
    for _ in range(3):
        compaction.compact(meta, store, name, POL, now=time.time() + 5)
        assert exact(meta, store, name) == before
    assert rows(meta, store, name) == w.model.visible()
    carried = sum(b.entries for x in segments(meta, name) for b in x.deltalogs)
    assert carried == 0, f"after 3 compactions {name} still carries {carried} delete entries"


def test_a_point_in_time_target_folds_the_deletes_its_replay_wrote(meta, store, settings):
    w = _source(meta, store, settings)
    copy_and_replay(meta, store, settings, pitr.restore_as_of(meta, store, "src", "then", meta.tso.now()), "then")
    _folds_everything(meta, store, w, "then")


def test_an_undropped_collection_folds_the_deletes_its_replay_wrote(meta, store, settings):
    w = _source(meta, store, settings)
    w.delete("src", [9, 10])                        # in the log only at the drop
    drop_now(meta, store, settings, "src")
    copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "back"), "back")
    _folds_everything(meta, store, w, "back")
