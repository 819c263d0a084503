"""attack-pitr3: restore to a time at exact ticks (issue 30): instants exactly at a
message's tick and one below it, at a snapshot's consistent_ts and one below it, at a
flush checkpoint's tick. Every check is row-exact against pitr_model.Model."""

from __future__ import annotations

import random

from seglake.errors import NotFound as NotFoundError
from seglake.lifecycle import pitr, snapshot
from seglake.wal.client import WalClient

from etcd_root import ttl_over
from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def _op(c, model, rnd, i):
    kind = rnd.choice(["ins", "ins_txn", "del", "del_p1", "del_txn", "ups_p1", "ups", "ins_p1"])
    pks = sorted(rnd.sample(range(1, 40), rnd.randint(1, 6)))
    v = float(i) + 0.5
    if kind == "ins":
        model.record(c.insert("src", rows(pks, v)), v)
    elif kind == "ins_p1":
        model.record(c.insert("src", rows(pks, v), partition="p1"), v)
    elif kind == "ins_txn":
        model.record(c.insert("src", rows(pks[:1], v), txn=True), v, txn=True)
    elif kind == "del":
        model.record(c.delete("src", pks), v)
    elif kind == "del_p1":
        model.record(c.delete("src", pks, partition="p1"), v)
    elif kind == "del_txn":
        model.record(c.delete("src", pks[:1], txn=True), v, txn=True)
    elif kind == "ups_p1":
        model.record(c.insert("src", rows(pks, v), partition="p1", upsert=True), v)
    else:
        model.record(c.insert("src", rows(pks, v), upsert=True), v)
    return kind


def test_instants_exactly_at_ticks_snapshots_and_checkpoints(meta, store, settings):
    rnd = random.Random(30)
    marks = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for i in range(60):
            _op(c, model, rnd, i)
            if i in (15, 35):
                flush_all(meta, store, settings, coll, flush_all=(i == 15))
            if i in (20, 40):
                rec = snapshot.create(meta, store, "src", f"s{i}")
                marks += [("snapshot", rec.consistent_ts), ("snapshot-1", rec.consistent_ts - 1)]
                for v, pos in (rec.positions or {}).items():
                    cp = pos.get("checkpoint")
                    if cp:
                        marks += [("checkpoint", cp[3]), ("checkpoint+1", cp[3] + 1)]
    ticks = sorted({at for *_, at, _p in model.inserted} | {at for *_, at, _s in model.deletes})
    picked = rnd.sample(ticks, 10)
    marks += [("tick", t) for t in picked] + [("tick-1", t - 1) for t in picked[:5]]
    bad, compared = [], 0
    for i, (label, t) in enumerate(marks):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        compared += sum(want.values())
        if got != want:
            bad.append((label, t, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))
    print("instants", len(marks), "rows compared", compared)
    assert not bad, bad


