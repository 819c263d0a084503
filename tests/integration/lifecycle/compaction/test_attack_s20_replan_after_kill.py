"""Attack s20: a unit killed after its prepare (its record PREPARED), then a delete elsewhere
hides rows of its inputs (the inputs themselves unchanged: same unit id), then the
compaction is run again. The re-plan gives a unit with the same id but other expected-gain
numbers (`deleted`, counted with the new delete): the re-run must converge (the issue: 'a
re-run converges'), not refuse the recorded unit as 'another unit' until the record expires."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, policy, rows

pytestmark = pytest.mark.etcd

POL = policy(target_rows=10_000, l0_age=1e6)


class Killed(Exception):
    pass


def _kill(_unit):
    raise Killed()


def test_a_killed_unit_re_planned_after_a_new_delete_converges(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("rk", ["_default", "p1"], shards=1)
    for i in range(3):
        w.insert("rk", range(5 * i, 5 * i + 5), "p1", float(i))
        w.flush("rk")
    p = compaction.plan(meta, store, "rk", POL)
    (unit,) = p.units
    with pytest.raises(Killed):
        compaction.run_unit(meta, store, unit, hooks={"after_files": _kill}, sources_revision=p.revision)
    w.delete("rk", [2, 3])            # collection-wide: an L0 segment in _default; p1's inputs unchanged
    w.flush("rk")
    before = exact(meta, store, "rk")
    p2 = compaction.plan(meta, store, "rk", POL)
    same = [u for u in p2.units if u.unit_id == unit.unit_id]
    assert same, "precondition: the re-plan has the same unit id"
    print("recorded", unit.deleted, "re-planned", same[0].deleted)
    s = compaction.compact(meta, store, "rk", POL)      # raised CompactionError: 'holds another unit'
    assert all(r.status in (compaction.COMMITTED, compaction.ALREADY) for r in s.results), s.to_json()
    assert exact(meta, store, "rk") == before and rows(meta, store, "rk") == w.model.visible()


def test_a_killed_fold_re_planned_after_a_newer_delete_converges(meta, store, settings):
    """The same for an L0 fold: killed after its files; a newer delete (too young to fold:
    l0_age) hides more rows of the fold's hits, so the re-planned fold (same id) counts a
    larger `deleted`; the re-run must converge."""
    import time

    fold_pol = policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, l0_age=1.0)
    w = Writer(meta, store, settings)
    w.create("rf", ["_default", "p1"], shards=1)
    w.insert("rf", range(0, 20), "p1", 1.0)
    w.flush("rf")
    w.delete("rf", [1, 2])
    w.flush("rf")
    time.sleep(1.3)                                   # the first delete log is old enough to fold
    p = compaction.plan(meta, store, "rf", fold_pol)
    (fold,) = [u for u in p.units if u.kind == compaction.FOLD]
    with pytest.raises(Killed):
        compaction.run_unit(meta, store, fold, hooks={"after_files": _kill}, sources_revision=p.revision)
    w.delete("rf", [5, 6])                            # young: not folded, but it hides rows of the hit
    w.flush("rf")
    before = exact(meta, store, "rf")
    p2 = compaction.plan(meta, store, "rf", fold_pol)
    same = [u for u in p2.units if u.unit_id == fold.unit_id]
    assert same and same[0].deleted != fold.deleted, (fold, p2.units)
    s = compaction.compact(meta, store, "rf", fold_pol)
    assert all(r.status in (compaction.COMMITTED, compaction.ALREADY) for r in s.results), s.to_json()
    assert exact(meta, store, "rf") == before and rows(meta, store, "rf") == w.model.visible()
