"""Attack s21 (HIGH, liveness): more than MAX_INPUTS (100) foldable L0 delete segments in one
(partition, vchannel) wedge the collection's compaction for good.

plan_folds bounds a fold unit by its txn (L0 inputs + 2 x hits <= MAX_FOLD_OPS = 120) but
Unit.check refuses more than MAX_INPUTS = 100 inputs: with 101..120 delete-only L0 segments
and a hit or two, make_unit raises ValidationError inside plan() -- every run (scheduled,
manual, --dry-run) of the collection fails, merges included, and more L0 segments only
keep it so. A stream of deletes flushed often (each flush of deletes alone makes one L0
segment) reaches 101 within l0_age.

Real etcd, real files, rows through the real WAL and flusher."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.flush.state import L0

from compaction_helpers import Writer, exact, rows, segments

pytestmark = pytest.mark.etcd


def test_more_l0_segments_than_one_unit_holds_are_folded_over_runs(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("m", ["_default"], shards=1)
    w.insert("m", range(1, 201), "_default", 1.0)
    w.flush("m")
    for i in range(1, 106):                       # 105 delete-only flushes: 105 L0 segments
        w.delete("m", [i])
        w.flush("m")
    assert len([x for x in segments(meta, "m") if x.level == L0 and not x.num_rows]) == 105
    before = exact(meta, store, "m")
    pol = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    for _ in range(4):
        s = compaction.compact(meta, store, "m", pol, now=time.time() + 5)
        assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
        assert exact(meta, store, "m") == before
        if not s.plan.units:
            break
    assert rows(meta, store, "m") == w.model.visible()
    assert not [x for x in segments(meta, "m") if x.level == L0 and not x.num_rows]
