"""Adversarial tests of the WAL archive and the restore to a time from the backup target
alone (attack-archive). Each compares the restored rows with a model of the acknowledged
operations (the pks acknowledged at or before the instant). A failing test here is a
reproduced defect (see /work/reports/attack-archive.md)."""

from __future__ import annotations

import json
import time

import pytest

from seglake.lifecycle import copyjob, pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.pitr import from_target
from seglake.lifecycle.pitr.planning import LogGap, OutsideWindow
from seglake.meta import Meta
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.message import MessageId

from pitr_model import export_and_archive, flush_all, restore_from_target

quiet = dict(say=lambda line: None)
SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4}]


def _pks(meta, store, name):
    return sorted(visible_rows(meta, store, meta.catalog.get_by_name(name).collection_id).column("pk").to_pylist())


def _restore(meta, store, settings, target, name, as_of, src="src", **kw):
    restore_from_target(meta, store, settings, target, src, name, as_of, **kw)
    return _pks(meta, store, name)


def _frag_of(res):
    """{pchannel: fragment numbers} holding an acknowledged call's messages."""
    out = {}
    for p, (first, last) in res.positions.items():
        out[p] = sorted({MessageId.parse(first).fragment, MessageId.parse(last).fragment})
    return out


def _produce(meta, store, settings, target, name="src"):
    """base rows 1..30 in a snapshot exported to the target; then two acknowledged inserts
    after it (100..119, 200..219); model: {instant: pks acknowledged at or before}."""
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(name, SCHEMA, shards=1)
        c.insert(name, synthetic_rows(coll, 30, 1))
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, name, "s1")
        exports.export(meta, store, target, name, "s1", **quiet)
        time.sleep(0.01)
        ra = c.insert(name, synthetic_rows(coll, 20, 100))
        time.sleep(0.01)
        t1 = meta.tso.now()
        time.sleep(0.01)
        rb = c.insert(name, synthetic_rows(coll, 20, 200))
        time.sleep(0.01)
        t2 = meta.tso.now()
        time.sleep(0.01)
        c.insert(name, synthetic_rows(coll, 10, 300))     # a later write: an archive run covers t2
    model = {t1: list(range(1, 31)) + list(range(100, 120)),
             t2: list(range(1, 31)) + list(range(100, 120)) + list(range(200, 220))}
    return coll, ra, rb, t1, t2, model


def test_attack_archive_an_edited_tt0_in_an_entry_is_accepted_and_rows_vanish(meta, store, settings, tmp_path):
    """An archived entry's tt0 (the base of every tick of its fragment) is outside the
    SHA-256 the entry carries: a damaged/forged tt0 is accepted and the restore moves the
    fragment's rows past the instant -- acknowledged rows silently missing."""
    target = LocalStore(tmp_path / "backup")
    coll, ra, rb, t1, t2, model = _produce(meta, store, settings, target)
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    site = archive.run(meta, store, target)["site"]
    ((p, fa),) = _frag_of(ra).items()
    ((_, fb),) = _frag_of(rb).items()
    assert fa[-1] < fb[0]
    n = fa[0]
    key = layout.archive_entry(site, p, n)
    d = json.loads(target.get(key))
    nxt = json.loads(target.get(layout.archive_entry(site, p, fb[0])))["tt0"]
    assert d["tt0"] < t1 < nxt
    d["tt0"] = t1 + 1            # still below the next fragment's ticks: the log order holds
    target.put(key, json.dumps(d, sort_keys=True).encode())
    try:
        got = _restore(meta, store, settings, target, "r1", t1)
    except Exception as e:      # refusing the edited entry is the right outcome
        assert "damaged" in str(e) or "entry" in str(e), e
        return
    assert got == model[t1], f"missing acknowledged rows: {sorted(set(model[t1]) - set(got))[:5]}..."


@pytest.mark.parametrize("field,value", [("term", 0), ("term", 99), ("producer", "forged"), ("records", 1),
                                         ("span", 1), ("calls", [])])
