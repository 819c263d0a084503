"""attack-pitr2: restore to a time at the edges (issue 30): instants near now whose log is
still being committed, boundaries of the window, identities across copies. Every check
is row-exact against pitr_model.Model (every acknowledged operation with its ticks)."""

from __future__ import annotations

import json
import threading

from seglake.lifecycle import pitr, snapshot
from seglake.meta import alloc
from seglake.meta.alloc import compose_ts
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, restore_from_target, restore_to, rows, visible_of


def _stall_next_commit(monkeypatch):
    """The next commit a WAL writer thread makes stalls right after it reserved its tick
    (a GC pause, a slow etcd round trip): returns (reserved, go, ticks)."""
    real, reserved, go, ticks = alloc.TSO.reserve, threading.Event(), threading.Event(), []

    def stalled(self, count, above=0, *, linearizable=False):
        t = real(self, count, above, linearizable=linearizable)
        if linearizable and threading.current_thread() is not threading.main_thread() and not reserved.is_set():
            ticks.append(t)
            reserved.set()
            go.wait(120)
        return t
    monkeypatch.setattr(alloc.TSO, "reserve", stalled)
    return reserved, go, ticks


def test_a_restore_to_now_while_a_commit_below_it_is_in_flight_has_that_write(meta, store, settings, monkeypatch):
    """A restore to an instant past the log's last tick (`--as-of` now) read the log and
    ended it with a synthetic TimeTick(as_of); a commit that had reserved its tick below
    the instant and was still on its way (reserve -> etcd txn) landed after the replay,
    acknowledged with a tick <= as_of: the target lacked an acknowledged write of its
    instant, silently. The replay must seal the source log at the instant first (as the
    archive does), so such a commit fails its compare and takes a tick above it."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 11), 1.0)), 1.0)
        reserved, go, ticks = _stall_next_commit(monkeypatch)
        done, errs = [], []

        def call():
            try:
                done.append(c.insert("src", rows(range(100, 110), 2.0)))
            except Exception as e:   # noqa: BLE001
                errs.append(e)
        th = threading.Thread(target=call)
        th.start()
        try:
            assert reserved.wait(60)
            as_of = meta.tso.now()     # the restore's instant: after the stalled commit's tick
            assert as_of > ticks[0]
            target = restore_to(meta, store, settings, "src", "r_now", as_of)
        finally:
            go.set()
            th.join(60)
        monkeypatch.undo()
        assert done and not errs, errs
        model.record(done[0], 2.0)
    want = model.visible(as_of)
    got = visible_of(meta, store, target)
    missing = sorted(set(want) - set(got))
    assert got == want, (f"restore as of {as_of}: {len(missing)} acknowledged rows of the instant missing "
                         f"{missing[:5]}, extra {sorted(set(got) - set(want))[:5]}")


def _db_at(meta, store, settings, names, *, drop_after_cut=(), create_after_cut=()):
    """Collections `names` (windows on) written in turns, `cut` taken mid-way, more writes;
    then the collections of `drop_after_cut` dropped (wal mode, finished) and those of
    `create_after_cut` created and written. Returns (models, cut)."""
    from seglake.lifecycle import drop

    from pitr_model import flush_all
    models, cut = {}, None
    with WalClient(meta, store, settings) as c:
        for n in names:
            c.create_collection(n, SCHEMA, shards=2, partitions=["_default", "p1"])
            pitr.set_window(meta, n, "1h")
            models[n] = Model(meta, store, n)
        for rnd in range(4):
            for i, n in enumerate(names):
                v = float(rnd * 10 + i)
                base = 1000 * rnd + 1
                models[n].record(c.insert(n, rows(range(base, base + 6), v)), v)
                if rnd:
                    models[n].record(c.delete(n, [base - 1000]), v)
                    models[n].record(c.upsert(n, rows([base - 999], v), partition="p1"), v)
            if rnd == 2:
                cut = meta.tso.now()
        for n in create_after_cut:
            c.create_collection(n, SCHEMA, shards=1)
            pitr.set_window(meta, n, "1h")
            c.insert(n, rows(range(1, 5), 9.0))
    for n in names:
        flush_all(meta, store, settings, meta.catalog.get_by_name(n))
    for n in drop_after_cut:
        coll = meta.catalog.get_by_name(n)
        drop.begin_drop(meta, store, settings, n)
        flush_all(meta, store, settings, coll, flush_all=False)
        assert drop.finish_drop(meta, n, collection_id=coll.collection_id)["state"] == "Dropped"
    return models, cut


def _drive(meta, store, settings, jobs):
    from seglake.lifecycle import copyjob
    for j in jobs:
        copyjob.plan(meta, j["job_id"], 3)
        copyjob.run_inline(meta, store, j["job_id"])
        assert copyjob.finalize(meta, j["job_id"]).state == "Completed"
        pitr.replay(meta, store, settings, meta.catalog.get_by_name(j["target"]).collection_id)


def test_a_database_at_an_instant_leaves_out_a_collection_created_after_it(meta, store, settings):
    """The database at `cut` held a and b; c was created after. restore_database (every
    collection of the db) planned c too and refused the whole set ('before collection c
    existed'): once any collection is added -- even the targets of an earlier database
    restore -- no earlier instant of the database could be restored without naming the set."""
    from seglake.lifecycle.pitr.database import restore_database_as_of

    models, cut = _db_at(meta, store, settings, ("a", "b"), create_after_cut=("c",))
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_cut")
    assert sorted(j["target"] for j in jobs) == ["a_cut", "b_cut"]
    _drive(meta, store, settings, jobs)
    for n in ("a", "b"):
        assert visible_of(meta, store, meta.catalog.get_by_name(f"{n}_cut")) == models[n].visible(cut), n


def test_a_database_at_an_instant_has_a_collection_dropped_after_it(meta, store, settings):
    """The database at `cut` held a and b; b was dropped after `cut`, inside its window.
    restore_database took only the live collections: b was silently missing from 'the
    whole database at one instant' (its rows at `cut` were restorable: its window holds
    its log and an undrop can bring it back)."""
    from seglake.lifecycle.pitr.database import restore_database_as_of

    models, cut = _db_at(meta, store, settings, ("a", "b"), drop_after_cut=("b",))
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_cut")
    assert sorted(j["target"] for j in jobs) == ["a_cut", "b_cut"], jobs
    _drive(meta, store, settings, jobs)
    for n in ("a", "b"):
        assert visible_of(meta, store, meta.catalog.get_by_name(f"{n}_cut")) == models[n].visible(cut), n


def test_a_name_dropped_inside_its_window_is_restored_to_an_instant_before_the_drop(meta, store, settings):
    """src written, t1, more writes, src dropped inside its window. 'seglake restore src
    --as-of t1' was refused ('collection src not found'), and once the name was created
    again ('before collection src existed (created ...)': a collection of that name did
    exist at t1): the window held src's log and snapshot for exactly that, and an undrop
    gives only the instant of the drop. The restore is of the collection that held the
    name at the instant, row-exact; the new one of the name is untouched."""
    from seglake.lifecycle import drop

    from pitr_model import flush_all
    with WalClient(meta, store, settings) as c:
        old = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 21), 1.0)), 1.0)
        model.record(c.delete("src", [3, 4]), 1.0)
        t1 = meta.tso.now()
        model.record(c.upsert("src", rows([5, 6], 2.0), partition="p1"), 2.0)
        model.record(c.insert("src", rows(range(40, 50), 2.0)), 2.0)
    flush_all(meta, store, settings, old)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, old, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=old.collection_id)["state"] == "Dropped"
    got = visible_of(meta, store, restore_to(meta, store, settings, "src", "src_t1", t1))
    assert got == model.visible(t1)
    with WalClient(meta, store, settings) as c:    # the name taken again by another collection
        c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        c.insert("src", rows(range(900, 905), 9.0))
    got = visible_of(meta, store, restore_to(meta, store, settings, "src", "src_t1b", t1))
    assert got == model.visible(t1)
    assert meta.catalog.get_by_name("src_t1b").properties["restored_from"]["collection_id"] == old.collection_id
    now = meta.tso.now()    # an instant of the new one: the new one
    assert sorted(visible_of(meta, store, restore_to(meta, store, settings, "src", "src_now", now))) == \
        [(pk, 9.0) for pk in range(900, 905)]


def test_undrop_after_gc_of_a_collection_without_snapshots_inside_its_window(meta, store, settings):
    """A collection with a window and no snapshot (born inside the window: an undrop replays
    it from its creation, the window holds its whole log) dropped; GC with zero tolerances
    reclaimed its Dropped segments, then -- nothing left under it -- removed its record
    together with its window, although the drop lay inside the window ('the window of a
    dropped collection keeps holding while the drop lies inside it'): the undrop was then
    'not found' and the log the window held was released. The record (and the window) are
    kept while the window holds the drop; the undrop is row-exact; clearing the window lets
    the next GC remove them."""
    from seglake.lifecycle import copyjob, drop, gc

    from pitr_model import flush_all

    def run_gc():
        return gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                              force=True, copy_job_retention=0.0))
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 31), 1.0)), 1.0)
        model.record(c.delete("src", [7, 8]), 1.0)
        model.record(c.upsert("src", rows([9], 2.0), partition="p1"), 2.0)
        want = model.visible(meta.tso.now())
    flush_all(meta, store, settings, coll)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    run_gc()
    run_gc()
    job = pitr.undrop(meta, store, "src", "back")
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    pitr.replay(meta, store, settings, meta.catalog.get_by_name("back").collection_id)
    assert visible_of(meta, store, meta.catalog.get_by_name("back")) == want
    shown = pitr.get_window(meta, "src")      # shown by the name too (it said 'not found')
    assert shown["window"] == "1h" and shown["state"] == "Dropped" and shown["collection_id"] == coll.collection_id
    assert pitr.clear_window(meta, "src")     # the window of the dropped collection off (by its name)
    assert pitr.get_window(meta, "src") is None
    run_gc()
    assert meta.kv.get(meta.keys.collection(coll.collection_id)) is None


def test_an_instant_within_a_second_after_a_drop_began_is_refused_not_guessed(meta, store, settings):
    """The drop began (its TSO, drop.drop_began_ts) and its DropCollections land a little
    after it: an instant in the second after it is refused (for one collection and for a
    database), naming the collection, nothing created; an instant before it restores.
    (attack-pitr3: the band was judged on the dropper's wall clock, which a writer's ticks
    may run ahead of by up to max_clock_skew: test_attack_pitr3's skew test.)"""
    from seglake.lifecycle import drop
    from seglake.lifecycle.pitr.database import restore_database_as_of

    from pitr_model import flush_all
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 11), 1.0)), 1.0)
        before = meta.tso.now()
    flush_all(meta, store, settings, coll)
    drop.begin_drop(meta, store, settings, "src")
    ts = drop.drop_began_ts(meta.catalog.get(coll.collection_id)) + 1    # one tick after the drop began
    assert ts <= meta.tso.now()
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    names = sorted(c.name for c in meta.catalog.list(include_dropped=True))
    for call in (lambda: pitr.restore_as_of(meta, store, "src", "r_band", ts),
                 lambda: restore_database_as_of(meta, store, "default", ts, suffix="_band")):
        try:
            call()
            raise AssertionError("an instant inside the drop's second was restored")
        except pitr.OutsideWindow as e:
            assert "'src' was being dropped" in str(e), e
    assert sorted(c.name for c in meta.catalog.list(include_dropped=True)) == names
    assert visible_of(meta, store, restore_to(meta, store, settings, "src", "r_before", before)) == \
        model.visible(before)


