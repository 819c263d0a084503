"""Attacks on the interactions between features (compaction x point in time x bundles x
archive x restore chains), each judged row-exact against the model of acknowledged
operations (pitr_model.Model: the one visibility rule, upsert = delete + insert)."""

from __future__ import annotations

import pytest

from seglake.errors import Conflict, NotFound
from seglake.lifecycle import compaction, copyjob, gc, pitr, restore, snapshot
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.wal.client import WalClient

from etcd_root import ttl_over
from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def _policy(**kw):
    return compaction.Policy(**{"min_segment_rows": 1000, "target_rows": 40, "delete_ratio": 0.0,
                                "protection": 0.0, "l0_age": 0.0, **kw})


def _gc(meta, store, settings):
    return gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                          force=True, copy_job_retention=0.0))


def _step(c, model, name, step, parts=("_default", "p1")):
    """Inserts into each partition, a scoped delete, an upsert (scoped by its partition), a
    collection-wide delete: every kind of row-hiding the rule knows."""
    base = step * 20
    for i, p in enumerate(parts):
        model.record(c.insert(name, rows(range(base + 1, base + 11), step * 10 + i), partition=p), step * 10 + i)
    model.record(c.delete(name, [base + 1, base + 2, base - 15], partition=parts[-1]), 0)
    model.record(c.upsert(name, rows([base + 3, base - 14, base + 30], step * 10 + 7), partition=parts[0]),
                 step * 10 + 7)
    model.record(c.delete(name, [base + 5, base - 11]), 0)


def _restore_snapshot(meta, store, source, snap, target):
    job = restore.restore(meta, store, source, snap, target, engine="inline")
    copyjob.plan(meta, job)
    copyjob.run_inline(meta, store, job)
    assert copyjob.finalize(meta, job).state == JOB_COMPLETED


