"""Snapshot hardening against real etcd + real files (issue 8): GC's stale-PENDING claim
against live and racing writers (4), checksummed manifests and metadata failing closed
(5), capture across processes (9), racing write attempts (13), snapshots of a dropped
collection (14)."""

import io
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from seglake import faults, manifest
from seglake.dev import demo
from seglake.errors import Conflict, NotFound, StateError
from seglake.lifecycle import copyjob, gc, restore, snapshot
from seglake.lifecycle.snapshot import alive as snapalive
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.meta.segments import DROPPED
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=3, rows=200, dim=8)
HOUR = 3600.0


@pytest.fixture
def coll(meta, store):
    return demo.seed(meta, store, SMALL)[0]


def _opts(**kw):
    return gc.GCOptions(missing_tolerance=7200, drop_tolerance=7200, **kw)


def _blocking_point(monkeypatch, name):
    """Make faults.point(name) block the thread that reaches it until released."""
    reached, release = threading.Event(), threading.Event()
    real = faults.point

    def point(n):
        if n == name:
            reached.set()
            assert release.wait(60), "never released"
        return real(n)
    monkeypatch.setattr(faults, "point", point)
    return reached, release


def _in_thread(fn, *args, **kwargs):
    out = {}

    def go():
        try:
            out["result"] = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e
    t = threading.Thread(target=go)
    t.start()
    return t, out


# -- item 4: the stale-PENDING claim ---------------------------------------------------------
def test_a_pending_create_whose_writer_beats_is_never_reclaimed_however_old(meta, store, coll, monkeypatch):
    monkeypatch.setattr(snapalive, "HEARTBEAT_INTERVAL", 0.1)
    rec = snapshot.begin(meta, "demo", "slow", now=time.time() - 10 * HOUR)  # created long ago
    with snapshot.KeepAlive(meta, rec, "test writer"):
        time.sleep(0.3)
        out = gc.clean_records(meta, store, _opts(snapshot_pending_timeout=600))
        assert out.get("stale_pending_snapshots", 0) == 0
        assert meta.snapshots.get(coll.collection_id, "slow")[0].state == PENDING
    # the DAG's wait keeps it alive too (e.g. while the Spark write queues for a slot)
    assert snapshot.keep_alive_status(meta, coll.collection_id, "slow", rec.snapshot_id,
                                      now=time.time() + 5 * HOUR)[0] == "waiting"
    assert not snapshot.reclaim_abandoned(meta, store, rec, 600, now=time.time() + 5 * HOUR + 500)
    # abandoned: nobody beat for longer than the timeout
    assert snapshot.reclaim_abandoned(meta, store, rec, 600, now=time.time() + 5 * HOUR + 700)
    assert meta.snapshots.find(coll.collection_id, "slow") is None
    assert meta.kv.get(meta.keys.snapshot_alive(coll.collection_id, rec.snapshot_id)) is None


def test_a_commit_racing_gcs_reclaim_loses_and_nothing_committed_lacks_its_files(meta, store, coll, monkeypatch):
    """The writer commits while GC is deleting its files: the claim won first, so the
    commit must lose and say so (before the fix it committed, then GC removed the record
    or left a COMMITTED record without files)."""
    rec = snapshot.begin(meta, "demo", "race")
    reached, release = _blocking_point(monkeypatch, "snapshot.before_commit")
    writer, out = _in_thread(snapshot.write_all, meta, store, rec)
    assert reached.wait(30)
    real_delete = store.delete_many

    def delete_then_let_the_writer_commit(keys):
        errors = real_delete(keys)
        release.set()
        writer.join(30)
        return errors
    monkeypatch.setattr(store, "delete_many", delete_then_let_the_writer_commit)
    res = gc.clean_records(meta, store, _opts(), now=time.time() + HOUR)
    release.set()
    writer.join(30)
    assert res["stale_pending_snapshots"] == 1
    assert isinstance(out.get("error"), snapshot.SnapshotLost), out
    assert "reclaimed" in str(out["error"]) or "DELETING" in str(out["error"])
    assert meta.snapshots.find(coll.collection_id, "race") is None
    assert list(store.list("snapshots")) == []


