"""attack-s22: restores to instants of a source that is compacted (L0 folds and merges with
l0_age 0) and snapshotted several times while it is written: upserts carried by several
appends (first append alone), txns with upserts and deletes, partition-scoped and
collection-wide deletes; each restore (at message ticks, tick-1, a txn's begin..commit,
snapshot instants) compared with the model; then an undrop and a database at one instant."""

from __future__ import annotations

import os
import random

import pytest

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.wal import message as M
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, copy_and_replay, flush_all, restore_to, route0, rows, visible_of

FOLD = dict(min_segment_rows=1000, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _ticks(model, res):
    return sorted({m.time_tick for m in model.messages(res) if m.type in (M.INSERT, M.DELETE, M.COMMIT_TXN,
                                                                          M.BEGIN_TXN)})


def _produce(meta, store, settings, rng, steps=14, on_snapshot=None):
    instants = []
    with WalClient(meta, store, settings, batch_rows=3) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.parts = {p.name: p.partition_id for p in coll.partitions}
        v = 1.0
        model.record(c.insert("src", rows(range(1, 25), v)), v)
        if on_snapshot is not None and rng.random() < 0.5:   # a first bundle before any flush (or later)
            snapshot.create(meta, store, "src", "s_first")
            on_snapshot("s_first")
        for step in range(steps):
            v += 1.0
            op = rng.choice(["insert", "upsert", "upsert", "delete", "delete_p1", "txn", "txn_upsert",
                             "flush", "compact", "snap"])
            pks = rng.sample(range(1, 40), rng.randint(1, 8))
            part = rng.choice(["_default", "p1"])
            if op == "insert":
                res = c.insert("src", rows(pks, v), partition=part)
            elif op == "upsert":
                res = c.upsert("src", rows(pks, v), partition=part)
            elif op == "delete":
                res = c.delete("src", pks)
            elif op == "delete_p1":
                res = c.delete("src", pks, partition="p1")
            elif op in ("txn", "txn_upsert"):
                pk0 = [int(x) for x in route0(pks + list(range(1, 40)))][:len(pks)]
                res = c.insert("src", rows(pk0, v), partition=part, txn=True, upsert=op == "txn_upsert")
                model.record(res, v, txn=True)
                instants += [t for tk in _ticks(model, res) for t in (tk - 1, tk, tk + 1)]
                continue
            elif op == "flush":
                flush_all(meta, store, settings, coll, flush_all=rng.random() < 0.5)
                instants.append(meta.tso.reserve(1, linearizable=True))
                continue
            elif op == "compact":
                flush_all(meta, store, settings, coll)
                compaction.compact(meta, store, "src", compaction.Policy(target_rows=rng.choice([4, 30]), **FOLD))
                instants.append(meta.tso.reserve(1, linearizable=True))
                continue
            else:
                flush_all(meta, store, settings, coll, flush_all=rng.random() < 0.5)
                snapshot.create(meta, store, "src", f"s{step}")
                if on_snapshot is not None:
                    on_snapshot(f"s{step}")
                instants.append(meta.tso.reserve(1, linearizable=True))
                continue
            model.record(res, v)
            instants += [t for tk in _ticks(model, res) for t in (tk - 1, tk)]
        flush_all(meta, store, settings, coll)
        compaction.compact(meta, store, "src", compaction.Policy(target_rows=30, **FOLD))
        now = meta.tso.reserve(1, linearizable=True)
    return coll, model, instants, now


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S22_SEEDS", "1,2").split(",")])
def test_restores_to_instants_of_a_compacted_source_equal_the_model(meta, store, settings, seed):
    rng = random.Random(seed)
    settings = settings.replace(flush_seal_rows=5)
    coll, model, instants, now = _produce(meta, store, settings, rng)
    # the source itself, now, equals the model
    assert visible_of(meta, store, coll) == model.visible(now)
    picks = sorted(set(rng.sample(sorted(set(instants)), min(10, len(set(instants))))) | {now})
    bad = []
    for i, t in enumerate(picks):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        if got != want:
            bad.append((i, t, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))
    assert not bad, (seed, bad)


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S22_SEEDS", "1,2").split(",")])
def test_restores_from_the_target_of_a_compacted_source_equal_the_model(meta, store, settings, tmp_path, seed):
    """The same from the backup target alone: every snapshot exported as taken, the WAL
    archived from the start; restores at instants after the first bundle."""
    from seglake.lifecycle import retention
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore

    from pitr_model import restore_from_target

    rng = random.Random(seed)
    settings = settings.replace(flush_seal_rows=5)
    backup = LocalStore(tmp_path / "backup")
    first = []

    def exported(name):
        exports.export(meta, store, backup, "src", name, say=lambda line: None)
        if not first:
            retention.set_policy(meta, "src", {"keep_last": 50, "archive": True})
            first.append(meta.snapshots.get(meta.catalog.get_by_name("src").collection_id, name)[0].consistent_ts)
    coll, model, instants, now = _produce(meta, store, settings, rng, steps=18, on_snapshot=exported)
    if not first:   # no snapshot in this seed: one now (after everything), the restore at its instant
        snapshot.create(meta, store, "src", "s_end")
        exported("s_end")
        now = meta.tso.reserve(1, linearizable=True)
    archive.run(meta, store, backup)
    usable = sorted({t for t in instants if t >= first[0]} | {now})
    picks = sorted(set(rng.sample(usable, min(6, len(usable)))) | {now})
    bad = []
    for i, t in enumerate(picks):
        target = restore_from_target(meta, store, settings, backup, "src", f"x{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        if got != want:
            bad.append((i, t, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))
    assert not bad, (seed, bad)
