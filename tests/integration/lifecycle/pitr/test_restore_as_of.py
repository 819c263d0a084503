"""Restore to a time against a model of the acknowledged operations (issue 30): a producer
writes inserts, deletes, upserts (two partitions) and transactions, with flushes, seals
by size and snapshots between them; restores at many instants -- between calls, inside an
open transaction, exactly at a delete's tick and one tick before it, just after a seal,
before and after each snapshot -- each equal to the model, row by row (pk and value,
duplicates counted). The source is untouched."""

from __future__ import annotations

import random

import pytest

from seglake.lifecycle import pitr, snapshot
from seglake.visibility import visible_rows
from seglake.wal import message as M
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, route0, rows, visible_of


def _produce(meta, store, settings, seed: int = 7):
    """The operations; returns (model, instants: [(label, tso)])."""
    rng = random.Random(seed)
    instants = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        next_pk, v = 1, 0.0
        live = []
        for step in range(40):
            v += 1
            kind = rng.choice(["insert", "insert", "delete", "upsert", "txn", "flush", "seal", "partdel"])
            if step in (12, 27):
                kind = "snapshot"
            if kind == "insert":
                pks = list(range(next_pk, next_pk + rng.randint(3, 12))) + rng.sample(live, min(2, len(live)))
                next_pk += 12
                part = rng.choice(["_default", "p1"])
                model.record(c.insert("src", rows(pks, v), partition=part), v)
                live += pks
            elif kind == "delete" and live:
                gone = rng.sample(live, min(len(live), rng.randint(1, 6)))
                res = c.delete("src", gone)
                model.record(res, v)
                ticks = [m.time_tick for m in model.messages(res) if m.type == M.DELETE]
                instants += [("at a delete", min(ticks)), ("just before a delete", min(ticks) - 1)]
            elif kind == "partdel" and live:
                model.record(c.delete("src", rng.sample(live, min(len(live), 3)), partition="p1"), v)
            elif kind == "upsert" and live:
                pks = rng.sample(live, min(len(live), 4)) + [next_pk]
                next_pk += 1
                model.record(c.upsert("src", rows(pks, v)), v)
                live += pks[-1:]
            elif kind == "txn":
                pks = [int(x) for x in route0(range(next_pk, next_pk + 60))][:20]   # one vchannel, 3 appends
                next_pk += 60
                res = c.insert("src", rows(pks, v), txn=True)
                model.record(res, v, txn=True)
                msgs = model.messages(res)
                body = [m.time_tick for m in msgs if m.type == M.INSERT]
                begin = [m.time_tick for m in msgs if m.type == M.BEGIN_TXN][0]
                commit = [m.time_tick for m in msgs if m.type == M.COMMIT_TXN][0]
                instants += [("inside an open transaction", body[1]), ("at a txn's begin", begin),
                             ("one tick before a commit", commit - 1), ("at a commit", commit)]
                live += pks
            elif kind == "flush":
                c.flush("src")
                flush_all(meta, store, settings, coll)
                instants.append(("just after a seal", meta.tso.now()))
            elif kind == "seal":
                flush_all(meta, store, settings, coll, flush_all=False)   # by size only: buffers stay
                instants.append(("after a partial flush", meta.tso.now()))
            elif kind == "snapshot":
                # a few rows left growing in _default while p1 seals by size: the snapshot's
                # checkpoint is below rows it holds (the replay must skip them by high-water)
                model.record(c.insert("src", rows(range(next_pk, next_pk + 3), v)), v)
                model.record(c.insert("src", rows(range(next_pk + 3, next_pk + 63), v), partition="p1"), v)
                model.record(c.delete("src", [next_pk + 4]), v)
                next_pk += 63
                flush_all(meta, store, settings, coll, flush_all=False)
                instants.append(("just before a snapshot", meta.tso.now()))
                snapshot.create(meta, store, "src", f"s{step}")
                instants.append(("just after a snapshot", meta.tso.now()))
            instants.append((f"after step {step} ({kind})", meta.tso.now()))
    return coll, model, instants


@pytest.fixture
def small_seals(settings):
    return settings.replace(flush_seal_rows=25)


def test_restores_at_many_instants_equal_the_model(meta, store, small_seals):
    settings = small_seals
    coll, model, instants = _produce(meta, store, settings)
    flush_all(meta, store, settings, coll, flush_all=False)
    before = visible_of(meta, store, coll)
    rng = random.Random(1)
    special = [x for x in instants if not x[0].startswith("after step")]
    plain = rng.sample([x for x in instants if x[0].startswith("after step")], 8)
    chosen = special[:14] + plain
    chosen += [x for x in instants if "commit" in x[0]][:2]
    assert any(k == "inside an open transaction" for k, _ in chosen)
    assert any(k == "at a delete" for k, _ in chosen)
    assert any(k == "just after a seal" for k, _ in chosen)
    overlaps = [v for r in meta.snapshots.list(coll.collection_id) for v, pos in r.positions.items()
                if max(pos["part_hw"].values(), default=0) > pos["checkpoint"][3]]
    assert overlaps, "no snapshot holds rows above its checkpoint: the high-water skip is not exercised"
    chosen += [x for x in instants if "snapshot" in x[0]]
    for i, (label, t) in enumerate(chosen):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        assert got == want, (label, t, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        assert target.state == "Created"
    # the source was never touched
    assert visible_of(meta, store, coll) == before
    assert meta.catalog.get(coll.collection_id).state == "Created"


def test_an_instant_before_any_snapshot_replays_from_creation(meta, store, small_seals):
    settings = small_seals
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 30), 1.0)), 1.0)
        t1 = meta.tso.now()
        model.record(c.delete("src", [3, 4, 5]), 2.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "later")
        model.record(c.upsert("src", rows([6, 7], 3.0)), 3.0)
        t2 = meta.tso.now()
    a = restore_to(meta, store, settings, "src", "a", t1)
    assert pitr.summary(meta, a)["snapshot"] is None
    assert visible_of(meta, store, a) == model.visible(t1)
    b = restore_to(meta, store, settings, "src", "b", t2)
    assert pitr.summary(meta, b)["snapshot"] == "later"
    assert visible_of(meta, store, b) == model.visible(t2)
    # writes to a restored target land after everything it holds
    with WalClient(meta, store, settings) as c:
        c.delete("b", [6])
    flush_all(meta, store, settings, b)
    assert 6 not in visible_rows(meta, store, b.collection_id).column("pk").to_pylist()