def test_a_claim_loses_to_a_commit_that_came_first(meta, store, coll):
    rec = snapshot.begin(meta, "demo", "c")
    committed = snapshot.write_all(meta, store, rec)
    assert not snapshot.reclaim_abandoned(meta, store, rec, 600, now=time.time() + 10 * HOUR)
    assert meta.snapshots.get(coll.collection_id, "c")[0].state == COMMITTED
    assert snapshot.read_segments(store, committed)


def test_a_heartbeat_between_gcs_read_and_claim_makes_the_claim_lose(meta, store, coll, monkeypatch):
    rec = snapshot.begin(meta, "demo", "beat", now=time.time() - HOUR)
    real_last_beat = meta.snapshots.last_beat

    def last_beat_then_writer_beats(r):
        seen = real_last_beat(r)
        meta.snapshots.heartbeat(r, time.time(), "writer")  # lands after GC read it
        return seen
    monkeypatch.setattr(meta.snapshots, "last_beat", last_beat_then_writer_beats)
    assert meta.snapshots.claim_abandoned(rec, 600, time.time()) is None
    assert meta.snapshots.get(coll.collection_id, "beat")[0].state == PENDING


def test_a_writer_learns_at_its_next_beat_that_gc_reclaimed_it(meta, store, coll, monkeypatch):
    monkeypatch.setattr(snapalive, "HEARTBEAT_INTERVAL", 0.05)
    rec = snapshot.begin(meta, "demo", "zombie")
    with snapshot.KeepAlive(meta, rec, "zombie") as alive:
        # a beat landing between the claim's read and its txn makes the claim lose: retry
        assert any(meta.snapshots.claim_abandoned(rec, 600, time.time() + HOUR) is not None for _ in range(100))
        deadline = time.time() + 60   # a hang guard: the beat comes every 0.05 s
        while alive.lost is None and time.time() < deadline:
            time.sleep(0.05)
        with pytest.raises(snapshot.SnapshotLost, match="DELETING"):
            alive.check()
    assert meta.snapshots.get(coll.collection_id, "zombie")[0].state == DELETING
    assert snapshot.keep_alive_status(meta, coll.collection_id, "zombie", rec.snapshot_id)[0] == "error"


# -- item 5: manifests and metadata are verified, fail closed ----------------------------------
def _sync_marker_ends(raw: bytes) -> list[int]:
    """Offsets just past each sync marker (the end of the header and of every block)."""
    sync, ends, i = raw[-16:], [], 0
    while (i := raw.find(sync, i)) >= 0:
        i += 16
        ends.append(i)
    return ends


def test_a_manifest_cut_at_a_block_boundary_makes_gc_refuse_and_restore_fail_naming_it(
        meta, store, coll, monkeypatch):
    import fastavro

    monkeypatch.setattr(manifest, "BLOCK_BYTES", 64)  # several blocks per manifest
    rec = snapshot.create(meta, store, "demo", "cut", per_file=100)
    key = snapshot.read_metadata(store, rec)["manifests"][0]["key"]
    raw = store.get(key)
    ends = _sync_marker_ends(raw)
    assert len(ends) >= 4, "expected several blocks"
    cut = raw[:ends[-2]]  # drop the last block exactly at a block boundary
    short = list(fastavro.reader(io.BytesIO(cut)))
    assert 0 < len(short) < rec.segments  # Avro alone reads it silently short
    store.put(key, cut)

    # what the snapshot still protects: segments Dropped long ago, an orphan next to them
    segs = list(meta.segments.list(coll.collection_id))
    meta.segments.transition([s.ref for s in segs], DROPPED, now=time.time() - 10 * HOUR)
    files = [f.key for s in segs for f in layout.segment_files(s)]
    with pytest.raises(manifest.ManifestError, match=key):
        snapshot.RefIndex.load(meta, store)
    with pytest.raises(gc.GCError, match=key):
        gc.run(meta, store, _opts())
    assert all(store.exists(k) for k in files)
    with pytest.raises(manifest.ManifestError, match=key):
        restore.restore(meta, store, "demo", "cut", "back")
    with pytest.raises(NotFound):
        meta.catalog.get_by_name("back")
    with pytest.raises(manifest.ManifestError, match=key):
        snapshot.describe(meta, store, "demo", "cut")


