"""Garbage collection against real etcd + real files. Each test is an incident seen in
Milvus, Iceberg, Delta or lakeFS."""

import os
import threading
import time

import pytest

from seglake.dev import demo
from seglake.errors import NotFound, ValidationError
from seglake.lifecycle import gc, snapshot
from seglake.meta.segments import DROPPED
from seglake.storage import layout

from etcd_root import ttl_leases_over

SMALL = demo.SeedParams(partitions=2, segments=2, rows=100, dim=4)
DAY = 86400


def _age(store, key, seconds):
    """Make an object look `seconds` old (local store)."""
    t = time.time() - seconds
    os.utime(os.path.join(store.uri, key), (t, t))


def _all(store):
    """Every object but GC's own reports."""
    return {o.key for o in store.list("") if not o.key.startswith("_gc/")}


def _opts(**kw):
    return gc.GCOptions(**kw)


def _referenced(meta, store):
    return gc.load_references(meta, store).files


@pytest.fixture
def coll(meta, store):
    c, _ = demo.seed(meta, store, SMALL)
    for o in store.list(""):
        _age(store, o.key, 2 * DAY)  # everything real is old: only references protect it
    return c


def test_old_orphans_go_young_orphans_and_referenced_files_stay(meta, store, coll):
    c = coll.collection_id
    old = f"insert_log/{c}/9/9/100/1"
    young = f"insert_log/{c}/9/9/100/2"
    for k in (old, young):
        store.put(k, b"orphan")
    _age(store, old, 2 * DAY)
    before = _all(store)
    result = gc.run(meta, store, _opts())
    after = _all(store)
    assert before - after == {old}
    assert young in after and _referenced(meta, store) <= after
    assert result["sweep"]["deleted"] == 1 and result["mark"]["kept"]["kept_young"] == 1


def test_files_referenced_only_by_a_snapshot_of_a_dropped_collection_survive(meta, store, coll):
    snapshot.create(meta, store, "demo", "keep")
    refs = [s.ref for s in meta.segments.list(coll.collection_id)]
    meta.segments.transition(refs, DROPPED, now=time.time() - 2 * DAY)
    meta.catalog.set_state(coll.collection_id, "Dropping")
    meta.catalog.remove(coll.collection_id)
    meta.kv.delete_prefix(meta.keys.segments_prefix(coll.collection_id))  # records gone, files remain
    for o in store.list(""):
        _age(store, o.key, 2 * DAY)
    before = _all(store)
    gc.run(meta, store, _opts())
    assert _all(store) == before  # the snapshot still references every file


def test_a_snapshot_created_between_mark_and_sweep_protects_its_files(meta, store, coll):
    seg = next(meta.segments.list(coll.collection_id))
    files = {f.key for f in layout.segment_files(seg)}
    m = gc.mark(meta, store, _opts())
    assert m.candidates == []
    # the segment's record disappears (e.g. compaction) after a snapshot captured it...
    snapshot.create(meta, store, "demo", "late")
    meta.kv.delete(meta.segments.key(seg))
    m = gc.mark(meta, store, _opts())
    assert m.candidates == []  # ...the snapshot still holds it
    # a file only the mark saw as orphan, then a snapshot of a new segment using it
    c = coll.collection_id
    ghost = layout.insert_log(c, seg.partition_id, 777, 100, 1)
    store.put(ghost, b"x")
    _age(store, ghost, 2 * DAY)
    m = gc.mark(meta, store, _opts())
    assert [x["path"] for x in m.candidates] == [ghost]
    meta.segments.save([seg.replace(segment_id=777, binlogs={100: (seg.binlogs[100][0].__class__(1, 1, 1),)},
                                    deltalogs=(), statslogs={}, index_files=())])
    s = gc.sweep(meta, store, m.run_id)
    assert s.deleted == 0 and s.rechecked_kept == 1 and store.exists(ghost)
    assert files <= _all(store)


def test_a_flush_in_progress_survives(meta, store, coll):
    c = coll.collection_id
    key = layout.insert_log(c, coll.partitions[0].partition_id, 123456, 100, 7)
    store.put(key, b"being flushed: metadata not committed yet")
    gc.run(meta, store, _opts())
    assert store.exists(key)


def test_files_written_after_listing_started_are_never_deleted(meta, store, coll, monkeypatch):
    c = coll.collection_id
    late = f"insert_log/{c}/1/1/100/99"
    real_list = store.list

    def slow_list(prefix="", **kw):
        for i, o in enumerate(real_list(prefix, **kw)):
            if i == 2:
                store.put(late, b"written during the listing")
                time.sleep(1.2)  # the listing takes longer than the (forced) tolerance
            yield o

    monkeypatch.setattr(store, "list", slow_list)
    gc.run(meta, store, _opts(missing_tolerance=1, force=True))
    monkeypatch.undo()
    assert store.exists(late)