def test_as_of_before_between_and_after_compactions_with_gc(meta, store, settings):
    """Restores to instants before a snapshot, before a compaction, after it, after a GC
    that reclaimed the compacted inputs, with the window on: each equal to the model."""
    instants = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(3):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        instants.append(("before the snapshot", meta.tso.now()))
        snapshot.create(meta, store, "src", "s1")
        for step in range(3, 5):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        instants.append(("before the compaction", meta.tso.now()))
        s = compaction.compact(meta, store, "src", _policy())
        assert s.counts()["committed"] > 0, s.to_json()
        instants.append(("at the compaction's end", meta.tso.now()))
        _step(c, model, "src", 5)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s2")
        _step(c, model, "src", 6)
        flush_all(meta, store, settings, coll)
        instants.append(("before the second compaction", meta.tso.now()))
        compaction.compact(meta, store, "src", _policy(target_rows=1000))
        _gc(meta, store, settings)
        _step(c, model, "src", 7)
        instants.append(("now (after GC, unflushed)", meta.tso.now()))
        flush_all(meta, store, settings, coll)
    assert visible_of(meta, store, coll) == model.visible(meta.tso.now())
    compared = 0
    for i, (label, t) in enumerate(instants):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        assert got == want, (label, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        compared += sum(want.values())
    print("compared rows", compared)


def test_as_of_restore_of_a_restored_collection(meta, store, settings):
    """src -> snapshot -> r1 (a restore); r1 gets a window and writes of its own. Its copied
    rows are not in its log: a restore of r1 to a time before r1's first snapshot was a
    replay of r1's log alone (45 of 78 rows missing, silently); now refused. r1's window
    holds its first snapshot (past its TTL, GC keeps it). After it, compacted, restores to
    instants after it equal r1's rows then."""
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        model = Model(meta, store, "src")
        for step in range(3):
            _step(c, model, "src", step)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        _restore_snapshot(meta, store, "src", "s1", "r1")
        r1 = meta.catalog.get_by_name("r1")
        assert visible_of(meta, store, r1) == model.visible(meta.tso.now())
        pitr.set_window(meta, "r1", "1h")
        m1 = Model(meta, store, "r1")
        for step in range(3, 5):
            _step(c, m1, "r1", step)
        flush_all(meta, store, settings, r1)
        t0 = meta.tso.now()
        with pytest.raises(pitr.OutsideWindow, match="restore of .src.*not in its own log.*no COMMITTED snapshot"):
            pitr.restore_as_of(meta, store, "r1", "r1_at0", t0)
        with pytest.raises(NotFound):
            meta.catalog.get_by_name("r1_at0")    # refused before anything was created
        a = snapshot.create(meta, store, "r1", "a", ttl=1)   # r1's first snapshot: the window holds it
        at = []
        for step in range(5, 7):
            _step(c, m1, "r1", step)
            flush_all(meta, store, settings, r1)
            at.append((meta.tso.now(), visible_of(meta, store, r1)))
            compaction.compact(meta, store, "r1", _policy())
            assert visible_of(meta, store, r1) == at[-1][1]
        ttl_over(meta, a)    # its TTL has passed
        (h,) = pitr.holds(meta)
        assert h.collection == "r1" and h.snapshot.name == "a"
        _gc(meta, store, settings)
        assert meta.snapshots.get(r1.collection_id, "a")[0].state == "COMMITTED"
    for i, (t, want) in enumerate(at):
        got = visible_of(meta, store, restore_to(meta, store, settings, "r1", f"r1_at{i}", t))
        assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        print("compared rows", sum(want.values()))


def test_undrop_of_a_compacted_collection_after_gc_with_zero_tolerances(meta, store, settings):
    """A collection compacted (twice, snapshots before and between) then dropped inside its
    window; GC with every tolerance zero runs after the drop; the undrop equals the model
    just before the drop."""
    from seglake.lifecycle import drop

    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(3):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        _step(c, model, "src", 3)
        flush_all(meta, store, settings, coll)
        assert compaction.compact(meta, store, "src", _policy()).counts()["committed"] > 0
        snapshot.create(meta, store, "src", "s2")
        _step(c, model, "src", 4)
        flush_all(meta, store, settings, coll)
        assert compaction.compact(meta, store, "src", _policy(target_rows=1000)).counts()["committed"] > 0
        _step(c, model, "src", 5)     # left in the log, unflushed, at the drop
        want = model.visible(meta.tso.now())
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    _gc(meta, store, settings)
    _gc(meta, store, settings)
    job = pitr.undrop(meta, store, "src", "back")
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    pitr.replay(meta, store, settings, meta.catalog.get_by_name("back").collection_id)
    got = visible_of(meta, store, meta.catalog.get_by_name("back"))
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
    print("compared rows", sum(want.values()))


EXTREMES = [-2**63, -2**63 + 1, -1, 0, 1, 2**63 - 2, 2**63 - 1]


def test_int64_extremes_an_empty_and_an_all_deleted_partition_through_every_copy(meta, store, settings,
                                                                               etcd_server, tmp_path):
    """pks at both ends of int64 (upserted, deleted scoped and collection-wide), a partition
    whose every row is deleted, an empty partition: compacted, snapshotted, exported,
    restored from the bundle into another etcd root, restored to a time before and after
    the compaction; each copy equal to the model."""
    import sys
    from pathlib import Path
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))
    from bundle_restore_helpers import restore_bundle
    from copy_model_helpers import other_root

    parts = ["_default", "p1", "gone", "empty"]
    with WalClient(meta, store, settings, batch_rows=4) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=parts)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(EXTREMES, 1.0)), 1.0)
        model.record(c.insert("src", rows(EXTREMES, 2.0), partition="p1"), 2.0)
        model.record(c.insert("src", rows(EXTREMES + [5, 6, 7], 3.0), partition="gone"), 3.0)
        flush_all(meta, store, settings, coll)
        model.record(c.delete("src", EXTREMES + [5, 6, 7], partition="gone"), 0)      # every row of 'gone'
        model.record(c.upsert("src", rows([-2**63, 2**63 - 1], 4.0), partition="p1"), 4.0)
        model.record(c.delete("src", [2**63 - 2, -2**63 + 1]), 0)                     # every partition
        model.record(c.delete("src", [-1], partition="_default"), 0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        t_before = meta.tso.now()
        s = compaction.compact(meta, store, "src", _policy(delete_ratio=0.0))
        assert s.counts()["committed"] > 0, s.to_json()
        t_after = meta.tso.now()
        model.record(c.upsert("src", rows([2**63 - 1, 0], 5.0), partition="_default"), 5.0)
        flush_all(meta, store, settings, coll)
        compaction.compact(meta, store, "src", _policy(target_rows=1000))
        t_end = meta.tso.now()
    want_end = model.visible(t_end)
    assert visible_of(meta, store, coll) == want_end
    assert not any(p == "gone" for p in ())
    _gc(meta, store, settings)
    snapshot.create(meta, store, "src", "s2")
    backup = LocalStore(tmp_path / "backup")
    exports.export(meta, store, backup, "src", "s1", say=lambda line: None)
    exports.export(meta, store, backup, "src", "s2", say=lambda line: None)
    compared = 0
    for i, t in enumerate([t_before, t_after, t_end]):
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", f"at{i}", t))
        assert got == model.visible(t), (i, sorted((got - model.visible(t)).items()),
                                         sorted((model.visible(t) - got).items()))
        compared += sum(got.values())
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "x")
    try:
        for b, t in (("s1", t_before), ("s2", t_end)):
            restore_bundle(meta2, store2, backup, "src", b, f"b_{b}")
            bc = meta2.catalog.get_by_name(f"b_{b}")
            got = visible_of(meta2, store2, bc)
            assert got == model.visible(t), (b, sorted((got - model.visible(t)).items()))
            compared += sum(got.values())
            # the copy compacted, snapshotted and restored again (a chain) on the other root
            compaction.compact(meta2, store2, f"b_{b}", _policy(target_rows=1000))
            assert visible_of(meta2, store2, bc) == got
            snapshot.create(meta2, store2, f"b_{b}", "x")
            _restore_snapshot(meta2, store2, f"b_{b}", "x", f"c_{b}")
            assert visible_of(meta2, store2, meta2.catalog.get_by_name(f"c_{b}")) == got
            compared += sum(got.values())
            # the other way in: the bundle imported as a snapshot, then restored from it
            from seglake.lifecycle.backup import imports
            imports.import_bundle(meta2, store2, backup, "src", b, as_collection=f"imp_{b}", say=lambda line: None)
            _restore_snapshot(meta2, store2, f"imp_{b}", b, f"i_{b}")
            assert visible_of(meta2, store2, meta2.catalog.get_by_name(f"i_{b}")) == got
            compared += sum(got.values())
    finally:
        meta2.close()
    print("compared rows", compared)