def test_from_the_target_alone_at_ticks_and_archive_fragment_boundaries(meta, store, settings, tmp_path):
    """The same workload archived (continuous archive, runs between the writes so fragments
    are cut at several points); the source store and etcd deleted; restores from the target
    alone at instants exactly at a fragment's first tick, one below it, at its last tick, at
    message ticks, at the bundle's consistent_ts: each row-exact."""
    import shutil
    import uuid

    from seglake.lifecycle.backup import archive
    from seglake.meta import Meta
    from seglake.meta.catalog import pchannel_of
    from seglake.storage import open_store
    from seglake.storage.local import LocalStore
    from seglake.wal.log import WalLog

    from pitr_model import export_and_archive, restore_from_target
    rnd = random.Random(31)
    target = LocalStore(tmp_path / "backup")
    marks = []
    with WalClient(meta, store, settings, batch_rows=8) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for i in range(50):
            _op(c, model, rnd, i)
            if i == 10:
                export_and_archive(meta, store, settings, target, coll)
                rec = meta.snapshots.get(coll.collection_id, "s1")[0]
                marks += [("bundle", rec.consistent_ts)]
            if i in (14, 22, 30, 38, 46):
                flush_all(meta, store, settings, coll, flush_all=(i % 2 == 0))
                archive.run(meta, store, target)
    archive.run(meta, store, target)
    first, edges = marks[0][1], []
    for p in sorted({pchannel_of(v) for v in coll.vchannels}):
        for rec in WalLog(meta, None, p).fragments():
            if rec.fmt != 1 and rec.tt0 > first:
                edges += [("frag tt0", rec.tt0), ("frag tt0-1", rec.tt0 - 1),
                          ("frag last", rec.tt0 + max(rec.span, 1) - 1)]
    marks += rnd.sample(edges, min(len(edges), 15))   # (all 200+ of them held once: 90 s)
    ticks = sorted(t for t in {at for *_, at, _p in model.inserted} | {at for *_, at, _s in model.deletes}
                   if t > first)
    marks += [("tick", t) for t in rnd.sample(ticks, 8)]
    wants = [(label, t, model.visible(t)) for label, t in marks]
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    bad, compared = [], 0
    try:
        for i, (label, t, want) in enumerate(wants):
            try:
                got = visible_of(meta2, store2, restore_from_target(meta2, store2, s2, target, "src", f"r{i}", t))
            except Exception as e:   # noqa: BLE001
                bad.append((label, t, repr(e)[:300]))
                continue
            compared += sum(want.values())
            if got != want:
                bad.append((label, t, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))
    finally:
        meta2.close()
    print("instants", len(wants), "rows compared", compared)
    assert not bad, bad


def test_one_drop_undropped_here_under_its_own_name_and_from_the_target_and_restored_to_before(
        meta, store, settings, tmp_path):
    """src dropped inside its window (archived, bundle s1); undropped on this store under its
    own name (the name live again, a new id); then undropped from the target naming s1 into
    another name; then the name restored to an instant before the drop (the old collection
    held it then) and to one after the undrop (the new one). Each row-exact."""
    from seglake.lifecycle import drop, retention
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore

    from pitr_model import copy_and_replay, route0
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        retention.set_policy(meta, "src", {"keep_last": 3, "archive": True})
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 40), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, target, "src", "s1", say=lambda line: None)
        model.record(c.delete("src", list(range(1, 6))), 2.0)
        before = meta.tso.now()
        model.record(c.insert("src", rows(range(20, 30), 3.0), partition="p1", upsert=True), 3.0)
        model.record(c.insert("src", rows(route0(range(200, 220)), 4.0), txn=True), 4.0, txn=True)
        model.record(c.delete("src", [21, 22], partition="p1"), 5.0)
        flush_all(meta, store, settings, coll, flush_all=False)
    at_drop = model.visible(meta.tso.now())
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    archive.run(meta, store, target)
    back = copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "src"), "src")
    assert back.collection_id != coll.collection_id
    assert visible_of(meta, store, back) == at_drop
    pitr.set_window(meta, "src", "1h")
    m2 = Model(meta, store, "src")
    with WalClient(meta, store, settings) as c:
        m2.record(c.insert("src", rows(range(500, 505), 6.0)), 6.0)
        m2.record(c.delete("src", [30, 31]), 6.0)
        after = meta.tso.now()
    old = copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "old", backup=target, bundle="s1"),
                          "old")
    assert visible_of(meta, store, old) == at_drop
    got = visible_of(meta, store, restore_to(meta, store, settings, "src", "src_before", before))
    assert got == model.visible(before), (sorted((got - model.visible(before)).items())[:4],)
    # the undropped collection at `after`: its copied rows (at the drop) less m2's deletes, plus m2's rows
    want = at_drop.copy()
    for pk in (30, 31):
        for k in [k for k in want if k[0] == pk]:
            del want[k]
    want.update(m2.visible(after))
    try:
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", "src_after", after))
    except pitr.OutsideWindow as e:   # its restored rows are not in its own log, no snapshot of it yet
        print("refused as expected:", e)
        snapshot.create(meta, store, "src", "b1")
        with WalClient(meta, store, settings) as c:
            m2.record(c.insert("src", rows(range(600, 603), 7.0)), 7.0)
        after2 = meta.tso.now()
        want.update(m2.visible(after2) - m2.visible(after))
        got = visible_of(meta, store, restore_to(meta, store, settings, "src", "src_after", after2))
    assert got == want, (sorted((got - want).items())[:4], sorted((want - got).items())[:4])


