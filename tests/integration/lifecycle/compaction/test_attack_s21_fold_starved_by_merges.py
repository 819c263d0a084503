"""Attack s21 (MEDIUM, liveness): compactions run more often than l0_age never fold the
deletes of a small collection -- each run merges the previous output (a carrier of the
deletes so far, still small) with the newest delete segment, so the output's newest
delete is always younger than l0_age and its whole delete log is never foldable.

A carrier's delete log is folded as a whole once its NEWEST delete is older than l0_age
(folding.foldable). A merge carries every input's delete entries into its output: a
carrier not yet old enough is merged with the newest (young) L0 segment, and the output's
newest delete is young again. A collection under min_segment_rows keeps one such output
for ever: its delete entries (one per deleted pk) pile up and every reader applies them.

Clock: the folding age check is driven by a simulated clock (cycle k at 100 k seconds,
its ticks mapped to that time), compaction every 100 s, l0_age 250 s. Real etcd, files,
WAL and flusher."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.compaction import folding

from compaction_helpers import Writer, exact, rows, segments

pytestmark = pytest.mark.etcd


def test_deletes_of_a_small_collection_compacted_often_are_folded_eventually(meta, store, settings, monkeypatch):
    w = Writer(meta, store, settings)
    w.create("often", ["_default"], shards=1)
    starts: list[int] = []                         # the TSO at each cycle's start

    def sim_ms(tick: int) -> int:                  # a tick's time on the simulated clock: its cycle's
        k = max((i for i, t in enumerate(starts) if t <= tick), default=0)
        return k * 100_000

    monkeypatch.setattr(folding, "physical_ms", sim_ms)
    pol = compaction.Policy(min_segment_rows=1000, target_rows=10**6, delete_ratio=0.0, protection=0.0,
                            l0_age=250.0)
    folds = 0
    for k in range(10):
        starts.append(meta.tso.now())
        w.insert("often", range(10 * k, 10 * k + 10), "_default", float(k))
        w.flush("often")
        w.delete("often", [10 * k])
        w.flush("often")
        before = exact(meta, store, "often")
        s = compaction.compact(meta, store, "often", pol, now=k * 100.0 + 1)
        assert exact(meta, store, "often") == before
        folds += sum(1 for u in s.plan.units if u.kind == compaction.FOLD)
    assert rows(meta, store, "often") == w.model.visible()
    carried = sum(b.entries for x in segments(meta, "often") for b in x.deltalogs)
    # deletes of cycles 0..6 are older than l0_age at the last run (cycle 9): foldable by now
    assert folds > 0 and carried <= 3, (f"10 compactions 100 s apart, l0_age 250 s: {folds} folds; the live "
                                        f"segments still carry {carried} delete entries (10 deletes made)")


def test_a_fold_unit_whose_fold_ts_is_above_the_checkpoint_is_lost_not_run(meta, store, settings):
    """A FOLD unit handed in from elsewhere (XCom, an argv file) with a fold_ts above what
    may be forgotten (its vchannel's checkpoint): the run judges it against etcd again and
    loses it -- a delete still newer than the checkpoint may hide a row in the WAL."""
    w = Writer(meta, store, settings)
    w.create("forged", ["_default"], shards=1)
    w.insert("forged", range(10), "_default", 1.0)
    w.flush("forged")
    w.delete("forged", [1])
    w.flush("forged")
    pol = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    plan = compaction.plan(meta, store, "forged", pol)
    fold = next(u for u in plan.units if u.kind == compaction.FOLD)
    forged = compaction.make_unit(fold.collection_id, fold.partition_id, fold.channel, fold.kind, fold.inputs,
                                  hits=fold.hits, folded=fold.folded, fold_ts=2**62)
    before = exact(meta, store, "forged")
    (res,) = compaction.run_units(meta, store, [forged], sources_revision=plan.revision)
    assert res.status == compaction.LOST and "above what may be forgotten" in res.reason, res
    assert exact(meta, store, "forged") == before
    (res,) = compaction.run_units(meta, store, [fold], sources_revision=plan.revision)
    assert res.status == compaction.COMMITTED, res
    assert rows(meta, store, "forged") == w.model.visible()
