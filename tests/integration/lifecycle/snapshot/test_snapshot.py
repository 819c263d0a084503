"""Snapshots against real etcd + real files: two-phase create, drop, list, describe,
reference index, crash safety and concurrency."""

import json
import re
import threading
import time

import pytest

from seglake import faults, manifest
from seglake.dev import demo
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.lifecycle import snapshot
from seglake.lifecycle.snapshot import write as snapwrite
from seglake.meta.segments import DROPPED, FLUSHED, GROWING, Segment
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=3, rows=200, dim=8)


@pytest.fixture
def coll(meta, store):
    return demo.seed(meta, store, SMALL)[0]


def _side_effects(meta, store):
    return meta.kv.count(meta.keys.snapshots_prefix()), sorted(o.key for o in store.list("snapshots"))


def test_create_commits_manifests_that_round_trip(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "s1", "first", per_file=4)
    assert rec.state == COMMITTED and rec.segments == 6 and rec.rows == 1200 and rec.manifests == 2
    live = {s.segment_id: s for s in meta.segments.list(coll.collection_id)}
    doc = snapshot.read_metadata(store, rec)
    assert doc["format"] == "seglake.snapshot.v2" and doc["attempt"] == rec.attempt
    assert [m["records"] for m in doc["manifests"]] == [4, 2] and doc["segment_count"] == 6
    assert doc["segment_ids"] == sorted(live)
    assert [p["name"] for p in doc["collection"]["partitions"]] == ["_default", "part_1"]
    assert doc["collection"]["schema"] == coll.schema.to_json()
    assert doc["index_build_ids"] == sorted({f.build_id for s in live.values() for f in s.index_files})
    assert doc["totals"] == {"segments": 6, "rows": 1200, "bytes": sum(s.total_size() for s in live.values()),
                             "files": sum(s.file_count() for s in live.values())}
    back = snapshot.read_segments(store, rec)
    assert {s.segment_id: s for s in back} == live  # read back equals what the metadata said
    d = snapshot.describe(meta, store, "demo", "s1")
    assert (d["segments"], d["rows"], d["bytes"]) == (6, 1200, doc["totals"]["bytes"])
    assert d["partition_names"] == ["_default", "part_1"] and d["location"] == rec.location
    assert [x["name"] for x in snapshot.list_snapshots(meta, "demo")] == ["s1"]
    assert [x["name"] for x in snapshot.list_snapshots(meta)] == ["s1"]


def test_only_flushed_segments_are_captured(meta, store, coll):
    segs = list(meta.segments.list(coll.collection_id))
    meta.segments.transition([segs[0].ref], DROPPED, now=1.0)
    extra = [segs[1].replace(segment_id=meta.ids.allocate(), state=st) for st in (GROWING, "Importing", "Sealed")]
    meta.segments.save(extra)
    rec = snapshot.create(meta, store, "demo", "s")
    captured = {s.segment_id for s in snapshot.read_segments(store, rec)}
    assert captured == {s.segment_id for s in segs[1:]}


def test_two_concurrent_creates_with_one_name_make_one_snapshot(meta, store, coll):
    out = []

    def go():
        try:
            out.append(snapshot.create(meta, store, "demo", "race"))
        except Conflict as e:
            out.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    ok = [r for r in out if not isinstance(r, Exception)]
    assert len(ok) == 1 and ok[0].state == COMMITTED
    assert all("already exists" in str(e) for e in out if isinstance(e, Exception))
    assert len(snapshot.list_snapshots(meta, include_all=True)) == 1
    assert len(list(store.list("snapshots"))) == 2  # one manifest + one metadata file


def test_create_while_segments_change_is_consistent_with_its_timestamp(meta, store, coll):
    before = {s.segment_id for s in meta.segments.list(coll.collection_id)}
    template = next(meta.segments.list(coll.collection_id))
    stop, added = threading.Event(), []

    def writer():
        while not stop.is_set():
            sid = meta.ids.allocate()
            meta.segments.save([template.replace(segment_id=sid, dml_ts=meta.tso.now())])
            added.append(sid)

    t = threading.Thread(target=writer)
    t.start()
    try:
        rec = snapshot.create(meta, store, "demo", "moving")
    finally:
        stop.set()
        t.join()
    captured = snapshot.read_segments(store, rec)
    assert before <= {s.segment_id for s in captured}
    assert all(s.dml_ts <= rec.consistent_ts for s in captured)
    # every segment flushed at or before the timestamp and visible at the revision is in
    visible = {s.segment_id for s in meta.segments.list(coll.collection_id, revision=rec.revision)
               if s.state == FLUSHED and s.dml_ts <= rec.consistent_ts}
    assert {s.segment_id for s in captured} == visible
    assert added and any(a not in visible for a in added)  # the writer really raced


