"""Attack s23: two compactions of one collection at once on different paths -- the Spark
executor path (compaction.run_partition: its own Meta and store from the settings env,
units as JSON, the driver's plan revision) and the inline one -- with DIFFERENT policies
(one merges small, the other folds and merges big, so their units overlap without being
equal), while a writer keeps inserting, upserting across partitions, deleting (scoped and
collection-wide) and flushing. Every round judged against the model of every acknowledged
call, row by row; no input is the input of two committed units."""

from __future__ import annotations

import random
import threading

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, mixed_workload, rows

pytestmark = pytest.mark.etcd

PARTS = ["_default", "p1", "p2"]
SMALL = compaction.Policy(min_segment_rows=1000, target_rows=30, delete_ratio=0.1, protection=0.0, l0_age=3600.0)
BIG = compaction.Policy(min_segment_rows=1000, target_rows=10**6, delete_ratio=0.0, protection=0.0, l0_age=0.0)


@pytest.mark.parametrize("seed", [3, 17])
def test_executor_and_inline_compactions_with_other_policies_race_a_writer(meta, store, settings, seed):
    rng = random.Random(seed)
    w = Writer(meta, store, settings)
    w.create("c", PARTS, shards=2)
    for step in range(3):
        mixed_workload(w, "c", step)
    errors: list = []

    def guard(fn):
        def run():
            try:
                fn()
            except Exception as e:   # noqa: BLE001 - reported by the test
                errors.append(e)
        return run

    for rnd in range(4):
        p1 = compaction.plan(meta, store, "c", SMALL)
        p2 = compaction.plan(meta, store, "c", BIG)
        t1 = threading.Thread(target=guard(lambda: list(compaction.run_partition(
            [u.to_json() for u in p1.units], settings.to_env(), sources_revision=p1.revision))))
        t2 = threading.Thread(target=guard(lambda: compaction.run_units(meta, store, p2.units,
                                                                        sources_revision=p2.revision)))
        t1.start()
        t2.start()
        base = 500 + 100 * rnd
        for i in range(4):       # the writer, meanwhile
            part = rng.choice(PARTS)
            pks = rng.sample(range(1, base), 6)
            op = rng.choice(["insert", "upsert", "scoped", "all"])
            if op in ("insert", "upsert"):
                w.insert("c", pks, part, float(rnd * 10 + i), upsert=op == "upsert")
            elif op == "scoped":
                w.delete("c", pks, partition=part)
            else:
                w.delete("c", pks)
            if rng.random() < 0.6:
                w.flush("c")
        t1.join(120)
        t2.join(120)
        assert not errors, errors
        w.flush("c")
        got, want = rows(meta, store, "c"), w.model.visible()
        assert got == want, (seed, rnd, sorted((got - want).items())[:6], sorted((want - got).items())[:6])
    # no input of two committed units; every committed output is Flushed or itself compacted
    recs = compaction.unit_records(meta)
    committed = [r for r in recs if r["state"] == "committed"]
    print("unit records:", {(r["unit"]["kind"], r["state"]) for r in recs},
          sum(r["state"] == "lost" for r in recs), "lost of", len(recs))
    seen: dict[int, str] = {}
    for r in committed:
        u = r["unit"]
        for sid in [s for s, _ in u["inputs"]] + [h[0] for h in u.get("hits", [])]:
            assert sid not in seen, f"segment {sid} is an input of committed units {seen[sid]} and {u['unit_id']}"
            seen[sid] = u["unit_id"]
    compaction.compact(meta, store, "c", BIG)
    assert rows(meta, store, "c") == w.model.visible()