def test_prefix_collisions_special_names_and_symlinks(meta, store, tmp_path):
    one = meta.catalog.create("one", demo.demo_schema(4))
    ten_id = one.collection_id * 10
    ref = f"insert_log/{ten_id}/20/5/100/1"
    store.put(ref, b"r")
    from seglake.meta.segments import FLUSHED, Binlog, Segment
    meta.segments.save([Segment(segment_id=5, collection_id=ten_id, partition_id=20, channel="c", state=FLUSHED,
                                num_rows=1, binlogs={100: (Binlog(1, 1, 1),)})])
    orphan = f"insert_log/{one.collection_id}/2/5/100/1"
    odd = [f"insert_log/{one.collection_id}/2/_x/.hidden", f"_other/{one.collection_id}/f"]
    for k in [orphan, *odd]:
        store.put(k, b"o")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep")
    os.symlink(outside, os.path.join(store.uri, "insert_log", "link"))
    for o in store.list(""):
        _age(store, o.key, 2 * DAY)
    gc.run(meta, store, _opts(collection_id=one.collection_id))
    assert not store.exists(orphan) and store.exists(ref)  # scope 1 never touches 10
    assert all(store.exists(k) for k in odd)  # not seglake's layout: never deleted
    # a symlink inside the store makes files reachable under two keys: the whole-store run
    # refuses before deleting anything (fail closed), naming it
    with pytest.raises(gc.GCError, match="symlink 'insert_log/link'"):
        gc.run(meta, store, _opts())
    assert (outside / "precious").read_bytes() == b"keep" and store.exists(ref)
    os.unlink(os.path.join(store.uri, "insert_log", "link"))
    res = gc.run(meta, store, _opts())
    assert store.exists(ref) and all(store.exists(k) for k in odd)
    assert res["mark"]["unrecognised"]["files"] == 2 and set(res["mark"]["unrecognised"]["sample"]) == set(odd)
    assert (outside / "precious").read_bytes() == b"keep"


def test_fail_closed_on_an_unreadable_manifest(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "s")
    orphan = f"insert_log/{coll.collection_id}/9/9/100/1"
    store.put(orphan, b"o")
    _age(store, orphan, 2 * DAY)
    key = snapshot.read_metadata(store, rec)["manifests"][0]["key"]
    store.put(key, store.get(key)[:20])
    with pytest.raises(gc.GCError, match="unreadable"):
        gc.run(meta, store, _opts())
    assert store.exists(orphan)


def test_fail_closed_when_etcd_stops_mid_run(tmp_path):
    from seglake.config import Settings
    from seglake.dev.devstack import EtcdServer
    from seglake.meta import Meta
    from seglake.storage import open_store

    server = EtcdServer(state_dir=tmp_path / "etcd").start()
    try:
        s = Settings.from_dict({"etcd_endpoint": server.endpoint, "store_uri": str(tmp_path / "store"),
                                "etcd_retries": 1, "etcd_timeout": 1})
        meta, store = Meta.from_settings(s), open_store(s)
        c, _ = demo.seed(meta, store, SMALL)
        for i in range(3):
            store.put(f"insert_log/{c.collection_id}/9/9/100/{i}", b"o")
        for o in store.list(""):
            _age(store, o.key, 2 * DAY)
        m = gc.mark(meta, store, _opts())
        assert len(m.candidates) == 3
        server.stop()
        before = _all(store)
        with pytest.raises(gc.GCError, match="refreshed"):
            gc.sweep(meta, store, m.run_id, refs=gc.References())
        with pytest.raises(gc.GCError, match="completely"):
            gc.run(meta, store, _opts())
        assert _all(store) == before
    finally:
        server.stop()


def test_two_concurrent_runs_converge_without_errors(meta, store, coll):
    c = coll.collection_id
    for i in range(50):
        store.put(f"insert_log/{c}/9/{i}/100/1", b"o")
    for o in store.list(""):
        _age(store, o.key, 2 * DAY)
    refs = _referenced(meta, store)
    results, errors = [], []

    def go():
        try:
            results.append(gc.run(meta, store, _opts()))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and all(not r["sweep"]["errors"] for r in results)
    assert _all(store) == refs


