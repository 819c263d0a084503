"""Adversary s24: damaged persisted records. Every record seglake reads back (etcd values,
JSON on the store or the backup target) is read by ONE strict reader (meta.codec.loads /
number / moment): NaN, Infinity, 1e400, a number as a string, null, a missing key or a
wrong type make the record unreadable (CorruptRecord, naming it), never zero, never
"absent", never "expired". A destructive path that meets one keeps what it guards.

Real etcd, real files (a local backup target)."""

from __future__ import annotations

import json
import time

import pytest

from seglake.dev import demo
from seglake.errors import CorruptRecord, NotFound
from seglake.lifecycle import retention, snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup.prune import prune
from seglake.meta import codec
from seglake.storage import layout
from seglake.storage.local import LocalStore

from bundle_restore_helpers import two_pp_bundles

quiet = dict(say=lambda line: None)
# what Python's json reads without a word (NaN compares false both ways; 1e400 is inf),
# and what float() turns into NaN/inf from a string, and the plainly wrong
DAMAGED_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", '"nan"', '"inf"', "null", '"12"', "true", "[1]",
                   "1e300", "-5"]


# -- the one reader -----------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [b'{"at": NaN}', b'{"at": Infinity}', b'{"at": -Infinity}', b'{"at": 1e400}',
                                 b'{"at": -1e999}', b'{"at": 1', b"\xff", b""])
def test_the_record_reader_refuses_what_python_json_reads_silently(raw):
    with pytest.raises(CorruptRecord, match="k/1"):
        codec.loads(raw, "k/1")


@pytest.mark.parametrize("value", DAMAGED_NUMBERS)
def test_a_recorded_time_must_be_a_finite_number_in_range(value):
    try:
        doc = json.loads(f'{{"at": {value}}}')   # what the old readers parsed
    except ValueError:
        doc = {"at": value}
    with pytest.raises(CorruptRecord, match="'at'"):
        codec.moment(doc, "at", "k/1")
    with pytest.raises(CorruptRecord, match="missing"):
        codec.moment({}, "at", "k/1")
    assert codec.moment({"at": 1700000000}, "at") == 1700000000.0


def test_a_typed_record_refuses_them_too():
    """msgspec's typed decode (segments, snapshots, copy jobs) already refuses NaN and 1e400;
    the plain records (collections) went through json.loads and took them."""
    with pytest.raises(CorruptRecord):
        codec.decode(b'{"v":1,"created_ts":NaN}', "c/1")
    with pytest.raises(CorruptRecord):
        codec.decode(b'{"v":"1"}', "c/1")
    from seglake.meta.segments import Segment
    with pytest.raises(CorruptRecord):
        codec.decode_struct(b'{"v":1,"segment_id":1e400}', Segment, "s/1")


# -- the retention prune of a backup target ----------------------------------------------------
@pytest.fixture
def two_bundles(meta, store, tmp_path):
    """Bundles s1 (older) and s2 of `pp` in a local target."""
    return two_pp_bundles(meta, store, LocalStore(tmp_path / "backup"))


def _damage_commit_time(target, bundle, value):
    key = layout.bundle_commit("default", "pp", bundle)
    marker = json.loads(target.get(key))
    body = json.dumps({**marker, "committed_at": "@"}).replace('"@"', value)
    target.put(key, body.encode())


@pytest.mark.parametrize("value", ["NaN", "Infinity", "1e400", '"inf"', '"nan"', "1e300", "null"])
def test_a_bundle_whose_commit_time_is_damaged_is_left_alone_and_does_not_outrank_the_newest(two_bundles, value):
    """The prune read committed_at with float(json.loads(...)): Infinity (or "inf", or 1e300)
    made the OLDER bundle s1 the newest, so keep_last=1 kept it and pruned s2, the real newest;
    NaN sorted anywhere. Now a marker whose time is not a time is not judged (left alone) and
    s2 stays the newest."""
    target = two_bundles
    _damage_commit_time(target, "s1", value)
    report = prune(target, "pp", retention.parse_policy({"keep_last": 1}), pinned=lambda n: [], sweep=False,
                   **quiet)
    assert report["pruned"] == [] and "s2" in report["kept"], report
    assert bundles.read(target, "default", "pp", "s2")["bundle"] == "s2"
    assert target.exists(layout.bundle_commit("default", "pp", "s1"))   # not judged: not dropped


