"""Adversarial tests of the compaction lifecycle (an attack on its first version): row-exact
against the Model through unflushed WAL writes, full replays after GC, many L0 segments,
odd policies, chains across roots, legacy stores; and two defects it found (a hand-edited
unit record's output id made a run, and GC's expiry of the record, delete a live
segment's files), fixed. Not here: GC forced below its tolerance floor sweeps any
in-flight file (a flusher's too) -- what forcing it below the floor means."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, gc, snapshot
from seglake.meta.codec import encode

from compaction_helpers import DROPPED, Writer, exact, policy, rows, run_restore, segments

pytestmark = pytest.mark.etcd


def test_compaction_interleaved_with_unflushed_wal(meta, store, settings):
    """Rows and deletes in the WAL above the checkpoint, compaction in between, then flush."""
    w = Writer(meta, store, settings)
    w.create("u", ["_default", "p1"], shards=1)
    for i in range(3):
        w.insert("u", range(1, 11), "p1", float(i))
        w.flush("u")
    w.delete("u", [1, 2])
    w.flush("u")
    # in the WAL, not flushed: upserts of pks in the inputs, a scoped delete, a wide delete
    w.insert("u", [3, 4], "p1", 9.0, upsert=True)
    w.delete("u", [5, 6], partition="p1")
    w.delete("u", [7])
    s = compaction.compact(meta, store, "u", policy())
    assert s.results and all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    w.flush("u")
    assert rows(meta, store, "u") == w.model.visible()
    # and again: compact the rest, rows exact
    s = compaction.compact(meta, store, "u", policy())
    assert rows(meta, store, "u") == w.model.visible()


def test_flusher_reopen_after_compaction_and_gc_adds_nothing_twice(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("r", ["_default", "p1"], shards=1)
    for i in range(3):
        w.insert("r", range(1, 6), "p1", float(i))
        w.insert("r", [100 + i], "p1", 1.0, upsert=True)
        w.flush("r")
        w.delete("r", [1 + i])
        w.flush("r")
    coll = meta.catalog.get_by_name("r")
    # the checkpoint is rewound to the start of the log: a full replay after compaction+GC
    from wal_helpers import pchannels
    before = rows(meta, store, "r")
    assert before == w.model.visible()
    s = compaction.compact(meta, store, "r", policy())
    assert s.results
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    (pch,) = pchannels(coll)
    v = coll.vchannels[0]
    assert meta.kv.get(meta.keys.channel_checkpoint(v)) is not None
    meta.kv.delete(meta.keys.channel_checkpoint(v))
    w.flush("r")
    assert rows(meta, store, "r") == w.model.visible()


def test_many_l0_segments(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("l", ["_default"], shards=1)
    w.insert("l", range(1, 301), "_default", 1.0)
    w.flush("l")
    for i in range(1, 111):
        w.delete("l", [i])
        w.flush("l")
    n0 = len(segments(meta, "l"))
    s = compaction.compact(meta, store, "l", policy(min_segment_rows=1000, target_rows=1_000_000))
    assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    assert len(segments(meta, "l")) < n0
    assert rows(meta, store, "l") == w.model.visible()
    s = compaction.compact(meta, store, "l", policy(min_segment_rows=1000, target_rows=1_000_000))
    assert rows(meta, store, "l") == w.model.visible()


def test_odd_policy_min_rows_1_target_1(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("o", ["_default", "p1"], shards=2)
    for i in range(3):
        w.insert("o", range(1, 8), "p1", float(i))
        w.insert("o", [1, 2], "_default", float(i), upsert=True)
        w.flush("o")
        w.delete("o", [i + 3], partition="p1")
        w.flush("o")
    before = exact(meta, store, "o")
    for pol in (policy(min_segment_rows=1, target_rows=1, delete_ratio=0.0),
                policy(min_segment_rows=100_000_000, target_rows=1), policy(target_rows=1)):
        s = compaction.compact(meta, store, "o", pol)
        assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
        assert exact(meta, store, "o") == before
        assert rows(meta, store, "o") == w.model.visible()


def test_a_hand_edited_unit_record_output_id_never_touches_a_live_segment(meta, store, settings):
    """A prepared unit record whose `output` was edited to the id of a live segment of the
    same partition: the run must not overwrite or delete that segment's files (it did:
    the merged rows overwrote the segment's binlogs, then the lost unit removed them)."""
    w = Writer(meta, store, settings)
    w.create("e", ["_default"], shards=1)
    for i in range(3):
        w.insert("e", range(10 * i + 1, 10 * i + 6), "_default", float(i))
        w.flush("e")
    w.insert("e", range(100, 150), "_default", 7.0)
    w.flush("e")
    before = rows(meta, store, "e")
    coll = meta.catalog.get_by_name("e")
    p = compaction.plan(meta, store, "e", policy(min_segment_rows=20))
    assert len(p.units) == 1
    unit = p.units[0]
    victim = [s for s in segments(meta, "e") if s.segment_id not in unit.segment_ids][0]
    from seglake.lifecycle.compaction.running import prepare
    rec, kv = prepare(meta, coll, unit, 0.0, p.revision)
    rec["output"] = victim.segment_id
    meta.kv.put(kv.key, encode(rec))
    from seglake.lifecycle.compaction.running import CompactionError
    with pytest.raises(CompactionError, match="already: the record was edited"):
        compaction.run_unit(meta, store, unit, sources_revision=p.revision)
    r = "refused"
    from seglake.lifecycle import verify
    rep = verify.verify_collection(meta, store, "e", threads=1)
    assert rep["ok"], (r, verify.format_report(rep))
    assert rows(meta, store, "e") == before, r


