"""Two GC runs at once (two processes), and a GC SIGKILLed mid-sweep and mid-reclaim of
dropped segments, then re-run: no referenced file deleted, every old orphan and every
reclaimable dropped segment gone exactly once, and the counts say what really happened."""

import os
import time

import pytest
from fault_harness import assert_invariants, kill_when, seed_and_snapshot, wait_until

from seglake.dev import demo
from seglake.lifecycle import gc
from seglake.meta.segments import DROPPED
from seglake.storage import layout

DAY = 86400


def _age(store, key, seconds):
    t = time.time() - seconds
    os.utime(os.path.join(store.uri, key), (t, t))


@pytest.fixture
def garbage(meta, store):
    """A snapshotted collection, 40 old and 5 young orphans, and one segment of another
    collection Dropped two days ago (9 files, no snapshot holds it)."""
    coll, _ = seed_and_snapshot(meta, store, snap="keep")
    other, _ = demo.seed(meta, store, demo.SeedParams(name="other", partitions=1, segments=2, rows=50, dim=4))
    for o in store.list(""):
        _age(store, o.key, 2 * DAY)  # only references protect the real files
    part = coll.partitions[0].partition_id
    old = {layout.insert_log(coll.collection_id, part, 900_000 + i, 100, 1) for i in range(40)}
    young = {layout.insert_log(coll.collection_id, part, 950_000 + i, 100, 1) for i in range(5)}
    for k in old | young:
        store.put(k, b"orphan")
    for k in old:
        _age(store, k, 2 * DAY)
    victim = sorted(meta.segments.list(other.collection_id), key=lambda s: s.segment_id)[0]
    meta.segments.transition([victim.ref], DROPPED, now=time.time() - 2 * DAY)
    dropped_files = {f.key for f in layout.segment_files(victim)}
    assert len(dropped_files) == 9   # fields 0, 1, 100-102, delta, stats, 2 index files
    return {"old": old, "young": young, "dropped": victim, "dropped_files": dropped_files}


def _assert_collected(meta, store, g):
    keys = {o.key for o in store.list("")}
    assert not g["old"] & keys, "old orphans left behind"
    assert g["young"] <= keys, "a young orphan was deleted"
    assert not g["dropped_files"] & keys, "files of the reclaimable dropped segment left behind"
    assert meta.kv.get(meta.segments.key(g["dropped"])) is None, "the dropped segment's record is still there"
    assert_invariants(meta, store)


def _counts(result) -> tuple[int, int, int]:
    """(orphan files, dropped segment records, dropped segment files) this run removed.
    `sweep.deleted` counts every file this run unlinked, orphans and Dropped segments'
    files alike; `dropped.files` is the Dropped segments' share of it."""
    s, d = result["sweep"], result["dropped"]
    assert s["deleted"] == sum(b["files"] for b in s["by_reason"].values()), f"deleted disagrees with by_reason: {s}"
    assert d["files"] == s["by_reason"].get("dropped_segment", {"files": 0})["files"], f"dropped disagrees: {result}"
    return s["deleted"] - d["files"], d["segments"], d["files"]


def _accounted(result) -> None:
    """Every candidate of this run's mark is accounted for exactly once by its sweep:
    deleted by it, already gone (another run first), kept by the re-check or errored."""
    s = result["sweep"]
    assert s["error_count"] == 0, s["errors"]
    assert s["deleted"] + s["already_gone"] + s["rechecked_kept"] + s["changed_kept"] == result["mark"]["candidates"], \
        f"sweep counts do not add up to the mark's candidates: {result}"