def test_a_restore_in_flight_while_the_window_is_cleared_and_gc_runs_with_zero_tolerances(
        meta, store, settings, monkeypatch):
    """A restore to a time is set up (target Importing, copy job not yet run) from a base
    snapshot whose TTL has passed; the window is cleared, compaction-free GC runs with every
    tolerance zero and the WAL aged three days; then the copy job and the replay run. The
    result must be row-exact (or a loud refusal), never fewer rows."""
    import os
    import time

    from seglake.lifecycle import copyjob, gc
    from seglake.storage import layout

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 50), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        base = snapshot.create(meta, store, "src", "base", ttl=1)
        model.record(c.delete("src", list(range(1, 6))), 2.0)
        model.record(c.insert("src", rows(range(10, 20), 3.0), partition="p1", upsert=True), 3.0)
        t = meta.tso.now()
        model.record(c.insert("src", rows(range(100, 130), 4.0)), 4.0)
        flush_all(meta, store, settings, coll)
    job = pitr.restore_as_of(meta, store, "src", "r", t)
    assert pitr.clear_window(meta, "src")
    ttl_over(meta, base)
    old = time.time() - 3 * 86400
    for o in store.list(f"{layout.WAL}/"):
        os.utime(store.root / o.key, (old, old))
    for _ in range(2):
        r = gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True, copy_job_retention=0.0))
        print("gc", r["sweep"].get("by_reason"), meta.snapshots.get(coll.collection_id, "base")[0].state)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    tid = meta.catalog.get_by_name("r").collection_id
    pitr.replay(meta, store, settings, tid)
    got, want = visible_of(meta, store, meta.catalog.get(tid)), model.visible(t)
    assert got == want, (sorted((got - want).items())[:4], sorted((want - got).items())[:4])


def test_a_writer_clock_ahead_within_max_clock_skew_and_a_drop_right_after_its_writes(meta, store, settings):
    """A writer whose clock runs 3 s ahead (inside max_clock_skew, 5 s) writes x; x is then
    dropped at once (inside its window). The drop's start is the dropper's wall clock, the
    writes' ticks lie up to 3 s above it. An instant at x's last acknowledged write (x was
    live then: its DropCollection's tick is above it) must restore x's rows, by name and in
    the whole database; before, x was judged 'dropped before the instant' (1 s slack only):
    the database restore silently left it out."""
    import time

    from seglake.lifecycle import drop
    from seglake.lifecycle.pitr.database import drive, restore_database_as_of

    assert settings.max_clock_skew >= 3.5
    models = {}
    with WalClient(meta, store, settings) as c:
        for n in ("a", "x"):
            c.create_collection(n, SCHEMA, shards=2)
            pitr.set_window(meta, n, "1h")
            models[n] = Model(meta, store, n)
            models[n].record(c.insert(n, rows(range(1, 21), 1.0)), 1.0)
    with WalClient(meta, store, settings, clock=lambda: time.time() + 3.0) as c:   # a skewed writer
        models["a"].record(c.insert("a", rows(range(50, 55), 2.0)), 2.0)
        models["x"].record(c.insert("x", rows(range(50, 60), 2.0)), 2.0)
        models["x"].record(c.delete("x", [1, 2]), 2.0)
    cut = max(max(at for *_, at, _p in models["x"].inserted), max(at for _pk, _ts, at, _s in models["x"].deletes))
    x = meta.catalog.get_by_name("x")
    drop.begin_drop(meta, store, settings, "x")
    flush_all(meta, store, settings, x, flush_all=False)
    assert drop.finish_drop(meta, "x", collection_id=x.collection_id)["state"] == "Dropped"
    while meta.tso.now() >> 18 <= (cut >> 18) + 100:   # (past the instant's millisecond; no write needed)
        time.sleep(0.05)
    wants = {n: models[n].visible(cut) for n in ("a", "x")}
    assert sum(wants["x"].values()) == 28
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_db")
    assert sorted(j["collection"] for j in jobs) == ["a", "x"], jobs
    drive(meta, store, settings, jobs, "default")
    for n in ("a", "x"):
        assert visible_of(meta, store, meta.catalog.get_by_name(f"{n}_db")) == wants[n], n
    got = visible_of(meta, store, restore_to(meta, store, settings, "x", "x_cut", cut))
    assert got == wants["x"], (sorted((got - wants["x"]).items())[:4], sorted((wants["x"] - got).items())[:4])