def test_attack_archive_other_unchecked_entry_fields(meta, store, settings, tmp_path, field, value):
    """The same for the entry's other fields outside its SHA-256: the restore either
    refuses the entry or equals the model."""
    target = LocalStore(tmp_path / "backup")
    coll, ra, rb, t1, t2, model = _produce(meta, store, settings, target)
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    site = archive.run(meta, store, target)["site"]
    ((p, fa),) = _frag_of(ra).items()
    key = layout.archive_entry(site, p, fa[0])
    d = json.loads(target.get(key))
    if d.get(field) == value:
        pytest.skip(f"{field} is already {value!r}")
    d[field] = value
    target.put(key, json.dumps(d, sort_keys=True).encode())
    try:
        got = _restore(meta, store, settings, target, "r1", t2)
    except Exception as e:
        print("REFUSED", type(e).__name__, e)
        return
    assert got == model[t2], (f"{field}={value!r}: missing {sorted(set(model[t2]) - set(got))[:5]}, "
                              f"extra {sorted(set(got) - set(model[t2]))[:5]}")


def test_attack_archive_a_forged_covered_json_gives_silently_fewer_rows(meta, store, settings, tmp_path):
    """COVERED.json carries no checksum: a damaged checked_ts (a digit changed) makes an
    instant past the archive's real coverage restorable, with the rows after the real
    coverage silently missing."""
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", synthetic_rows(coll, 30, 1))
        export_and_archive(meta, store, settings, target, coll)
        site = archive.run(meta, store, target)["site"]
        c.insert("src", synthetic_rows(coll, 20, 100))        # acknowledged, not archived yet
    t = meta.tso.now()
    (p,) = archive.archived_pchannels(meta)
    key = layout.archive_coverage(site, p)
    d = json.loads(target.get(key))
    d["checked_ts"] = t + (120_000 << 18)        # one damaged field
    target.put(key, json.dumps(d, sort_keys=True).encode())
    try:
        got = _restore(meta, store, settings, target, "r1", t)
    except (LogGap, OutsideWindow, archive.ArchiveError) as e:
        assert "recovery point" in str(e) or "damaged" in str(e)
        return
    assert got == list(range(1, 31)) + list(range(100, 120)), "restore past the archive's coverage lost rows"