def test_crash_before_commit_leaves_pending_unlisted_and_reclaimable(meta, store, coll):
    with faults.inject("snapshot.before_commit"), pytest.raises(faults.InjectedFault):
        snapshot.create(meta, store, "demo", "crashed")
    rec, _ = meta.snapshots.get(coll.collection_id, "crashed")
    assert rec.state == PENDING and "injected fault" in rec.error
    assert snapshot.list_snapshots(meta, "demo") == []
    assert [x["state"] for x in snapshot.list_snapshots(meta, "demo", include_all=True)] == [PENDING]
    files = snapshot.snapshot_files(store, rec)
    assert all(store.exists(k) for k in files) and len(files) == 2
    idx = snapshot.RefIndex.load(meta, store)
    assert coll.collection_id in idx.blocked_collections  # GC skips the collection while PENDING
    with pytest.raises(StateError, match="PENDING"):
        snapshot.drop(meta, store, "demo", "crashed")
    with pytest.raises(StateError, match="PENDING"):
        snapshot.remove_files_and_record(meta, store, rec)  # never without the claim
    assert snapshot.reclaim_abandoned(meta, store, rec, 600, now=time.time() + 3600)  # what GC does
    assert list(store.list("snapshots")) == [] and meta.snapshots.find(coll.collection_id, "crashed") is None


def test_a_create_rerun_by_its_owner_resumes_its_pending_record(meta, store, coll):
    with faults.inject("snapshot.after_manifests"), pytest.raises(faults.InjectedFault):
        snapshot.create(meta, store, "demo", "again", owner="run-1")
    with pytest.raises(Conflict):
        snapshot.create(meta, store, "demo", "again", owner="run-2")
    rec = snapshot.create(meta, store, "demo", "again", owner="run-1")
    assert rec.state == COMMITTED and rec.segments == 6 and rec.error is None


def test_drop_removes_files_then_record_and_resumes_from_deleting(meta, store, coll):
    snapshot.create(meta, store, "demo", "a")
    snapshot.create(meta, store, "demo", "b")
    with faults.inject("snapshot.drop_after_deleting"), pytest.raises(faults.InjectedFault):
        snapshot.drop(meta, store, "demo", "a")
    assert meta.snapshots.get(coll.collection_id, "a")[0].state == DELETING
    assert snapshot.list_snapshots(meta, "demo") == [snapshot.list_snapshots(meta, "demo")[0]]
    result = snapshot.drop(meta, store, "demo", "a")  # resumes
    assert result["files_removed"] == 2
    assert meta.snapshots.find(coll.collection_id, "a") is None
    b = meta.snapshots.get(coll.collection_id, "b")[0]
    assert sorted(o.key for o in store.list("snapshots")) == sorted(snapshot.snapshot_files(store, b))
    with pytest.raises(NotFound):
        snapshot.drop(meta, store, "demo", "a")


def test_drop_is_refused_while_a_restore_job_pins_the_snapshot(meta, store, coll):
    snapshot.create(meta, store, "demo", "pinned")
    meta.snapshots.pin(coll.collection_id, "pinned", 42)
    with pytest.raises(Conflict, match="pinned \\(copy job 42\\)"):
        snapshot.drop(meta, store, "demo", "pinned")
    assert meta.snapshots.get(coll.collection_id, "pinned")[0].state == COMMITTED
    meta.snapshots.unpin(coll.collection_id, "pinned", 42)
    snapshot.drop(meta, store, "demo", "pinned")


@pytest.mark.parametrize("args,err,match", [
    (("demo", "bad name"), ValidationError, "invalid snapshot name"),
    (("demo", ""), ValidationError, "invalid snapshot name"),
    (("bad-coll", "s"), ValidationError, "invalid collection name"),
    (("unknown", "s"), NotFound, "'unknown' not found"),
])
def test_bad_create_input_has_no_side_effects(meta, store, coll, args, err, match):
    with pytest.raises(err, match=match):
        snapshot.create(meta, store, *args)
    assert _side_effects(meta, store) == (0, [])


def test_bad_ttl_duplicate_name_and_dropping_collection(meta, store, coll):
    with pytest.raises(ValidationError, match="ttl"):
        snapshot.create(meta, store, "demo", "t", ttl=-1)
    snapshot.create(meta, store, "demo", "dup")
    with pytest.raises(Conflict, match="already exists"):
        snapshot.create(meta, store, "demo", "dup")
    meta.catalog.set_state(coll.collection_id, "Dropping")
    with pytest.raises(StateError, match="Dropping"):
        snapshot.create(meta, store, "demo", "late")
    assert meta.kv.count(meta.keys.snapshots_prefix()) == 1


def test_ttl_is_recorded(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "ttl", ttl=3600)
    assert rec.expires_at == pytest.approx(rec.created_at + 3600)
    assert snapshot.create(meta, store, "demo", "forever").expires_at is None


