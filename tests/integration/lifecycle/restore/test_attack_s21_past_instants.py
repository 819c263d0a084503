"""Adversary s21 (issue 26): restores to PAST instants of collections that are themselves
copies (bundle restores into another root with colliding ids, restores of restores,
compacted in between), each judged against the model as it was at that instant.

The random chains compare each copy at "now"; here the model is recorded after every
acknowledged call with the TSO's now(), and restores to a time go to instants between
writes, flushes, snapshots and compactions of the copied collection."""

from __future__ import annotations

import copy
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, snap_and_restore
from pitr_model import copy_and_replay, route0
from seglake.wal.client import WalClient

PARTS = ["_default", "p1", "p2"]


class Timed(Writer):
    """A Writer that records (tso.now(), the model's visible rows) after every call."""

    def __init__(self, *a, marks=None, **kw):
        super().__init__(*a, **kw)
        self.marks = marks if marks is not None else []
        self.recording = False

    def _mark(self):
        if self.recording:
            self.marks.append((self.meta.tso.now(), copy.deepcopy(self.model.visible())))

    def insert(self, name, pks, partition="_default", v=1.0, upsert=False, txn=False, batch_rows=None):
        from copy_model_helpers import table
        kw = {} if batch_rows is None else {"batch_rows": batch_rows}
        with WalClient(self.meta, self.store, self.settings, **kw) as c:
            c.insert(name, table(pks, v), partition=partition, upsert=upsert, txn=txn)
        (self.model.upsert if upsert else self.model.insert)(pks, partition, v)
        self._mark()

    def delete(self, name, pks, partition=None, txn=False, batch_rows=None):
        kw = {} if batch_rows is None else {"batch_rows": batch_rows}
        with WalClient(self.meta, self.store, self.settings, **kw) as c:
            c.delete(name, list(pks), partition=partition, txn=txn)
        self.model.delete(pks, partition)
        self._mark()

    def flush(self, name):
        super().flush(name)
        self._mark()


def _writes(rng, w, name, hop):
    base = 100 * hop
    for i in range(rng.randint(5, 9)):
        op = rng.choice(["insert", "insert", "upsert", "upsert", "delete_scoped", "delete_all", "flush", "compact"])
        pks = rng.sample(range(max(0, base - 150), base + 40), rng.randint(1, 10))
        part = rng.choice(PARTS)
        v = float(1000 * hop + i)
        txn = rng.random() < 0.3
        if txn:
            pks = [int(x) for x in route0(pks)] or [base + 1000 + i]
            pks = [int(x) for x in route0(pks + list(range(base + 1000, base + 1010)))][:len(pks)]
        br = rng.choice([None, 2, 3])
        if op in ("insert", "upsert"):
            w.insert(name, pks, part, v, upsert=op == "upsert", txn=txn, batch_rows=br)
        elif op == "delete_scoped":
            w.delete(name, pks, partition=part, txn=txn, batch_rows=br)
        elif op == "delete_all":
            w.delete(name, pks, partition=None, txn=txn, batch_rows=br)
        elif op == "flush":
            w.flush(name)
        else:
            w.flush(name)
            compaction.compact(w.meta, w.store, name, compaction.Policy(
                min_segment_rows=1000, target_rows=rng.choice([6, 50]), delete_ratio=0.0, protection=0.0,
                l0_age=0.0))
            w._mark()


@pytest.mark.parametrize("seed", [int(x) for x in __import__("os").environ.get("S21_SEEDS", "1").split(",")])
def test_restores_to_past_instants_of_copied_collections_equal_the_model(meta, store, settings, etcd_server,
                                                                          tmp_path, seed):
    rng = random.Random(seed)
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "p")
    sides = [(meta, store, settings), (meta2, store2, settings2)]
    side = 0
    backup = LocalStore(tmp_path / "backup")
    n = 0
    try:
        w = Timed(meta, store, settings)
        name = "h0"
        w.create(name, PARTS)
        pitr.set_window(meta, name, "1h")
        w.recording = True
        for hop in range(1, 5):
            m, s, st = sides[side]
            _writes(rng, w, name, hop)
            w.flush(name)
            # restores to past instants of `name` (recorded since its first snapshot)
            for k, (t, want) in enumerate(rng.sample(w.marks, min(3, len(w.marks)))):
                tgt = f"t{hop}_{k}"
                copy_and_replay(m, s, st, pitr.restore_as_of(m, s, name, tgt, t, engine="inline"), tgt)
                got = rows(m, s, tgt)
                n += sum(want.values())
                assert got == want, (seed, hop, k, t, sorted((got - want).items())[:5],
                                     sorted((want - got).items())[:5])
            new = f"h{hop}"
            if rng.random() < 0.6:      # a bundle into the other root
                snapshot.create(m, s, name, new)
                exports.export(m, s, backup, name, new, **quiet)
                side = 1 - side
                m, s, st = sides[side]
                restore_bundle(m, s, backup, name, new, new)
            else:
                snap_and_restore(m, s, name, new)
            name = new
            w = Timed(m, s, st, w.model)
            pitr.set_window(m, name, "1h")
            assert rows(m, s, name) == w.model.visible(), (seed, hop, "copy")
            snapshot.create(m, s, name, f"{new}base")   # its copied rows are in no log: the base
            w.recording = True
        print("seed", seed, "rows compared", n)
    finally:
        meta2.close()
