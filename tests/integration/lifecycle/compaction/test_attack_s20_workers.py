"""Attack s20: a run's units in parallel (compact(workers=4): the shared delete-source
cache, concurrent commits of units and folds of one plan) stays row-exact and converges."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, mixed_workload, policy, rows

pytestmark = pytest.mark.etcd


def test_parallel_units_row_exact(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("pw", ["_default", "p1", "p2"], shards=2)
    for step in range(5):
        mixed_workload(w, "pw", step)
    for pol in (policy(target_rows=7, l0_age=0.0, delete_ratio=0.0), policy(target_rows=10_000, l0_age=0.0),
                policy(min_segment_rows=1, delete_ratio=0.0, l0_age=0.0)):
        for _ in range(3):
            before = exact(meta, store, "pw")
            s = compaction.compact(meta, store, "pw", pol, workers=4)
            assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
            assert exact(meta, store, "pw") == before
    assert rows(meta, store, "pw") == w.model.visible()