# -- snapshot pins (GC's expiry of pins) ---------------------------------------------------------
@pytest.mark.parametrize("value", ["NaN", "-1", '"soon"', "null", "1e400", "[]"])
def test_a_damaged_pin_record_is_never_released_as_expired(meta, store, value):
    """GC's remove_expired_holds read `doc["expires_at"] <= now`: a negative expiry released
    the pin (and its hold on the snapshot, though the snapshot's own hold was live), a string
    crashed every GC pass with a TypeError. Now a pin record that is not one is kept and
    named, and the snapshot's own (typed) hold judges the snapshot."""
    demo.seed(meta, store, demo.SeedParams(name="pp", partitions=1, segments=1, rows=20, dim=4))
    snapshot.create(meta, store, "pp", "s")
    pin = snapshot.pin(meta, "pp", "s", 3600)
    key = meta.keys.snapshot_pin(pin["pin_id"])
    meta.kv.delete(meta.keys.snapshot_pin_lease(pin["pin_id"]))   # a pin made before leases: the clock judges
    meta.kv.put(key, json.dumps({**pin, "expires_at": "@"}).replace('"@"', value))
    assert meta.snapshots.remove_expired_holds(time.time()) == 0
    assert meta.kv.get(key) is not None
    rec, _ = meta.snapshots.get(pin["collection_id"], "s")
    assert meta.snapshots.pinned_by(rec, time.time()) == [f"pin {pin['pin_id']}"]
    assert snapshot.list_pins(meta) == []          # not listed as a live pin; named in the log
    # the operator's remedy: an unpin of that id removes the record and the hold carrying the
    # id on the snapshot (found there: the damaged record does not say which), in one txn
    gone = snapshot.unpin(meta, pin["pin_id"])
    assert (gone["pin_id"], gone["snapshot"], gone["collection"]) == (pin["pin_id"], "s", "pp"), gone
    assert meta.kv.get(key) is None
    rec, _ = meta.snapshots.get(pin["collection_id"], "s")
    assert rec.holds == () and meta.snapshots.pinned_by(rec, time.time()) == []
    with pytest.raises(NotFound):
        snapshot.unpin(meta, pin["pin_id"])


# -- retention schedules ----------------------------------------------------------------------
def test_a_policy_record_missing_a_count_is_refused_not_read_as_zero(meta, store):
    """The schedule read a stored policy with `{k: doc[k] for k in POLICY_KEYS if k in doc}`:
    a record that lost keep_daily kept only keep_last and pruned the daily snapshots. Every
    stored policy has every count, so one missing is damage: the run is refused, nothing
    pruned; a count of NaN or "3" is refused too."""
    from datetime import datetime, timezone

    coll = demo.seed(meta, store, demo.SeedParams(name="pp", partitions=1, segments=1, rows=20, dim=4))[0]
    t0 = datetime(2026, 3, 1, tzinfo=timezone.utc).timestamp()
    retention.set_policy(meta, "pp", {"keep_last": 1, "keep_daily": 3})
    for day in range(3):
        assert retention.run(meta, store, "pp", now=t0 + day * 86400)["created"]
    names = sorted(r.name for r in meta.snapshots.list(coll.collection_id))
    key = meta.keys.retention(coll.collection_id)
    doc = json.loads(meta.kv.get(key).value)
    for damaged in ({k: v for k, v in doc.items() if k != "keep_daily"},
                    json.dumps({**doc, "keep_daily": "@"}).replace('"@"', "NaN"), {**doc, "keep_daily": "3"}):
        meta.kv.put(key, damaged if isinstance(damaged, str) else json.dumps(damaged))
        with pytest.raises(ValueError, match="malformed|corrupt record"):
            retention.run(meta, store, "pp", now=t0 + 3 * 86400 + 60)
        (rep,) = retention.run_all(meta, store, now=t0 + 3 * 86400 + 60)
        assert "error" in rep and not rep.get("pruned"), rep
        assert sorted(r.name for r in meta.snapshots.list(coll.collection_id)) == names


