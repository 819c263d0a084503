"""attack s23: compactions that FOLD (l0_age 0) and merge, SIGKILLed after random delays,
sometimes two at once, with acknowledged writes (scoped and collection-wide deletes,
upserts across partitions, retries of an upsert by seq whose first try was since
compacted) and a GC at zero tolerances (every file aged two days, force) between rounds;
then a snapshot taken before the first round is restored and one run goes to the end.
Every outcome is judged against the model of every acknowledged call, row by row."""

import os
import random
import sys
import time
from pathlib import Path

import pytest
from fault_harness import assert_invariants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "restore"))
from compaction_helpers import Writer, mixed_workload, policy, rows, run_restore  # noqa: E402
from copy_model_helpers import table  # noqa: E402

from seglake.lifecycle import compaction, gc, snapshot  # noqa: E402
from seglake.wal.client import WalClient  # noqa: E402

POLICY = policy(target_rows=10_000, l0_age=0.0)
GC_OPTS = dict(missing_tolerance=0, drop_tolerance=0, force=True)
PARTS = ["_default", "p1", "p2"]


def _age_all(store):
    t = time.time() - 2 * 86400
    for o in store.list(""):
        try:
            os.utime(os.path.join(store.uri, o.key), (t, t))
        except FileNotFoundError:
            pass


def _writes(rng, w, meta, store, settings, rnd):
    base = 1000 + 100 * rnd
    for i in range(rng.randint(3, 6)):
        op = rng.choice(["insert", "upsert", "scoped", "all", "retry"])
        pks = rng.sample(range(1, base + 40), rng.randint(1, 8))
        part = rng.choice(PARTS)
        v = float(100 * rnd + i)
        if op in ("insert", "upsert"):
            w.insert("c", pks, part, v, upsert=op == "upsert")
        elif op == "scoped":
            w.delete("c", pks, partition=part)
        elif op == "all":
            w.delete("c", pks)
        else:   # an upsert by seq, acknowledged, flushed, compacted by the next round, then retried
            seq = 10 + rnd * 10 + i
            with WalClient(meta, store, settings, producer_id="ops") as c:
                c.insert("c", table(pks, v), partition=part, upsert=True, seq=seq)
            w.model.upsert(pks, part, v)
            w.retries.append((seq, pks, part, v))
    w.flush("c")
    # retries of earlier calls (their rows may be in compacted or folded segments now)
    for seq, pks, part, v in rng.sample(w.retries, min(2, len(w.retries))):
        with WalClient(meta, store, settings, producer_id="ops") as c:
            c.insert("c", table(pks, v), partition=part, upsert=True, seq=seq)
    w.flush("c")


@pytest.mark.parametrize("seed", [5, 29, 41])
def test_folds_killed_at_random_with_writes_between_rounds_stay_row_exact(meta, store, settings, spawn, seed):
    rng = random.Random(seed)
    w = Writer(meta, store, settings)
    w.retries = []
    w.create("c", PARTS, shards=2)
    for step in range(3):
        mixed_workload(w, "c", step)
    snapshot.create(meta, store, "c", "old")
    old = w.model.visible()
    killed = 0
    for i in range(6):
        kids = [spawn("compact", {"collection": "c", "policy": POLICY.to_json()}, settings,
                      faults="compaction.after_files:sleep=0.05")
                for _ in range(rng.choice([1, 2]))]
        time.sleep(rng.uniform(1.0, 4.0))
        for k in kids:
            killed += k.alive()
            k.kill()
        got = rows(meta, store, "c")
        assert got == w.model.visible(), (seed, i, "after kill", sorted((got - w.model.visible()).items())[:5],
                                          sorted((w.model.visible() - got).items())[:5])
        _age_all(store)
        gc.run(meta, store, gc.GCOptions(**GC_OPTS), run_id=f"gc-{time.time_ns()}")
        assert rows(meta, store, "c") == w.model.visible(), (seed, i, "after gc")
        _writes(rng, w, meta, store, settings, i)
        got = rows(meta, store, "c")
        assert got == w.model.visible(), (seed, i, "after writes", sorted((got - w.model.visible()).items())[:5],
                                          sorted((w.model.visible() - got).items())[:5])
    kinds = [r["unit"]["kind"] for r in compaction.unit_records(meta)]
    print("killed mid-run:", killed, "unit records by kind:", {k: kinds.count(k) for k in set(kinds)})
    done = spawn("compact", {"collection": "c", "policy": POLICY.to_json()}, settings).wait(180)
    assert done.rc == 0, done.err[-2000:]
    assert rows(meta, store, "c") == w.model.visible()
    _age_all(store)
    gc.run(meta, store, gc.GCOptions(**GC_OPTS), run_id=f"gc-{time.time_ns()}")
    assert rows(meta, store, "c") == w.model.visible()
    run_restore(meta, store, "c", "old", "c_old")
    assert rows(meta, store, "c_old") == old
    assert_invariants(meta, store)
