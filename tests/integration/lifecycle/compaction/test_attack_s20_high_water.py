"""Attack s20: the partition row high-water mark a recovering flusher reads must survive
compaction + GC (issue 28 x the flusher; test_compaction_and_the_flusher states it). A
0-row L1 output keeps it in dml_ts -- but when such a 0-row output is MERGED again (with
another 0-row output, or with an older row-bearing segment), write_output takes dml_ts
from the inputs WITH ROWS only (and makes the output level L0 when none has rows), so the
mark drops. After GC a flusher replaying the log (no checkpoint: the project's own 'full
WAL replay' check) re-inserts the deleted rows; with a newer delete still stored (del_hw
above the old deletes, which a fold removed) they are VISIBLE again."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, gc
from seglake.lifecycle.flush import Flusher

from compaction_helpers import Writer, policy, rows, segments
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd


def _marks(meta, store, settings, coll) -> dict:
    out = {}
    for pch in pchannels(coll):
        f = Flusher(meta, store, pch, settings).open()
        out.update({v: dict(st.part_hw) for v, st in f.states.items() if v in coll.vchannels})
    return out


def _gc(meta, store, settings, coll):
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))


@pytest.mark.parametrize("older_rows", [False, True])
def test_merging_a_zero_row_output_keeps_the_partition_high_water_mark(meta, store, settings, older_rows):
    w = Writer(meta, store, settings)
    w.create("hw", ["_default", "p1"], shards=1)
    if older_rows:
        w.insert("hw", [100, 101], "p1", 7.0)          # an older segment whose rows stay
        w.flush("hw")
    w.insert("hw", range(1, 6), "p1", 1.0)
    w.flush("hw")
    w.insert("hw", range(6, 11), "p1", 2.0)
    w.flush("hw")
    coll = meta.catalog.get_by_name("hw")
    before = _marks(meta, store, settings, coll)
    w.delete("hw", range(1, 11))                       # collection-wide, every row of the two newest segments
    w.flush("hw")
    # 1) fold the delete log into its hits: the two segments become 0-row L1 outputs (marks kept)
    s1 = compaction.compact(meta, store, "hw", policy(min_segment_rows=1, delete_ratio=1.0, l0_age=0.0))
    assert s1.results and all(r.status == compaction.COMMITTED for r in s1.results), s1.to_json()
    # 2) those small outputs merged (with the older rows when there are any)
    s2 = compaction.compact(meta, store, "hw", policy(min_segment_rows=1000, target_rows=10_000, l0_age=1e6))
    assert s2.results and all(r.status == compaction.COMMITTED for r in s2.results), s2.to_json()
    _gc(meta, store, settings, coll)
    after = _marks(meta, store, settings, coll)
    assert after == before, (f"partition row high-water marks a recovering flusher reads: before {before}, "
                             f"after compaction + GC {after}; outputs "
                             f"{[(x.segment_id, x.level, x.num_rows, x.dml_ts) for x in segments(meta, 'hw')]}")


def test_a_full_wal_replay_after_the_merge_brings_deleted_rows_back(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("hr", ["_default", "p1"], shards=1)
    w.insert("hr", range(1, 6), "p1", 1.0)
    w.flush("hr")
    w.insert("hr", range(6, 11), "p1", 2.0)
    w.flush("hr")
    w.delete("hr", range(1, 11))
    w.flush("hr")
    compaction.compact(meta, store, "hr", policy(min_segment_rows=1, delete_ratio=1.0, l0_age=0.0))   # fold
    compaction.compact(meta, store, "hr", policy(min_segment_rows=1000, target_rows=10_000, l0_age=1e6))
    w.delete("hr", [999])                              # a newer delete, stored (not folded: l0_age)
    w.flush("hr")
    coll = meta.catalog.get_by_name("hr")
    _gc(meta, store, settings, coll)
    assert rows(meta, store, "hr") == w.model.visible() == {}
    # the vchannel replays its whole log (as test_fold_then_gc_then_full_wal_replay_and_restore does)
    meta.kv.delete(meta.keys.channel_checkpoint(coll.vchannels[0]))
    w.flush("hr")
    got = rows(meta, store, "hr")
    assert got == w.model.visible(), f"rows back after the replay: {sorted(got)}"


def test_folding_a_zero_row_l1_carrier_keeps_the_partition_high_water_mark(meta, store, settings):
    """A row-bearing segment whose own delete log hides all its rows is REWRITTEN into a
    0-row L1 output that keeps its delete entries (carried) and its row mark (dml_ts). A
    later fold takes that output for a delete-only L0 input (0 rows): it is Dropped as
    'folded', with no output -- and the partition's row high-water mark goes with it."""
    w = Writer(meta, store, settings)
    w.create("hz", ["_default", "p1"], shards=1)
    w.insert("hz", range(1, 6), "p1", 1.0)
    w.delete("hz", range(1, 6))                          # rides on the same segment's delta log
    w.flush("hz")
    coll = meta.catalog.get_by_name("hz")
    before = _marks(meta, store, settings, coll)
    s1 = compaction.compact(meta, store, "hz", policy(min_segment_rows=1, delete_ratio=0.0, l0_age=1e6))
    assert [u.kind for u in s1.plan.units] == [compaction.REWRITE], s1.to_json()
    (out,) = segments(meta, "hz")
    assert out.num_rows == 0 and out.level == "L1" and out.deltalogs, out
    s2 = compaction.compact(meta, store, "hz", policy(min_segment_rows=1, delete_ratio=1.0, l0_age=0.0))
    assert s2.results and all(r.status == compaction.COMMITTED for r in s2.results), s2.to_json()
    w.delete("hz", [999])                                # a newer delete, stored
    w.flush("hz")
    _gc(meta, store, settings, coll)
    after = _marks(meta, store, settings, coll)
    segs = [(x.segment_id, x.level, x.num_rows, x.dml_ts) for x in segments(meta, 'hz')]
    meta.kv.delete(meta.keys.channel_checkpoint(coll.vchannels[0]))
    w.flush("hz")
    got = rows(meta, store, "hz")
    assert (after, got) == (before, w.model.visible()), (f"row high-water marks: before {before}, after "
                                                         f"{after}; segments {segs}; rows after a full "
                                                         f"replay: {sorted(got)}")