def test_attack_archive_two_seglakes_same_collection_name_one_target(meta, store, settings, tmp_path):
    """Two seglakes (two etcd roots, two sites) back up a collection called `src` into one
    target. A restore from the target of `src` as of an instant of seglake A may start from
    seglake B's bundle (chosen by consistent_ts across both) and replay B's archive: the
    rows of another store, silently."""
    import uuid
    target = LocalStore(tmp_path / "backup")
    s2 = settings.replace(etcd_root=f"b{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "b_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    try:
        with WalClient(meta, store, settings) as c:
            coll = c.create_collection("src", SCHEMA, shards=1)
            c.insert("src", synthetic_rows(coll, 30, 1))
            flush_all(meta, store, settings, coll)
            snapshot.create(meta, store, "src", "a1")
            exports.export(meta, store, target, "src", "a1", **quiet)
        retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
        archive.run(meta, store, target)
        with WalClient(meta2, store2, s2) as c:
            coll2 = c.create_collection("src", SCHEMA, shards=1)
            c.insert("src", synthetic_rows(coll2, 5, 5000))
            flush_all(meta2, store2, s2, coll2)
            snapshot.create(meta2, store2, "src", "b1")
            exports.export(meta2, store2, target, "src", "b1", **quiet)
        retention.set_policy(meta2, "src", {"keep_last": 1, "archive": True})
        archive.run(meta2, store2, target)
        time.sleep(0.01)
        t = meta.tso.now()          # seglake A's src at t: pks 1..30
        time.sleep(0.01)
        with WalClient(meta, store, settings) as c:   # a later write: A's archive covers t
            c.insert("src", synthetic_rows(coll, 1, 999))
        with WalClient(meta2, store2, s2) as c:         # and a later write in B (B's archive covers t too)
            c.insert("src", synthetic_rows(coll2, 1, 6000))
        archive.run(meta, store, target)
        archive.run(meta2, store2, target)
        try:
            got = _restore(meta, store, settings, target, "r1", t)
        except (LogGap, OutsideWindow) as e:   # refusing the ambiguity is fine
            assert "b1" in str(e) or "site" in str(e) or "ambiguous" in str(e), e
            return
        assert got == list(range(1, 31)), f"restored another seglake's rows: {got[:5]}..."
    finally:
        meta2.close()


def test_attack_archive_a_dropped_collection_restored_from_the_target(meta, store, settings, tmp_path):
    """Acknowledged writes after the bundle, then the collection is dropped (the archive
    ran after the drop; the Dropped record and its policy still there). A restore from the
    target as of before the drop equals the model; as of after the drop it is refused or
    gives the rows at the drop, never a part of them."""
    from seglake.lifecycle.drop import drop_collection
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", synthetic_rows(coll, 30, 1))
        export_and_archive(meta, store, settings, target, coll)
        c.insert("src", synthetic_rows(coll, 10, 100))
        c.delete("src", [1, 2])
        time.sleep(0.01)
        t = meta.tso.now()
        time.sleep(0.01)
    drop_collection(meta, store, settings, "src")
    flush_all(meta, store, settings, coll)
    drop_collection(meta, store, settings, "src")
    with WalClient(meta, store, settings) as c:                # a later write on the same pchannel
        o = c.create_collection("other", SCHEMA, shards=16)
        c.insert("other", synthetic_rows(o, 64, 5000))
    time.sleep(0.01)
    after_drop = meta.tso.now()
    time.sleep(0.01)
    with WalClient(meta, store, settings) as c:
        c.insert("other", synthetic_rows(o, 64, 9000))
    archive.run(meta, store, target)
    got = _restore(meta, store, settings, target, "r1", t)
    assert got == list(range(3, 31)) + list(range(100, 110))
    try:
        got2 = _restore(meta, store, settings, target, "r2", after_drop)
    except Exception as e:
        print("REFUSED after drop:", type(e).__name__, str(e)[:300])
        return
    print("AFTER DROP rows:", len(got2))
    assert got2 in ([], list(range(3, 31)) + list(range(100, 110))), got2[:10]


def _tamper_entry(field, value):
    def f(target, site, p, n, ns):
        key = layout.archive_entry(site, p, n)
        d = json.loads(target.get(key))
        d[field] = value(d) if callable(value) else value
        target.put(key, json.dumps(d, sort_keys=True).encode())
    return f


def _swap_frag(target, site, p, n, ns):
    """the .frag of n replaced by another valid fragment of the same log (n + 1's)"""
    target.put(layout.archive_fragment(site, p, n), target.get(layout.archive_fragment(site, p, n + 1)))


def _swap_both(target, site, p, n, ns):
    """.frag AND .json of n replaced by n + 1's (a renamed pair)"""
    target.put(layout.archive_fragment(site, p, n), target.get(layout.archive_fragment(site, p, n + 1)))
    target.put(layout.archive_entry(site, p, n), target.get(layout.archive_entry(site, p, n + 1)))


def _covered_beyond(target, site, p, n, ns):
    key = layout.archive_coverage(site, p)
    d = json.loads(target.get(key))
    d["n"] = ns[-1] + 5
    d["last_tt"] = d["last_tt"] + (600_000 << 18)
    target.put(key, json.dumps(d, sort_keys=True).encode())


def _drop_middle(target, site, p, n, ns):
    (target.root / layout.archive_entry(site, p, n)).unlink()


def _truncate_frag(target, site, p, n, ns):
    target.put(layout.archive_fragment(site, p, n), target.get(layout.archive_fragment(site, p, n))[:-3])


@pytest.mark.parametrize("tamper", [_tamper_entry("n", lambda d: d["n"] + 1), _tamper_entry("site", "0" * 32),
                                    _tamper_entry("pchannel", "seglake-dml_9"),
                                    _tamper_entry("sha256", lambda d: "0" * 64), _tamper_entry("version", 7),
                                    _tamper_entry("size", lambda d: d["size"] + 1), _swap_frag, _swap_both,
                                    _covered_beyond, _drop_middle, _truncate_frag],
                         ids=["n", "site", "pchannel", "sha", "version", "size", "swap_frag", "swap_both",
                              "covered_beyond", "drop_middle", "truncate_frag"])
def test_attack_archive_tampering_is_refused_or_harmless(meta, store, settings, tmp_path, tamper):
    """Held: each tampering is refused (before anything is created, or loudly by the replay)
    or the restore equals the model."""
    target = LocalStore(tmp_path / "backup")
    coll, ra, rb, t1, t2, model = _produce(meta, store, settings, target)
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    site = archive.run(meta, store, target)["site"]
    ((p, fa),) = _frag_of(ra).items()
    ns = archive.ArchivedLog(target, site, p).numbers()
    tamper(target, site, p, fa[0], ns)
    try:
        got = _restore(meta, store, settings, target, "r1", t2)
    except Exception as e:
        print("REFUSED", type(e).__name__, str(e)[:160])
        return
    assert got == model[t2]


@pytest.mark.parametrize("as_of", [float("nan"), "nan", "2026-11-27T12:00:00", "1970-01-01T00:00:01Z",
                                   "3000-01-01T00:00:00Z", "2999-12-31T23:30:00-01:00", "2026-11-27T12:00:61Z",
                                   "2026-11-27T24:00:00Z", -1, 0, 2**63, True, "", " 1 ", "+1", "1e18",
                                   "2026-11-27T12:00:00.1234567890Z", "２０２６-11-27T12:00:00Z"])
def test_attack_archive_bad_as_of_refused_before_anything(meta, store, settings, tmp_path, as_of):
    from seglake.errors import SeglakeError
    target = LocalStore(tmp_path / "backup")
    _produce(meta, store, settings, target)
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    archive.run(meta, store, target)
    before = sorted(x.name for x in meta.catalog.list(include_dropped=True))
    with pytest.raises(SeglakeError) as ei:
        from_target.restore_as_of_from_target(meta, store, target, "src", "r1", as_of)
    print("REFUSED", type(ei.value).__name__, str(ei.value)[:120])
    assert sorted(x.name for x in meta.catalog.list(include_dropped=True)) == before


@pytest.mark.parametrize("bundle", ["../s1", "s1/", "S1 ", "", "a" * 300, "s1\n", "nope"])
def test_attack_archive_bad_bundle_names_refused(meta, store, settings, tmp_path, bundle):
    from seglake.errors import SeglakeError
    target = LocalStore(tmp_path / "backup")
    _, _, _, t1, t2, _ = _produce(meta, store, settings, target)
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    archive.run(meta, store, target)
    with pytest.raises(SeglakeError) as ei:
        from_target.restore_as_of_from_target(meta, store, target, "src", "r1", t2, bundle=bundle)
    print("REFUSED", type(ei.value).__name__, str(ei.value)[:120])
    assert not [x for x in meta.catalog.list(include_dropped=True) if x.name == "r1"]


def test_attack_archive_archive_off_and_on_again_leaves_no_gap_and_restores(meta, store, settings, tmp_path):
    """The archive is turned off for a while (GC truncates meanwhile: a documented gap),
    then on again; a NEW bundle is exported after that and the archive holds the whole log
    from the new bundle on. A restore as of an instant after the new bundle must work;
    ArchivedLog.covered() returns 0 for ANY hole below COVERED.json's n, so every restore
    of that pchannel is refused from then on ("no recorded point")."""
    from seglake.lifecycle import gc
    from test_attack_archive_gc_helpers import age_all
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", synthetic_rows(coll, 30, 1))
        retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
        archive.run(meta, store, target)
        retention.set_policy(meta, "src", {"keep_last": 1, "archive": False})     # off for a while
        for i in range(3):
            c.insert("src", synthetic_rows(coll, 10, 100 + 10 * i))
    flush_all(meta, store, settings, coll)
    age_all(store)
    gc.run(meta, store, gc.GCOptions(missing_tolerance=3600, drop_tolerance=3600))
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})         # on again
    (p,) = archive.archived_pchannels(meta)
    from seglake.wal.log import WalLog
    # (was: GC truncated the fragments written while off -- a gap; now the cursor keeps them
    # until the archiver has shipped them, so no gap forms)
    assert WalLog(meta, store, p).state().first <= archive.read_cursor(meta, p).shipped + 1
    archive.run(meta, store, target)
    with WalClient(meta, store, settings) as c:
        snapshot.create(meta, store, "src", "s2")
        exports.export(meta, store, target, "src", "s2", **quiet)
        c.insert("src", synthetic_rows(coll, 10, 500))
        time.sleep(0.01)
        t = meta.tso.now()
        time.sleep(0.01)
        c.insert("src", synthetic_rows(coll, 1, 999))
    archive.run(meta, store, target)
    got = _restore(meta, store, settings, target, "r1", t)
    assert got == list(range(1, 31)) + list(range(100, 130)) + list(range(500, 510))