def test_dry_run_marks_the_same_candidates_and_deletes_nothing(meta, store, coll):
    for i in range(5):
        store.put(f"insert_log/{coll.collection_id}/9/{i}/100/1", b"o")
        _age(store, f"insert_log/{coll.collection_id}/9/{i}/100/1", 2 * DAY)
    before = _all(store)
    dry = gc.run(meta, store, _opts(dry_run=True))
    assert _all(store) == before
    dry_set = {c["path"] for c in gc.read_report(store, dry["mark"]["run_id"])}
    real = gc.run(meta, store, _opts())
    assert {c["path"] for c in gc.read_report(store, real["mark"]["run_id"])} == dry_set
    assert len(dry_set) == 5 and not (dry_set & _all(store))
    assert gc.latest_summary(store)["swept"]["deleted"] == 5


def test_dropped_segments_wait_for_the_tolerance_and_snapshots(meta, store, coll):
    segs = sorted(meta.segments.list(coll.collection_id), key=lambda s: s.segment_id)
    snapshot.create(meta, store, "demo", "holds_first")  # references every current segment
    meta.segments.transition([s.ref for s in segs], DROPPED, now=time.time() - 3600)
    assert gc.run(meta, store, _opts())["dropped"]["segments"] == 0  # < 3 h: kept
    res = gc.run(meta, store, _opts(drop_tolerance=600, force=True))
    assert res["dropped"]["segments"] == 0 and res["dropped"]["kept_referenced_or_skipped"] == 4
    snapshot.drop(meta, store, "demo", "holds_first")
    res = gc.run(meta, store, _opts(drop_tolerance=600, force=True))
    assert res["dropped"]["segments"] == 4
    assert list(meta.segments.list(coll.collection_id)) == []
    assert not any(store.exists(f.key) for s in segs for f in layout.segment_files(s))


def test_tolerance_below_the_floor_is_refused_before_any_listing(meta, store, coll, monkeypatch):
    monkeypatch.setattr(store, "list", lambda *a, **k: pytest.fail("listed before refusing"))
    for kw in ({"missing_tolerance": 60}, {"drop_tolerance": 0}, {"missing_tolerance": -1, "force": True}):
        with pytest.raises(ValidationError, match="tolerance"):
            gc.run(meta, store, _opts(**kw))


def test_pause_skips_and_reports_then_resume(meta, store, coll):
    orphan = f"insert_log/{coll.collection_id}/9/9/100/1"
    store.put(orphan, b"o")
    _age(store, orphan, 2 * DAY)
    gc.pause(meta, coll.collection_id, ttl=60)
    res = gc.run(meta, store, _opts())
    assert store.exists(orphan) and res["mark"]["kept"]["skipped_paused"] == 1
    gc.resume(meta, coll.collection_id)
    gc.pause(meta, None, ttl=60)
    gc.run(meta, store, _opts())
    assert store.exists(orphan)
    gc.resume(meta)
    gc.run(meta, store, _opts())
    assert not store.exists(orphan)


def test_a_pending_snapshot_blocks_its_collection_and_stale_records_are_cleaned(meta, store, coll):
    orphan = f"insert_log/{coll.collection_id}/9/9/100/1"
    store.put(orphan, b"o")
    _age(store, orphan, 2 * DAY)
    rec = snapshot.begin(meta, "demo", "stuck", now=time.time() - 3600)
    snapshot.write_manifest(store, rec, meta.ids.allocate(), 0, list(meta.segments.list(coll.collection_id)))
    res = gc.run(meta, store, _opts())
    assert store.exists(orphan) and res["mark"]["kept"]["skipped_pending_snapshot"] >= 1
    assert res["records"]["stale_pending_snapshots"] == 1
    assert meta.snapshots.find(coll.collection_id, "stuck") is None
    assert list(store.list("snapshots")) == []
    gc.run(meta, store, _opts())
    assert not store.exists(orphan)


def test_expired_snapshots_and_copy_jobs_are_removed(meta, store, coll):
    from seglake.lifecycle import copyjob, restore

    snapshot.create(meta, store, "demo", "short", ttl=0.01)
    snapshot.create(meta, store, "demo", "forever")
    job = restore.restore(meta, store, "demo", "forever", "copy")
    copyjob.plan(meta, job, 5)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    ttl_leases_over(meta)     # a TTL ends by the clock and by etcd's lease of it
    res = gc.clean_records(meta, store, _opts(copy_job_retention=0.01))
    assert res["expired_snapshots"] == 1 and res["copy_jobs_removed"] == 1
    assert [r.name for r in meta.snapshots.list()] == ["forever"]


