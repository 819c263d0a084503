"""Attack s23 (LOW): GC on a host whose clock runs 2 h FAST judges drop_tolerance by that
clock, so it reclaims a compaction's inputs (Dropped a moment ago) as if 2 h had passed --
with a 1 h tolerance, at once. Snapshot TTLs and pins were made safe against exactly this
host (etcd leases, s22/s23); every writer of the store is held to the TSO (a clock more
than max_clock_skew + 10 s fast while the store is in use is refused: ClockSkewError);
GC judged tolerances by its own clock unchecked.

Expected: the compacted inputs are kept (or the fast GC is refused before it judges
anything). Real etcd, files, WAL and flusher; GC's clock and its TSO's clock shifted."""

from __future__ import annotations

import functools
import time

import pytest

from seglake.errors import ClockSkewError
from seglake.lifecycle import compaction, gc
from seglake.lifecycle.gc import inline, marking
from seglake.meta import Meta
from seglake.meta.alloc import TSO

from compaction_helpers import DROPPED, Writer, exact, mixed_workload, policy, segments

pytestmark = pytest.mark.etcd

AHEAD = 7200.0


def _compacted(meta, store, settings, steps: int):
    """Collection `c` after `steps` of the mixed workload and one compaction: (its exact
    rows, the ids of the compacted inputs, Dropped a moment ago)."""
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(steps):
        mixed_workload(w, "c", step)
    before = exact(meta, store, "c")
    assert compaction.compact(meta, store, "c", policy()).counts()["committed"] >= 1
    inputs = [x.segment_id for x in segments(meta, "c", DROPPED) if x.compacted_to is not None]
    assert inputs
    return before, inputs


def test_gc_on_a_fast_clock_never_reclaims_compacted_inputs_early(meta, store, settings, monkeypatch):
    before, inputs = _compacted(meta, store, settings, steps=3)
    fast = lambda: time.time() + AHEAD                                       # noqa: E731
    g = Meta.from_settings(settings)                    # the GC host: its clock, its TSO's clock
    try:
        g.tso = TSO(g.kv, g.keys.alloc_tso(), clock=fast, max_clock_skew=settings.max_clock_skew)
        monkeypatch.setattr(inline, "mark", functools.partial(marking.mark, now=fast))
        opts = gc.GCOptions.from_settings(settings, drop_tolerance=3600.0,
                                          collection_id=meta.catalog.get_by_name("c").collection_id)
        judge = marking.judging_time

        def in_use_then_judge(m, now=time.time, store=None):   # a writer with a right clock is active as GC judges
            meta.tso.now()
            return judge(m, now, store)

        monkeypatch.setattr(marking, "judging_time", in_use_then_judge)
        try:
            gc.run(g, store, opts)
        except ClockSkewError:
            pass                                        # refused: nothing judged by a fast clock
    finally:
        g.close()
    still = [x.segment_id for x in segments(meta, "c", DROPPED) if x.compacted_to is not None]
    assert sorted(still) == sorted(inputs), (
        f"GC on a clock {AHEAD:.0f} s fast reclaimed {len(inputs) - len(still)} of {len(inputs)} compacted "
        f"inputs Dropped moments ago (drop_tolerance 1 h)")
    assert exact(meta, store, "c") == before
    meta.tso.now()          # the fast GC host moved nothing: a right clock still issues timestamps


def test_gc_on_a_fast_clock_of_an_idle_store_judges_by_the_store_s_clock(meta, store, settings, monkeypatch):
    """The same fast GC host when no writer is active: the TSO cannot vouch (nothing is in
    use), so the object store's own clock (a probe object's mtime; an S3 server's
    LastModified) caps the time GC judges by. Before, the compacted inputs were reclaimed."""
    before, inputs = _compacted(meta, store, settings, steps=2)
    fast = lambda: time.time() + AHEAD                                       # noqa: E731
    g = Meta.from_settings(settings)
    try:
        g.tso = TSO(g.kv, g.keys.alloc_tso(), clock=fast, max_clock_skew=settings.max_clock_skew)
        monkeypatch.setattr(g.tso, "vouch", lambda: (fast(), fast()))     # idle: nothing to check it against
        monkeypatch.setattr(inline, "mark", functools.partial(marking.mark, now=fast))
        opts = gc.GCOptions.from_settings(settings, drop_tolerance=3600.0,
                                          collection_id=meta.catalog.get_by_name("c").collection_id)
        summary = gc.run(g, store, opts)
    finally:
        g.close()
    still = [x.segment_id for x in segments(meta, "c", DROPPED) if x.compacted_to is not None]
    assert sorted(still) == sorted(inputs), (summary, len(inputs) - len(still))
    assert exact(meta, store, "c") == before