def test_a_database_at_an_instant_from_the_target_leaves_out_a_collection_dropped_before_it(meta, store, settings,
                                                                                         tmp_path):
    """From the backup target alone: x (exported, archived) was dropped BEFORE the instant;
    a and b were live then. restore_database --from-target (every collection with a bundle)
    refused the whole set naming x ('was dropped ... before as_of'): x was not in the database
    at that instant. It is left out; a and b equal their models."""
    import shutil
    import uuid

    from seglake.lifecycle import drop
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.pitr.database import drive, restore_database_as_of
    from seglake.meta import Meta
    from seglake.storage import open_store
    from seglake.storage.local import LocalStore

    from pitr_model import export_and_archive, flush_all
    target = LocalStore(tmp_path / "backup")
    models = {}
    with WalClient(meta, store, settings) as c:
        for n in ("a", "b", "x"):
            coll = c.create_collection(n, SCHEMA, shards=2)
            models[n] = Model(meta, store, n)
            models[n].record(c.insert(n, rows(range(1, 21), 1.0)), 1.0)
            export_and_archive(meta, store, settings, target, coll)
        models["x"].record(c.insert("x", rows(range(50, 55), 2.0)), 2.0)
    x = meta.catalog.get_by_name("x")
    drop.begin_drop(meta, store, settings, "x")
    flush_all(meta, store, settings, x, flush_all=False)
    assert drop.finish_drop(meta, "x", collection_id=x.collection_id)["state"] == "Dropped"
    with WalClient(meta, store, settings) as c:
        for n in ("a", "b"):
            models[n].record(c.insert(n, rows(range(100, 110), 3.0)), 3.0)
            models[n].record(c.delete(n, [2]), 3.0)
        cut = meta.tso.now()
        for n in ("a", "b"):
            models[n].record(c.insert(n, rows(range(200, 205), 4.0)), 4.0)
    archive.run(meta, store, target)
    wants = {n: models[n].visible(cut) for n in ("a", "b")}
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    try:
        jobs = restore_database_as_of(meta2, store2, "default", cut, suffix="_cut", target=target)
        assert sorted(j["target"] for j in jobs) == ["a_cut", "b_cut"]
        out = drive(meta2, store2, s2, jobs, "default")
        assert [r["state"] for r in out] == ["Created", "Created"]
        for n in ("a", "b"):
            assert visible_of(meta2, store2, meta2.catalog.get_by_name(f"{n}_cut")) == wants[n], n
        try:   # named, x is still refused (it is asked for)
            restore_database_as_of(meta2, store2, "default", cut, suffix="_n", target=target, collections=["x"])
            raise AssertionError("x restored at an instant after its drop")
        except pitr.OutsideWindow as e:
            assert "dropped" in str(e)
    finally:
        meta2.close()