def test_a_transaction_open_across_a_flush_and_a_snapshot(meta, store, settings, monkeypatch):
    """A transaction's BeginTxn and bodies are in the log, its CommitTxn held back (stalled
    before its commit) while another writer writes, a flush runs and snapshot s1 is taken;
    a delete of one of the transaction's pks lands before its commit; then it commits.
    Restores at s1's consistent_ts, just before and at the commit's tick, and after, each
    row-exact (base s1 for those after it: the replay must still find the bodies, which
    lie before s1's positions in the log)."""
    import threading

    from seglake.wal import message as M
    from seglake.wal.writer import WalWriter

    real, reached, go = WalWriter._commit, threading.Event(), threading.Event()

    def stalled(self, frag):
        if any(m.type == M.COMMIT_TXN for m, _rel in frag.txn_msgs) and not reached.is_set():
            reached.set()
            go.wait(120)
        return real(self, frag)
    monkeypatch.setattr(WalWriter, "_commit", stalled)
    marks = []
    with WalClient(meta, store, settings) as c, WalClient(meta, store, settings) as other:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 21), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        done, errs = [], []

        def call():
            try:
                done.append(c.insert("src", rows(range(100, 105), 2.0), txn=True))
            except Exception as e:   # noqa: BLE001
                errs.append(e)
        th = threading.Thread(target=call)
        th.start()
        try:
            assert reached.wait(60)
            model.record(other.insert("src", rows(range(200, 205), 3.0)), 3.0)
            model.record(other.delete("src", [1, 100]), 3.0)
            flush_all(meta, store, settings, coll)
            s1 = snapshot.create(meta, store, "src", "s1")
            marks += [("s1", s1.consistent_ts), ("after s1", meta.tso.now())]
        finally:
            go.set()
            th.join(60)
        monkeypatch.undo()
        assert done and not errs, errs
        model.record(done[0], 2.0, txn=True)
        commit = max(at for pk, _v, _ts, at, _p in model.inserted if pk == 100)
        marks += [("commit-1", commit - 1), ("commit", commit)]
        model.record(other.insert("src", rows(range(300, 303), 4.0)), 4.0)
        flush_all(meta, store, settings, coll)
        marks.append(("end", meta.tso.now()))
    assert set(model.pks(commit)) >= {100, 101, 102} and 1 not in model.pks(commit)
    bad = []
    for i, (label, t) in enumerate(marks):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        if got != want:
            bad.append((label, pitr.summary(meta, target)["snapshot"], sorted((got - want).items())[:4],
                        sorted((want - got).items())[:4]))
    assert not bad, bad