def test_two_gc_runs_at_once(meta, store, settings, spawn, garbage):
    runs = [spawn("gc_run", {"delete_delay": 0.02}, settings) for _ in range(2)]
    outcomes = [r.wait(120) for r in runs]
    done = [o.result for o in outcomes if o.assert_ok_or_clear_error("gc", "running", "another")]
    assert done, "neither GC run completed"
    _assert_collected(meta, store, garbage)
    for r in done:
        _accounted(r)
    totals = [sum(x) for x in zip(*(_counts(r) for r in done))]
    assert totals == [40, 1, 9], f"two runs together report {totals} deletions; 40 orphans, 1 segment, 9 files"
    assert sum(r["sweep"]["deleted"] for r in done) == 49, "a file was counted as deleted by both runs"
    if len(done) == 2:  # what one run deleted, the other (if its mark saw it) found already gone
        assert all(r["sweep"]["already_gone"] <= 49 - r["sweep"]["deleted"] for r in done)
    again = gc.run(meta, store, gc.GCOptions())
    assert _counts(again) == (0, 0, 0)
    assert again["sweep"]["already_gone"] == 0
    _assert_collected(meta, store, garbage)


def _left(store, keys) -> set:
    return {k for k in keys if store.exists(k)}


def _re_run_counts_only_its_own(meta, store, garbage, left_old, left_dropped):
    """A re-run after a kill deletes what the killed run left and counts only that:
    nothing it did not unlink, nothing already gone, the segment record once."""
    result = gc.run(meta, store, gc.GCOptions())
    _accounted(result)
    assert _counts(result) == (len(left_old), 1, len(left_dropped)), "the re-run must count only what it deleted"
    assert result["sweep"]["deleted"] == len(left_old) + len(left_dropped)
    assert result["sweep"]["already_gone"] == 0
    _assert_collected(meta, store, garbage)


def test_gc_killed_mid_sweep_then_re_run(meta, store, settings, spawn, garbage):
    old = garbage["old"]
    child = spawn("gc_run", {"delete_delay": 0.03}, settings)
    kill_when(child, lambda: sum(not store.exists(k) for k in old) / len(old), 0.5)
    left = _left(store, old)
    assert 0 < len(left) < len(old)
    assert_invariants(meta, store)
    _re_run_counts_only_its_own(meta, store, garbage, left, _left(store, garbage["dropped_files"]))


def test_gc_killed_while_reclaiming_a_dropped_segment_then_re_run(meta, store, settings, spawn, garbage):
    files = garbage["dropped_files"]
    child = spawn("gc_run", {"delete_delay": 0.05}, settings)
    kill_when(child, lambda: sum(not store.exists(k) for k in files) / len(files), 3 / 9)
    left = _left(store, files)
    assert 0 < len(left) < len(files)
    assert_invariants(meta, store)
    _re_run_counts_only_its_own(meta, store, garbage, _left(store, garbage["old"]), left)


def test_gc_reclaiming_a_pending_snapshot_while_it_commits(meta, store, settings, spawn):
    """A create commits while GC's stale-PENDING cleanup is removing its files (GC told
    the PENDING is stale): whoever wins, the creator's answer must match what is left --
    COMMITTED means the record and every file it needs exist; otherwise a clear error
    and no COMMITTED record."""
    coll, _ = seed_and_snapshot(meta, store, snap=None)
    create = spawn("snapshot_create", {"collection": "demo", "name": "s1", "owner": "run-1", "per_file": 2},
                   settings, faults="snapshot.before_commit:sleep=1")
    meta_prefix = f"{layout.SNAPSHOTS}/{coll.collection_id}/metadata/"
    wait_until(lambda: any(True for _ in store.list(meta_prefix)), what="snapshot metadata written")
    reclaim = spawn("gc_run", {"opts": {"snapshot_pending_timeout": 0}, "delete_delay": 0.4}, settings)
    created = create.wait(60).assert_ok_or_clear_error("snapshot", "conflict", "changed", "dropped", "deleted")
    reclaim.wait(60).assert_ok_or_clear_error("snapshot", "pending", "timeout")
    rec = meta.snapshots.find(coll.collection_id, "s1")
    if created:
        assert rec is not None and rec.state == "COMMITTED", f"the creator reported COMMITTED; the record is {rec}"
    else:
        assert rec is None or rec.state != "COMMITTED", "the creator failed, but a COMMITTED record is left"
    assert_invariants(meta, store)