def test_a_database_at_an_instant_from_the_target_leaves_out_a_collection_created_after_it(meta, store, settings,
                                                                                          tmp_path):
    """From the backup target alone: `late` was created (and exported, archived) AFTER the
    instant; a was live then. restore_database --from-target (every collection with a
    bundle) refused the whole set ("no bundle of default.late ... at or before"): the
    bundles did not say when their collection was created. They do (snapshot.collection.
    created_ts): late is left out, a equals its model; named, late is refused saying it was
    created after the instant; a bundle whose created_ts is not an id is refused."""
    import shutil
    import uuid

    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.lifecycle.pitr.database import drive, restore_database_as_of
    from seglake.lifecycle.pitr.from_target import NotBornYet
    from seglake.meta import Meta
    from seglake.storage import open_store
    from seglake.storage.local import LocalStore

    from pitr_model import export_and_archive
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        a = c.create_collection("a", SCHEMA, shards=2)
        model = Model(meta, store, "a")
        model.record(c.insert("a", rows(range(1, 21), 1.0)), 1.0)
        export_and_archive(meta, store, settings, target, a)
        model.record(c.insert("a", rows(range(30, 40), 2.0)), 2.0)
        model.record(c.delete("a", [3]), 2.0)
        cut = meta.tso.now()
        late = c.create_collection("late", SCHEMA, shards=1)
        c.insert("late", rows(range(1, 6), 3.0))
        model.record(c.insert("a", rows(range(50, 55), 3.0)), 3.0)
        export_and_archive(meta, store, settings, target, late)
    doc = bundles.read(target, "default", "late", "s1")
    assert doc["snapshot"]["collection"]["created_ts"] == late.created_ts > cut
    archive.run(meta, store, target)
    want = model.visible(cut)
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    try:
        try:   # named, late is refused before anything is created
            restore_database_as_of(meta2, store2, "default", cut, suffix="_n", target=target, collections=["a", "late"])
            raise AssertionError("late restored at an instant before it was created")
        except NotBornYet as e:
            assert "default.late was created at" in str(e) and "after as_of" in str(e), e
        assert list(meta2.catalog.list("default")) == []
        jobs = restore_database_as_of(meta2, store2, "default", cut, suffix="_cut", target=target)
        assert [j["target"] for j in jobs] == ["a_cut"]
        out = drive(meta2, store2, s2, jobs, "default")
        assert [r["state"] for r in out] == ["Created"]
        assert visible_of(meta2, store2, meta2.catalog.get_by_name("a_cut")) == want
    finally:
        meta2.close()
    bad = json.loads(json.dumps(doc))
    for v in (-1, "1", True, 2**64, 1.5):
        bad["snapshot"]["collection"]["created_ts"] = v
        try:
            bundles._check_sections(bad, "bundle default.late/s1")
            raise AssertionError(f"created_ts {v!r} accepted")
        except bundles.BundleError as e:
            assert "snapshot.collection.created_ts" in str(e), e