def test_an_undrop_from_the_target_into_the_name_of_a_local_undrop_of_another_incarnation(meta, store, settings,
                                                                                          tmp_path):
    """Two incarnations of `src`, both windowed, exported (s1, s2), archived and dropped. A
    local undrop (the newest, incarnation 2) is set up into `back` (and again, finished);
    then an undrop from the target naming s1 (incarnation 1) into the same `back`: it must
    be refused (another undrop), never answer with the local undrop's job as if it were
    incarnation 1's."""
    from seglake.errors import Conflict
    from seglake.lifecycle.backup import archive
    from seglake.storage.local import LocalStore

    from test_attack_undrop_incarnations import _finish, _incarnation
    target = LocalStore(tmp_path / "backup")
    _incarnation(meta, store, settings, target, "s1", 1, 1.0, window=True)
    _, m2 = _incarnation(meta, store, settings, target, "s2", 1000, 2.0, window=True)
    want2 = m2.visible(meta.tso.now())
    archive.run(meta, store, target)
    job = pitr.undrop(meta, store, "src", "back")            # this store: incarnation 2, set up only
    names = sorted(c.name for c in meta.catalog.list(include_dropped=True))
    for state in ("set up", "finished"):
        try:
            got = pitr.undrop(meta, store, "src", "back", backup=target, bundle="s1")
        except Conflict as e:
            assert "back" in str(e), e
        else:
            raise AssertionError(f"undrop of bundle s1 into 'back' ({state}, the local undrop of incarnation 2) "
                                 f"answered job {got} (the local undrop's is {job})")
        assert sorted(c.name for c in meta.catalog.list(include_dropped=True)) == names
        if state == "set up":
            _finish(meta, store, settings, job, "back")
    assert visible_of(meta, store, meta.catalog.get_by_name("back")) == want2


def test_a_database_at_a_collections_created_ts_and_one_tick_before(meta, store, settings):
    """Collection n is created (and written at once) while a is written: the database at
    n's created_ts has n (its state then: nothing, or what was already written) and at
    created_ts - 1 has not; n by name at created_ts - 1 is refused as before it existed,
    nothing created. Row-exact."""
    from seglake.lifecycle.pitr.database import drive, restore_database_as_of

    with WalClient(meta, store, settings) as c:
        c.create_collection("a", SCHEMA, shards=2)
        pitr.set_window(meta, "a", "1h")
        ma = Model(meta, store, "a")
        ma.record(c.insert("a", rows(range(1, 11), 1.0)), 1.0)
        n = c.create_collection("n", SCHEMA, shards=2)
        pitr.set_window(meta, "n", "1h")
        mn = Model(meta, store, "n")
        mn.record(c.insert("n", rows(range(1, 6), 2.0)), 2.0)
        ma.record(c.insert("a", rows(range(20, 25), 3.0)), 3.0)
    born = n.created_ts
    for ts, suffix, names in ((born, "_at", ["a", "n"]), (born - 1, "_before", ["a"])):
        jobs = restore_database_as_of(meta, store, "default", ts, suffix=suffix)
        assert sorted(j["collection"] for j in jobs) == names, (suffix, jobs)
        drive(meta, store, settings, jobs, "default")
        assert visible_of(meta, store, meta.catalog.get_by_name(f"a{suffix}")) == ma.visible(ts)
        if "n" in names:
            assert visible_of(meta, store, meta.catalog.get_by_name(f"n{suffix}")) == mn.visible(ts)
    before = sorted(c.name for c in meta.catalog.list(include_dropped=True))
    try:
        pitr.restore_as_of(meta, store, "n", "n_early", born - 1)
        raise AssertionError("n restored before it existed")
    except pitr.OutsideWindow as e:
        assert "before collection 'n' existed" in str(e), e
    assert sorted(c.name for c in meta.catalog.list(include_dropped=True)) == before