def test_archive_compaction_gc_then_as_of_from_the_target_alone(meta, store, settings, tmp_path):
    """Archive on, a bundle before and one after compactions, GC (zero tolerances) on the
    source between; the source's store and etcd root deleted; restores to instants before,
    between and after the compactions from the target alone equal the model."""
    import shutil
    import uuid
    from seglake.lifecycle import retention
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.lifecycle.pitr import from_target
    from seglake.meta import Meta
    from seglake.storage import open_store
    from seglake.storage.local import LocalStore

    target = LocalStore(tmp_path / "backup")
    instants = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(2):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, target, "src", "s1", say=lambda line: None)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        _step(c, model, "src", 2)
        flush_all(meta, store, settings, coll)
        instants.append(("before the compaction", meta.tso.now()))
        assert compaction.compact(meta, store, "src", _policy()).counts()["committed"] > 0
        _step(c, model, "src", 3)
        flush_all(meta, store, settings, coll, flush_all=False)
        instants.append(("after the compaction, partly flushed", meta.tso.now()))
        archive.run(meta, store, target)
        _gc(meta, store, settings)
        snapshot.create(meta, store, "src", "s2")
        exports.export(meta, store, target, "src", "s2", say=lambda line: None)
        _step(c, model, "src", 4)
        flush_all(meta, store, settings, coll)
        assert compaction.compact(meta, store, "src", _policy(target_rows=1000)).counts()["committed"] > 0
        _gc(meta, store, settings)
        _step(c, model, "src", 5)
        flush_all(meta, store, settings, coll)
        instants.append(("after the second compaction", meta.tso.now()))
        c.flush("src")
        flush_all(meta, store, settings, coll)
    site = archive.run(meta, store, target)["site"]
    covered = min(archive.ArchivedLog(target, site, p).covered() for p in archive.archived_pchannels(meta))
    assert all(t <= covered for _, t in instants), (instants, covered)
    wants = {t: model.visible(t) for _, t in instants}
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    compared = 0
    try:
        for i, (label, t) in enumerate(instants):
            job = from_target.restore_as_of_from_target(meta2, store2, target, "src", f"r{i}", t)
            copyjob.plan(meta2, job, 3)
            copyjob.run_inline(meta2, store2, job, threads=2)
            assert copyjob.finalize(meta2, job).state == "Completed"
            tid = meta2.catalog.get_by_name(f"r{i}").collection_id
            pitr.replay(meta2, store2, s2, tid)
            got = visible_of(meta2, store2, meta2.catalog.get(tid))
            assert got == wants[t], (label, sorted((got - wants[t]).items())[:5],
                                     sorted((wants[t] - got).items())[:5])
            compared += sum(got.values())
    finally:
        meta2.close()
    print("compared rows", compared)


def test_producer_retries_across_compaction_gc_and_restores(meta, store, settings):
    """A named producer's calls (inserts, scoped deletes, upserts) each retried with its seq
    after a compaction, a GC with zero tolerances, a restore to a time and a snapshot
    restore, from a new client of the same producer id: answered, nothing written twice;
    the source and an as-of restore equal the model."""
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
    model = Model(meta, store, "src")
    calls = []
    with WalClient(meta, store, settings, batch_rows=8, producer_id="prod-1") as c:
        for step in range(4):
            base = step * 20
            for kind, kw, data in (("insert", {"partition": "p1"}, rows(range(base, base + 12), step + 0.5)),
                                   ("delete", {"partition": "p1"}, [base + 1, base - 19]),
                                   ("upsert", {"partition": "_default"}, rows([base + 2, base - 18], step + 0.25)),
                                   ("delete", {}, [base + 3])):
                res = getattr(c, kind)("src", data, **kw)
                model.record(res, step + (0.5 if kind == "insert" else 0.25))
                calls.append((kind, kw, data, res.seq))
            flush_all(meta, store, settings, coll)
            if step == 1:
                snapshot.create(meta, store, "src", "s1")
    assert compaction.compact(meta, store, "src", _policy()).counts()["committed"] > 0
    _gc(meta, store, settings)
    t = meta.tso.now()
    restore_to(meta, store, settings, "src", "at1", t)
    _restore_snapshot(meta, store, "src", "s1", "r1")
    with WalClient(meta, store, settings, batch_rows=8, producer_id="prod-1") as c:
        for kind, kw, data, seq in calls:
            getattr(c, kind)("src", data, seq=seq, **kw)
    flush_all(meta, store, settings, coll)
    compaction.compact(meta, store, "src", _policy(target_rows=1000))
    want = model.visible(meta.tso.now())
    assert visible_of(meta, store, coll) == want
    got = visible_of(meta, store, restore_to(meta, store, settings, "src", "at2", meta.tso.now()))
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
    assert visible_of(meta, store, meta.catalog.get_by_name("at1")) == model.visible(t)
    print("compared rows", 3 * sum(want.values()))


def test_incremental_export_after_a_rewrite_only_compaction_then_the_old_bundle_pruned(meta, store, settings,
                                                                                    etcd_server, tmp_path):
    """Bundle s1; a compaction that rewrites only the segments with deletes (the others'
    files are reused by the next bundle); bundle s2; s1 pruned and the target swept; s2
    verified and restored on another root, then its copy restored again: equal to the
    model at s2."""
    import sys
    from pathlib import Path
    from seglake.lifecycle.backup import export as exports
    from seglake.lifecycle.backup import prune as prunes
    from seglake.lifecycle.backup import verify as verifies
    from seglake.storage.local import LocalStore

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))
    from bundle_restore_helpers import restore_bundle
    from copy_model_helpers import other_root

    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        model = Model(meta, store, "src")
        for step in range(3):
            for i, p in enumerate(("_default", "p1")):
                model.record(c.insert("src", rows(range(step * 20, step * 20 + 10), step * 10 + i), partition=p),
                             step * 10 + i)
            flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", say=lambda line: None)
        model.record(c.delete("src", [1, 2, 3], partition="p1"), 0)
        model.record(c.upsert("src", rows([21, 22], 99.0), partition="_default"), 99.0)
        model.record(c.delete("src", [44]), 0)
        flush_all(meta, store, settings, coll)
        before = {s.segment_id for s in meta.segments.list(coll.collection_id) if s.state == "Flushed"}
        s = compaction.compact(meta, store, "src", _policy(min_segment_rows=1, delete_ratio=0.01))
        assert s.counts()["committed"] > 0, s.to_json()
        after = {s.segment_id for s in meta.segments.list(coll.collection_id) if s.state == "Flushed"}
        assert before & after and after - before, (before, after)   # some rewritten, some kept
        _gc(meta, store, settings)
        t2 = meta.tso.now()
        snapshot.create(meta, store, "src", "s2")
        r2 = exports.export(meta, store, backup, "src", "s2", say=lambda line: None)
    assert r2["reused_files"] > 0, r2    # the second bundle reuses the first one's files of the kept segments
    want = model.visible(t2)
    prunes.prune(backup, "src", {"keep_last": 1})
    import time
    swept = prunes.sweep_data(backup, min_age=3600.0, now=time.time() + 7200)
    print("swept", swept)
    rep = verifies.verify(backup, "src", "s2")
    assert rep.get("ok", not rep.get("problems")), rep
    meta2, store2, _ = other_root(etcd_server, tmp_path, "y")
    try:
        restore_bundle(meta2, store2, backup, "src", "s2", "b2")
        got = visible_of(meta2, store2, meta2.catalog.get_by_name("b2"))
        assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        snapshot.create(meta2, store2, "b2", "x")
        _restore_snapshot(meta2, store2, "b2", "x", "c2")
        assert visible_of(meta2, store2, meta2.catalog.get_by_name("c2")) == want
    finally:
        meta2.close()
    print("compared rows", 2 * sum(want.values()))