def test_a_restore_to_now_of_a_collection_never_written_seals_a_log_not_yet_begun(meta, store, settings):
    """Held check: a collection created and never written, restored to now: empty; the seal
    leaves its log sealed at the instant (a log record not begun yet is created sealed: not
    reached here, create_collection already writes to the log), and the first write after it
    commits above the instant and is visible."""
    from seglake.meta.catalog import pchannel_of
    from seglake.wal.log import WalLog

    from pitr_model import flush_all
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        p = pchannel_of(coll.vchannels[0])
        as_of = meta.tso.now()
        target = restore_to(meta, store, settings, "src", "r0", as_of)
        assert sum(visible_of(meta, store, target).values()) == 0
        assert WalLog(meta, None, p).state().floor_tt >= as_of
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 6), 1.0)), 1.0)
    flush_all(meta, store, settings, coll)
    assert min(ts for _, _, ts, _, _ in model.inserted) > as_of
    assert visible_of(meta, store, meta.catalog.get_by_name("src")) == model.visible(meta.tso.now())


def _finish(meta, store, settings, job):
    from seglake.lifecycle import copyjob
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    tid = meta.copyjobs.get(job)[0].target_collection_id
    pitr.replay(meta, store, settings, tid)
    return meta.catalog.get(tid)


def test_undrop_twice_and_an_undropped_copy_dropped_and_undropped_again(meta, store, settings):
    """Held check: one drop undropped twice into two names (both row-exact, the same rows);
    the first copy (a window and a snapshot of its own, then its own writes) dropped and
    undropped again: row-exact against the copy's model (src's rows at the drop + its own)."""
    from seglake.lifecycle import drop, snapshot

    from pitr_model import flush_all

    def drop_it(name):
        coll = meta.catalog.get_by_name(name)
        drop.begin_drop(meta, store, settings, name)
        flush_all(meta, store, settings, coll, flush_all=False)
        assert drop.finish_drop(meta, name, collection_id=coll.collection_id)["state"] == "Dropped"
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 26), 1.0)), 1.0)
        model.record(c.delete("src", [2, 3], partition="p1"), 1.0)
        model.record(c.upsert("src", rows([4, 5], 2.0), partition="p1"), 2.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.insert("src", rows(range(30, 40), 3.0)), 3.0)
        model.record(c.delete("src", [6]), 3.0)
        want = model.visible(meta.tso.now())
    drop_it("src")
    b1 = _finish(meta, store, settings, pitr.undrop(meta, store, "src", "b1"))
    b2 = _finish(meta, store, settings, pitr.undrop(meta, store, "src", "b2"))
    assert visible_of(meta, store, b1) == want and visible_of(meta, store, b2) == want
    pitr.set_window(meta, "b1", "1h")
    snapshot.create(meta, store, "b1", "x1")
    with WalClient(meta, store, settings) as c:
        r1 = c.insert("b1", rows(range(100, 105), 5.0))
        c.delete("b1", [30, 31])
        assert r1.positions
    flush_all(meta, store, settings, b1)
    want_b1 = visible_of(meta, store, meta.catalog.get_by_name("b1"))
    assert sum(want_b1.values()) == sum(want.values()) + 5 - 2
    drop_it("b1")
    back = _finish(meta, store, settings, pitr.undrop(meta, store, "b1", "b1_back"))
    assert visible_of(meta, store, back) == want_b1


