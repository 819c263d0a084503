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