# -- WAL truncation (GC) -----------------------------------------------------------------------
def _wal_fragments(store):
    return {o.key for o in store.list(f"{layout.WAL}/") if layout.parse_wal_fragment(o.key)}


def _flushed_wal(meta, store, settings, snapshot_after_flush=False):
    """One vchannel: three inserts flushed (a snapshot then, if asked), one more acknowledged
    and not flushed; every fragment old enough for GC. Returns (pchannel, fragment keys)."""
    import os

    from seglake.lifecycle.flush import flush_pchannel
    from seglake.wal.client import WalClient, synthetic_rows
    from wal_helpers import make_collection, pchannels

    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c1", shards=1)
        for i in range(3):
            c.insert("c1", synthetic_rows(coll, 20, 1 + 20 * i))
    (p,) = pchannels(coll)
    flush_pchannel(meta, store, p, settings, flush_all=True)
    if snapshot_after_flush:
        snapshot.create(meta, store, "c1", "after_flush")
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 20, 100))   # acknowledged, not flushed: above the checkpoint
    before = _wal_fragments(store)
    old = time.time() - 3 * 86400
    for k in before:
        os.utime(store.root / k, (old, old))
    return p, before


GC_OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


@pytest.mark.parametrize("damage", ["past_the_end", "strings", "floats", "nan", "not_a_list"])
def test_a_damaged_wal_checkpoint_truncates_nothing_and_is_named(meta, store, settings, damage):
    """GC truncates the WAL below every vchannel's checkpoint. A checkpoint's message id was
    read with int(): ["1", "9", "0"] or [1, 9.9, 0] passed, and a fragment past the log's end
    let GC delete every committed fragment, the unflushed ones too (acknowledged writes).
    Now such a checkpoint is a damaged record: the WAL view names it and nothing is
    truncated."""
    from seglake.lifecycle import gc
    from seglake.wal.checkpoints import live_vchannels, read_checkpoint
    from seglake.wal.log import WalLog

    p, before = _flushed_wal(meta, store, settings)
    (v,) = live_vchannels(meta, p)
    cp, _ = read_checkpoint(meta, v)
    last = WalLog(meta, None, p).state().last
    t, o = cp.message_id.term, cp.message_id.offset
    mid = {"past_the_end": f"[{t}, {last + 5}, 0]", "strings": f'["{t}", "{last}", "0"]',
           "floats": f"[{t}, {last}.5, 0]", "nan": f"[{t}, NaN, {o}]", "not_a_list": f'"{t}:{last}:0"'}[damage]
    key = meta.keys.channel_checkpoint(v)
    meta.kv.put(key, f'{{"message_id": {mid}, "time_tick": {cp.time_tick}}}')
    r = gc.run(meta, store, gc.GCOptions(**GC_OPTS))
    assert _wal_fragments(store) == before
    assert gc.WAL_TRUNCATED not in r["sweep"]["by_reason"]
    assert v in (r["mark"]["wal"]["error"] or ""), r["mark"]["wal"]


# -- point-in-time windows (what they hold of the WAL) ------------------------------------------
@pytest.mark.parametrize("value", ["0", "-86400", "NaN", '"86400"', "null", "1e400"])
def test_a_damaged_window_record_makes_gc_keep_the_whole_wal(meta, store, settings, value):
    """A 1-day window holds the log back to the base snapshot at its oldest instant (none:
    from creation). Its window_s was read with float(): 0 or -86400 made the oldest instant
    now, so the snapshot just taken became the base and GC truncated the log below it (the
    day the window promises); "86400" read as a number. Now a window record that is not one
    is a read error of the windows: GC keeps the whole WAL and says which record."""
    from seglake.lifecycle import gc, pitr

    p, before = _flushed_wal(meta, store, settings, snapshot_after_flush=True)
    pitr.set_window(meta, "c1", "1d")
    assert gc.run(meta, store, gc.GCOptions(dry_run=True, **GC_OPTS))["mark"]["wal"]["truncatable"] == 0
    coll = meta.catalog.get_by_name("c1")
    key = meta.keys.pitr_window(coll.collection_id)
    meta.kv.put(key, json.dumps({**json.loads(meta.kv.get(key).value), "window_s": "@"}).replace('"@"', value))
    dry = gc.run(meta, store, gc.GCOptions(dry_run=True, **GC_OPTS))
    assert key in (dry["mark"]["wal"]["error"] or ""), dry["mark"]["wal"]
    with pytest.raises(CorruptRecord, match=key):   # its record pass (expired snapshots) stops there too
        gc.run(meta, store, gc.GCOptions(**GC_OPTS))
    assert _wal_fragments(store) == before
    with pytest.raises(CorruptRecord, match=key):
        pitr.list_windows(meta)



