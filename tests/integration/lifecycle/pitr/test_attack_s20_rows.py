"""attack-s20: restores to a time compared with a model on EVERY column (not only pk and one
value): a schema with VarChar, Bool, Int8, nullable Double, a 4-dim vector; two partitions,
two shards; inserts, partition-scoped deletes (of pks living in the other partition),
upserts into the other partition, transactions; flushes and a snapshot between; each
restored row compared (partition name, pk, every field, nulls included)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pyarrow as pa
import pytest

from seglake.lifecycle import pitr, snapshot
from seglake.visibility import visible_rows
from seglake.wal import message as M
from seglake.wal.client import WalClient

from pitr_model import Model, flush_all, restore_to, route0

RICH = [
    {"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
    {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 4},
    {"field_id": 102, "name": "price", "dtype": "Float"},
    {"field_id": 103, "name": "label", "dtype": "VarChar"},
    {"field_id": 104, "name": "flag", "dtype": "Bool"},
    {"field_id": 105, "name": "tiny", "dtype": "Int8"},
    {"field_id": 106, "name": "score", "dtype": "Double"},
]
COLS = ["embedding", "price", "label", "flag", "tiny", "score"]


def rich_rows(pks, v: float, rng) -> pa.Table:
    pks = [int(p) for p in pks]
    n = len(pks)
    lab = [None if rng.random() < 0.2 else ("é" * rng.randint(0, 3) + f"r{p}-{v}" + "\x00" * (p % 2)) for p in pks]
    return pa.table({
        "pk": pa.array(pks, pa.int64()),
        "embedding": pa.array([[float(p), float(v), -0.0, 1e-38] for p in pks], pa.list_(pa.float32(), 4)),
        "price": pa.array([float(v)] * n, pa.float32()),
        "label": pa.array(lab, pa.string()),
        "flag": pa.array([None if p % 5 == 0 else bool(p % 2) for p in pks], pa.bool_()),
        "tiny": pa.array([None if p % 7 == 0 else (p % 256) - 128 for p in pks], pa.int8()),
        "score": pa.array([None if p % 3 == 0 else (1.7976931348623157e308 if p % 11 == 0 else p / 3.0) for p in pks],
                          pa.float64()),
    })


def _key(row: dict, part: str) -> tuple:
    emb = row["embedding"]
    return (part, row["pk"], None if emb is None else tuple(round(x, 6) for x in emb),
            None if row["price"] is None else round(row["price"], 3), row["label"], row["flag"], row["tiny"],
            row["score"])


def full_visible(meta, store, coll) -> Counter:
    t = visible_rows(meta, store, coll.collection_id, columns=COLS)
    names = {p.partition_id: p.name for p in meta.catalog.get(coll.collection_id).partitions}
    out = Counter()
    for r in t.to_pylist():
        out[_key(r, names[r["partition_id"]])] += 1
    return out


class FullModel(Model):
    """Model plus every row's full content: visible() of the base gives (pk, v); each v is one
    call whose table we keep."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.tables = {}    # v -> (table, partition name)

    def full(self, t: int) -> Counter:
        names = {pid: n for n, pid in self.parts.items()}
        dels = {}
        for pk, ts, at, scope in self.deletes:
            if at <= t:
                dels.setdefault(pk, []).append((ts, scope))
        out = Counter()
        for pk, v, ts, at, part in self.inserted:
            if at > t or any(dts > ts and scope in (0, part) for dts, scope in dels.get(pk, ())):
                continue
            table, _ = self.tables[v]
            for r in table.to_pylist():
                if r["pk"] == pk:
                    out[_key(r, names[part])] += 1
        return out


@pytest.mark.parametrize("seed", [20, 21, 22, 23])
def test_every_column_and_partition_restored_at_many_instants(meta, store, settings, seed):
    settings = settings.replace(flush_seal_rows=7)
    rng = random.Random(seed)
    instants = []
    with WalClient(meta, store, settings, batch_rows=5) as c:
        coll = c.create_collection("rich", RICH, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "rich", "1h")
        model = FullModel(meta, store, "rich")
        model.parts = {p.name: p.partition_id for p in coll.partitions}
        live = {"_default": [], "p1": []}
        nxt, v = 1, 0
        for step in range(30):
            v += 1
            kind = rng.choice(["insert", "insert", "pdel", "xdel", "upsert", "txn", "flush", "del"])
            if step == 14:
                kind = "snapshot"
            part = rng.choice(["_default", "p1"])
            other = "p1" if part == "_default" else "_default"
            if kind == "insert":
                pks = list(range(nxt, nxt + rng.randint(2, 9))) + rng.sample(live[other], min(2, len(live[other])))
                nxt += 10
                t = rich_rows(pks, v, rng)
                model.tables[v] = (t, part)
                model.record(c.insert("rich", t, partition=part), v)
                live[part] += pks
            elif kind in ("pdel", "xdel") and live[other]:
                # xdel: a delete scoped to `part` of pks that live only in `other` (must hide nothing)
                src = live[part] if kind == "pdel" and live[part] else live[other]
                gone = rng.sample(src, min(3, len(src)))
                res = c.delete("rich", gone, partition=part)
                model.record(res, v)
                tk = [m.time_tick for m in model.messages(res) if m.type == M.DELETE]
                instants += [min(tk) - 1, min(tk), max(tk)]
            elif kind == "del" and (live["p1"] or live["_default"]):
                allp = live["p1"] + live["_default"]
                res = c.delete("rich", rng.sample(allp, min(4, len(allp))))
                model.record(res, v)
            elif kind == "upsert" and live[other]:
                pks = rng.sample(live[other], min(3, len(live[other]))) + [nxt]
                nxt += 1
                t = rich_rows(pks, v, rng)
                model.tables[v] = (t, part)
                res = c.upsert("rich", t, partition=part)
                model.record(res, v)
                tk = [m.time_tick for m in model.messages(res) if m.type == M.INSERT]
                instants += [min(tk) - 1, min(tk), max(tk)]
                live[part] += pks
            elif kind == "txn":
                pks = [int(x) for x in route0(range(nxt, nxt + 40))][:9]
                nxt += 40
                t = rich_rows(pks, v, rng)
                model.tables[v] = (t, part)
                res = c.insert("rich", t, partition=part, txn=True)
                model.record(res, v, txn=True)
                msgs = model.messages(res)
                body = [m.time_tick for m in msgs if m.type == M.INSERT]
                commit = [m.time_tick for m in msgs if m.type == M.COMMIT_TXN][0]
                instants += [body[0], commit - 1, commit]
                live[part] += pks
            elif kind == "flush":
                c.flush("rich")
                flush_all(meta, store, settings, coll, flush_all=rng.random() < 0.5)
            elif kind == "snapshot":
                flush_all(meta, store, settings, coll, flush_all=False)
                snapshot.create(meta, store, "rich", "s")
            instants.append(meta.tso.now())
    flush_all(meta, store, settings, coll)
    # the source itself against the model first (the model is right)
    assert full_visible(meta, store, coll) == model.full(meta.tso.now())
    chosen = sorted(set(rng.sample(instants, min(14, len(instants)))))
    bad = []
    for i, t in enumerate(chosen):
        target = restore_to(meta, store, settings, "rich", f"r{i}", t)
        got, want = full_visible(meta, store, target), model.full(t)
        if got != want:
            bad.append((t, sorted((got - want).items())[:3], sorted((want - got).items())[:3]))
    assert not bad, bad