def test_snapshot_before_compaction_gc_zero_then_restore(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("g", ["_default", "p1"], shards=1)
    for i in range(3):
        w.insert("g", range(1, 6), "p1", float(i))
        w.flush("g")
        w.delete("g", [i + 1], partition="p1")
        w.flush("g")
    snap_rows = rows(meta, store, "g")
    snapshot.create(meta, store, "g", "before")
    s = compaction.compact(meta, store, "g", policy(protection=0.0))
    assert s.results and all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    coll = meta.catalog.get_by_name("g")
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    run_restore(meta, store, "g", "before", "g2")
    assert rows(meta, store, "g2") == snap_rows
    # the restored copy compacted, snapshotted and restored again (a chain)
    w.delete("g", [4], partition="p1")
    s = compaction.compact(meta, store, "g2", policy())
    assert rows(meta, store, "g2") == snap_rows
    snapshot.create(meta, store, "g2", "s2")
    run_restore(meta, store, "g2", "s2", "g3")
    assert rows(meta, store, "g3") == snap_rows


def _compact_all(meta, store, name, **kw):
    s = compaction.compact(meta, store, name, policy(**kw))
    assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    return s


def _replay_from_scratch(meta, store, settings, w, name):
    """GC the compacted inputs, drop every vchannel checkpoint, flush: a full replay."""
    coll = meta.catalog.get_by_name(name)
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    for v in coll.vchannels:
        meta.kv.delete(meta.keys.channel_checkpoint(v))
    w.flush(name)


def test_chain_of_compacted_restores_and_bundles(meta, store, settings, etcd_server, tmp_path):
    import copy as _copy
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore
    from bundle_restore_helpers import restore_bundle
    from copy_model_helpers import other_root, quiet, snap_and_restore

    parts = ["_default", "p1", "p2", "p3"]

    def writes(w, name, r):
        b = 1000 * r
        for i, p in enumerate(parts):
            w.insert(name, range(b, b + 12), p, float(10 * r + i))
        w.flush(name)
        for i, p in enumerate(parts):
            w.delete(name, [b + i, 3, 4], partition=p)
        w.delete(name, [b + 9])
        w.insert(name, [b + 10, 5], "p2", 500.0 + r, upsert=True)
        w.flush(name)
        assert rows(w.meta, w.store, name) == w.model.visible(), (name, r)

    w = Writer(meta, store, settings)
    w.create("src", parts, shards=2)
    writes(w, "src", 0)
    writes(w, "src", 1)
    _compact_all(meta, store, "src")
    assert rows(meta, store, "src") == w.model.visible()
    snap_and_restore(meta, store, "src", "r1")
    assert rows(meta, store, "r1") == w.model.visible()
    _compact_all(meta, store, "r1")
    assert rows(meta, store, "r1") == w.model.visible()
    writes(w, "r1", 2)
    _replay_from_scratch(meta, store, settings, w, "r1")
    assert rows(meta, store, "r1") == w.model.visible(), "r1 after a full replay"
    _compact_all(meta, store, "r1")
    assert rows(meta, store, "r1") == w.model.visible()

    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "b")
    try:
        backup = LocalStore(tmp_path / "backup")
        snapshot.create(meta, store, "r1", "x1")
        exports.export(meta, store, backup, "r1", "x1", **quiet)
        restore_bundle(meta2, store2, backup, "r1", "x1", "b1")
        w2 = Writer(meta2, store2, settings2, _copy.deepcopy(w.model))
        assert rows(meta2, store2, "b1") == w2.model.visible()
        _compact_all(meta2, store2, "b1")
        assert rows(meta2, store2, "b1") == w2.model.visible()
        writes(w2, "b1", 3)
        _compact_all(meta2, store2, "b1")
        _replay_from_scratch(meta2, store2, settings2, w2, "b1")
        assert rows(meta2, store2, "b1") == w2.model.visible(), "b1 after a full replay"
        snap_and_restore(meta2, store2, "b1", "b2")
        assert rows(meta2, store2, "b2") == w2.model.visible()
        _compact_all(meta2, store2, "b2", target_rows=1)
        writes(w2, "b2", 4)
        assert rows(meta2, store2, "b2") == w2.model.visible()
    finally:
        meta2.close()