def test_mark_and_sweep_on_s3(meta, s3_store):
    c, _ = demo.seed(meta, s3_store, SMALL)
    orphans = [f"insert_log/{c.collection_id}/9/{i}/100/1" for i in range(2100)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: s3_store.client.put_object(Bucket=s3_store.bucket, Key=s3_store._full(k), Body=b"o"),
                      orphans))
    time.sleep(1.1)
    refs = _referenced(meta, s3_store)
    res = gc.run(meta, s3_store, _opts(missing_tolerance=1, force=True))
    assert res["sweep"]["deleted"] == 2100 and res["sweep"]["errors"] == []
    assert {o.key for o in s3_store.list("") if not o.key.startswith("_gc/")} == refs


def test_cli_gc_report_pause_resume(meta, store, coll, settings, monkeypatch, capsys):
    import json

    from seglake import cli

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    orphan = f"insert_log/{coll.collection_id}/9/9/100/1"
    store.put(orphan, b"o" * 10)
    _age(store, orphan, 2 * DAY)
    assert cli.main(["gc", "report"]) == 2 and "no gc run" in capsys.readouterr().err
    assert cli.main(["gc", "pause", "--collection", "demo", "--ttl-hours", "1"]) == 0
    assert gc.paused_scopes(meta) == (False, {coll.collection_id})
    assert cli.main(["gc", "resume", "--collection", "demo"]) == 0
    gc.run(meta, store, _opts(dry_run=True))
    capsys.readouterr()
    assert cli.main(["gc", "report", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["candidates"] == 1 and doc["dry_run"] is True
    assert cli.main(["gc", "report"]) == 0
    assert "orphan" in capsys.readouterr().out


def _big_store(meta, store):
    """Three collections, many orphans spread over enough prefixes that the listing is cut
    into units (split_at below), plus unrecognised keys and the WAL directory."""
    colls = [demo.seed(meta, store, demo.SeedParams(name=f"g{i}", partitions=2, segments=3, rows=50, dim=4))[0]
             for i in range(3)]
    for c in colls:
        for p in range(12):
            for n in range(20):
                store.put(f"insert_log/{c.collection_id}/{p + 100}/{n + 500}/100/1", b"o")
    store.put("stray/file.txt", b"x")
    store.put("insert_log/not-a-number/1", b"x")
    for o in store.list(""):
        _age(store, o.key, 2 * DAY)
    return colls


def test_the_parallel_inline_listing_marks_exactly_what_the_serial_one_marks(meta, store, monkeypatch):
    """The inline mark lists the store cut into units as the Spark mark cuts it, with
    gc_list_threads threads: same candidates, same counts, same report as one thread."""
    from seglake.lifecycle.gc import listing

    _big_store(meta, store)
    monkeypatch.setattr(listing, "SPLIT_AT", 50)   # cut even this small store into many units
    serial = gc.mark(meta, store, _opts(dry_run=True, list_threads=1), run_id="serial")
    par = gc.mark(meta, store, _opts(dry_run=True, list_threads=4), run_id="par")
    assert serial.counts.candidates == 3 * 12 * 20 and serial.counts.unrecognised.files == 2
    s, p = serial.summary(), par.summary()
    # (refs_revision: the etcd revision each read its references at -- another writer of the
    # worker's etcd between the two marks moves it, seen once on a loaded make test)
    for k in ("run_id", "started_at", "cutoff", "report", "report_parts", "refs_revision"):
        s.pop(k), p.pop(k)
    for d in (s, p):   # (the second mark also lists the first one's report under _gc/)
        d["listed"] -= d.pop("internal")
    assert s == p
    assert [c["path"] for c in serial.candidates] == [c["path"] for c in par.candidates]
    assert gc.read_report(store, "serial") == gc.read_report(store, "par")
    units = []
    real = listing.list_unit
    monkeypatch.setattr(listing, "list_unit", lambda st, u: units.append(u) or real(st, u))
    gc.mark(meta, store, _opts(dry_run=True, list_threads=4), run_id="units")
    assert len(units) > 10 and any(start is not None for _, start in units)   # really cut


def test_a_unit_that_cannot_be_listed_fails_the_whole_mark(meta, store, monkeypatch):
    """Fail closed: one failing listing unit among many fails the mark before any report."""
    from seglake.lifecycle.gc import listing

    _big_store(meta, store)
    monkeypatch.setattr(listing, "SPLIT_AT", 50)
    real = listing.list_unit
    calls = []

    def flaky(st, unit):
        calls.append(unit)
        if len(calls) == 5:
            raise OSError("listing failed")
        return real(st, unit)
    monkeypatch.setattr(listing, "list_unit", flaky)
    with pytest.raises(OSError, match="listing failed"):
        gc.mark(meta, store, _opts(list_threads=4), run_id="broken")
    assert not [o.key for o in store.list("_gc/") if "broken" in o.key]   # no report, no summary
    with pytest.raises(NotFound):
        gc.latest_summary(store)