def test_as_of_restore_of_a_collection_with_rows_written_before_its_log(meta, store, settings):
    """A collection seeded with segments written directly (`seglake demo seed`), then written
    through the WAL with a window on: its seeded rows are not in its log, so a restore to a
    time with no snapshot would be its log alone. Refused; from a snapshot on, exact."""
    from seglake.dev import demo

    coll, _ = demo.seed(meta, store, demo.SeedParams(name="seeded", segments=1, rows=20, dim=2, delete_ratio=0.0))
    seeded = visible_of(meta, store, coll)
    assert sum(seeded.values()) == 40
    with WalClient(meta, store, settings, batch_rows=8) as c:
        c.insert("seeded", rows(range(10**6, 10**6 + 10), 5.0))
        pitr.set_window(meta, "seeded", "1h")
        c.delete("seeded", [10**6 + 1], partition="_default")
        coll = meta.catalog.get_by_name("seeded")
        flush_all(meta, store, settings, coll)
        t0 = meta.tso.now()
        with pytest.raises(pitr.OutsideWindow, match="not in its own log"):
            pitr.restore_as_of(meta, store, "seeded", "at0", t0)
        snapshot.create(meta, store, "seeded", "a")
        c.upsert("seeded", rows([10**6 + 2], 6.0), partition="_default")
        flush_all(meta, store, settings, coll)
        compaction.compact(meta, store, "seeded", _policy())
        t1 = meta.tso.now()
        want = visible_of(meta, store, coll)
    assert sum(want.values()) == 40 + 9
    got = visible_of(meta, store, restore_to(meta, store, settings, "seeded", "at1", t1))
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])


def _flushed_steps_around_s1(c, model, meta, store, settings, coll) -> None:
    """Steps 0-1 of "src", each flushed; snapshot s1; steps 2-4, each flushed (the in-flight
    restore and undrop tests' common start)."""
    for step in range(5):
        if step == 2:
            snapshot.create(meta, store, "src", "s1")
        _step(c, model, "src", step)
        flush_all(meta, store, settings, coll)


def _age_wal(store) -> None:
    import os
    import time
    from seglake.storage import layout

    t = time.time() - 3 * 86400
    for o in store.list(f"{layout.WAL}/"):
        if layout.parse_wal_fragment(o.key):
            os.utime(store.root / o.key, (t, t))


