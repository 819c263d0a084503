"""Attacks on the interactions between features (compaction x point in time x bundles x
archive x restore chains), each judged row-exact against the model of acknowledged
operations (pitr_model.Model: the one visibility rule, upsert = delete + insert)."""

from __future__ import annotations

import pytest

from seglake.errors import NotFound
from seglake.lifecycle import compaction, copyjob, gc, pitr, restore, snapshot
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.wal.client import WalClient

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
    replay of r1's log alone (45 of 78 rows missing, silently); now refused. After a
    snapshot of r1, compacted, restores to instants after it equal r1's rows then."""
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
        with pytest.raises(pitr.OutsideWindow, match="restore of 'src'.*no COMMITTED snapshot"):
            pitr.restore_as_of(meta, store, "r1", "r1_at0", t0)
        with pytest.raises(NotFound):
            meta.catalog.get_by_name("r1_at0")    # refused before anything was created
        snapshot.create(meta, store, "r1", "a")
        at = []
        for step in range(5, 7):
            _step(c, m1, "r1", step)
            flush_all(meta, store, settings, r1)
            at.append((meta.tso.now(), visible_of(meta, store, r1)))
            compaction.compact(meta, store, "r1", _policy())
            assert visible_of(meta, store, r1) == at[-1][1]
        _gc(meta, store, settings)
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
    finally:
        meta2.close()
    print("compared rows", compared)