def test_restores_to_now_while_two_producers_write_are_each_row_exact(meta, store, settings):
    """Held check of fix 1 under real concurrency (no stall injected): two producers insert,
    delete and upsert without pause on a 2-shard collection while five restores to 'now'
    run one after another; once the producers stop, each target equals the model at its
    instant (every acknowledged call, recorded from its positions)."""
    import time

    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
    stop, results, errors = threading.Event(), [], []

    def producer(k):
        try:
            with WalClient(meta, store, settings) as c:
                i = 0
                while not stop.is_set():
                    base = k * 100000 + i * 10
                    v = float(i % 7)
                    results.append(("i", c.insert("src", rows(range(base, base + 5), v)), v))
                    if i % 3 == 1:
                        results.append(("d", c.delete("src", [base - 10, base - 9]), v))
                    if i % 4 == 2:
                        results.append(("u", c.upsert("src", rows([base - 8], v + 0.5), partition="p1"), v + 0.5))
                    i += 1
        except Exception as e:   # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=producer, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    targets = []
    try:
        time.sleep(0.5)
        for n in range(5):
            as_of = meta.tso.now()
            targets.append((as_of, restore_to(meta, store, settings, "src", f"now{n}", as_of)))
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    model = Model(meta, store, "src")
    for _, res, v in results:
        model.record(res, v)
    compared = 0
    for as_of, target in targets:
        want = model.visible(as_of)
        got = visible_of(meta, store, target)
        assert got == want, (target.name, sorted((want - got).items())[:5], sorted((got - want).items())[:5])
        compared += sum(want.values())
    assert compared > 0
    print("calls", len(results), "rows compared", compared)