@pytest.mark.parametrize("flushed", [False, True])
def test_attack_archive_bundle_of_an_unflushed_or_half_flushed_collection(meta, store, settings, tmp_path, flushed):
    """Rows only in the WAL when the snapshot is taken (no checkpoint: the replay starts at
    fragment 1), or half flushed (flush_all=False), with deletes and an upsert crossing the
    bundle: every acknowledged row exactly once (no duplicate, no loss)."""
    from pitr_model import Model, rows, visible_of, SCHEMA as MSCHEMA
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", MSCHEMA, shards=2)
        retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 100), 1.0)), 1.0)
        if flushed:
            flush_all(meta, store, settings, coll, flush_all=False)
        model.record(c.insert("src", rows(range(100, 150), 2.0)), 2.0)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, target, "src", "s1", **quiet)
        model.record(c.delete("src", list(range(1, 10)) + list(range(100, 105))), 3.0)
        model.record(c.upsert("src", rows(range(20, 30), 4.0)), 4.0)
        model.record(c.insert("src", rows(range(200, 260), 5.0)), 5.0)
        time.sleep(0.01)
        t = meta.tso.now()
        time.sleep(0.01)
        model.record(c.insert("src", rows(range(900, 940), 6.0)), 6.0)   # both shards
    archive.run(meta, store, target)
    job = from_target.restore_as_of_from_target(meta, store, target, "src", "r1", t)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    tid = meta.catalog.get_by_name("r1").collection_id
    pitr.replay(meta, store, settings, tid)
    got, want = visible_of(meta, store, meta.catalog.get(tid)), model.visible(t)
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])


