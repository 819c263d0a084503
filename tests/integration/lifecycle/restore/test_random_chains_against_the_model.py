"""Issue 26, adversary rows4: random chains of copies, each judged against a model of
every acknowledged operation (pk, partition NAME, value), not only against its source.

A chain of 7 hops, each one of: a restore of a snapshot; a full bundle round trip into
the OTHER etcd root (two roots whose allocators collide: small ids name different
partitions and segments on each side); an incremental bundle (an earlier bundle of the
same collection first, so most files are reused) into the other root; a compaction in
place; a drop then undrop; a restore to the current instant (window, a snapshot first).
Before every hop the current collection gets random writes: inserts, upserts and deletes
scoped to each of three partitions, collection-wide deletes, pks touching rows written by
earlier hops; some flushed, some left in the log at the hop. Seeded: a failure names its
seed and hop."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, copyjob, drop, pitr, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import Writer, other_root, quiet, rows, snap_and_restore
from pitr_model import copy_and_replay
from seglake.lifecycle.flush import flush_pchannel
from wal_helpers import pchannels

PARTS = ["_default", "p1", "p2"]
HOPS = ("restore", "bundle", "incremental", "compact", "undrop", "as_of")


def _writes(rng: random.Random, w: Writer, name: str, hop: int, flush_last: bool) -> None:
    base = 100 * hop
    for i in range(rng.randint(4, 8)):
        op = rng.choice(["insert", "insert", "upsert", "delete_scoped", "delete_all", "flush"])
        pks = rng.sample(range(max(0, base - 150), base + 60), rng.randint(1, 12))
        part = rng.choice(PARTS)
        v = float(1000 * hop + i)
        if op in ("insert", "upsert"):
            w.insert(name, pks, part, v, upsert=op == "upsert")
        elif op == "delete_scoped":
            w.delete(name, pks, partition=part)
        elif op == "delete_all":
            w.delete(name, pks, partition=None)
        else:
            w.flush(name)
    if flush_last:
        w.flush(name)


def _check(meta, store, name, model, where):
    got, want = rows(meta, store, name), model.visible()
    assert got == want, (where, sorted((got - want).items())[:6], sorted((want - got).items())[:6])
    return sum(want.values())


@pytest.mark.parametrize("seed", [11, 23, 37])
def test_a_random_chain_of_copies_equals_the_model(meta, store, settings, etcd_server, tmp_path, seed):
    rng = random.Random(seed)
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "r")
    sides = [(meta, store, settings), (meta2, store2, settings2)]
    side = 0
    backup = LocalStore(tmp_path / "backup")
    try:
        w = Writer(meta, store, settings)
        name = "h0"
        w.create(name, PARTS)
        pitr.set_window(meta, name, "1h")
        _writes(rng, w, name, 0, flush_last=True)
        audited = _check(meta, store, name, w.model, (seed, 0, "start"))
        plan = [rng.choice(HOPS) for _ in range(7)]
        for hop, kind in enumerate(plan, start=1):
            m, s, st = sides[side]
            w = Writer(m, s, st, w.model)
            _writes(rng, w, name, hop, flush_last=kind in ("restore", "bundle", "incremental", "compact"))
            new = f"h{hop}"
            where = (seed, hop, kind, plan)
            if kind == "restore":
                snap_and_restore(m, s, name, new)
            elif kind in ("bundle", "incremental"):
                if kind == "incremental":
                    snapshot.create(m, s, name, f"{new}a")
                    exports.export(m, s, backup, name, f"{new}a", **quiet)
                    w.insert(name, [100 * hop + 90], "p2", float(hop), upsert=True)
                    w.delete(name, [100 * hop + 89, 100 * hop - 3], partition="p1")
                    w.flush(name)
                snapshot.create(m, s, name, new)
                exports.export(m, s, backup, name, new, **quiet)
                side = 1 - side
                m, s, st = sides[side]
                restore_bundle(m, s, backup, name, new, new)
            elif kind == "compact":
                compaction.compact(m, s, name, compaction.Policy(min_segment_rows=1000, target_rows=rng.choice([5, 40]),
                                                                 delete_ratio=0.0, protection=0.0, l0_age=0.0))
                assert _check(m, s, name, w.model, where + ("after compaction",)) >= 0
                snap_and_restore(m, s, name, new)
            elif kind == "undrop":
                coll = m.catalog.get_by_name(name)
                snapshot.create(m, s, name, f"{new}base")      # a restored collection's rows are in no log
                _writes(rng, w, name, hop + 50, flush_last=rng.random() < 0.5)
                drop.begin_drop(m, s, st, name)
                for p in pchannels(coll):
                    flush_pchannel(m, s, p, st, flush_all=False)
                assert drop.finish_drop(m, name, collection_id=coll.collection_id)["state"] == "Dropped"
                job = pitr.undrop(m, s, name, new)
                copyjob.plan(m, job, 3)
                copyjob.run_inline(m, s, job)
                copyjob.finalize(m, job)
                pitr.replay(m, s, st, m.catalog.get_by_name(new).collection_id)
            else:   # as_of: the collection's copied rows are in no log: a snapshot first
                snapshot.create(m, s, name, f"{new}base")
                _writes(rng, w, name, hop + 50, flush_last=rng.random() < 0.5)
                t = m.tso.now()
                copy_and_replay(m, s, st, pitr.restore_as_of(m, s, name, new, t), new)
            name = new
            m, s, st = sides[side]
            pitr.set_window(m, name, "1h")
            audited += _check(m, s, name, w.model, where)
        print("seed", seed, "plan", plan, "rows compared", audited)
    finally:
        meta2.close()
