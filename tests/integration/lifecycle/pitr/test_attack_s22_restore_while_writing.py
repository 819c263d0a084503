"""attack-s22: restores to instants taken WHILE a writer thread appends (inserts, split
upserts, scoped deletes, txns), the main thread flushing, snapshotting and compacting
(folds, l0_age 0) meanwhile: a call whose tick lies at or below an instant but was still
in flight when the instant was taken must be in the restore (the replay seals the log at
the instant); every restore compared with the model built from the acknowledged calls."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, route0, rows, visible_of

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=20, delete_ratio=0.0, protection=0.0, l0_age=0.0)


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S22_SEEDS", "7").split(",")])
def test_restores_to_instants_taken_while_writing_equal_the_model(meta, store, settings, seed):
    settings = settings.replace(flush_seal_rows=6)
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
    model = Model(meta, store, "src")
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def writer():
        rng = random.Random(seed)
        v = 1.0
        try:
            with WalClient(meta, store, settings, batch_rows=3) as w:
                while not stop.is_set():
                    v += 1.0
                    pks = rng.sample(range(1, 60), rng.randint(1, 7))
                    op = rng.choice(["insert", "upsert", "upsert", "delete", "delete_p1", "txn"])
                    part = rng.choice(["_default", "p1"])
                    if op == "insert":
                        res, txn = w.insert("src", rows(pks, v), partition=part), False
                    elif op == "upsert":
                        res, txn = w.upsert("src", rows(pks, v), partition=part), False
                    elif op == "delete":
                        res, txn = w.delete("src", pks), False
                    elif op == "delete_p1":
                        res, txn = w.delete("src", pks, partition="p1"), False
                    else:
                        pk0 = [int(x) for x in route0(pks + list(range(1, 60)))][:len(pks)]
                        res, txn = w.insert("src", rows(pk0, v), partition=part, txn=True, upsert=True), True
                    with lock:
                        model.record(res, v, txn=txn)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    th = threading.Thread(target=writer)
    th.start()
    instants = []
    try:
        for i in range(16):
            time.sleep(0.05)
            instants.append(meta.tso.reserve(1, linearizable=True))
            flush_all(meta, store, settings, coll, flush_all=i % 2 == 0)
            if i % 3 == 1:
                snapshot.create(meta, store, "src", f"s{i}")
            if i % 4 == 2:
                compaction.compact(meta, store, "src", FOLD)
    finally:
        stop.set()
        th.join()
    assert not errors, errors
    print("calls recorded:", len(model.inserted), "rows,", len(model.deletes), "deletes")
    picks = instants[::2] + [instants[-1]]
    bad = []
    for k, t in enumerate(picks):
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", f"r{k}", t))
        want = model.visible(t)
        if got != want:
            bad.append((k, t, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))
    assert not bad, bad