def test_attack_archive_a_commit_stalled_across_the_archives_seal_takes_a_later_tick(meta, store, settings, tmp_path,
                                                                                       monkeypatch):
    """covered() trusts that a fragment's tick is taken at most COMMIT_SLACK (60 s) before
    its commit lands. Nothing enforces it: the writer checks MAX_COMMIT_DELAY BEFORE it
    reserves the tick (writer._commit), then builds and sends the txn. A producer stalled
    61 s between the reserve and the txn (a GC pause, SIGSTOP, a VM freeze) commits with a
    tick the archive already declared covered: a restore from the target as of an instant
    after that tick silently lacks the acknowledged write. (Takes ~65 s of real time: the
    constant is not changed.)"""
    import threading
    from seglake.meta import alloc

    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", synthetic_rows(coll, 30, 1))
        export_and_archive(meta, store, settings, target, coll)
        site = archive.run(meta, store, target)["site"]
        real, reserved, go, ticks = alloc.TSO.reserve, threading.Event(), threading.Event(), []

        def stalled_reserve(self, count, above=0, *, linearizable=False):
            t = real(self, count, above, linearizable=linearizable)
            if threading.current_thread() is not threading.main_thread() and not reserved.is_set():
                ticks.append(t)
                reserved.set()
                go.wait(300)                  # the stall between the reserve and the txn
            return t
        monkeypatch.setattr(alloc.TSO, "reserve", stalled_reserve)
        done, errs = [], []

        def call():
            try:
                done.append(c.insert("src", synthetic_rows(coll, 10, 100)))
            except Exception as e:     # AppendIncomplete: the call's own 60 s wait ran out
                errs.append(e)
        th = threading.Thread(target=call)
        th.start()
        assert reserved.wait(60)
        time.sleep(3.0)
        archive.run(meta, store, target)           # nothing newer in the log: coverage = look - slack
        (p,) = archive.archived_pchannels(meta)
        covered = archive.ArchivedLog(target, site, p).covered()
        go.set()
        th.join(60)
        monkeypatch.setattr(alloc.TSO, "reserve", real)
        if not done:      # retried as the client's doc says: same seq, same rows -> acknowledged
            from seglake.wal.client import AppendIncomplete
            assert errs and isinstance(errs[0], AppendIncomplete), errs
            for _ in range(50):
                try:
                    done.append(c.insert("src", synthetic_rows(coll, 10, 100), seq=errs[0].result.seq))
                    break
                except AppendIncomplete:
                    time.sleep(0.2)
    assert done, "the insert was not acknowledged"
    from seglake.wal.log import WalLog
    first = MessageId.parse(done[0].positions[p][0])
    acked_tick = next(m.time_tick for m in WalLog(meta, store, p).messages(first) if m.id == first)
    # the archive sealed the log at `covered`: the stalled commit failed its compare and took
    # a tick above the seal, so the restore as of `covered` rightly lacks it ...
    assert acked_tick > covered >= ticks[0], (acked_tick, covered, ticks)
    got = _restore(meta, store, settings, target, "r1", covered)
    assert got == list(range(1, 31))
    # ... and once archived, a restore as of its tick has it
    archive.run(meta, store, target)
    got = _restore(meta, store, settings, target, "r2", acked_tick)
    assert got == list(range(1, 31)) + list(range(100, 110))