@pytest.mark.parametrize("how", ["window_off", "compaction_and_snapshot_drop", "truncated_anyway"])
def test_an_in_flight_restore_to_a_time_keeps_the_log_and_snapshot_it_planned(meta, store, settings, how,
                                                                          monkeypatch, capsys):
    """A restore to a time set up (its plan names the base snapshot and the log fragments),
    then before its copy job and replay: the window turned off (or the source compacted and
    the base snapshot dropped), the log aged and GC run with zero tolerances. The restore
    finishes equal to the model: the in-flight restore holds the log it planned (before,
    with the window off, GC truncated it and the replay gave 53 of 78 rows, Created). A
    log truncated anyway (GC of a seglake without that hold): the replay refuses, naming the
    fragments, nothing visible (before: it replayed what was left, Created, rows missing)."""
    with WalClient(meta, store, settings.replace(flush_seal_rows=25), batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        _flushed_steps_around_s1(c, model, meta, store, settings, coll)
        t = meta.tso.now()
        for step in range(5, 7):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
    job = pitr.restore_as_of(meta, store, "src", "r", t)
    if how in ("window_off", "truncated_anyway"):
        assert pitr.clear_window(meta, "src")
    if how == "truncated_anyway":
        from seglake.lifecycle.pitr import window as pwindow
        monkeypatch.setattr(pwindow, "replay_holds", lambda meta: [])
    elif how == "compaction_and_snapshot_drop":
        assert compaction.compact(meta, store, "src", _policy()).counts()["committed"] > 0
        with pytest.raises(Conflict, match="pinned"):     # the restore's copy job holds it
            snapshot.drop_by_id(meta, store, coll.collection_id, "s1")
    if how != "truncated_anyway":
        from seglake import metrics

        cost = pitr.cost(meta)   # the in-flight restore's hold is shown apart from the windows
        assert [h["restore"] for h in cost["restores"]] == ["r"]
        assert [w["collection"] for w in cost["windows"]] == ([] if how == "window_off" else ["src"])
        samples = [ln.rsplit(" ", 1)[0] for ln in metrics.render(meta, store).splitlines()
                   if ln and not ln.startswith("#")]
        assert len(samples) == len(set(samples)), "a metric sample repeated"
        from seglake import cli
        for k, v in settings.to_env().items():
            monkeypatch.setenv(k, v)
        assert cli.main(["wal", "status"]) == 0
        assert "restores to a time in flight hold their log: default.src into r" in capsys.readouterr().out
    _age_wal(store)
    _gc(meta, store, settings)
    _gc(meta, store, settings)
    want = model.visible(t)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    tid = meta.catalog.get_by_name("r").collection_id
    if how == "truncated_anyway":
        with pytest.raises(pitr.LogGap, match=r"fragments \d+\.\.\d+ were truncated"):
            pitr.replay(meta, store, settings, tid)
        assert meta.catalog.get(tid).state == "Importing"
        return
    pitr.replay(meta, store, settings, tid)
    got = visible_of(meta, store, meta.catalog.get_by_name("r"))
    assert got == want, (sum(got.values()), sum(want.values()), sorted((want - got).items())[:5])
    print("compared rows", sum(want.values()))


@pytest.mark.parametrize("seed", [11, 12])
def test_random_workload_with_compactions_folds_partial_flushes_and_gc_restored_at_many_instants(meta, store,
                                                                                                settings, seed):
    """Random inserts, scoped and collection-wide deletes, upserts, transactions, partial
    (by size) and full flushes, snapshots, compactions with random policies (merges,
    rewrites, L0 folds) and GC with zero tolerances, the window on; restores at 12 random
    instants (and just after each compaction) equal the model."""
    import random

    from pitr_model import route0

    rng = random.Random(seed)
    settings = settings.replace(flush_seal_rows=25)
    instants = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1", "p2"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        nxt, live, v = 1, [], 0.0
        for step in range(45):
            v += 1
            kind = rng.choice(["insert", "insert", "delete", "partdel", "upsert", "txn", "flush", "seal",
                               "compact", "compact", "snapshot", "gc"])
            part = rng.choice(["_default", "p1", "p2"])
            if kind == "insert":
                pks = list(range(nxt, nxt + rng.randint(3, 12))) + rng.sample(live, min(3, len(live)))
                nxt += 12
                model.record(c.insert("src", rows(pks, v), partition=part), v)
                live += pks
            elif kind in ("delete", "partdel") and live:
                gone = rng.sample(live, min(len(live), rng.randint(1, 6)))
                model.record(c.delete("src", gone, **({"partition": part} if kind == "partdel" else {})), v)
            elif kind == "upsert" and live:
                pks = rng.sample(live, min(len(live), 4)) + [nxt]
                nxt += 1
                model.record(c.upsert("src", rows(pks, v), partition=part), v)
                live.append(pks[-1])
            elif kind == "txn":
                pks = [int(x) for x in route0(range(nxt, nxt + 40))][:12]
                nxt += 40
                model.record(c.insert("src", rows(pks, v), partition=part, txn=True), v, txn=True)
                live += pks
            elif kind == "flush":
                flush_all(meta, store, settings, coll)
            elif kind == "seal":
                flush_all(meta, store, settings, coll, flush_all=False)
            elif kind == "compact":
                pol = rng.choice([_policy(), _policy(target_rows=1000), _policy(min_segment_rows=1, delete_ratio=0.01),
                                  _policy(target_rows=5), _policy(min_segment_rows=1, delete_ratio=0.9)])
                compaction.compact(meta, store, "src", pol)
                instants.append(meta.tso.now())
            elif kind == "snapshot":
                snapshot.create(meta, store, "src", f"s{step}")
            elif kind == "gc":
                _gc(meta, store, settings)
            instants.append(meta.tso.now())
    chosen = sorted(set(rng.sample(instants, 12)))
    compared = 0
    for i, t in enumerate(chosen):
        got, want = visible_of(meta, store, restore_to(meta, store, settings, "src", f"r{i}", t)), model.visible(t)
        assert got == want, (i, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        compared += sum(want.values())
    flush_all(meta, store, settings, coll)
    assert visible_of(meta, store, coll) == model.visible(meta.tso.now())
    print("compared rows", compared)


def test_writes_retries_and_a_snapshot_between_a_units_files_and_its_commit(meta, store, settings):
    """Between a compaction unit's files and its commit: a producer's scoped delete, upsert
    and collection-wide delete of the unit's input rows (flushed), a snapshot; then the
    commit; the producer retries each call with its seq (answered, not re-applied). The
    source, the snapshot's restore, restores to the instant inside the unit and after the
    commit all equal the model."""
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=1, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
    model = Model(meta, store, "src")
    marks, calls = {}, []
    with WalClient(meta, store, settings, batch_rows=8, producer_id="prod-2") as c:
        for step in range(3):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        units = compaction.plan(meta, store, "src", _policy(target_rows=1000)).units
        assert units

        def mid(_unit):
            if "mid" in marks:
                return
            for kind, kw, data, v in (("delete", {"partition": "p1"}, [21, 22, 23], 0),
                                      ("upsert", {"partition": "_default"}, rows([24, 25, 1000], 55.0), 55.0),
                                      ("delete", {}, [26, 27], 0)):
                res = getattr(c, kind)("src", data, **kw)
                model.record(res, v)
                calls.append((kind, kw, data, res.seq))
            flush_all(meta, store, settings, coll)
            snapshot.create(meta, store, "src", "mid")
            marks["mid"] = meta.tso.now()

        results = [compaction.run_unit(meta, store, u, hooks={"after_files": mid}) for u in units]
        assert {r.status for r in results} <= {compaction.COMMITTED, compaction.LOST}, results
        assert compaction.COMMITTED in {r.status for r in results}
        for kind, kw, data, seq in calls:
            getattr(c, kind)("src", data, seq=seq, **kw)
        flush_all(meta, store, settings, coll)
        marks["after"] = meta.tso.now()
    compaction.compact(meta, store, "src", _policy(target_rows=1000))
    _gc(meta, store, settings)
    now = meta.tso.now()
    assert visible_of(meta, store, coll) == model.visible(now)
    _restore_snapshot(meta, store, "src", "mid", "from_mid")
    assert visible_of(meta, store, meta.catalog.get_by_name("from_mid")) == model.visible(marks["mid"])
    compared = sum(model.visible(marks["mid"]).values())
    for k, t in marks.items():
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", f"at_{k}", t))
        assert got == model.visible(t), (k, sorted((got - model.visible(t)).items()),
                                         sorted((model.visible(t) - got).items()))
        compared += sum(got.values())
    print("compared rows", compared)


def test_a_restore_to_a_time_copied_onwards_compacted_exported_and_restored_on_another_root(meta, store, settings,
                                                                                        etcd_server, tmp_path):
    """The target of a restore to a time (copied base + replayed rows and scoped deletes) is
    written to, compacted (folds included), snapshotted, exported, restored from the bundle
    on another root, compacted and restored again there: every hop equals the model, its
    rows read through its own partition ids."""
    import sys
    from pathlib import Path
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))
    from bundle_restore_helpers import restore_bundle
    from copy_model_helpers import other_root

    with WalClient(meta, store, settings.replace(flush_seal_rows=25), batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1", "p2"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(2):
            _step(c, model, "src", step, parts=("_default", "p1", "p2"))
            flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        for step in range(2, 4):
            _step(c, model, "src", step, parts=("p2", "_default", "p1"))
            flush_all(meta, store, settings, coll, flush_all=False)
        t = meta.tso.now()
        want = model.visible(t)
        r = restore_to(meta, store, settings, "src", "r", t)
        assert visible_of(meta, store, r) == want
        # the target is written to: its own model continues from the source's, by partition name
        names = {p.partition_id: p.name for p in coll.partitions}
        rids = {p.name: p.partition_id for p in r.partitions}
        mr = Model(meta, store, "r")
        mr.inserted = [(pk, v, ts, at, rids[names[p]]) for pk, v, ts, at, p in model.inserted if at <= t]
        mr.deletes = [(pk, ts, at, 0 if s == 0 else rids[names[s]]) for pk, ts, at, s in model.deletes if at <= t]
        _step(c, mr, "r", 7, parts=("p1", "p2"))
        _step(c, mr, "r", 1, parts=("p2", "_default"))
        flush_all(meta, store, settings, r)
    want = mr.visible(meta.tso.now())
    assert visible_of(meta, store, r) == want
    kinds = [u.kind for u in compaction.compact(meta, store, "r", _policy()).plan.units]
    assert "fold" in kinds, kinds     # the copied and replayed delete logs folded too
    assert visible_of(meta, store, r) == want
    snapshot.create(meta, store, "r", "x")
    backup = LocalStore(tmp_path / "backup")
    exports.export(meta, store, backup, "r", "x", say=lambda line: None)
    meta2, store2, _ = other_root(etcd_server, tmp_path, "z")
    try:
        restore_bundle(meta2, store2, backup, "r", "x", "b")
        b = meta2.catalog.get_by_name("b")
        assert visible_of(meta2, store2, b) == want
        compaction.compact(meta2, store2, "b", _policy(target_rows=1000))
        assert visible_of(meta2, store2, b) == want
        snapshot.create(meta2, store2, "b", "y")
        _restore_snapshot(meta2, store2, "b", "y", "c")
        assert visible_of(meta2, store2, meta2.catalog.get_by_name("c")) == want
    finally:
        meta2.close()
    print("compared rows", 4 * sum(want.values()))


def test_an_upsert_split_over_appends_compacted_and_restored_between_its_appends(meta, store, settings):
    """One upsert call of 30 rows (a pk twice) carried by many appends of 4 rows (one
    timestamp for the call's delete), over rows of the same pks in two partitions; then
    compactions (merge, then rewrite), GC; restores at every append's tick of the call and
    after it equal the model (the call's own copies never hide each other)."""
    from seglake.wal import message as M

    with WalClient(meta, store, settings, batch_rows=4) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(2):
            _step(c, model, "src", step)
        flush_all(meta, store, settings, coll)
        pks = list(range(1, 30)) + [7]
        res = c.upsert("src", rows(pks, 77.0), partition="p1")
        model.record(res, 77.0)
        ticks = sorted({m.time_tick for m in model.messages(res) if m.type == M.INSERT})
        assert len(ticks) >= 6
        flush_all(meta, store, settings, coll)
        compaction.compact(meta, store, "src", _policy())
        compaction.compact(meta, store, "src", _policy(min_segment_rows=1, delete_ratio=0.01))
        _gc(meta, store, settings)
    end = meta.tso.now()
    assert visible_of(meta, store, coll) == model.visible(end)
    assert model.visible(end)[(7, 77.0)] == 2
    compared = 0
    for i, t in enumerate([ticks[0] - 1, *ticks[::2], end]):
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", f"r{i}", t))
        assert got == model.visible(t), (i, sorted((got - model.visible(t)).items())[:5],
                                         sorted((model.visible(t) - got).items())[:5])
        compared += sum(got.values())
    print("compared rows", compared)


@pytest.mark.parametrize("point", ["snapshot.after_manifests", "snapshot.before_commit"])
def test_compaction_and_gc_between_a_snapshots_capture_and_its_commit(meta, store, settings, monkeypatch, point):
    """A snapshot captures the segments, then (before it commits) a compaction planned
    before the snapshot began commits (a new one is refused while a snapshot is PENDING)
    and GC runs with zero tolerances. The committed snapshot restores to the rows
    at its capture, and restores to a time that start from it equal the model."""
    from seglake import faults

    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(4):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        t_cap = meta.tso.now()
        real, fired = faults.point, []
        planned = compaction.plan(meta, store, "src", _policy(target_rows=1000))
        assert planned.units

        def point_hook(name):
            if name == point and not fired:
                again = compaction.compact(meta, store, "src", _policy(target_rows=1000))
                assert not again.plan.units and "PENDING" in again.plan.skipped
                res = compaction.run_units(meta, store, planned.units, sources_revision=planned.revision)
                fired.append({"committed": sum(r.status == compaction.COMMITTED for r in res)})
                _gc(meta, store, settings)
            return real(name)

        monkeypatch.setattr(faults, "point", point_hook)
        snapshot.create(meta, store, "src", "s1")
        monkeypatch.setattr(faults, "point", real)
        assert fired and fired[0]["committed"] > 0, str(fired)
        _step(c, model, "src", 4)
        flush_all(meta, store, settings, coll)
        t_after = meta.tso.now()
        _gc(meta, store, settings)
    _restore_snapshot(meta, store, "src", "s1", "from_s1")
    got = visible_of(meta, store, meta.catalog.get_by_name("from_s1"))
    assert got == model.visible(t_cap), (sorted((model.visible(t_cap) - got).items())[:5])
    got = visible_of(meta, store, restore_to(meta, store, settings, "src", "at", t_after))
    assert got == model.visible(t_after)
    print("compared rows", sum(got.values()) + sum(model.visible(t_cap).values()))


def test_a_restore_to_a_time_of_a_restore_to_a_time(meta, store, settings):
    """src restored to a time as r; r gets a window and a snapshot, writes (scoped deletes,
    upserts), partial flushes and a compaction; r restored to two instants: equal to r's
    rows then. Before r's snapshot: refused (its rows came from a replay, not its log)."""
    with WalClient(meta, store, settings.replace(flush_seal_rows=25), batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(3):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll, flush_all=step != 1)
        r = restore_to(meta, store, settings, "src", "r", meta.tso.now())
        pitr.set_window(meta, "r", "1h")
        _step(c, Model(meta, store, "r"), "r", 5)
        with pytest.raises(pitr.OutsideWindow, match="not in its own log"):
            pitr.restore_as_of(meta, store, "r", "rr0", meta.tso.now())
        snapshot.create(meta, store, "r", "a")
        marks = []
        for step in (6, 7):
            _step(c, Model(meta, store, "r"), "r", step)
            flush_all(meta, store, settings, r, flush_all=False)
            compaction.compact(meta, store, "r", _policy())
            t = meta.tso.now()
            flush_all(meta, store, settings, r)
            marks.append((t, visible_of(meta, store, r)))
    compared = 0
    for i, (t, want) in enumerate(marks):
        got = visible_of(meta, store, restore_to(meta, store, settings, "r", f"rr{i}", t))
        assert got == want, (i, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        compared += sum(want.values())
    print("compared rows", compared)


def test_the_windows_base_snapshot_past_its_ttl_keeps_the_compacted_inputs(meta, store, settings, monkeypatch):
    """The window's base snapshot (the only snapshot, past its TTL) captured segments a
    compaction then replaced; GC with zero tolerances: the snapshot and its (compacted,
    Dropped) input segments stay, and restores inside the window, which copy them, equal the
    model. With the window off, the next GC releases them."""
    import time
    from seglake.lifecycle.pitr import window as pwindow

    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for step in range(3):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        s1 = snapshot.create(meta, store, "src", "s1", ttl=1)
        time.sleep(0.2)
        lo = time.time()
        monkeypatch.setattr(pwindow, "clock", lambda: lo + 3600)     # the window's oldest instant: just after s1
        instants = []
        for step in range(3, 5):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
            instants.append(meta.tso.now())
            assert compaction.compact(meta, store, "src", _policy(target_rows=1000)).counts()["committed"] > 0
        ttl_over(meta, s1)
        (h,) = pitr.holds(meta)
        assert h.snapshot.name == "s1"
        _gc(meta, store, settings)
    assert meta.snapshots.get(coll.collection_id, "s1")[0].state == "COMMITTED"
    compared = 0
    for i, t in enumerate(instants):
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", f"r{i}", t))
        assert got == model.visible(t), (i, sorted((model.visible(t) - got).items())[:5])
        assert pitr.summary(meta, meta.catalog.get_by_name(f"r{i}"))["snapshot"] == "s1"
        compared += sum(got.values())
    assert pitr.clear_window(meta, "src")
    _gc(meta, store, settings)
    assert meta.snapshots.find(coll.collection_id, "s1") is None
    print("compared rows", compared)


def test_a_database_at_one_instant_with_a_compacted_and_a_restored_collection(meta, store, settings):
    """One database: a (written, compacted, GC'd), r (a restore of a's snapshot, a window,
    a snapshot, its own writes, compacted). Before r's first snapshot the set is refused
    naming r, nothing created; after it, every collection at one instant equals its rows
    then."""
    from seglake.lifecycle.pitr.database import restore_database_as_of

    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("a", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "a", "1h")
        ma = Model(meta, store, "a")
        for step in range(3):
            _step(c, ma, "a", step)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "a", "s1")
        t1 = meta.tso.now()
        _restore_snapshot(meta, store, "a", "s1", "r")
        r = meta.catalog.get_by_name("r")
        names = {p.partition_id: p.name for p in coll.partitions}
        rids = {p.name: p.partition_id for p in r.partitions}
        mr = Model(meta, store, "r")     # r's model: a's at s1 by partition name, then r's own calls
        mr.inserted = [(pk, v, ts, 0, rids[names[p]]) for pk, v, ts, at, p in ma.inserted if at <= t1]
        mr.deletes = [(pk, ts, 0, 0 if sc == 0 else rids[names[sc]]) for pk, ts, at, sc in ma.deletes if at <= t1]
        pitr.set_window(meta, "r", "1h")
        _step(c, mr, "r", 4)
        flush_all(meta, store, settings, r)
        early = meta.tso.now()
        with pytest.raises(pitr.OutsideWindow, match="'r' is a restore of 'a'"):
            restore_database_as_of(meta, store, "default", early, suffix="_e")
        assert not [x for x in meta.catalog.list() if x.name.endswith("_e")]
        snapshot.create(meta, store, "r", "x")
        _step(c, ma, "a", 5)
        _step(c, mr, "r", 6)
        flush_all(meta, store, settings, coll, flush_all=False)
        flush_all(meta, store, settings, r, flush_all=False)
        cut = meta.tso.now()
        _step(c, ma, "a", 7)
        _step(c, mr, "r", 8)
    flush_all(meta, store, settings, coll)
    flush_all(meta, store, settings, r)
    compaction.compact(meta, store, "a", _policy())
    compaction.compact(meta, store, "r", _policy())
    _gc(meta, store, settings)
    wants = {"a_cut": ma.visible(cut), "r_cut": mr.visible(cut)}
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_cut")
    assert sorted(j["target"] for j in jobs) == ["a_cut", "r_cut"]
    for j in jobs:
        copyjob.plan(meta, j["job_id"], 3)
        copyjob.run_inline(meta, store, j["job_id"])
        assert copyjob.finalize(meta, j["job_id"]).state == "Completed"
        pitr.replay(meta, store, settings, meta.catalog.get_by_name(j["target"]).collection_id)
    compared = 0
    for name, want in wants.items():
        got = visible_of(meta, store, meta.catalog.get_by_name(name))
        assert got == want, (name, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
        compared += sum(want.values())
    assert visible_of(meta, store, r) == mr.visible(meta.tso.now())
    print("compared rows", compared)


def test_a_restored_collection_archived_and_restored_to_a_time_from_the_target_alone(meta, store, settings,
                                                                                   tmp_path):
    """r: a restore of src's snapshot; snapshotted before any write of its own (no flusher
    checkpoint yet: its bundle's log positions are 'from creation'), exported, archived;
    written to (scoped deletes, upserts), compacted; the source store and etcd deleted:
    restores of r to instants after its bundle from the target alone equal r's rows then."""
    import shutil
    import uuid
    from seglake.lifecycle import retention
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.lifecycle.pitr import from_target
    from seglake.meta import Meta
    from seglake.storage import open_store
    from seglake.storage.local import LocalStore

    target = LocalStore(tmp_path / "backup")
    marks = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        model = Model(meta, store, "src")
        for step in range(3):
            _step(c, model, "src", step)
            flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        _restore_snapshot(meta, store, "src", "s1", "r")
        r = meta.catalog.get_by_name("r")
        pitr.set_window(meta, "r", "1h")
        snapshot.create(meta, store, "r", "x1")
        exports.export(meta, store, target, "r", "x1", say=lambda line: None)
        retention.set_policy(meta, "r", {"keep_last": 5, "archive": True})
        for step in (4, 5):
            _step(c, Model(meta, store, "r"), "r", step)
            flush_all(meta, store, settings, r, flush_all=False)
            t = meta.tso.now()
            flush_all(meta, store, settings, r)
            marks.append((t, visible_of(meta, store, r)))
            compaction.compact(meta, store, "r", _policy())
        c.flush("r")
        flush_all(meta, store, settings, r)
    archive.run(meta, store, target)
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    compared = 0
    try:
        for i, (t, want) in enumerate(marks):
            job = from_target.restore_as_of_from_target(meta2, store2, target, "r", f"rr{i}", t)
            copyjob.plan(meta2, job, 3)
            copyjob.run_inline(meta2, store2, job)
            assert copyjob.finalize(meta2, job).state == "Completed"
            tid = meta2.catalog.get_by_name(f"rr{i}").collection_id
            pitr.replay(meta2, store2, s2, tid)
            got = visible_of(meta2, store2, meta2.catalog.get(tid))
            assert got == want, (i, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
            compared += sum(want.values())
    finally:
        meta2.close()
    print("compared rows", compared)


def test_an_undrop_in_flight_when_the_drop_leaves_the_window(meta, store, settings, monkeypatch):
    """An undrop set up; before its copy job and replay the drop leaves the window (the
    clock moves on two hours: the window no longer holds the log), the WAL is aged and GC
    runs with zero tolerances: the undrop in flight holds the log it planned (the only
    hold left); the result equals the model just before the drop. (Without that hold this
    case held too: GC did not truncate the released pchannel's tail here.)"""
    from seglake.lifecycle import drop
    from seglake.lifecycle.pitr import window as pwindow

    with WalClient(meta, store, settings.replace(flush_seal_rows=25), batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        _flushed_steps_around_s1(c, model, meta, store, settings, coll)
        compaction.compact(meta, store, "src", _policy())
        _step(c, model, "src", 5)
        want = model.visible(meta.tso.now())
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, "src", collection_id=coll.collection_id)
    job = pitr.undrop(meta, store, "src", "back")
    import time
    later = time.time() + 7200
    monkeypatch.setattr(pwindow, "clock", lambda: later)
    assert [h.restore for h in pitr.holds(meta)] == ["back"]     # only the undrop in flight holds now
    _age_wal(store)
    _gc(meta, store, settings)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    pitr.replay(meta, store, settings, meta.catalog.get_by_name("back").collection_id)
    got = visible_of(meta, store, meta.catalog.get_by_name("back"))
    assert got == want, (sum(got.values()), sum(want.values()), sorted((want - got).items())[:5])
    print("compared rows", sum(want.values()))
