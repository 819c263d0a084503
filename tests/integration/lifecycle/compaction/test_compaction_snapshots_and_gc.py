"""Issue 28: snapshots and GC around compaction. A snapshot keeps referencing the inputs
it captured: a restore of a snapshot taken before a compaction (or during one) gives the
pre-compaction rows exactly, and GC keeps those inputs while the snapshot lives; a
collection snapshotted within compaction_protection (or with a snapshot being written)
is not compacted; compacted inputs are reclaimed, files and records, only after
drop_tolerance and only when nothing references them."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, gc, snapshot
from seglake.storage import layout

from compaction_helpers import DROPPED, Writer, exact, mixed_workload, policy, rows, run_restore, segments

pytestmark = pytest.mark.etcd


def _present(store, seg) -> list[bool]:
    out = []
    for f in layout.segment_files(seg):
        try:
            store.head(f.key)
            out.append(True)
        except Exception:
            out.append(False)
    return out


def _gc(meta, store, settings, cid: int, drop_tolerance: float) -> dict:
    opts = gc.GCOptions.from_settings(settings, drop_tolerance=drop_tolerance, force=drop_tolerance < 3600,
                                      collection_id=cid)
    return gc.run(meta, store, opts)


def test_snapshot_protection_keeps_a_fresh_snapshot_s_collection_out(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "c", step)
    assert compaction.plan(meta, store, "c", policy(protection=3600)).units
    snapshot.create(meta, store, "c", "fresh")
    p = compaction.plan(meta, store, "c", policy(protection=3600))
    assert p.units == [] and "compaction_protection" in p.skipped
    assert compaction.compact(meta, store, "c", policy(protection=3600)).results == []
    # the same snapshot is old enough for a shorter protection, or later in time
    assert compaction.plan(meta, store, "c", policy(protection=0)).units
    import time
    assert compaction.plan(meta, store, "c", policy(protection=60), now=time.time() + 120).units
    # a snapshot being written (PENDING) keeps it out whatever the protection
    snapshot.begin(meta, "c", "writing")
    p = compaction.plan(meta, store, "c", policy(protection=0))
    assert p.units == [] and "PENDING" in p.skipped


def test_restore_of_a_snapshot_taken_before_or_during_a_compaction_gives_its_rows(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "src", step)
    pre = rows(meta, store, "src")
    snapshot.create(meta, store, "src", "before")
    units = compaction.plan(meta, store, "src", policy(target_rows=10_000)).units
    during = []

    def snap(_unit):
        if not during:
            during.append(snapshot.create(meta, store, "src", "during"))

    results = [compaction.run_unit(meta, store, u, hooks={"after_files": snap}) for u in units]
    assert {r.status for r in results} == {compaction.COMMITTED}
    w.delete("src", [3, 4, 23])      # after the compaction: not in either snapshot
    w.flush("src")
    assert rows(meta, store, "src") == w.model.visible() != pre
    for snap_name, target in (("before", "r1"), ("during", "r2")):
        run_restore(meta, store, "src", snap_name, target)
        assert rows(meta, store, target) == pre


def test_gc_reclaims_compacted_inputs_after_the_tolerance_unless_a_snapshot_holds_them(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("g", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "g", step)
    cid = meta.catalog.get_by_name("g").collection_id
    held = {s.segment_id for s in segments(meta, "g")}
    snapshot.create(meta, store, "g", "held")
    pre = exact(meta, store, "g")
    for step in range(2, 4):                  # more segments, not in the snapshot
        mixed_workload(w, "g", step)
    visible = exact(meta, store, "g")
    s = compaction.compact(meta, store, "g", policy(target_rows=10_000))
    assert s.results and {r.status for r in s.results} == {compaction.COMMITTED}
    inputs = {x.segment_id: x for x in segments(meta, "g", DROPPED) if x.compacted_to is not None}
    assert set(inputs) & held and set(inputs) - held
    # within the tolerance: every input kept, files and records
    _gc(meta, store, settings, cid, 3600.0)
    assert {x.segment_id for x in segments(meta, "g", DROPPED)} >= set(inputs)
    assert all(all(_present(store, x)) for x in inputs.values())
    # past it (tolerance 0): the inputs the snapshot holds stay; the others go, files and records
    _gc(meta, store, settings, cid, 0.0)
    left = {x.segment_id for x in segments(meta, "g", DROPPED)}
    for sid, x in inputs.items():
        if sid in held:
            assert sid in left and all(_present(store, x)), sid
        else:
            assert sid not in left and not any(_present(store, x)), sid
    assert exact(meta, store, "g") == visible
    run_restore(meta, store, "g", "held", "g_restored")
    assert exact(meta, store, "g_restored").keys() != set() and rows(meta, store, "g_restored") == \
        _names(pre)
    # the snapshot dropped: nothing references them any more
    snapshot.drop(meta, store, "g", "held")
    _gc(meta, store, settings, cid, 0.0)
    left = {x.segment_id for x in segments(meta, "g", DROPPED)}
    assert not left & set(inputs)
    assert not any(any(_present(store, x)) for x in inputs.values())
    assert exact(meta, store, "g") == visible


def _names(exact_rows) -> dict:
    from collections import Counter
    out = Counter()
    for (pk, _rid, _ts, part, v), n in exact_rows.items():
        out[(pk, part, v)] += n
    return out