def test_attack_archive_a_cloned_etcd_root_gets_its_own_site(meta, store, settings, tmp_path):
    """A copy of a seglake (its etcd root's keys copied under another root, its store
    copied: a staging copy made from a backup of etcd + the store) keeps `{root}/site`, so
    both archive into archive/{site}/ of one target. Their logs diverge after the copy;
    whichever ships fragment k+1 first owns it; the other's archiver is refused (loud),
    but a restore from the target of the OTHER one's collection replays the winner's
    fragments -- the rows of another store, silently, and its own acknowledged rows lost."""
    import shutil
    import uuid
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", synthetic_rows(coll, 30, 1))
        export_and_archive(meta, store, settings, target, coll)
    archive.run(meta, store, target)
    # the copy
    s2 = settings.replace(etcd_root=f"cl{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "clone_store"))
    shutil.copytree(store.root, tmp_path / "clone_store")
    meta2 = Meta.from_settings(s2)
    try:
        for kv in meta.kv.range(meta.keys.prefix):
            meta2.kv.put(meta2.keys.prefix + kv.key[len(meta.keys.prefix):], kv.value)
        store2 = open_store(s2)
        # (was: the copy kept the site id; now a site is bound to its etcd cluster and root)
        assert archive.site_id(meta2) != archive.site_id(meta)
        with WalClient(meta2, store2, s2) as c:         # the copy writes first and archives first
            c.insert("src", synthetic_rows(meta2.catalog.get_by_name("src"), 10, 7000))
        with WalClient(meta, store, settings) as c:     # the original: acknowledged rows 100..109
            c.insert("src", synthetic_rows(coll, 10, 100))
            time.sleep(0.01)
            t = meta.tso.now()
            time.sleep(0.01)
        with WalClient(meta2, store2, s2) as c:
            c.insert("src", synthetic_rows(meta2.catalog.get_by_name("src"), 1, 7999))
        archive.run(meta2, store2, target)
        refused = None
        archive.run(meta, store, target)      # the original archives into its own site: not refused
        got = _restore(meta, store, settings, target, "r1", t, bundle="s1")
        assert got == list(range(1, 31)) + list(range(100, 110)), \
            f"restore of the original from the target: {got[30:40]}... (archiver refused: {refused})"
    finally:
        meta2.close()


def test_attack_archive_the_same_restore_run_twice_never_duplicates(meta, store, settings, tmp_path):
    """Held check: the whole restore from the target re-run (same name, same instant) after
    it finished, and the replay alone re-run: rows equal the model, none twice."""
    from collections import Counter
    target = LocalStore(tmp_path / "backup")
    coll, ra, rb, t1, t2, model = _produce(meta, store, settings, target)
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    archive.run(meta, store, target)
    assert _restore(meta, store, settings, target, "r1", t2) == model[t2]
    try:
        _restore(meta, store, settings, target, "r1", t2)
    except Exception as e:
        print("REFUSED", type(e).__name__, str(e)[:200])
    tid = meta.catalog.get_by_name("r1").collection_id
    try:
        pitr.replay(meta, store, settings, tid)
    except Exception as e:
        print("REPLAY REFUSED", type(e).__name__, str(e)[:200])
    pks = visible_rows(meta, store, tid).column("pk").to_pylist()
    assert sorted(pks) == model[t2] and not [k for k, n in Counter(pks).items() if n > 1]