# -- a snapshot's log positions and the flusher term ------------------------------------------
def test_a_snapshot_of_a_damaged_checkpoint_fails_naming_it_and_a_damaged_term_refuses_a_flusher(meta, store,
                                                                                                   settings):
    """A snapshot records each vchannel's checkpoint as where a replay (and a window's hold
    on the log) starts; it read the checkpoint with int(), so ["1", "3", "0"] or [1, 3.7, 0]
    became a position. The flusher's term record was read raw: NaN + 1 was written back as
    the next term, a string crashed with a TypeError. Now both are damaged records, named."""
    from seglake.lifecycle.flush.state import acquire_term
    from seglake.meta import keys as keymod
    from seglake.wal.checkpoints import live_vchannels, read_checkpoint

    p, _ = _flushed_wal(meta, store, settings)
    (v,) = live_vchannels(meta, p)
    cp, _ = read_checkpoint(meta, v)
    key = meta.keys.channel_checkpoint(v)
    good = meta.kv.get(key).value
    meta.kv.put(key, json.dumps({"message_id": [str(x) for x in cp.message_id.to_json()], "time_tick": cp.time_tick}))
    with pytest.raises(CorruptRecord, match=key):
        snapshot.create(meta, store, "c1", "s")
    meta.kv.put(key, good)
    term_key = keymod.wal_flusher(meta.keys, p)
    for bad in ('{"term": NaN}', '{"term": "4"}', '{"term": -1}', '{}'):
        meta.kv.put(term_key, bad)
        with pytest.raises(CorruptRecord, match=term_key):
            acquire_term(meta, p, "f2")


# -- Milvus capture pins and sources -----------------------------------------------------------
@pytest.mark.parametrize("value", ["-1", '"-1"', "true", '"9e99"', "0.0e0"])
def test_a_damaged_milvus_pin_holds_its_bundle(meta, two_bundles, value):
    """A capture pin (no lease: written before leases, or by hand) was live while
    float(expires_at) > now: "-1", true (1.0) and -1 read as expired, so the prune dropped
    the bundle. Now an expiry that is not a time in range makes it unreadable: it holds
    (fail closed), and says which record."""
    from seglake.lifecycle.backup.prune import prune
    from seglake.milvus import sources

    target = two_bundles
    key = meta.keys.milvus_pin("default", "pp", "s1")
    meta.kv.put(key, '{"expires_at": %s, "by": "ops"}' % value)
    pins = sources.pinned_by(meta, "default", "pp", "s1")
    if value == "0.0e0":   # a real time (1970): expired, it holds nothing
        assert pins == []
        return
    assert pins == [f"an unreadable pin record {key} (kept)"]
    report = prune(target, "pp", retention.parse_policy({"keep_last": 1}),
                   pinned=lambda b: sources.pinned_by(meta, "default", "pp", b), sweep=False, **quiet)
    assert report["pruned"] == [] and list(report["held"]) == ["s1"], report


def test_a_milvus_source_record_missing_a_count_is_refused_before_anything(meta, tmp_path):
    """The schedule rebuilt a stored source with `{k: src[k] for k in KEYS if k in src}`: a
    record that lost keep_daily kept only keep_last and its prune dropped the daily captures.
    Every stored source has every count: one missing refuses the run, naming it."""
    from seglake.errors import ValidationError
    from seglake.milvus import sources

    sources.set_source(meta, "src", {"milvus_etcd": "127.0.0.1:2379", "bucket": "milvus-bucket",
                                     "collections": "a", "keep_last": 1, "keep_daily": 7})
    key = meta.keys.milvus_source("src")
    doc = json.loads(meta.kv.get(key).value)
    meta.kv.put(key, json.dumps({k: v for k, v in doc.items() if k != "keep_daily"}))
    with pytest.raises(ValidationError, match="malformed: keep_daily missing"):
        sources.run(meta, LocalStore(tmp_path / "backup"), None, "src", now=time.time())
    meta.kv.put(key, json.dumps({**doc, "keep_daily": "@"}).replace('"@"', "NaN"))
    with pytest.raises(CorruptRecord, match=key):
        sources.run(meta, LocalStore(tmp_path / "backup"), None, "src", now=time.time())


