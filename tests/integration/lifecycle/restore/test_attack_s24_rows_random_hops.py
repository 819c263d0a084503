"""Adversary s24 (issue 26): random chains over hops the earlier chains did not mix --
an IMPORT into the other etcd root then a restore of the imported snapshot, a drop + undrop
INTO THE SAME NAME, a restore to a past instant, a bundle restore, compaction + GC at zero
tolerances -- with writes from producers whose clock runs up to 3 s fast (the TSO follows
them), split calls, txns, scoped and wide deletes, upserts across partitions. Each copy,
and each restore to a past instant, equals the model at its instant. Seeded
(S24_SEEDS=1,2,...)."""

from __future__ import annotations

import copy
import os
import random
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, gc, pitr, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, run_restore, snap_and_restore, table
from pitr_model import copy_and_replay, drop_now, route0

# S24_PARTS=p2,p1,zz: partitions in another order, no _default (L0 carriers land in the first)
PARTS = os.environ.get("S24_PARTS", "_default,p1,p2").split(",")
HOPS = ("restore", "bundle", "import", "undrop_same", "as_of", "compact_gc")


class Timed(Writer):
    def __init__(self, *a, marks=None, **kw):
        super().__init__(*a, **kw)
        self.marks = marks if marks is not None else []

    def _mark(self):
        self.marks.append((self.meta.tso.now(), copy.deepcopy(self.model.visible())))

    def call(self, name, op, pks, part, v, *, txn=False, batch_rows=None, fast=False):
        kw = {} if batch_rows is None else {"batch_rows": batch_rows}
        if fast:
            kw["clock"] = lambda: time.time() + 3.0
        with WalClient(self.meta, self.store, self.settings, **kw) as c:
            if op in ("insert", "upsert"):
                c.insert(name, table(pks, v), partition=part, upsert=op == "upsert", txn=txn)
            else:
                c.delete(name, list(pks), partition=part, txn=txn)
        if op == "insert":
            self.model.insert(pks, part, v)
        elif op == "upsert":
            self.model.upsert(pks, part, v)
        else:
            self.model.delete(pks, part)
        self._mark()


def _writes(rng, w: Timed, name: str, hop: int) -> None:
    base = 100 * hop
    for i in range(rng.randint(5, 9)):
        op = rng.choice(["insert", "insert", "upsert", "upsert", "delete_scoped", "delete_all", "flush"])
        pks = rng.sample(range(max(0, base - 150), base + 40), rng.randint(1, 10))
        part = rng.choice(PARTS)
        v = float(1000 * hop + i)
        txn = rng.random() < 0.25
        if txn:
            pks = [int(x) for x in route0(pks + list(range(base + 1000, base + 1010)))][:len(pks)]
        kw = dict(txn=txn, batch_rows=rng.choice([None, 2, 3]), fast=rng.random() < 0.3)
        if op == "flush":
            w.flush(name)
            w._mark()
        elif op == "delete_scoped":
            w.call(name, "delete", pks, part, v, **kw)
        elif op == "delete_all":
            w.call(name, "delete", pks, None, v, **kw)
        else:
            w.call(name, op, pks, part, v, **kw)


def _gc0(meta, store, settings):
    return gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                          force=True))


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S24_SEEDS", "1,2").split(",")])
def test_random_hops_equal_the_model(meta, store, settings, etcd_server, tmp_path, seed):
    rng = random.Random(seed)
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "rh")
    sides = [(meta, store, settings), (meta2, store2, settings2)]
    side = 0
    backup = LocalStore(tmp_path / "backup")
    audited = 0
    plan = [rng.choice(HOPS) for _ in range(6)]
    try:
        w = Timed(meta, store, settings)
        name = "h0"
        w.create(name, PARTS)
        pitr.set_window(meta, name, "1h")
        snapshot.create(meta, store, name, "h0base")
        for hop, kind in enumerate(plan, start=1):
            m, s, st = sides[side]
            _writes(rng, w, name, hop)
            w.flush(name)
            new = f"h{hop}"
            where = (seed, hop, kind, plan)
            if kind == "restore":
                snap_and_restore(m, s, name, new)
            elif kind in ("bundle", "import"):
                snapshot.create(m, s, name, new)
                exports.export(m, s, backup, name, new, **quiet)
                side = 1 - side
                m, s, st = sides[side]
                if kind == "bundle":
                    restore_bundle(m, s, backup, name, new, new)
                else:
                    imports.import_bundle(m, s, backup, name, new, as_collection=f"{new}imp", **quiet)
                    _gc0(m, s, st)
                    run_restore(m, s, f"{new}imp", new, new)
            elif kind == "undrop_same":
                _writes(rng, w, name, hop + 50)        # some left in the log at the drop
                drop_now(m, s, st, name)
                copy_and_replay(m, s, st, pitr.undrop(m, s, name, name), name)
                new = name                             # the name goes on
            elif kind == "as_of":
                t, want = rng.choice(w.marks[-12:])
                copy_and_replay(m, s, st, pitr.restore_as_of(m, s, name, new, t), new)
                got = rows(m, s, new)
                assert got == want, where + ("as of", sorted((got - want).items())[:6],
                                             sorted((want - got).items())[:6])
                audited += sum(want.values())
                from copy_model_helpers import Model
                w.model = Model()
                w.model.rows = [[pk, part, v, True] for (pk, part, v), n in want.items() for _ in range(n)]
            else:
                compaction.compact(m, s, name, compaction.Policy(min_segment_rows=1000, target_rows=rng.choice([6, 40]),
                                                                 delete_ratio=0.0, protection=0.0, l0_age=0.0))
                _gc0(m, s, st)
                snap_and_restore(m, s, name, new)
            name = new
            w = Timed(m, s, st, w.model)
            pitr.set_window(m, name, "1h")
            got, want = rows(m, s, name), w.model.visible()
            assert got == want, where + (sorted((got - want).items())[:6], sorted((want - got).items())[:6])
            audited += sum(want.values())
            snapshot.create(m, s, name, f"{name}base{hop}")   # its copied rows are in no log: a base
            w.marks = []
        print("seed", seed, "plan", plan, "rows compared", audited)
    finally:
        meta2.close()