def _rewrite_metadata(meta, store, rec, change):
    """A metadata JSON rewritten consistently (its record's checksum updated): what a
    different writer version, not corruption, would leave."""
    doc = json.loads(store.get(rec.location))
    change(doc)
    raw = json.dumps(doc).encode()
    store.put(rec.location, raw)
    cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
    return meta.snapshots.update(kv, cur.replace(metadata_sha256=manifest.sha256(raw)))


@pytest.mark.parametrize("change,match", [
    (lambda d: d.update(manifests=[]), "lists no manifests, but the snapshot has 6 segments"),
    (lambda d: d.update(format="seglake.snapshot.v3"), "unknown format 'seglake.snapshot.v3'"),
    (lambda d: d["manifests"].pop(), "holding 4 segments, but records 6"),
    (lambda d: d.update(segment_count=4, manifests=d["manifests"][:1]), r"records 4 \(etcd: 6\)"),
])
def test_metadata_that_does_not_add_up_fails_closed(meta, store, coll, change, match):
    rec = snapshot.create(meta, store, "demo", "m", per_file=4)
    rec = _rewrite_metadata(meta, store, rec, change)
    with pytest.raises(manifest.ManifestError, match=match) as e:
        snapshot.RefIndex.load(meta, store)
    assert rec.location in str(e.value)
    with pytest.raises(gc.GCError, match=match):
        gc.load_references(meta, store)
    with pytest.raises(manifest.ManifestError, match=match):
        restore.restore(meta, store, "demo", "m", "back")


def test_an_altered_metadata_file_or_an_unknown_manifest_version_fails_closed(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "v", per_file=4)
    good = store.get(rec.location)
    store.put(rec.location, good.replace(b'"segment_count":6', b'"segment_count":6 '))
    with pytest.raises(manifest.ManifestError, match="checksum its record holds"):
        snapshot.read_segments(store, rec)
    store.put(rec.location, good)
    m = snapshot.read_metadata(store, rec)["manifests"][0]
    entries = snapshot.read_manifest(store, rec, m)
    future = manifest.encode(entries, {"seglake.snapshot_id": str(rec.snapshot_id),
                                       "seglake.manifest.version": "2"})
    store.put(m["key"], future)

    def bump(d):
        d["manifests"][0].update(sha256=manifest.sha256(future), size=len(future))
    rec = _rewrite_metadata(meta, store, rec, bump)
    with pytest.raises(manifest.ManifestError, match=f"manifest {m['key']} has unknown version '2'"):
        snapshot.read_segments(store, rec)


# -- item 9: capture across processes ------------------------------------------------------------
_FLUSH = """
import sys
from seglake.config import Settings
from seglake.meta import Meta
from seglake.meta.segments import FLUSHED
with Meta.from_settings(Settings.load()) as meta:
    seg = next(iter(meta.segments.list(int(sys.argv[1]))))
    sid = meta.ids.allocate()
    meta.segments.save([seg.replace(segment_id=sid, state=FLUSHED, dml_ts=meta.tso.now())])
    print(sid)
"""


