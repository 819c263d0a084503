"""Attack s23 (LOW): a compaction on a host whose clock runs 2 h behind stamps its inputs'
`dropped_at` 2 h in the past, so GC (right clock) reclaims them 2 h before
`drop_tolerance` has passed -- with a 1 h tolerance, at once. Every other writer of the
store is held to the TSO (a process more than max_clock_skew behind the mark refuses:
ClockSkewError); a compaction commit issued no timestamp at all.

Expected: the inputs' dropped_at is never before the store's clock (the TSO mark) at the
commit, or the behind host is refused. Real etcd, files, WAL and flusher; the compaction
modules' clock shifted (the rest of the process keeps the real one)."""

from __future__ import annotations

import time
import types

import pytest

from seglake.errors import ClockSkewError
from seglake.lifecycle import compaction, gc
from seglake.lifecycle.compaction import folding, running

from compaction_helpers import DROPPED, Writer, exact, mixed_workload, segments

pytestmark = pytest.mark.etcd

BEHIND = 7200.0


def _behind(monkeypatch):
    shim = types.SimpleNamespace(time=lambda: time.time() - BEHIND, monotonic=time.monotonic)
    monkeypatch.setattr(running, "time", shim)
    monkeypatch.setattr(folding, "time", shim)


@pytest.mark.parametrize("l0_age", [3600.0, 0.0], ids=["merge", "fold"])
def test_a_compaction_on_a_slow_clock_never_shortens_drop_tolerance(meta, store, settings, monkeypatch, l0_age):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(3):
        mixed_workload(w, "c", step)
    before = exact(meta, store, "c")
    pol = compaction.Policy(min_segment_rows=1000, target_rows=40, delete_ratio=0.1, protection=0.0, l0_age=l0_age)
    _behind(monkeypatch)
    t0 = time.time()
    try:
        s = compaction.compact(meta, store, "c", pol, now=None)
    except ClockSkewError:
        return                                  # refused: nothing committed on a slow clock
    monkeypatch.undo()
    assert s.counts()["committed"] >= 1
    inputs = [x for x in segments(meta, "c", DROPPED) if x.compacted_to is not None]
    assert inputs
    early = [(x.segment_id, round(t0 - x.dropped_at)) for x in inputs if x.dropped_at < t0 - 60]
    assert not early, f"inputs stamped Dropped this many seconds before the commit: {early[:4]}"
    opts = gc.GCOptions.from_settings(settings, drop_tolerance=3600.0, collection_id=meta.catalog.get_by_name("c").collection_id)
    gc.run(meta, store, opts)
    still = [x for x in segments(meta, "c", DROPPED) if x.compacted_to is not None]
    assert len(still) == len(inputs), "GC reclaimed compacted inputs before drop_tolerance (1 h) had passed"
    assert exact(meta, store, "c") == before
