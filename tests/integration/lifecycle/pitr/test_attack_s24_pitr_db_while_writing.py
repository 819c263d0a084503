"""attack-s24-pitr: a whole database restored at an instant taken a moment ago, WHILE a writer
thread keeps appending to both collections (calls split over appends, upserts, deletes,
txns): each collection's replay seals its log at the instant when it reads it, so a call
whose tick lies at or below the instant but was still in flight is in its restore. Both
restores -- one cut -- equal the model of the acknowledged calls at the instant."""

from __future__ import annotations

import random
import threading
import time

from seglake.lifecycle import pitr
from seglake.lifecycle.pitr.database import drive, restore_database_as_of
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, route0, rows, visible_of


def test_a_database_restored_at_an_instant_while_both_collections_are_written(meta, store, settings):
    colls = {}
    with WalClient(meta, store, settings) as c:
        for n in ("a", "b"):
            colls[n] = c.create_collection(n, SCHEMA, shards=2)
            pitr.set_window(meta, n, "1h")
    models = {n: Model(meta, store, n) for n in colls}
    lock, stop, errors = threading.Lock(), threading.Event(), []

    def writer():
        rng = random.Random(24)
        v = 1.0
        try:
            with WalClient(meta, store, settings, batch_rows=3) as w:
                while not stop.is_set():
                    v += 1.0
                    n = rng.choice(["a", "b"])
                    pks = rng.sample(range(1, 50), rng.randint(1, 6))
                    op = rng.choice(["insert", "upsert", "delete", "txn"])
                    if op == "insert":
                        res, txn = w.insert(n, rows(pks, v)), False
                    elif op == "upsert":
                        res, txn = w.upsert(n, rows(pks, v)), False
                    elif op == "delete":
                        res, txn = w.delete(n, pks), False
                    else:
                        res, txn = w.insert(n, rows([int(x) for x in route0(pks + [1, 2, 3, 4])], v), txn=True), True
                    with lock:
                        models[n].record(res, v, txn=txn)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=writer)
    th.start()
    cuts = []
    try:
        for i in range(5):
            time.sleep(0.3)
            if i == 1:
                for coll in colls.values():
                    flush_all(meta, store, settings, coll, flush_all=False)
            t = meta.tso.reserve(1, linearizable=True)
            jobs = restore_database_as_of(meta, store, "default", t, suffix=f"_c{i}", collections=["a", "b"])
            drive(meta, store, settings, jobs, "default")
            cuts.append((i, t))
    finally:
        stop.set()
        th.join()
    assert not errors, errors
    bad, n = {}, 0
    for i, t in cuts:
        for name in colls:
            got = visible_of(meta, store, meta.catalog.get_by_name(f"{name}_c{i}"))
            want = models[name].visible(t)
            n += sum(got.values())
            if got != want:
                bad[(i, name)] = (sorted((want - got).elements()), sorted((got - want).elements()))
    print("cuts", len(cuts), "rows compared", n)
    assert not bad, bad
