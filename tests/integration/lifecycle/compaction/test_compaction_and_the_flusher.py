"""Issue 28 x the WAL flusher: the flusher's replay skips rows at or below the highest row
tick it wrote per partition, read from the Flushed (and Dropped-with-files) segment
records of its vchannel. Compaction drops those records' segments and GC later removes
them, so the output carries the inputs' row high-water mark in dml_ts, even when every
row was deleted (a 0-row L1 output): the flusher still reads it after GC removed the
inputs, and a later flush of the same collection adds rows exactly once."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, gc, snapshot
from seglake.lifecycle.flush import Flusher

from compaction_helpers import DROPPED, Writer, policy, rows, run_restore, segments
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd


def test_a_zero_row_output_keeps_the_partition_high_water_mark_after_gc(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("h", ["_default", "p1"], shards=1)
    for i in range(2):
        w.insert("h", range(1, 7), "p1", float(i))
        w.flush("h")
    coll = meta.catalog.get_by_name("h")
    p1 = [p.partition_id for p in coll.partitions if p.name == "p1"][0]
    hw = max(s.dml_ts for s in segments(meta, "h") if s.partition_id == p1)
    w.delete("h", range(1, 7), partition="p1")
    w.flush("h")
    assert rows(meta, store, "h") == w.model.visible() == {}
    s = compaction.compact(meta, store, "h", policy())
    assert [r.status for r in s.results] == [compaction.COMMITTED]
    out = [x for x in segments(meta, "h") if x.partition_id == p1]
    assert len(out) == 1 and out[0].num_rows == 0 and not out[0].binlogs and out[0].dml_ts == hw
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    assert not [x for x in segments(meta, "h", DROPPED) if x.partition_id == p1]   # input records gone
    (pch,) = pchannels(coll)
    f = Flusher(meta, store, pch, settings).open()
    assert f.states[coll.vchannels[0]].part_hw.get(p1) == hw
    # and the collection goes on: new rows once, the old ones still deleted
    w.insert("h", [3, 9], "p1", 5.0)
    w.flush("h")
    assert rows(meta, store, "h") == w.model.visible() == {(3, "p1", 5.0): 1, (9, "p1", 5.0): 1}
    # a snapshot holding the file-less 0-row output restores like any other
    snapshot.create(meta, store, "h", "s")
    run_restore(meta, store, "h", "s", "h2")
    assert rows(meta, store, "h2") == w.model.visible()


def test_the_flusher_high_water_marks_are_unchanged_by_compaction_and_gc(meta, store, settings):
    """What a flusher recovering each vchannel reads as its per-partition row high-water
    marks is the same before a compaction and after it once GC removed the inputs."""
    from compaction_helpers import mixed_workload

    w = Writer(meta, store, settings)
    w.create("m", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "m", step)
    coll = meta.catalog.get_by_name("m")

    def marks() -> dict:
        out = {}
        for pch in pchannels(coll):
            f = Flusher(meta, store, pch, settings).open()
            out.update({v: dict(st.part_hw) for v, st in f.states.items() if v in coll.vchannels})
        return out

    before = marks()
    assert before and all(before.values())
    s = compaction.compact(meta, store, "m", policy(target_rows=10_000))
    assert s.results and {r.status for r in s.results} == {compaction.COMMITTED}
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    assert not [x for x in segments(meta, "m", DROPPED)]                 # every input record gone
    assert marks() == before
    w.insert("m", [1, 2, 3], "p2", 9.0)
    w.flush("m")
    assert rows(meta, store, "m") == w.model.visible()