def test_a_dropper_clock_ahead_within_max_clock_skew_does_not_keep_a_dropped_collection_alive(meta, store,
                                                                                              settings):
    """The other side of the skew: y is dropped by a process whose clock runs 3 s ahead
    (its wall-clock drop start 3 s late). An instant 1.5 s after the drop really began (its
    DropCollections are below it: y was gone) was judged before the drop: y was restored
    with its rows at the drop, labelled as that instant, and a whole database at it had y."""
    import time

    from seglake.lifecycle import drop
    from seglake.lifecycle.pitr.database import restore_database_as_of

    with WalClient(meta, store, settings) as c:
        for n in ("a", "y"):
            c.create_collection(n, SCHEMA, shards=1)
            pitr.set_window(meta, n, "1h")
            c.insert(n, rows(range(1, 11), 1.0))
    y = meta.catalog.get_by_name("y")
    drop.begin_drop(meta, store, settings, "y", clock=lambda: time.time() + 3.0)
    flush_all(meta, store, settings, y, flush_all=False)
    assert drop.finish_drop(meta, "y", collection_id=y.collection_id, clock=lambda: time.time() + 3.0)["state"] \
        == "Dropped"
    time.sleep(1.5)
    ts = meta.tso.now()
    before = sorted(c.name for c in meta.catalog.list(include_dropped=True))
    try:
        pitr.restore_as_of(meta, store, "y", "y_gone", ts)
        raise AssertionError("y restored at an instant after its drop")
    except (pitr.OutsideWindow, NotFoundError) as e:
        print("refused:", e)
    jobs = restore_database_as_of(meta, store, "default", ts, suffix="_db")
    assert sorted(j["collection"] for j in jobs) == ["a"], jobs
    assert sorted(c.name for c in meta.catalog.list(include_dropped=True)) == sorted([*before, "a_db"])



def _undrop_elsewhere(settings, ready, go, out):
    """Another process: takes a timestamp (its TSO batch, kept a minute instead of 50 ms),
    waits, then plans and sets up the undrop of src into back."""
    from seglake.meta import Meta, alloc
    from seglake.storage import open_store

    alloc.BATCH_MAX_AGE = 60.0
    meta, store = Meta.from_settings(settings), open_store(settings)
    try:
        meta.tso.now()
        ready.set()
        go.wait(120)
        out.put(("job", pitr.undrop(meta, store, "src", "back")))
    except Exception as e:   # noqa: BLE001
        out.put(("error", repr(e)))
    finally:
        meta.close()


def test_an_undrop_planned_in_another_process_with_a_batch_reserved_before_the_last_writes(meta, store, settings):
    """The undrop's instant ("now") was the planning process's TSO now(), which serves a
    batch reserved up to BATCH_MAX_AGE (50 ms) earlier: not above timestamps ANOTHER process
    issued since. An undrop planned in a process that took a timestamp just before the last
    writes and the drop landed had an instant below their ticks: the replay stopped there and
    the acknowledged writes were missing, silently. (The child keeps its batch a minute
    instead of 50 ms, so the interleaving is not left to timing.)"""
    import multiprocessing as mp

    from seglake.lifecycle import drop

    from pitr_model import copy_and_replay
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 11), 1.0)), 1.0)
        child = ctx.Process(target=_undrop_elsewhere, args=(settings, ready, go, out))
        child.start()
        try:
            assert ready.wait(120)                   # it took a timestamp ...
            model.record(c.insert("src", rows(range(100, 110), 2.0)), 2.0)     # ... then these were acknowledged
            model.record(c.delete("src", [1, 2]), 2.0)
            drop.begin_drop(meta, store, settings, "src")
            flush_all(meta, store, settings, coll, flush_all=False)
            assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
            go.set()
            kind, res = out.get(timeout=120)
        finally:
            go.set()
            child.join(60)
            if child.is_alive():
                child.kill()
    assert kind == "job", res
    want = model.visible(meta.tso.reserve(1, linearizable=True))
    back = copy_and_replay(meta, store, settings, res, "back")
    got = visible_of(meta, store, back)
    assert got == want, (f"undrop as of {back.properties['restored_from']['as_of']}: missing "
                         f"{sorted((want - got).items())[:4]}, extra {sorted((got - want).items())[:4]}")
