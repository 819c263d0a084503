"""Attack s25: a snapshot PENDING (its manifests written, held just before its commit)
while a compaction planned before it commits and GC runs with zero tolerances (force):
the snapshot names the compaction's inputs, which are Dropped a moment later. GC must
keep them (a snapshot being written references what it captured), so the snapshot,
once committed, restores to the rows of its moment exactly; and after it is dropped GC
reclaims the inputs."""

from __future__ import annotations

import threading

import pytest

from seglake import faults
from seglake.lifecycle import compaction, gc, snapshot

from compaction_helpers import DROPPED, Writer, exact, mixed_workload, policy, rows, run_restore, segments

pytestmark = pytest.mark.etcd


def _gc(meta, store, settings, cid):
    return gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                          force=True, collection_id=cid))


@pytest.mark.parametrize("fold", [False, True], ids=["merge", "fold"])
def test_gc_keeps_what_a_pending_snapshot_captured_while_a_compaction_drops_it(meta, store, settings, tmp_path,
                                                                              fold):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for s in range(3):
        mixed_workload(w, "c", s)
    cid = meta.catalog.get_by_name("c").collection_id
    p = compaction.plan(meta, store, "c", policy(target_rows=10_000, l0_age=0.0 if fold else 1e6))
    assert p.units
    want, want_exact = w.model.visible(), exact(meta, store, "c")
    gate = tmp_path / "gate"
    errors: list = []

    def take():
        try:
            snapshot.create(meta, store, "c", "s")
        except Exception as e:     # noqa: BLE001 - reported by the test
            errors.append(e)

    with faults.inject("snapshot.before_commit", f"gate={gate}"):
        t = threading.Thread(target=take)
        t.start()
        reached = tmp_path / "gate.reached"
        for _ in range(600):
            if reached.exists() or not t.is_alive():
                break
            t.join(0.05)
        assert reached.exists(), errors
        results = compaction.run_units(meta, store, p.units, sources_revision=p.revision)
        assert {r.status for r in results} == {compaction.COMMITTED}, results
        inputs = {s for u in p.units for s in [*u.segment_ids, *(h[0] for h in u.hits)]}
        _gc(meta, store, settings, cid)
        _gc(meta, store, settings, cid)
        gate.write_text("")
        t.join(120)
    assert not t.is_alive() and not errors, errors
    assert rows(meta, store, "c") == want
    run_restore(meta, store, "c", "s", "r")
    assert rows(meta, store, "r") == want
    # row ids and timestamps too
    assert exact(meta, store, "r") == want_exact
    snapshot.drop(meta, store, "c", "s")
    _gc(meta, store, settings, cid)
    _gc(meta, store, settings, cid)
    left = {s.segment_id for s in segments(meta, "c", DROPPED)} & inputs
    assert not left, left