# -- an import's record (its takeover discards what the recorded import wrote) --------------------
@pytest.mark.parametrize("field,value", [("snapshot_id", '"@id"'), ("snapshot_id", "@id.0"),
                                         ("collection_id", "null"), ("state", "7")])
def test_a_damaged_import_record_is_never_taken_over(meta, store, two_bundles, field, value):
    """An import under another name may take over a recorded import that failed or whose
    snapshot was dropped, discarding the files the recorded one wrote. It judged a damaged
    record: a snapshot id of "7" (or 7.0 as text) never matched the imported snapshot's, so
    a completed import read as "its snapshot dropped since" and the takeover deleted the
    files of that live snapshot. Now the record is refused, naming it; nothing is deleted."""
    from seglake.lifecycle.backup import imports

    target = two_bundles
    out = imports.import_bundle(meta, store, target, "pp", "s1", as_collection="imp1", **quiet)
    key = meta.keys.backup_import(out["uid"])
    doc = json.loads(meta.kv.get(key).value)
    meta.kv.put(key, json.dumps({**doc, field: "@"}).replace('"@"', value.replace("@id", str(doc["snapshot_id"]))))
    before = {o.key for o in store.list("")}
    with pytest.raises(CorruptRecord, match=key):
        imports.import_bundle(meta, store, target, "pp", "s1", as_collection="imp2", **quiet)
    assert before <= {o.key for o in store.list("")}
    assert meta.snapshots.find(out["collection_id"], out["snapshot"]).state == "COMMITTED"
    assert imports.list_imports(meta) == []   # left out of the listing, named in the log


# -- a PENDING snapshot's heartbeat (GC reclaims an abandoned one) -----------------------------
@pytest.mark.parametrize("body", [b'{"at": NaN, "by": "w"}', b'{"by": "w"}', b'{"at": "now"}', b"{not json",
                                  b'{"at": -1}'])
def test_a_pending_snapshot_whose_heartbeat_is_damaged_is_not_reclaimed(meta, store, body):
    """GC reclaims a PENDING snapshot (deletes what it wrote) when no writer has beaten for
    the timeout. A heartbeat that could not be read counted from the record's creation, so
    a creation running for longer than the timeout was reclaimed under its live writer. Now
    it counts as alive: kept, named in the log."""
    demo.seed(meta, store, demo.SeedParams(name="pp", partitions=1, segments=1, rows=20, dim=4))
    rec = snapshot.begin(meta, "pp", "slow")
    meta.kv.put(meta.snapshots.alive_key(rec), body)
    assert not snapshot.reclaim_abandoned(meta, store, rec, 600, now=time.time() + 86400)
    assert meta.snapshots.find(rec.collection_id, "slow").state == "PENDING"


# -- Milvus restores: one restore per name -------------------------------------------------------
@pytest.mark.parametrize("rule", ["first_for_name", "sole_restore_of"])
@pytest.mark.parametrize("body", [b"{not json", b'{"name": "n", "target": NaN}', b"[1]", b'{"target": "a:1"}'])
def test_a_damaged_record_of_another_restore_makes_this_one_yield(meta, rule, body):
    """Two restores into one Milvus name: the later yields to any other record that holds
    the name. A record that could not be read was skipped (`except ValueError: continue`),
    so two runs could import into one collection (its rows twice). Now this run yields,
    its own record goes (it imported nothing), and the damaged record is named."""
    from types import SimpleNamespace

    from seglake.errors import Conflict
    from seglake.milvus import restore as mr

    other = meta.keys.milvus_restore("rid0")
    meta.kv.put(other, body)                                # written first (create revision)
    recs = mr.Records(meta.kv, meta.keys, "rid1")
    rec = {"name": "n", "state": "created", "collection_id": 7, "bundle": "b", "bundle_uid": "u",
           "target": {"address": "a:1", "bucket": "bk"}}
    recs.create(rec)
    target, req = SimpleNamespace(address="a:1", bucket="bk"), SimpleNamespace(name="n")
    with pytest.raises(Conflict, match=other):
        if rule == "first_for_name":
            mr._first_for_name(recs, target, req, client=None)
        else:
            mr._sole_restore_of(recs, target, req, rec)
    assert meta.kv.get(recs.key) is None