def test_scheduled_backups_keep_the_bundle_a_restore_from_the_target_to_the_window_starts_from(meta, store, settings,
                                                                                             tmp_path):
    """A retention policy keep_last 1 with export and archive, a 1 h window: two hourly
    schedule runs; the second pruned the first bundle from the target (keep_last 1). A
    restore from the target alone to an instant between the two bundles -- inside the
    window -- was then refused ('no bundle ... at or before'): the target kept nothing a
    restore to the window's oldest instants starts from (issue 30 item 1: the window keeps
    'the snapshot (or bundle) each such restore starts from'). The schedule's prune keeps
    that bundle while the window needs it."""
    import time

    from seglake.lifecycle import retention
    from seglake.lifecycle.backup import archive, scheduled
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.storage.local import LocalStore

    from pitr_model import flush_all
    target = LocalStore(tmp_path / "backup")
    hour = 3600
    t0 = (int(time.time()) // hour - 2) * hour
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        retention.set_policy(meta, "src", {"keep_last": 1, "export": True, "archive": True})
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 21), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        (r1,) = scheduled.run(meta, store, lambda: target, now=t0, collection="src", threads=2, say=lambda x: None)
        assert "error" not in r1, r1
        archive.run(meta, store, target)
        model.record(c.insert("src", rows(range(30, 40), 2.0)), 2.0)
        model.record(c.delete("src", [3]), 2.0)
        mid = meta.tso.now()
        model.record(c.insert("src", rows(range(50, 55), 3.0)), 3.0)
        flush_all(meta, store, settings, coll)
        (r2,) = scheduled.run(meta, store, lambda: target, now=t0 + hour, collection="src", threads=2,
                              say=lambda x: None)
        assert "error" not in r2, r2
        archive.run(meta, store, target)
    kept = sorted(b for _, _, b, done in bundles.find(target, "default", "src") if done)
    print("bundles kept in the target:", kept, "pruned:", r2["export"]["pruned"], "held:", r2["export"]["held"])
    first = retention.sched_name(t0)
    assert r2["export"]["held"] == {first: ["the point-in-time window of default.src (1h)"]}
    got = visible_of(meta, store, restore_from_target(meta, store, settings, target, "src", "mid", mid))
    assert got == model.visible(mid)
    pitr.clear_window(meta, "src")      # the window off: the next run prunes it
    (r3,) = scheduled.run(meta, store, lambda: target, now=t0 + 2 * hour, collection="src", threads=2,
                          say=lambda x: None)
    assert first in r3["export"]["pruned"] and not r3["export"]["held"], r3["export"]


