"""Attack on undrop from a backup target (issue 30 item 5) when the collection's NAME was
re-created and dropped again: each incarnation exported once and its WAL archived. The
undrop brings back the incarnation asked for (the newest by default, the one of the
named bundle otherwise), row-exact against the model of that incarnation; a re-run into
the same target asking for another bundle is refused, never silently the first one; a
newer incarnation that is live, or whose drop is not archived yet, is refused, never an
older incarnation in its place."""

from __future__ import annotations

import pytest

from seglake.errors import Conflict
from seglake.lifecycle import copyjob, drop, pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.pitr.planning import LogGap
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, rows, visible_of

quiet = dict(say=lambda line: None)


def _incarnation(meta, store, settings, target, bundle: str, base: int, v: float, *, dropped=True, window=False,
                 name="src"):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(name, SCHEMA, shards=2, partitions=["_default", "p1"])
        retention.set_policy(meta, name, {"keep_last": 3, "archive": True})
        if window:
            pitr.set_window(meta, name, "1h")
        model = Model(meta, store, name)
        model.record(c.insert(name, rows(range(base, base + 30), v)), v)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, name, bundle)
        exports.export(meta, store, target, name, bundle, **quiet)
        model.record(c.delete(name, list(range(base, base + 4))), v + 0.5)
        model.record(c.insert(name, rows(range(base + 100, base + 120), v + 0.5), partition="p1"), v + 0.5)
    if dropped:
        drop.begin_drop(meta, store, settings, name)
        flush_all(meta, store, settings, coll, flush_all=False)
        assert drop.finish_drop(meta, name, collection_id=coll.collection_id)["state"] == "Dropped"
    return coll, model


def _finish(meta, store, settings, job, name):
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    return pitr.replay(meta, store, settings, meta.catalog.get_by_name(name).collection_id)


def test_undrop_of_a_reused_name_brings_back_the_incarnation_asked_for(meta, store, settings, tmp_path):
    target = LocalStore(tmp_path / "backup")
    _, m1 = _incarnation(meta, store, settings, target, "s1", 1, 1.0)
    want1 = m1.visible(meta.tso.now())
    _, m2 = _incarnation(meta, store, settings, target, "s2", 1000, 2.0)
    want2 = m2.visible(meta.tso.now())
    archive.run(meta, store, target)
    assert want1 != want2 and sum(want1.values()) and sum(want2.values())

    # the newest incarnation by default; the named bundle's incarnation otherwise
    out = _finish(meta, store, settings, pitr.undrop(meta, store, "src", "back2", backup=target), "back2")
    assert out["snapshot"] == "s2"
    assert visible_of(meta, store, meta.catalog.get_by_name("back2")) == want2
    out = _finish(meta, store, settings, pitr.undrop(meta, store, "src", "back1", backup=target, bundle="s1"),
                  "back1")
    assert out["snapshot"] == "s1"
    assert visible_of(meta, store, meta.catalog.get_by_name("back1")) == want1

    # back1 is the undrop from s1: asking for s2 into it is another undrop, refused
    names = sorted(c.name for c in meta.catalog.list(include_dropped=True))
    with pytest.raises(Conflict, match="back1"):
        pitr.undrop(meta, store, "src", "back1", backup=target, bundle="s2")
    # the same undrop again resumes it
    assert pitr.undrop(meta, store, "src", "back1", backup=target, bundle="s1") == \
        meta.catalog.get_by_name("back1").properties["restore_job_id"]

    # a third incarnation, live: not an older one in its place
    _incarnation(meta, store, settings, target, "s3", 5000, 3.0, dropped=False)
    archive.run(meta, store, target)
    with pytest.raises(LogGap, match="no drop of it"):
        pitr.undrop(meta, store, "src", "back3", backup=target)
    # dropped, but its drop not archived yet: refused, not incarnation 2 instead
    coll3 = meta.catalog.get_by_name("src")
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll3, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll3.collection_id)["state"] == "Dropped"
    with pytest.raises(LogGap, match="no drop of it"):
        pitr.undrop(meta, store, "src", "back3", backup=target)
    assert sorted(c.name for c in meta.catalog.list(include_dropped=True)) == sorted([*names, "src"])


def test_a_named_bundle_is_the_incarnation_undropped_even_when_this_store_could_give_a_newer_one(meta, store,
                                                                                                 settings, tmp_path):
    """Both incarnations had a window: this store can undrop the newest (its newest Dropped
    record). Naming the bundle of the older one brings back THAT one, from the target --
    not the store's newest with the bundle ignored."""
    target = LocalStore(tmp_path / "backup")
    _, m1 = _incarnation(meta, store, settings, target, "s1", 1, 1.0, window=True)
    want1 = m1.visible(meta.tso.now())
    _, m2 = _incarnation(meta, store, settings, target, "s2", 1000, 2.0, window=True)
    want2 = m2.visible(meta.tso.now())
    archive.run(meta, store, target)
    _finish(meta, store, settings, pitr.undrop(meta, store, "src", "newest", backup=target), "newest")
    assert visible_of(meta, store, meta.catalog.get_by_name("newest")) == want2     # from this store
    out = _finish(meta, store, settings, pitr.undrop(meta, store, "src", "older", backup=target, bundle="s1"),
                  "older")
    assert out["snapshot"] == "s1"
    assert visible_of(meta, store, meta.catalog.get_by_name("older")) == want1


