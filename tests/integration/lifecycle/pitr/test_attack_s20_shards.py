"""attack-s20: a collection with more shards than pchannels (17 > PCHANNEL_COUNT 16: two
of its vchannels ride one pchannel), restored to many instants (snapshot with positions
in between, partial flushes), and a whole database at one instant holding it and a
one-shard collection sharing its pchannels: each row-exact with the model."""

from __future__ import annotations

import random

from seglake.lifecycle import pitr, snapshot
from seglake.lifecycle.pitr.database import drive, restore_database_as_of
from seglake.meta.catalog import pchannel_of
from seglake.wal import message as M
from seglake.wal.client import WalClient, route

from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def test_two_vchannels_of_one_collection_on_one_pchannel(meta, store, settings):
    settings = settings.replace(flush_seal_rows=9)
    rng = random.Random(17)
    instants = []
    with WalClient(meta, store, settings, batch_rows=7) as c:
        coll = c.create_collection("wide", SCHEMA, shards=17, partitions=["_default", "p1"])
        assert len({pchannel_of(v) for v in coll.vchannels}) == 16
        small = c.create_collection("small", SCHEMA, shards=1)
        for n in ("wide", "small"):
            pitr.set_window(meta, n, "1h")
        mw, ms = Model(meta, store, "wide"), Model(meta, store, "small")
        nxt, v = 1, 0.0
        for step in range(24):
            v += 1
            kind = rng.choice(["ins", "ins", "del", "pdel", "ups", "txn", "flush", "small"])
            if step == 11:
                kind = "snap"
            if kind == "ins":
                pks = list(range(nxt, nxt + rng.randint(5, 40)))
                nxt += 40
                mw.record(c.insert("wide", rows(pks, v), partition=rng.choice(["_default", "p1"])), v)
            elif kind in ("del", "pdel") and nxt > 2:
                res = c.delete("wide", rng.sample(range(1, nxt), min(nxt - 1, 12)),
                               partition="p1" if kind == "pdel" else None)
                mw.record(res, v)
                tk = sorted(m.time_tick for m in mw.messages(res) if m.type == M.DELETE)
                instants += [tk[0] - 1, tk[0], tk[len(tk) // 2]]
            elif kind == "ups" and nxt > 2:
                mw.record(c.upsert("wide", rows(rng.sample(range(1, nxt), min(nxt - 1, 9)), v), partition="p1"), v)
            elif kind == "txn":
                cand = list(range(nxt, nxt + 400))
                sh = route(__import__("numpy").asarray(cand, dtype="int64"), 17)
                pks = [p for p, s in zip(cand, sh) if s == 16][:6]   # the 17th shard: shares v0's pchannel
                nxt += 400
                res = c.insert("wide", rows(pks, v), txn=True)
                mw.record(res, v, txn=True)
                msgs = mw.messages(res)
                commit = [m.time_tick for m in msgs if m.type == M.COMMIT_TXN][0]
                instants += [commit - 1, commit]
            elif kind == "flush":
                flush_all(meta, store, settings, coll, flush_all=rng.random() < 0.5)
                flush_all(meta, store, settings, small, flush_all=False)
            elif kind == "small":
                ms.record(c.insert("small", rows(range(nxt, nxt + 5), v)), v)
                nxt += 5
            elif kind == "snap":
                flush_all(meta, store, settings, coll, flush_all=False)
                snapshot.create(meta, store, "wide", "s")
                snapshot.create(meta, store, "small", "s") if ms.inserted else None
            instants.append(meta.tso.now())
    flush_all(meta, store, settings, coll)
    assert visible_of(meta, store, coll) == mw.visible(meta.tso.now())
    bad = []
    chosen = sorted(set(rng.sample(instants, min(8, len(instants)))))
    for i, t in enumerate(chosen):
        target = restore_to(meta, store, settings, "wide", f"w{i}", t)
        got, want = visible_of(meta, store, target), mw.visible(t)
        if got != want:
            bad.append((t, sorted((got - want).items())[:3], sorted((want - got).items())[:3]))
    assert not bad, bad
    t = chosen[len(chosen) // 2]
    jobs = restore_database_as_of(meta, store, "default", t, suffix="_db", collections=["wide", "small"])
    out = {r["collection"]: r for r in drive(meta, store, settings, jobs, "default")}
    for name, model in (("wide", mw), ("small", ms)):
        tgt = meta.catalog.get_by_name(f"{name}_db")
        assert out[name]["state"] == "Created"
        assert visible_of(meta, store, tgt) == model.visible(t), name
