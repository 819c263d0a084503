"""Attack s23: the floor a checkpoint-less vchannel now folds below (its collection's
creation, or a point-in-time target's instant: folding.written_before) under a fuzz:
copies (a restore, a restore to a time) written through their own WAL with writes left
UNFLUSHED (no checkpoint yet) while compactions fold with l0_age 0 -- inserts, upserts
across partitions, scoped and collection-wide deletes hitting copied rows and rows still in
the log, retries by seq. After every flush the visible rows equal the model row by row."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.wal.client import WalClient

from compaction_helpers import Writer, mixed_workload, rows
from copy_model_helpers import snap_and_restore, table
from pitr_model import copy_and_replay

pytestmark = pytest.mark.etcd

PARTS = ["_default", "p1", "p2"]
FOLD = compaction.Policy(min_segment_rows=1000, target_rows=50, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _round(rng, w, meta, store, settings, name, rnd):
    for i in range(rng.randint(3, 7)):
        op = rng.choice(["insert", "upsert", "scoped", "all", "seq"])
        pks = rng.sample(range(1, 120), rng.randint(1, 6))
        part = rng.choice(PARTS)
        v = float(1000 * rnd + i)
        if op in ("insert", "upsert"):
            w.insert(name, pks, part, v, upsert=op == "upsert")
        elif op == "scoped":
            w.delete(name, pks, partition=part)
        elif op == "all":
            w.delete(name, pks)
        else:
            seq = 100 * rnd + i + 1
            for _ in range(2):      # the call, then its retry (answered from the record)
                with WalClient(meta, store, settings, producer_id=f"p-{name}") as c:
                    c.insert(name, table(pks, v), partition=part, upsert=True, seq=seq)
            w.model.upsert(pks, part, v)
        if rng.random() < 0.35:
            compaction.compact(meta, store, name, FOLD, now=time.time() + 1)   # writes still in the log
    compaction.compact(meta, store, name, FOLD, now=time.time() + 1)
    w.flush(name)
    got, want = rows(meta, store, name), w.model.visible()
    assert got == want, (name, rnd, sorted((got - want).items())[:6], sorted((want - got).items())[:6])
    compaction.compact(meta, store, name, FOLD, now=time.time() + 1)
    assert rows(meta, store, name) == want, (name, rnd, "after a compaction of the flushed state")


@pytest.mark.parametrize("seed", [2, 13, 31])
def test_copies_fold_below_their_creation_while_their_log_holds_writes(meta, store, settings, seed):
    rng = random.Random(seed)
    w = Writer(meta, store, settings)
    w.create("src", PARTS, shards=2)
    pitr.set_window(meta, "src", "1h")
    snapshot.create(meta, store, "src", "empty")        # the window's base
    for step in range(3):
        mixed_workload(w, "src", step)
    model_src = w.model
    if rng.random() < 0.5:
        snap_and_restore(meta, store, "src", "copy")
    else:
        copy_and_replay(meta, store, settings, pitr.restore_as_of(meta, store, "src", "copy", meta.tso.now()), "copy")
    assert rows(meta, store, "copy") == model_src.visible()
    for rnd in range(4):
        _round(rng, w, meta, store, settings, "copy", rnd)