def test_a_segment_flushed_by_another_process_just_before_the_request_is_captured(meta, store, coll, settings):
    meta.tso.now()  # this process has been issuing timestamps for a while
    env = {**os.environ, **settings.to_env(), "PYTHONPATH": os.pathsep.join(sys.path)}
    for i in range(3):
        out = subprocess.run([sys.executable, "-c", _FLUSH, str(coll.collection_id)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        flushed = int(out.stdout.strip())
        rec = snapshot.create(meta, store, "demo", f"right_after_{i}")  # requested at once
        captured = {s.segment_id for s in snapshot.read_segments(store, rec)}
        assert flushed in captured
        assert rec.revision >= rec.requested_revision > 0
        assert all(s.dml_ts <= rec.consistent_ts for s in snapshot.read_segments(store, rec))


# -- item 13: racing write attempts --------------------------------------------------------------
def test_two_writers_of_one_pending_snapshot_commit_exactly_one_complete_manifest_set(meta, store, coll, monkeypatch):
    rec = snapshot.begin(meta, "demo", "twice", owner="run-1")
    b_written, a_written, b_done = threading.Event(), threading.Event(), threading.Event()
    real = faults.point

    def point(name):
        if name == "snapshot.after_manifests":
            if threading.current_thread().name == "B":
                b_written.set()
                assert a_written.wait(60)
            else:
                a_written.set()
                assert b_done.wait(60)
        return real(name)
    monkeypatch.setattr(faults, "point", point)
    results = {}

    def writer(name, per_file):
        try:
            results[name] = snapshot.write_all(meta, store, rec, per_file=per_file)
        except Exception as e:  # noqa: BLE001
            results[name] = e
        finally:
            if name == "B":
                b_done.set()

    b = threading.Thread(target=writer, args=("B", 3), name="B")
    b.start()
    assert b_written.wait(30)
    a = threading.Thread(target=writer, args=("A", 2), name="A")  # overwrites nothing of B's
    a.start()
    a.join(60)
    b.join(60)
    won = [r for r in results.values() if not isinstance(r, Exception)]
    lost = [r for r in results.values() if isinstance(r, Exception)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(results["A"], snapshot.SnapshotLost) and "lost the race" in str(results["A"])
    committed = meta.snapshots.get(coll.collection_id, "twice")[0]
    assert committed.state == COMMITTED and committed.attempt == results["B"].attempt
    doc = snapshot.read_metadata(store, committed)
    winner = layout.snapshot_attempt_prefix(coll.collection_id, rec.snapshot_id, committed.attempt)
    assert doc["manifests"] and all(m["key"].startswith(winner) for m in doc["manifests"])
    assert len(doc["manifests"]) == 2  # B's grouping (3 per file), none of A's three
    live = {s.segment_id for s in meta.segments.list(coll.collection_id)}
    got = [s.segment_id for s in snapshot.read_segments(store, committed)]
    assert sorted(got) == sorted(live)  # complete, no duplicates
    # the loser's files are orphans of this snapshot id, not part of what it committed
    every = sorted(o.key for o in store.list("snapshots"))
    losers = [k for k in every if k not in {m["key"] for m in doc["manifests"]} and k != committed.location]
    assert len(losers) == 3  # A's 3 manifests (it saw it lost before writing metadata)
    sid_prefixes = (layout.snapshot_manifests_prefix(coll.collection_id, rec.snapshot_id),
                    layout.snapshot_metadata_prefix(coll.collection_id, rec.snapshot_id))
    assert all(k.startswith(sid_prefixes) and not k.startswith(winner) for k in losers)
    assert snapshot.create(meta, store, "demo", "twice", owner="run-1").attempt == committed.attempt  # re-run
    snapshot.drop(meta, store, "demo", "twice")
    assert list(store.list("snapshots")) == []  # every attempt's files go with the snapshot


# -- item 14: snapshots of a dropped collection ----------------------------------------------------
def _restore_and_check(meta, store, source, name, target, rows, **kw):
    job = restore.restore(meta, store, source, name, target, **kw)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job)
    assert copyjob.finalize(meta, job).state == JOB_COMPLETED
    back = meta.catalog.get_by_name(target)
    assert sum(s.num_rows for s in meta.segments.list(back.collection_id)) == rows
    return back


@pytest.mark.parametrize("how", ["remove", "purge_and_reuse_name"])
def test_a_snapshot_outlives_its_collection(meta, store, coll, how):
    rec = snapshot.create(meta, store, "demo", "keep")
    if how == "remove":
        meta.catalog.remove(coll.collection_id, "dropped by the test")  # Dropped, name freed
    else:
        meta.catalog.purge(coll.collection_id)  # records gone, files kept
        demo.seed(meta, store, demo.SeedParams(partitions=1, segments=1, rows=10, dim=8))  # new "demo"
    assert [x["snapshot_id"] for x in snapshot.list_snapshots(meta, "demo")] == [rec.snapshot_id]
    d = snapshot.describe(meta, store, "demo", "keep")
    assert d["snapshot_id"] == rec.snapshot_id and d["collection_dropped"] and d["segments"] == 6
    assert d["partition_names"] == ["_default", "part_1"]
    back = _restore_and_check(meta, store, "demo", "keep", "back", 1200)
    assert back.schema.to_json() == coll.schema.to_json() and [p.name for p in back.partitions] == \
        ["_default", "part_1"]
    assert snapshot.drop(meta, store, "demo", "keep")["files_removed"] == 2
    assert meta.snapshots.find(coll.collection_id, "keep") is None
    with pytest.raises(NotFound):
        snapshot.describe(meta, store, "demo", "keep")


def test_same_named_snapshots_of_two_dropped_collections_need_the_collection_id(meta, store, coll):
    first = snapshot.create(meta, store, "demo", "nightly")
    meta.catalog.remove(coll.collection_id)
    coll2, _ = demo.seed(meta, store, SMALL)
    second = snapshot.create(meta, store, "demo", "nightly")
    assert snapshot.describe(meta, store, "demo", "nightly")["snapshot_id"] == second.snapshot_id  # live first
    meta.catalog.remove(coll2.collection_id)
    with pytest.raises(Conflict, match=f"{coll.collection_id}, {coll2.collection_id}"):
        snapshot.describe(meta, store, "demo", "nightly")
    d = snapshot.describe(meta, store, "demo", "nightly", collection_id=coll.collection_id)
    assert d["snapshot_id"] == first.snapshot_id
    with pytest.raises(NotFound, match="belongs to default.demo, not default.other"):
        snapshot.describe(meta, store, "other", "nightly", collection_id=coll.collection_id)
    snapshot.drop(meta, store, "demo", "nightly", collection_id=coll.collection_id)
    assert snapshot.describe(meta, store, "demo", "nightly")["snapshot_id"] == second.snapshot_id


def test_remove_files_refuses_anything_but_deleting(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "live")
    with pytest.raises(StateError, match="COMMITTED"):
        snapshot.remove_files_and_record(meta, store, rec)
    assert snapshot.read_segments(store, rec)


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, "600", True])
def test_a_reclaim_with_a_non_finite_timeout_is_refused_before_any_change(meta, store, coll, timeout):
    from seglake.errors import ValidationError

    rec = snapshot.begin(meta, "demo", "p", now=time.time() - 10 * HOUR)
    with pytest.raises(ValidationError, match="snapshot_pending_timeout"):
        snapshot.reclaim_abandoned(meta, store, rec, timeout, now=time.time())
    assert meta.snapshots.get(coll.collection_id, "p")[0].state == PENDING


