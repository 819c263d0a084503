"""Attack s20 (LOW): the inputs' dropped_at starts GC's drop_tolerance for readers that
listed the old segments; it must be the commit's time, not the unit's start (a long unit
would shorten the tolerance by its own run time), for merges and folds."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.compaction import compacting

from compaction_helpers import DROPPED, Writer, mixed_workload, policy, segments

pytestmark = pytest.mark.etcd


def test_inputs_are_dropped_at_the_commit_time(meta, store, settings, monkeypatch):
    w = Writer(meta, store, settings)
    w.create("da", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "da", step)
    marks = []

    def slow(unit):
        time.sleep(1.5)                 # a long write
        marks.append(time.time())

    real = compacting.run_unit
    monkeypatch.setattr(compacting, "run_unit", lambda m, s, u, **kw: real(
        m, s, u, hooks={"after_files": slow}, **{k: v for k, v in kw.items() if k != "hooks"}))
    s = compaction.compact(meta, store, "da", policy(target_rows=10_000, l0_age=0.0))
    monkeypatch.undo()
    assert {u.kind for u in s.plan.units} >= {compaction.FOLD} and marks
    dropped = segments(meta, "da", DROPPED)
    assert dropped
    first = min(marks)
    early = [(x.segment_id, round(first - x.dropped_at, 2)) for x in dropped if x.dropped_at < first]
    assert not early, f"inputs dropped_at before their unit's files were even written (s early): {early}"