def test_drop_unknown_snapshot_or_collection(meta, store, coll):
    with pytest.raises(NotFound):
        snapshot.drop(meta, store, "demo", "nope")
    with pytest.raises(NotFound):
        snapshot.drop(meta, store, "nope", "nope")


def test_ref_index_holds_every_file_and_fails_closed_on_a_truncated_manifest(meta, store, coll):
    rec = snapshot.create(meta, store, "demo", "ref", per_file=2)
    idx = snapshot.RefIndex.load(meta, store)
    expected = {f.key for s in meta.segments.list(coll.collection_id) for f in layout.segment_files(s)}
    assert idx.files == expected
    assert {s for _, s in idx.segments} == {s.segment_id for s in meta.segments.list(coll.collection_id)}
    assert rec.location in idx.own_files and not idx.blocked_collections
    key = json.loads(store.get(rec.location))["manifests"][1]["key"]
    store.put(key, store.get(key)[:-40])
    with pytest.raises(manifest.ManifestError, match="unreadable"):
        snapshot.RefIndex.load(meta, store)
    store.delete_many([key])
    with pytest.raises(manifest.ManifestError, match="missing"):
        snapshot.RefIndex.load(meta, store)


def test_manifest_schema_is_versioned_and_segments_round_trip():
    from seglake.meta.segments import Binlog, IndexFile
    import fastavro, io

    seg = Segment(segment_id=3, collection_id=1, partition_id=2, channel="c", state=FLUSHED, num_rows=5,
                  binlogs={100: (Binlog(7, 50, 5, 1, 2),)}, deltalogs=(Binlog(8, 9, 1),),
                  statslogs={100: (Binlog(9, 3, 5),)}, index_files=(IndexFile(4, 1, "x", 10),), dml_ts=7)
    raw = manifest.encode([manifest.segment_entry(seg)])
    reader = fastavro.reader(io.BytesIO(raw))
    assert reader.metadata["seglake.manifest.version"] == "1"
    assert reader.writer_schema["name"] == "seglake.manifest.v1.SegmentEntry"
    (entry,) = list(reader)
    assert manifest.entry_to_segment(entry) == seg
    assert sorted(p for p, _ in manifest.entry_files(entry)) == sorted(f.key for f in layout.segment_files(seg))


def test_cli_snapshots(meta, store, coll, settings, monkeypatch, capsys):
    from seglake import cli

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    assert cli.main(["snapshots", "create", "demo", "cli_snap", "--ttl-hours", "1"]) == 0
    assert "COMMITTED" in capsys.readouterr().out
    assert cli.main(["snapshots", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["state"], r["segments"]) for r in rows] == [("cli_snap", "COMMITTED", 6)]
    assert cli.main(["snapshots", "list", "--collection", "demo"]) == 0
    assert "cli_snap" in capsys.readouterr().out
    assert cli.main(["snapshots", "describe", "demo", "cli_snap"]) == 0
    out = capsys.readouterr().out
    assert "6 segments, 1200 rows" in out and "_default, part_1" in out
    rec = meta.snapshots.get(coll.collection_id, "cli_snap")[0]    # each id next to what it names
    assert out.startswith(f"snapshot 'cli_snap' (id {rec.snapshot_id}) of collection 'demo' "
                          f"(id {coll.collection_id}): COMMITTED\n"), out
    assert re.search(r"expires \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n", out), out
    assert cli.main(["snapshots", "pin", "demo", "cli_snap", "--ttl-hours", "1", "--json"]) == 0
    pin = json.loads(capsys.readouterr().out)["pin_id"]
    assert cli.main(["snapshots", "drop", "demo", "cli_snap"]) == 2    # the refusal says what a pin needs
    err = capsys.readouterr().err
    assert f"is pinned (pin {pin}): drop it after the pins are removed (`seglake snapshots unpin ID`) or " \
           "expire" in err and "copy job" not in err, err
    assert cli.main(["snapshots", "unpin", str(pin)]) == 0
    assert cli.main(["snapshots", "drop", "demo", "cli_snap"]) == 0
    capsys.readouterr()
    assert cli.main(["snapshots", "describe", "demo", "cli_snap"]) == 2


def test_large_captures_write_manifests_from_worker_processes(meta, store, coll, monkeypatch):
    monkeypatch.setattr(snapwrite, "PARALLEL_MIN_SEGMENTS", 1)
    rec = snapshot.begin(meta, "demo", "parallel")
    rec = snapshot.write_all(meta, store, rec, per_file=2, workers=2)
    assert rec.state == COMMITTED and rec.manifests == 3 and rec.segments == 6
    serial = snapshot.create(meta, store, "demo", "serial", per_file=2)
    assert (rec.rows, rec.bytes, rec.files) == (serial.rows, serial.bytes, serial.files)
    assert sorted(s.segment_id for s in snapshot.read_segments(store, rec)) == \
        sorted(s.segment_id for s in snapshot.read_segments(store, serial))