def test_a_snapshot_drop_removes_only_files_of_its_own_layout(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "own")
    c, sid = coll.collection_id, rec.snapshot_id
    foreign = [f"{layout.snapshot_manifests_prefix(c, sid)}notes.txt",
               f"{layout.snapshot_manifests_prefix(c, sid)}07/1.avro",
               f"{layout.snapshot_manifests_prefix(c, sid)}1/2.avro.tmp",
               f"{layout.snapshot_metadata_prefix(c, sid)}x.json"]
    for k in foreign:
        store.put(k, b"not seglake's")
    assert snapshot.drop(meta, store, "demo", "own")["files_removed"] == 2
    assert sorted(o.key for o in store.list("snapshots")) == sorted(foreign)


def test_two_removers_of_one_deleting_snapshot_both_succeed(meta, store, coll, monkeypatch):
    """Two GC runs (or a GC and a resumed drop) finishing one DELETING snapshot at once."""
    rec = snapshot.create(meta, store, "demo", "twice_gone")
    rec = meta.snapshots.transition(coll.collection_id, "twice_gone", DELETING)
    real_delete = store.delete_many
    calls = []

    def delete_and_let_the_other_finish(keys):
        errors = real_delete(keys)
        if not calls:
            calls.append(1)
            snapshot.remove_files_and_record(meta, store, rec)  # the other remover, all the way
        return errors
    monkeypatch.setattr(store, "delete_many", delete_and_let_the_other_finish)
    snapshot.remove_files_and_record(meta, store, rec)
    assert meta.snapshots.find(coll.collection_id, "twice_gone") is None and list(store.list("snapshots")) == []