# -- readers: a damaged record is named or left out of a listing, never a traceback -----------
def test_listings_leave_a_damaged_record_out_and_name_it(meta, caplog):
    """The captures list sorted by float(finished_at): "soon" was a ValueError out of the
    page; NaN sorted anywhere. The export and verify lists were `[json.loads(...) ...]`:
    one damaged record was a JSONDecodeError out of the page and the CLI."""
    from seglake.lifecycle.backup import export, verify
    from seglake.milvus import capture

    ok = {"db": "default", "collection": "c", "bundle": "b1", "finished_at": 1700000000.0}
    meta.kv.put(meta.keys.milvus_capture("default", "c", "b1"), json.dumps(ok))
    meta.kv.put(meta.keys.milvus_capture("default", "c", "b2"), json.dumps({**ok, "bundle": "b2",
                                                                           "finished_at": "soon"}))
    meta.kv.put(meta.keys.milvus_capture("default", "c", "b3"), b'{"finished_at": NaN}')
    assert [d["bundle"] for d in capture.list_captures(meta)] == ["b1", "b2"]
    assert "milvus/captures/default/c/b3" in caplog.text
    for key, listing in ((meta.keys.backup_export("default", "c", "b1"), export.list_exports),
                         (meta.keys.backup_verify("default", "c", "b1"), verify.list_verifications)):
        meta.kv.put(key, b'{"state": "done", "rows": Infinity}')
        assert listing(meta) == [] and key in caplog.text


def test_a_damaged_wal_pause_flag_holds_and_is_named(meta):
    """A pause flag holds a pchannel's consumers while its key exists; a flag whose value was
    damaged was a JSONDecodeError; now a CorruptRecord naming it (nothing resumes)."""
    from seglake.meta import keys as keymod
    from seglake.wal.log import pause_state

    key = keymod.wal_pause(meta.keys)
    meta.kv.put(key, b'{"paused_at": NaN}')
    with pytest.raises(CorruptRecord, match=key):
        pause_state(meta, "seglake-dml_0")


@pytest.mark.parametrize("value", [-1.0, -1e9, 1e15])
def test_a_dropped_segment_whose_drop_time_is_damaged_is_never_reclaimed(meta, store, value):
    """Typed records (segments, snapshots, copy jobs) refused NaN and 1e400 but took a
    negative or far-future time: a Dropped segment with dropped_at -1 was judged past
    every drop_tolerance at once and its files deleted. Now the record is unreadable
    (CorruptRecord naming its key) and GC keeps every file (fail closed)."""
    import msgspec

    from seglake.lifecycle import gc
    from seglake.meta.codec import decode_struct
    from seglake.meta.segments import DROPPED, Segment

    coll, _ = demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=20, dim=4))
    seg = next(iter(meta.segments.list(coll.collection_id)))
    key = meta.keys.segment(seg.collection_id, seg.partition_id, seg.segment_id)
    damaged = msgspec.structs.replace(seg, state=DROPPED, dropped_at=value)
    meta.kv.put(key, codec.encode_struct(damaged))
    with pytest.raises(CorruptRecord, match="dropped_at"):
        decode_struct(meta.kv.get(key).value, Segment, key)
    files = [f.key for f in layout.segment_files(seg)]
    assert files and all(store.exists(k) for k in files)
    from seglake.errors import SeglakeError

    opts = gc.GCOptions(drop_tolerance=3600.0)
    try:
        gc.run(meta, store, opts)
    except SeglakeError as e:       # refused before anything is deleted: fine, if it names the record
        assert key in str(e) and "dropped_at" in str(e), e
    assert all(store.exists(k) for k in files)
    assert meta.kv.get(key) is not None
