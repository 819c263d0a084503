"""Attack s23 (LOW, operator visibility): compaction history lines are keyed by the wall
clock's milliseconds and the newest HISTORY_KEEP are kept BY KEY. After the host's clock
jumped back (it had run 2 h fast, then NTP stepped it), every new run's line sorts below
the old ones and is pruned in the same call that wrote it: the page and `compaction
history` never show the runs that happened since. Two runs recorded in the same
millisecond (two workers compacting) overwrite each other's line the same way.

Real etcd, files, WAL and flusher."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.compaction.compacting import HISTORY_KEEP
from seglake.meta.codec import encode
from seglake.meta.kv import Put

from compaction_helpers import Writer, mixed_workload, policy

pytestmark = pytest.mark.etcd


def _lines(meta, cid):
    return compaction.history(meta, cid, last=10**6)


def test_a_run_after_the_clock_stepped_back_keeps_its_history_line(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "c", step)
    cid = meta.catalog.get_by_name("c").collection_id
    ahead = time.time() + 7200          # recorded while the clock ran 2 h fast
    for i in range(HISTORY_KEEP):
        t = ahead + i
        meta.kv.put(meta.keys.compaction_history(cid, int(t * 1000)),
                    encode({"collection_id": cid, "collection": "c", "db": "default", "recorded_at": t,
                            "seconds": 0.1, "engine": "inline", "trigger": "manual", "segments_before": 2,
                            "segments_after": 1, "units": 1, "committed": 1, "lost": 0, "rows_dropped": 0,
                            "bytes_in": 1, "bytes_out": 1, "bytes_reclaimed": 0}))
    s = compaction.compact(meta, store, "c", policy())
    assert s.counts()["committed"] >= 1
    lines = _lines(meta, cid)
    assert len(lines) == HISTORY_KEEP
    mine = [x for x in lines if x["segments_before"] == s.plan.segments and x["units"] == len(s.plan.units)
            and x["rows_dropped"] == s.counts()["rows_dropped"]]
    assert mine, "the run that just compacted has no history line: pruned as the 'oldest' after the clock stepped back"
    assert compaction.history(meta, cid, last=1) == mine, "the newest run is not shown first"


def test_two_runs_recorded_in_one_millisecond_keep_two_lines(meta, store, settings, monkeypatch):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "c", step)
    cid = meta.catalog.get_by_name("c").collection_id
    from seglake.lifecycle.compaction import compacting
    runs = []
    for _ in range(2):
        p = compaction.plan(meta, store, "c", policy())
        assert p.units
        runs.append(compaction.Summary(p, results=compaction.run_units(meta, store, p.units)))
        w.insert("c", range(900, 905), "p1", 3.0)
        w.flush("c")
        w.delete("c", [900, 1, 2, 3])
        w.flush("c")
    frozen = time.time()
    monkeypatch.setattr(compacting.time, "time", lambda: frozen)   # both recorded in one millisecond
    for r in runs:
        compacting.record(meta, r)
    monkeypatch.undo()
    assert len(_lines(meta, cid)) == 2, "the second run's line overwrote the first's"