def _exact_cols(meta, store, name):
    from collections import Counter
    from seglake.visibility import visible_rows
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id)
    cols = [t.column(c).to_pylist() for c in ("pk", "RowID", "Timestamp", "partition_id")]
    return Counter(zip(*cols))


def test_legacy_v1_store_compacted_then_its_old_wal_flushed(meta, store, settings):
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from upgrade_helpers import load_store_v1
    from seglake.lifecycle.flush import flush_pchannel, pchannels_with_log

    v1 = load_store_v1(meta, settings.store_uri)["collections"]
    for name in ("demo_v1", "wal_v1"):
        before = _exact_cols(meta, store, name)
        s = compaction.compact(meta, store, name, policy(min_segment_rows=100_000, target_rows=1_000_000))
        assert s.results and all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
        assert _exact_cols(meta, store, name) == before, name
        from seglake.lifecycle import verify
        rep = verify.verify_collection(meta, store, name, threads=1)
        assert rep["ok"], verify.format_report(rep)
    coll = meta.catalog.get_by_name("wal_v1")
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    for p in pchannels_with_log(meta):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    from seglake.visibility import visible_rows
    got = sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())
    exp = v1["wal_v1"]
    assert got == sorted(exp["visible_pks"] + exp["unflushed_pks"])


def test_two_plans_with_different_policies_interleaved(meta, store, settings):
    from compaction_helpers import mixed_workload
    w = Writer(meta, store, settings)
    w.create("t", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "t", step)
    before = exact(meta, store, "t")
    pa_, pb = policy(target_rows=15), policy(target_rows=10_000, delete_ratio=0.0)
    a, b = compaction.plan(meta, store, "t", pa_), compaction.plan(meta, store, "t", pb)
    assert a.units and b.units
    ran_b = []

    def b_runs(_u):
        if not ran_b:
            ran_b.extend(compaction.run_units(meta, store, b.units, sources_revision=b.revision))
    res_a = [compaction.run_unit(meta, store, u, hooks={"after_files": b_runs}, sources_revision=a.revision)
             for u in a.units]
    assert exact(meta, store, "t") == before, ([r.to_json() for r in res_a], [r.to_json() for r in ran_b])
    assert rows(meta, store, "t") == w.model.visible()
    # no output committed twice from one input
    dropped = segments(meta, "t", DROPPED)
    assert len({s.segment_id for s in dropped}) == len(dropped)
    # re-planned with either policy it converges, rows exact
    for pol in (pa_, pb, pa_):
        compaction.compact(meta, store, "t", pol)
        assert exact(meta, store, "t") == before
    assert compaction.plan(meta, store, "t", pb).units == []