def test_an_instant_in_a_drops_first_second_with_the_name_taken_again_is_the_new_collection(meta, store, settings):
    """The drop's first second is refused only while it is unknown whether the dropped
    collection still lived: once another collection of the name was created before the
    instant (after the drop began), the instant is the new collection's."""
    import time

    from seglake.lifecycle import drop

    from pitr_model import flush_all
    with WalClient(meta, store, settings) as c:
        old = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        c.insert("src", rows(range(1, 11), 1.0))
    flush_all(meta, store, settings, old)
    began = time.time() - 0.2
    drop.begin_drop(meta, store, settings, "src", clock=lambda: began)
    flush_all(meta, store, settings, old, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=old.collection_id)["state"] == "Dropped"
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(500, 505), 5.0)), 5.0)
        ts = meta.tso.now()
    assert ts < compose_ts(int(began * 1000) + 1000), "the instant must lie in the drop's first second"
    target = restore_to(meta, store, settings, "src", "r_new", ts)
    assert target.properties["restored_from"]["collection_id"] != old.collection_id
    assert visible_of(meta, store, target) == model.visible(ts)
    from seglake.lifecycle.pitr.database import restore_database_as_of   # the database at ts: the new one
    (job,) = restore_database_as_of(meta, store, "default", ts, suffix="_db")
    _drive(meta, store, settings, [job])
    t2 = meta.catalog.get_by_name("src_db")
    assert t2.properties["restored_from"]["collection_id"] != old.collection_id
    assert visible_of(meta, store, t2) == model.visible(ts)


def test_a_database_at_an_instant_with_a_windowless_collection_dropped_since_is_refused_naming_it(meta, store,
                                                                                                 settings):
    """w (no window) was in the database at the cut and was dropped since: it cannot be
    restored, so the whole set is refused naming it and saying it was dropped since (one
    refusal refuses the set, as for a live collection without a window), nothing created;
    the named set without it restores."""
    from seglake.lifecycle import drop
    from seglake.lifecycle.pitr.database import restore_database_as_of

    from pitr_model import flush_all
    with WalClient(meta, store, settings) as c:
        w = c.create_collection("w", SCHEMA, shards=1)
        c.insert("w", rows(range(1, 4), 1.0))
    models, cut = _db_at(meta, store, settings, ("a",))
    flush_all(meta, store, settings, w)
    drop.begin_drop(meta, store, settings, "w")
    flush_all(meta, store, settings, w, flush_all=False)
    assert drop.finish_drop(meta, "w", collection_id=w.collection_id)["state"] == "Dropped"
    names = sorted(x.name for x in meta.catalog.list(include_dropped=True))
    try:
        restore_database_as_of(meta, store, "default", cut, suffix="_cut")
        raise AssertionError("a set missing w was restored silently")
    except pitr.OutsideWindow as e:
        assert "'w'" in str(e) and "dropped since" in str(e), e
    assert sorted(x.name for x in meta.catalog.list(include_dropped=True)) == names
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_cut", collections=["a"])
    _drive(meta, store, settings, jobs)
    assert visible_of(meta, store, meta.catalog.get_by_name("a_cut")) == models["a"].visible(cut)


def test_a_prune_by_hand_keeps_the_bundle_the_window_needs_and_a_pinned_capture(meta, store, settings, tmp_path,
                                                                               monkeypatch, capsys):
    """`seglake backup prune` (by hand) dropped the bundle a restore from the target to the
    window's oldest instants starts from, and a bundle `seglake milvus pin` pinned: it asked
    neither. It now asks what the schedules' prunes ask (prune.held_in); with the window off
    and the pin gone, the same prune drops it."""
    from seglake import cli
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.lifecycle.backup import export
    from seglake.milvus import sources
    from seglake.storage.local import LocalStore

    from pitr_model import flush_all
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        for i, name in enumerate(("b1", "b2", "b3")):
            c.insert("src", rows(range(10 * i, 10 * i + 5), 1.0))
            flush_all(meta, store, settings, coll)
            snapshot.create(meta, store, "src", name)
            export.export(meta, store, target, "src", name, threads=2)
    sources.pin(meta, target, "default", "src", "b2", 3600, by="op")

    def prune() -> dict:
        capsys.readouterr()
        rc = cli.main(["backup", "prune", "src", "--keep-last", "1", "--target", target.uri, "--json"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        return json.loads(out)

    r = prune()
    assert r["pruned"] == [] and set(r["held"]) == {"b1", "b2"}, r
    assert r["held"]["b1"] == ["the point-in-time window of default.src (1h)"] and "pin by op" in r["held"]["b2"][0]
    pitr.clear_window(meta, "src")
    sources.unpin(meta, "default", "src", "b2")
    r = prune()
    assert r["pruned"] == ["b1", "b2"] and not r["held"], r
    assert sorted(b for _, _, b, done in bundles.find(target, "default", "src") if done) == ["b3"]