def test_a_restore_to_a_time_after_the_drop_is_refused_not_the_dropped_incarnation(meta, store, settings,
                                                                                    tmp_path):
    """From the target alone, `src` as of an instant after its drop: at that instant there
    was no `src` (or another incarnation): refused, saying when it was dropped -- never
    the dropped incarnation's last rows labelled as that instant."""
    from seglake.lifecycle.pitr import from_target
    from seglake.lifecycle.pitr.planning import OutsideWindow
    from seglake.meta.catalog import pchannel_of

    target = LocalStore(tmp_path / "backup")
    coll, _ = _incarnation(meta, store, settings, target, "s1", 1, 1.0)
    with WalClient(meta, store, settings) as c:   # the log goes on after the drop (another collection)
        other = c.create_collection("other", SCHEMA, shards=2, partitions=["_default", "p1"])
        retention.set_policy(meta, "other", {"keep_last": 3, "archive": True})
        c.insert("other", rows(range(1, 10), 1.0))
        flush_all(meta, store, settings, other)
    archive.run(meta, store, target)
    site = archive.site_id(meta)
    after = min(archive.ArchivedLog(target, site, pchannel_of(v)).covered() for v in coll.vchannels)
    with pytest.raises((OutsideWindow, LogGap), match="dropped"):
        from_target.plan_from_target(meta, target, "src", after)
    # just before the drop: planned, the bundle's incarnation
    p, doc = from_target.plan_undrop_from_target(meta, target, "src")
    first_drop = min(from_target.drops_in_archive(target, site, p).values())
    p, doc = from_target.plan_from_target(meta, target, "src", first_drop - 1)
    assert doc["bundle"] == "s1" and p.as_of == first_drop - 1


def test_two_undrops_racing_for_one_target_name_one_wins_the_other_is_refused(meta, store, settings, tmp_path):
    """Two dropped collections undropped at once into the SAME new name: one target, one
    identity; the loser is refused (Conflict), nothing half-made; each source undropped into
    its own name at once: both row-exact."""
    import threading

    target = LocalStore(tmp_path / "backup")
    _, ma = _incarnation(meta, store, settings, target, "sa", 1, 1.0, window=True, name="a")
    _, mb = _incarnation(meta, store, settings, target, "sb", 500, 2.0, window=True, name="b")
    want = {"a": ma.visible(meta.tso.now()), "b": mb.visible(meta.tso.now())}
    results: dict = {}
    barrier = threading.Barrier(2)

    def go(src, to):
        barrier.wait()
        try:
            results[(src, to)] = pitr.undrop(meta, store, src, to)
        except Exception as e:   # noqa: BLE001 -- the test looks at which
            results[(src, to)] = e

    ts = [threading.Thread(target=go, args=(s, "same")) for s in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    won = [k for k, v in results.items() if isinstance(v, int)]
    lost = [v for v in results.values() if not isinstance(v, int)]
    assert len(won) == 1 and len(lost) == 1 and isinstance(lost[0], Conflict), results
    src = won[0][0]
    _finish(meta, store, settings, results[won[0]], "same")
    assert visible_of(meta, store, meta.catalog.get_by_name("same")) == want[src]
    assert meta.catalog.get_by_name("same").properties["restored_from"]["collection"] == src

    results.clear()
    barrier = threading.Barrier(2)
    ts = [threading.Thread(target=go, args=(s, f"{s}_back")) for s in ("a", "b")]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for s in ("a", "b"):
        assert isinstance(results[(s, f"{s}_back")], int), results
        _finish(meta, store, settings, results[(s, f"{s}_back")], f"{s}_back")
        assert visible_of(meta, store, meta.catalog.get_by_name(f"{s}_back")) == want[s]


def test_undrop_of_a_name_taken_again_says_an_earlier_one_was_dropped(meta, store, settings, tmp_path):
    """This store undrops a name's newest collection: with the name live again, the refusal
    says an earlier collection of it was dropped and how to get it (not just 'not dropped');
    nothing created."""
    from seglake.errors import StateError

    target = LocalStore(tmp_path / "backup")
    c1, _ = _incarnation(meta, store, settings, target, "s1", 1, 1.0, window=True)
    _incarnation(meta, store, settings, target, "s2", 1000, 2.0, window=True, dropped=False)
    before = sorted(c.name for c in meta.catalog.list(include_dropped=True))
    with pytest.raises(StateError, match=rf"not dropped.*earlier collection of that name \(id {c1.collection_id}\) "
                                         r"was dropped.*--bundle"):
        pitr.undrop(meta, store, "src", "back")
    assert sorted(c.name for c in meta.catalog.list(include_dropped=True)) == before