def test_drop_after_compaction_leaves_no_file(meta, store, settings):
    from seglake.lifecycle import drop
    w = Writer(meta, store, settings)
    w.create("dd", ["_default", "p1"], shards=1)
    for i in range(3):
        w.insert("dd", range(1, 6), "p1", float(i))
        w.flush("dd")
        w.delete("dd", [i + 1])
        w.flush("dd")
    coll = meta.catalog.get_by_name("dd")
    compaction.compact(meta, store, "dd", policy())
    # a unit prepared and its files written, never committed (abandoned)
    w.insert("dd", range(10, 13), "p1", 3.0)
    w.flush("dd")
    w.insert("dd", range(20, 23), "p1", 3.0)
    w.flush("dd")
    p = compaction.plan(meta, store, "dd", policy())
    assert p.units

    class Stop(Exception):
        pass

    def stop(_u):
        raise Stop()
    with pytest.raises(Stop):
        compaction.run_unit(meta, store, p.units[0], hooks={"after_files": stop}, sources_revision=p.revision)
    from seglake.lifecycle.flush import flush_pchannel
    from wal_helpers import pchannels
    drop.begin_drop(meta, store, settings, "dd")
    for pch in pchannels(coll):
        flush_pchannel(meta, store, pch, settings, flush_all=True)
    drop.finish_drop(meta, "dd")
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                   force=True, copy_job_retention=0.0))
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                   force=True, copy_job_retention=0.0))
    left = [o.key for o in store.list("") if f"/{coll.collection_id}/" in o.key
            and not o.key.startswith(("wal", "_", "gc"))]
    assert not left, left[:10]
    assert not compaction.unit_records(meta, coll.collection_id)


def test_gc_expiry_of_a_prepared_record_with_an_edited_output_keeps_the_live_segment(meta, store, settings):
    """The same untrusted `output` through GC: an expired PREPARED record's output dir is
    deleted without checking that no live segment has that id."""
    w = Writer(meta, store, settings)
    w.create("x", ["_default"], shards=1)
    for i in range(3):
        w.insert("x", range(10 * i + 1, 10 * i + 6), "_default", float(i))
        w.flush("x")
    w.insert("x", range(100, 150), "_default", 7.0)
    w.flush("x")
    before = rows(meta, store, "x")
    coll = meta.catalog.get_by_name("x")
    p = compaction.plan(meta, store, "x", policy(min_segment_rows=20))
    unit = p.units[0]
    victim = [s for s in segments(meta, "x") if s.segment_id not in unit.segment_ids][0]
    from seglake.lifecycle.compaction.running import prepare
    rec, kv = prepare(meta, coll, unit, 0.0, p.revision)
    meta.kv.put(kv.key, encode({**rec, "output": victim.segment_id, "prepared_at": 1.0}))
    gc.run(meta, store, gc.GCOptions.from_settings(settings, force=True, copy_job_retention=0.0,
                                                   collection_id=coll.collection_id))
    from seglake.lifecycle import verify
    rep = verify.verify_collection(meta, store, "x", threads=1)
    assert rep["ok"], verify.format_report(rep)
    assert rows(meta, store, "x") == before


def test_interrupted_unit_rerun_after_new_deletes_upserts_and_gc(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("k", ["_default", "p1"], shards=1)
    for i in range(4):
        w.insert("k", range(1, 9), "p1", float(i))
        w.insert("k", [1, 2], "_default", float(i), upsert=True)
        w.flush("k")
    w.delete("k", [3])
    w.flush("k")
    p = compaction.plan(meta, store, "k", policy())
    assert p.units

    class Stop(Exception):
        pass

    def stop(_u):
        raise Stop()
    with pytest.raises(Stop):
        compaction.run_unit(meta, store, p.units[0], hooks={"after_files": stop}, sources_revision=p.revision)
    # the world moves: new deletes, upserts of pks in the inputs, flushed; GC zero tolerance
    w.delete("k", [4, 5], partition="p1")
    w.insert("k", [6, 1], "p1", 77.0, upsert=True)
    w.flush("k")
    coll = meta.catalog.get_by_name("k")
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                   force=True, collection_id=coll.collection_id))
    r = compaction.run_unit(meta, store, p.units[0], sources_revision=p.revision)
    assert rows(meta, store, "k") == w.model.visible(), r
    compaction.compact(meta, store, "k", policy())
    assert rows(meta, store, "k") == w.model.visible()
    _replay_from_scratch(meta, store, settings, w, "k")
    assert rows(meta, store, "k") == w.model.visible()
