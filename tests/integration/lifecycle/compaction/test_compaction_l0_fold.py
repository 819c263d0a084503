"""L0 folding: delete-only L0 segments older than the policy's bound, below every
vchannel's checkpoint, are folded into the segments they hit and dropped in ONE guarded
txn. Real etcd, real files, rows through the real WAL and flusher; visible rows
row-exact before == after and equal to the model; the rows the folded deletes hid are
physically gone; later writes, a full WAL replay after GC and a snapshot restore agree."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction, gc, snapshot
from seglake.lifecycle.compaction import folding
from seglake.lifecycle.flush.state import L0
from seglake.visibility import read_rows

from compaction_helpers import DROPPED, Writer, exact, rows, run_restore, segments

pytestmark = pytest.mark.etcd


def fold_policy(**kw):
    """Nothing is small (min rows 1), nothing is rewritten for its deletes (ratio 1): only folds."""
    return compaction.Policy(**{"min_segment_rows": 1, "target_rows": 10**6, "delete_ratio": 1.0,
                                "protection": 0.0, "l0_age": 0.0, **kw})


def _world(w, name="f", shards=2):
    w.create(name, ["_default", "p1", "p2"], shards=shards)
    for i, p in enumerate(["_default", "p1", "p2"]):
        w.insert(name, range(1, 41), p, float(i))
    w.flush(name)
    w.insert(name, range(41, 61), "p1", 5.0)
    w.flush(name)
    w.delete(name, [1, 2, 3, 42])                  # collection-wide
    w.flush(name)                                   # nothing else to sync: L0 segments
    w.delete(name, [10, 11], partition="p2")       # partition-scoped
    w.flush(name)


def _l0(meta, name):
    return [s for s in segments(meta, name) if s.level == L0 and not s.num_rows]


def _stored(meta, store, name) -> int:
    coll = meta.catalog.get_by_name(name)
    return read_rows(store, coll.schema, segments(meta, name)).num_rows


def test_fold_drops_l0_segments_and_the_rows_they_hid(meta, store, settings):
    w = Writer(meta, store, settings)
    _world(w)
    before = exact(meta, store, "f")
    assert rows(meta, store, "f") == w.model.visible()
    l0 = _l0(meta, "f")
    assert l0, "the workload must leave L0 delete segments"
    hidden_before = _stored(meta, store, "f") - sum(before.values())
    assert hidden_before > 0
    hits, folded = set(), set()
    for _ in range(4):      # an L0 segment whose hits another fold of the plan rewrites waits for the next run
        p = compaction.plan(meta, store, "f", fold_policy())
        if not p.units:
            break
        assert all(u.kind == compaction.FOLD for u in p.units)      # the policy plans nothing else
        run_hits = [h[0] for u in p.units for h in u.hits]
        assert len(run_hits) == len(set(run_hits))                  # no segment in two folds of one plan
        s = compaction.compact(meta, store, "f", fold_policy())
        assert [r.status for r in s.results] == [compaction.COMMITTED] * len(p.units), s.to_json()
        assert exact(meta, store, "f") == before and rows(meta, store, "f") == w.model.visible()
        hits |= set(run_hits)
        folded |= {x for u in p.units for x in u.segment_ids}
    else:
        pytest.fail("folding does not converge")
    assert folded == {x.segment_id for x in l0} and hits and not hits & folded
    # the L0 segments are gone (Dropped, folded), the rows they hid physically gone
    assert _l0(meta, "f") == []
    coll = meta.catalog.get_by_name("f")
    dropped = {x.segment_id: x for x in meta.segments.list(coll.collection_id) if x.state == DROPPED}
    assert all(dropped[x.segment_id].compacted_to == folding.FOLDED for x in l0)
    assert all(dropped[h].compacted_to for h in hits)
    assert _stored(meta, store, "f") == sum(before.values())
    assert all(not x.deltalogs for x in segments(meta, "f"))       # no delete log left anywhere
    # later writes: a re-insert of a folded-away pk is visible, a new delete applies
    w.insert("f", [1, 2], "p1", 9.0)
    w.delete("f", [20])
    w.flush("f")
    assert rows(meta, store, "f") == w.model.visible()


def test_fold_then_gc_then_full_wal_replay_and_restore(meta, store, settings):
    w = Writer(meta, store, settings)
    _world(w, "g", shards=1)
    before = exact(meta, store, "g")
    snap = snapshot.create(meta, store, "g", "pre")
    assert snap
    compaction.compact(meta, store, "g", fold_policy())
    assert exact(meta, store, "g") == before
    # a restore of the snapshot taken before the fold: the pre-fold rows exactly
    run_restore(meta, store, "g", "pre", "g_pre")
    assert exact(meta, store, "g_pre") == before
    snapshot.drop(meta, store, "g", "pre")
    coll = meta.catalog.get_by_name("g")
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    assert exact(meta, store, "g") == before and rows(meta, store, "g") == w.model.visible()
    # the vchannel replays its whole log (checkpoint removed): nothing comes back, nothing twice
    meta.kv.delete(meta.keys.channel_checkpoint(coll.vchannels[0]))
    w.flush("g")
    assert rows(meta, store, "g") == w.model.visible()
    w.insert("g", [3], "_default", 7.0, upsert=True)
    w.flush("g")
    assert rows(meta, store, "g") == w.model.visible()


def test_the_age_bound_and_the_checkpoint_keep_young_l0_segments(meta, store, settings, monkeypatch):
    w = Writer(meta, store, settings)
    _world(w, "a", shards=1)
    def folds(p):
        return [u for u in p.units if u.kind == compaction.FOLD]

    # younger than the bound: not folded
    assert folds(compaction.plan(meta, store, "a", fold_policy(l0_age=3600.0))) == []
    # old enough by a clock two hours ahead
    later = time.time() + 7200
    assert folds(compaction.plan(meta, store, "a", fold_policy(l0_age=3600.0), now=later))
    # a delete above its vchannel's checkpoint (rows older than it may still be in the WAL): not folded
    coll = meta.catalog.get_by_name("a")
    # (the delete's timestamp: its call's one timestamp, at or below its tick; every row it hides
    # is older, and a row's timestamp is its tick, so all of them are at or below the checkpoint)
    newest = max(folding.delete_tick(s) for s in _l0(meta, "a"))
    monkeypatch.setattr(folding, "checkpoint_ticks", lambda meta, c, **kw: {v: newest - 1 for v in c.vchannels})
    p = compaction.plan(meta, store, "a", fold_policy())
    assert [u for u in folds(p) if any(s.segment_id in u.segment_ids for s in _l0(meta, "a")
                                       if folding.delete_tick(s) == newest)] == []
    assert folds(p)          # the older ones still are
    # a vchannel without a checkpoint: nothing folded
    monkeypatch.undo()
    meta.kv.delete(meta.keys.channel_checkpoint(coll.vchannels[0]))
    assert folds(compaction.plan(meta, store, "a", fold_policy())) == []


def test_a_flush_and_a_delete_during_the_fold_are_kept(meta, store, settings, monkeypatch):
    """Between the fold's files and its commit: new rows flushed into a hit partition and
    a new delete of a hit row; the fold commits (neither touches its inputs), nothing lost."""
    w = Writer(meta, store, settings)
    _world(w, "d", shards=1)
    fired = []

    def during(unit):
        if not fired:
            fired.append(unit.unit_id)
            w.insert("d", [100, 101], "p1", 3.0)
            w.delete("d", [30])                 # hits rows in every partition (all hit segments)
            w.flush("d")

    from seglake.lifecycle.compaction import compacting
    real = compacting.run_unit
    monkeypatch.setattr(compacting, "run_unit", lambda m, s, u, **kw: real(m, s, u, hooks={"after_files": during},
                                                                         **{k: v for k, v in kw.items()
                                                                            if k != "hooks"}))
    s = compaction.compact(meta, store, "d", fold_policy())
    monkeypatch.undo()
    assert fired and all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    assert rows(meta, store, "d") == w.model.visible()
    compaction.compact(meta, store, "d", fold_policy())
    assert rows(meta, store, "d") == w.model.visible()


def test_a_compaction_of_a_hit_segment_during_the_fold_wins(meta, store, settings, monkeypatch):
    w = Writer(meta, store, settings)
    _world(w, "h", shards=1)
    before = exact(meta, store, "h")
    p = compaction.plan(meta, store, "h", fold_policy())
    (fold,) = [u for u in p.units if u.kind == compaction.FOLD]
    hit_id, hit_pid, hit_rev = fold.hits[0]
    hit = next(s for s in segments(meta, "h") if s.segment_id == hit_id)
    other = compaction.make_unit(fold.collection_id, hit_pid, hit.channel, compaction.REWRITE, [(hit_id, hit_rev)])

    def during(unit):
        if unit.unit_id == fold.unit_id:
            r = compaction.run_unit(meta, store, other)
            assert r.status == compaction.COMMITTED

    res = compaction.run_unit(meta, store, fold, hooks={"after_files": during}, sources_revision=p.revision)
    assert res.status == compaction.LOST and "hit segment" in res.reason
    # the lost fold left no file: every output dir of its record is empty
    rec = next(r for r in compaction.unit_records(meta) if r["unit"]["unit_id"] == fold.unit_id)
    from seglake.storage import layout
    for (_, pid, _), o in zip(rec["unit"]["hits"], rec["outputs"]):
        assert not [x for d in layout.segment_dirs(fold.collection_id, pid, o) for x in store.list(d)]
    assert exact(meta, store, "h") == before
    # a re-plan folds what is left
    s = compaction.compact(meta, store, "h", fold_policy())
    assert all(r.status == compaction.COMMITTED for r in s.results) and _l0(meta, "h") == []
    assert exact(meta, store, "h") == before and rows(meta, store, "h") == w.model.visible()


def test_fold_rerun_after_a_crash_converges(meta, store, settings):
    """Killed after its files (simulated: the hook raises): the re-run reuses the recorded
    ids, commits once, rows exact."""
    w = Writer(meta, store, settings)
    _world(w, "k", shards=1)
    before = exact(meta, store, "k")
    p = compaction.plan(meta, store, "k", fold_policy())
    (fold,) = p.units

    class Killed(Exception):
        pass

    def die(unit):
        raise Killed()

    with pytest.raises(Killed):
        compaction.run_unit(meta, store, fold, hooks={"after_files": die}, sources_revision=p.revision)
    assert exact(meta, store, "k") == before
    rec1 = next(r for r in compaction.unit_records(meta) if r["unit"]["unit_id"] == fold.unit_id)
    assert rec1["state"] == compaction.PREPARED
    s = compaction.compact(meta, store, "k", fold_policy())
    assert [r.unit_id for r in s.results] == [fold.unit_id] and s.results[0].status == compaction.COMMITTED
    rec2 = next(r for r in compaction.unit_records(meta) if r["unit"]["unit_id"] == fold.unit_id)
    assert rec2["outputs"] == rec1["outputs"] and rec2["state"] == compaction.COMMITTED
    assert compaction.run_unit(meta, store, fold).status == compaction.ALREADY
    assert exact(meta, store, "k") == before and rows(meta, store, "k") == w.model.visible()


def test_fold_records_are_schema_v4_and_expire(meta, store, settings):
    from seglake.meta import codec

    w = Writer(meta, store, settings)
    _world(w, "v", shards=1)
    compaction.compact(meta, store, "v", fold_policy())
    coll = meta.catalog.get_by_name("v")
    kvs = list(meta.kv.range(meta.keys.compaction_units_prefix(coll.collection_id)))
    assert kvs and all(kv.value.startswith(b'{"v":4,') for kv in kvs)
    assert codec.SCHEMA_VERSION == 4
    out = compaction.expire_unit_records(meta, store, 0.0, time.time() + 10, coll.collection_id)
    assert out["unit_records_removed"] == len(kvs)


def test_fold_runs_on_the_executor_side_from_json(meta, store, settings):
    """The Spark engine's executor function runs a fold from its JSON with the driver's
    settings; a retried task finds it committed; a fold whose hits were edited is refused."""
    w = Writer(meta, store, settings)
    _world(w, "s", shards=1)
    before = exact(meta, store, "s")
    (fold,) = compaction.plan(meta, store, "s", fold_policy()).units
    doc = fold.to_json()
    with pytest.raises(Exception, match="does not match its content"):
        list(compaction.run_partition([{**doc, "hits": doc["hits"][1:]}], settings.to_env()))
    out = list(compaction.run_partition([doc], settings.to_env()))
    assert [r["status"] for r in out] == [compaction.COMMITTED] and out[0]["outputs"] == len(fold.hits)
    assert list(compaction.run_partition([doc], settings.to_env()))[0]["status"] == compaction.ALREADY
    assert exact(meta, store, "s") == before and rows(meta, store, "s") == w.model.visible()


def test_mixed_workload_with_folds_and_merges_after_every_step(meta, store, settings):
    """Merges, rewrites and folds interleaved with a mixed workload (inserts, scoped and
    collection-wide deletes, upserts; 2 shards, 3 partitions; L0 delete segments every
    step), a compaction after every step: the visible rows equal the model, row-exact
    against the state before each compaction."""
    from compaction_helpers import mixed_workload, policy

    w = Writer(meta, store, settings)
    w.create("m", ["_default", "p1", "p2"], shards=2)
    pol = policy(target_rows=30, l0_age=0.0)
    kinds = set()
    for step in range(5):
        mixed_workload(w, "m", step)
        w.delete("m", [step * 20 + 6, step * 20 - 3])             # alone in a flush: L0 segments
        w.flush("m")
        w.delete("m", [step * 20 + 7], partition="p2")
        w.flush("m")
        before = exact(meta, store, "m")
        s = compaction.compact(meta, store, "m", pol)
        assert s.counts()["lost"] == 0, s.to_json()
        kinds |= {u.kind for u in s.plan.units}
        assert exact(meta, store, "m") == before and rows(meta, store, "m") == w.model.visible()
    assert compaction.FOLD in kinds and compaction.MERGE in kinds


def test_delete_logs_riding_on_row_segments_are_folded_too(meta, store, settings):
    """The flusher stores deletes with the next segment it syncs (not in an L0 segment) and
    a merge carries them on: those delete logs are folded as well (the carrier rewritten
    without them, the rows they hide gone from every hit), until no delta log is left."""
    w = Writer(meta, store, settings)
    w.create("r", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        for i, p in enumerate(["_default", "p1", "p2"]):
            w.insert("r", range(step * 30 + 1, step * 30 + 21), p, float(step * 10 + i))
        w.flush("r")
        w.insert("r", [step * 30 + 25], "p1", 1.0)                  # rows in the same flush as ...
        w.delete("r", [step * 30 + 1, step * 30 + 2])               # ... these deletes: they ride with them
        w.insert("r", [step * 30 + 3], "p2", 2.0, upsert=True)      # an upsert's implied delete too
        w.flush("r")
    assert [s for s in segments(meta, "r") if s.deltalogs and s.num_rows], "deletes must ride on row segments"
    before = exact(meta, store, "r")
    assert rows(meta, store, "r") == w.model.visible()
    # first a merge that carries the delete logs on (folding off: a young bound)
    compaction.compact(meta, store, "r", compaction.Policy(min_segment_rows=1000, target_rows=10**6,
                                                            protection=0.0, l0_age=3600.0))
    assert exact(meta, store, "r") == before and any(s.deltalogs for s in segments(meta, "r"))
    kinds = set()
    for _ in range(6):
        s = compaction.compact(meta, store, "r", fold_policy())
        assert s.counts()["lost"] == 0, s.to_json()
        kinds |= {u.kind for u in s.plan.units}
        assert exact(meta, store, "r") == before and rows(meta, store, "r") == w.model.visible()
        if not s.plan.units:
            break
    else:
        pytest.fail("folding does not converge")
    assert compaction.FOLD in kinds
    assert not [x for x in segments(meta, "r") if x.deltalogs]          # every delete log folded
    assert _stored(meta, store, "r") == sum(before.values())           # and the rows they hid are gone
    w.insert("r", [1, 2], "_default", 9.0)                              # a folded-away pk comes back
    w.flush("r")
    assert rows(meta, store, "r") == w.model.visible()
