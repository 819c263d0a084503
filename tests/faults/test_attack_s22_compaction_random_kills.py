"""attack s22: compaction SIGKILLed after random delays (not at its named points), eight
times in a row, sometimes two compactions at once, with a GC (every file aged two days,
force) between rounds; then one run to the end: the visible rows equal the model row for
row (row ids and timestamps kept), nothing left to plan, every unit COMMITTED, nothing
referenced lost, nothing twice."""

import os
import random
import sys
import time
from pathlib import Path

import pytest
from fault_harness import assert_invariants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))
from compaction_helpers import Writer, exact, mixed_workload, policy, rows  # noqa: E402

from seglake.lifecycle import compaction, gc  # noqa: E402

POLICY = policy(target_rows=10_000)
GC_OPTS = dict(missing_tolerance=0, drop_tolerance=0, force=True)


def _age_all(store):
    t = time.time() - 2 * 86400
    for o in store.list(""):
        try:
            os.utime(os.path.join(store.uri, o.key), (t, t))
        except FileNotFoundError:
            pass


@pytest.mark.parametrize("seed", [7])
def test_compaction_random_kills_then_re_run_converges(meta, store, settings, spawn, seed):
    rng = random.Random(seed)
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=2)
    for step in range(4):
        mixed_workload(w, "c", step)
    before = exact(meta, store, "c")
    killed = 0
    for i in range(8):
        kids = [spawn("compact", {"collection": "c", "policy": POLICY.to_json()}, settings,
                      faults="compaction.after_files:sleep=0.05")
                for _ in range(rng.choice([1, 1, 2]))]
        time.sleep(rng.uniform(0.5, 2.5))
        for k in kids:
            killed += k.alive()
            k.kill()
        assert exact(meta, store, "c") == before, f"round {i}: visible rows changed by a killed compaction"
        _age_all(store)
        gc.run(meta, store, gc.GCOptions(**GC_OPTS), run_id=f"gc-{time.time_ns()}")
        assert exact(meta, store, "c") == before, f"round {i}: GC after a killed compaction changed the rows"
    print("killed mid-run:", killed)
    done = spawn("compact", {"collection": "c", "policy": POLICY.to_json()}, settings).wait(180)
    assert done.rc == 0, done.err[-2000:]
    assert exact(meta, store, "c") == before and rows(meta, store, "c") == w.model.visible()
    assert compaction.plan(meta, store, "c", POLICY).units == []
    assert {r["state"] for r in compaction.unit_records(meta)} <= {compaction.COMMITTED}
    _age_all(store)
    gc.run(meta, store, gc.GCOptions(**GC_OPTS), run_id=f"gc-{time.time_ns()}")
    assert exact(meta, store, "c") == before
    assert_invariants(meta, store)
