"""A snapshot create SIGKILLed after its manifests and right before its commit, a GC
run meanwhile, then the same owner re-runs the create: it converges to one COMMITTED
snapshot of every Flushed segment, and nothing it references is lost."""

import time

import pytest
from fault_harness import assert_invariants, seed_and_snapshot

from seglake.lifecycle import gc, snapshot


@pytest.mark.parametrize("point", ["snapshot.after_manifests", "snapshot.before_commit"])
def test_snapshot_create_killed_then_gc_then_re_run(meta, store, settings, spawn, point):
    coll, _ = seed_and_snapshot(meta, store, snap=None)
    out = spawn("snapshot_create", {"collection": "demo", "name": "s1", "owner": "run-1"}, settings,
                faults=f"{point}:kill").wait(60)
    assert out.rc == -9, out.err[-2000:]
    assert meta.snapshots.get(coll.collection_id, "s1")[0].state == "PENDING"
    # everything is old enough to collect: only the PENDING record protects its files
    result = gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, force=True,
                                              snapshot_pending_timeout=3600), run_id=f"gc-{time.time_ns()}")
    assert result["sweep"]["deleted"] == 0, result
    rec = snapshot.create(meta, store, "demo", "s1", owner="run-1", per_file=2)
    assert rec.state == "COMMITTED"
    flushed = sorted(s.segment_id for s in meta.segments.list(coll.collection_id))
    assert sorted(s.segment_id for s in snapshot.read_segments(store, rec)) == flushed
    assert_invariants(meta, store)
