"""A compaction SIGKILLed at each of its steps (after a unit's prepare, after its files,
after its commit), then run again: it converges -- the same visible rows, row for row
(row ids and timestamps kept), no duplicate or lost row, every output visible only with
its inputs Dropped, nothing left to plan, no unit record left prepared."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))

from compaction_helpers import DROPPED, Writer, exact, mixed_workload, policy, rows, segments  # noqa: E402

from seglake.lifecycle import compaction  # noqa: E402

POLICY = policy(target_rows=10_000)


@pytest.mark.parametrize("point", ["compaction.after_prepare", "compaction.after_files",
                                   "compaction.after_commit"])
def test_compaction_killed_then_re_run_converges(meta, store, settings, spawn, point):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "c", step)
    before = exact(meta, store, "c")
    planned = compaction.plan(meta, store, "c", POLICY)
    assert len(planned.units) >= 2
    out = spawn("compact", {"collection": "c", "policy": POLICY.to_json()}, settings,
                faults=f"{point}:kill@2").wait(120)        # the second unit dies at the point
    assert out.rc == -9, out.err[-2000:]
    assert exact(meta, store, "c") == before                # nothing visible changed, whatever was cut
    done = spawn("compact", {"collection": "c", "policy": POLICY.to_json()}, settings).wait(120)
    assert done.rc == 0, done.err[-2000:]
    assert done.result["lost"] == 0
    assert exact(meta, store, "c") == before and rows(meta, store, "c") == w.model.visible()
    assert compaction.plan(meta, store, "c", POLICY).units == []
    assert {r["state"] for r in compaction.unit_records(meta)} == {compaction.COMMITTED}
    live = {s.segment_id: s for s in segments(meta, "c")}
    for s in segments(meta, "c", DROPPED):
        assert s.compacted_to in live and s.segment_id in live[s.compacted_to].compacted_from
    # every input of the first plan is Dropped into exactly one output
    assert {s.segment_id for s in segments(meta, "c", DROPPED)} == {i for u in planned.units for i in u.segment_ids}


FOLD_POLICY = policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, l0_age=0.0)


@pytest.mark.parametrize("point", ["compaction.after_prepare", "compaction.after_files",
                                   "compaction.after_commit"])
def test_l0_fold_killed_then_re_run_converges(meta, store, settings, spawn, point):
    """The same for an L0 fold (one txn: L0 inputs and hit segments Dropped, one output
    per hit Flushed): cut at each step, nothing visible changes; the re-run converges."""
    from seglake.lifecycle.flush.state import L0

    w = Writer(meta, store, settings)
    w.create("f", ["_default", "p1", "p2"], shards=1)
    for i, p in enumerate(["_default", "p1", "p2"]):
        w.insert("f", range(1, 31), p, float(i))
    w.flush("f")
    w.delete("f", [1, 2, 3])
    w.flush("f")
    w.delete("f", [7, 8], partition="p1")
    w.flush("f")
    before = exact(meta, store, "f")
    (fold,) = compaction.plan(meta, store, "f", FOLD_POLICY).units
    assert fold.kind == compaction.FOLD and fold.hits
    out = spawn("compact", {"collection": "f", "policy": FOLD_POLICY.to_json()}, settings,
                faults=f"{point}:kill@1").wait(120)
    assert out.rc == -9, out.err[-2000:]
    assert exact(meta, store, "f") == before
    done = spawn("compact", {"collection": "f", "policy": FOLD_POLICY.to_json()}, settings).wait(120)
    assert done.rc == 0, done.err[-2000:]
    assert done.result["lost"] == 0
    assert exact(meta, store, "f") == before and rows(meta, store, "f") == w.model.visible()
    assert compaction.plan(meta, store, "f", FOLD_POLICY).units == []
    assert {r["state"] for r in compaction.unit_records(meta)} == {compaction.COMMITTED}
    assert not [s for s in segments(meta, "f") if s.level == L0]
    dropped = {s.segment_id: s for s in segments(meta, "f", DROPPED)}
    assert set(dropped) == {*fold.segment_ids, *(h[0] for h in fold.hits)}
    live = {s.segment_id: s for s in segments(meta, "f")}
    for h, _, _ in fold.hits:
        assert live[dropped[h].compacted_to].compacted_from == (h,)
