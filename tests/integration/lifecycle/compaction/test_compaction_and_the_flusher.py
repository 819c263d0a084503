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
