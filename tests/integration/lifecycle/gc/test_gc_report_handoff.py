"""Adversarial review of the mark -> report -> sweep hand-off (both engines share it), on
real etcd and real files:

- the sweep deletes only from report parts that are byte for byte what the mark wrote
  (summary.json holds each part's sha256): a part another mark of the same run id wrote
  (a retried or zombie task, a reused id), an edited, missing or twice-listed part is
  refused before anything in it is deleted; an extra part nobody listed is never read;
- a dry run's report is never swept; run ids full-match their pattern;
- the sweep's re-check reads the etcd changes since the mark (a watch from the mark's
  revision, complete up to a fence it writes), never every segment record per batch; a
  history compacted past the mark falls back to the current state, never to "no change";
- a drop reverted between mark and sweep keeps the files and the record."""

import json
import os
import time

import pytest
from seglake.dev import demo
from seglake.errors import NotFound, SeglakeError, ValidationError
from seglake.lifecycle import gc
from seglake.lifecycle.gc import report as gcreport
from seglake import faults
from seglake.meta.kv import KV, Compacted, Put
from seglake.meta.segments import DROPPED, FLUSHED, Binlog, Segment
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=2, rows=50, dim=4)
DAY = 86400


def _age(store, key, seconds=2 * DAY):
    t = time.time() - seconds
    os.utime(os.path.join(store.uri, key), (t, t))


def _all(store):
    return {o.key for o in store.list("") if not o.key.startswith("_gc/")}


@pytest.fixture
def coll(meta, store):
    c, _ = demo.seed(meta, store, SMALL)
    for o in store.list(""):
        _age(store, o.key)
    return c


def _orphans(store, c, n, seg=9):
    keys = [layout.insert_log(c, 9, seg, 100, i) for i in range(1, n + 1)]
    for k in keys:
        store.put(k, b"orphan " + k.encode())
        _age(store, k)
    return keys


def _flush_record(meta, coll, key):
    """A flush commits a record naming `key` (an insert log written before it)."""
    p = layout.parse_key(key)
    meta.segments.save([Segment(segment_id=p.segment_id, collection_id=p.collection_id, partition_id=p.partition_id,
                                channel=coll.vchannels[0], state=FLUSHED, num_rows=1,
                                binlogs={p.field_id: (Binlog(p.log_id, 10, 1),)})])


# -- the report the sweep reads is the one its mark wrote ------------------------------------------
def test_a_part_another_mark_of_the_same_run_id_wrote_is_refused(meta, store, coll):
    """Mark 1 and mark 2 of one run id (a retried task, a cleared DAG run) write the same
    part index with the same counts; a late write of mark 1 (a zombie task) leaves mark
    1's candidates under mark 2's summary, whose re-check starts at mark 2's revision and
    cannot see the record committed between the two marks."""
    c = coll.collection_id
    f, g = layout.insert_log(c, 9, 9, 100, 1), layout.insert_log(c, 9, 8, 100, 1)
    store.put(f, b"f")
    _age(store, f)
    m1 = gc.mark(meta, store, gc.GCOptions(), run_id="same")
    assert [x["path"] for x in m1.candidates] == [f]
    stale = {kind: store.get(gc.part_key("same", kind, 0)) for kind in (gc.CANDIDATES, gc.DROPPED_PARTS)}
    _flush_record(meta, coll, f)          # f is referenced from now on
    store.put(g, b"g")                    # and another orphan keeps the counts equal
    _age(store, g)
    m2 = gc.mark(meta, store, gc.GCOptions(), run_id="same")
    assert [x["path"] for x in m2.candidates] == [g] and m2.refs_revision > m1.refs_revision
    for kind, data in stale.items():      # mark 1's task writes its part late
        store.put(gc.part_key("same", kind, 0), data)
    with pytest.raises(gc.GCError, match="not the file its mark wrote"):
        gc.sweep(meta, store, "same")
    assert store.exists(f) and store.exists(g)


@pytest.mark.parametrize("how", ["edited", "listed_twice", "missing", "extra"])
def test_a_tampered_report_deletes_nothing_it_does_not_vouch_for(meta, store, coll, how):
    c = coll.collection_id
    orphans = _orphans(store, c, 3)
    m = gc.mark(meta, store, gc.GCOptions(), run_id="t")
    assert sorted(x["path"] for x in m.candidates) == orphans
    live = min(gc.load_references(meta, store).files)  # a file a live record references
    info = store.head(live)
    row = {"path": live, "size": info.size, "mtime": info.mtime, "reason": gc.ORPHAN, "collection_id": c,
           "segment_id": layout.parse_key(live).segment_id}
    part = gc.part_key("t", gc.CANDIDATES, 0)
    summary = json.loads(store.get("_gc/t/summary.json"))
    if how == "edited":        # a referenced file in place of an orphan, the counts unchanged
        rows = gcreport._get_parquet(store, part)
        gcreport._put_parquet(store, part, gcreport._REPORT_COLUMNS, [row] + rows[1:])
    elif how == "listed_twice":
        summary["report_parts"] *= 2
        store.put("_gc/t/summary.json", json.dumps(summary).encode())
    elif how == "missing":
        store.delete_checked([part])
    else:                      # a part nobody listed: never read
        gcreport._put_parquet(store, gc.part_key("t", gc.CANDIDATES, 7), gcreport._REPORT_COLUMNS, [row])
        gcreport._put_parquet(store, gc.part_key("t", gc.DROPPED_PARTS, 7), gcreport._DROPPED_COLUMNS, [])
    if how == "extra":
        assert gc.sweep(meta, store, "t").deleted == 3 and not any(store.exists(k) for k in orphans)
    else:
        with pytest.raises((gc.GCError, NotFound), match="not the file its mark wrote|twice|missing"):
            gc.sweep(meta, store, "t")
        assert all(store.exists(k) for k in orphans if how != "missing" or k != orphans[0])
    assert store.exists(live) and store.get(live)


def test_a_dry_run_report_is_never_swept(meta, store, coll):
    orphans = _orphans(store, coll.collection_id, 2)
    dry = gc.run(meta, store, gc.GCOptions(dry_run=True), run_id="dry")
    assert dry["mark"]["candidates"] == 2
    with pytest.raises(gc.GCError, match="dry run"):
        gc.sweep(meta, store, "dry")
    assert all(store.exists(k) for k in orphans)
    assert gc.run(meta, store, gc.GCOptions(), run_id="real")["sweep"]["deleted"] == 2


@pytest.mark.parametrize("bad", ["a/b", "../x", "x/../y", ".x", "-x", "", "x\n", "x y", "\u00e9", "x" * 201, 7])
def test_run_ids_full_match_their_pattern_before_any_side_effect(meta, store, coll, bad):
    orphans = _orphans(store, coll.collection_id, 1)
    for call in (lambda: gc.run(meta, store, gc.GCOptions(), run_id=bad),
                 lambda: gc.mark(meta, store, gc.GCOptions(), run_id=bad),
                 lambda: gc.sweep(meta, store, bad), lambda: gc.check_run_id(None)):
        with pytest.raises(ValidationError, match="run id"):
            call()
    assert not any(o.key.startswith("_gc/") for o in store.list("")) and store.exists(orphans[0])
    assert gc.check_run_id("manual__2026-11-22T12_00_00.000_00_00") and gc.check_run_id("x" * 200)


# -- the sweep's re-check: the changes since the mark, never a scan per batch ---------------------------
def _count_segment_scans(monkeypatch, meta) -> list:
    calls = []
    real = KV.range

    def spy(self, prefix, **kw):
        if prefix.startswith(meta.keys.segments_prefix()) or meta.keys.segments_prefix().startswith(prefix):
            calls.append((prefix, kw.get("min_mod_revision")))
        return real(self, prefix, **kw)

    monkeypatch.setattr(KV, "range", spy)
    return calls


def test_the_recheck_reads_the_changes_since_the_mark_not_every_record(meta, store, coll, monkeypatch):
    c = coll.collection_id
    meta.segments.save([Segment(segment_id=50_000 + i, collection_id=c, partition_id=8, channel=coll.vchannels[0],
                                state=FLUSHED, num_rows=1) for i in range(300)])  # records nobody changes
    orphans = _orphans(store, c, 6)
    m = gc.mark(meta, store, gc.GCOptions())
    _flush_record(meta, coll, orphans[0])                       # after the mark: a flush names one
    meta.kv.put(meta.keys.collection(c) + "-unrelated", b"x")   # and unrelated keys change
    scans = _count_segment_scans(monkeypatch, meta)
    s = gc.sweep(meta, store, m.run_id, batch=2)
    assert store.exists(orphans[0]) and not any(store.exists(k) for k in orphans[1:])
    assert s.deleted == 5 and s.rechecked_kept == 1
    assert scans == [], f"the re-check scanned the segment records {len(scans)} times"


def test_a_change_between_batches_is_seen_by_the_next_batch(meta, store, coll, monkeypatch):
    c = coll.collection_id
    orphans = _orphans(store, c, 4)
    m = gc.mark(meta, store, gc.GCOptions())
    batches = []
    real = faults.point

    def point(name):
        if name == "gc.sweep.batch":
            batches.append(name)
            if len(batches) == 2:   # right before the second batch: a flush names its first file
                _flush_record(meta, coll, orphans[2])
        return real(name)

    monkeypatch.setattr(faults, "point", point)
    s = gc.sweep(meta, store, m.run_id, batch=2)
    assert len(batches) == 2 and s.deleted == 3 and s.rechecked_kept == 1 and store.exists(orphans[2])


def test_etcd_compaction_past_the_mark_never_hides_a_change(meta, store, coll, monkeypatch):
    """The history the re-check reads is gone: it reads the current state instead (every
    record whose mod_revision is above the mark's), never 'nothing changed'."""
    c = coll.collection_id
    orphans = _orphans(store, c, 3)
    m = gc.mark(meta, store, gc.GCOptions())
    _flush_record(meta, coll, orphans[1])
    meta.kv.put(meta.keys.collection(c) + "-later", b"x")  # history moves on ...
    meta.kv._client.compact(meta.kv.revision())              # ... and is compacted past the flush
    compacted = []
    real = KV.changes

    def changes(self, *a, **kw):
        try:
            return real(self, *a, **kw)
        except Compacted as e:
            compacted.append(e)
            raise

    monkeypatch.setattr(KV, "changes", changes)
    s = gc.sweep(meta, store, m.run_id)
    assert compacted, "the history was not compacted: the fallback was not exercised"
    assert store.exists(orphans[1]) and not store.exists(orphans[0]) and not store.exists(orphans[2])
    assert s.deleted == 2 and s.rechecked_kept == 1


def test_kv_changes_is_complete_up_to_its_fence_and_refuses_a_compacted_history(meta):
    k = meta.keys
    lo, hi = k.gc() + "/", k.snapshots_prefix()[:-1] + "0"
    since = meta.kv.revision() + 1
    a, b, gone = k.segment(1, 2, 3), k.segment(1, 2, 4), k.snapshot(1, "s")
    meta.kv.put(a, b"1")
    meta.kv.write([Put(b, b"1"), Put(gone, b"x")])
    meta.kv.put(a, b"2")
    meta.kv.delete(gone)
    meta.kv.put(k.collection(1), b"outside the range")
    changed, upto = meta.kv.changes(lo, hi, since, k.gc("fence", "t1"))
    assert {key: (kv and kv.value) for key, kv in changed.items()} == {a: b"2", b: b"1", gone: None}
    assert upto == meta.kv.revision() == meta.kv.get(k.gc("fence", "t1")).mod_revision
    again, upto2 = meta.kv.changes(lo, hi, upto + 1, k.gc("fence", "t2"))
    assert again == {} and upto2 == upto + 1
    with pytest.raises(ValueError, match="fence"):
        meta.kv.changes(lo, hi, since, k.collection(2))
    meta.kv._client.compact(meta.kv.revision())
    with pytest.raises(Compacted):
        meta.kv.changes(lo, hi, since, k.gc("fence", "t3"))


def test_a_drop_reverted_between_mark_and_sweep_keeps_files_and_record(meta, store, coll):
    seg = min(meta.segments.list(coll.collection_id), key=lambda s: s.segment_id)
    meta.segments.transition([seg.ref], DROPPED, now=time.time() - 2 * DAY)
    m = gc.mark(meta, store, gc.GCOptions())
    files = {f.key for f in layout.segment_files(seg)}
    assert {x["path"] for x in m.candidates} == files
    meta.kv.put(meta.segments.key(seg), meta.kv.get(meta.segments.key(seg)).value.replace(b'"Dropped"', b'"Flushed"'))
    assert meta.segments.get(*seg.ref).state == FLUSHED
    s = gc.sweep(meta, store, m.run_id)
    assert s.deleted == 0 and s.rechecked_kept == len(files) and all(store.exists(k) for k in files)
    assert s.dropped_records_removed == 0 and meta.segments.get(*seg.ref).state == FLUSHED


def test_a_listing_page_that_fails_mid_way_fails_the_mark_before_any_report(meta):
    """moto for the injection (the error on every try of the second page of the store's
    listing): the mark raises, no summary exists, so nothing can be swept."""
    moto = pytest.importorskip("moto")
    import boto3
    from botocore.exceptions import ClientError
    from seglake.storage.s3 import S3Store

    with moto.mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="gc-mark")
        store = S3Store("s3://gc-mark/root", client=client)
        demo.seed(meta, store, SMALL)
        for i in range(1_100):
            client.put_object(Bucket="gc-mark", Key=f"root/insert_log/1/9/9/100/{i}", Body=b"o")
        calls = {"n": 0}

        def fail_second_page(params, **_):
            if params.get("ContinuationToken"):
                calls["n"] += 1
                raise ClientError({"Error": {"Code": "SlowDown", "Message": "injected"}}, "ListObjectsV2")

        client.meta.events.register("before-parameter-build.s3.ListObjectsV2", fail_second_page)
        from seglake.storage import s3 as s3mod
        with pytest.MonkeyPatch.context() as mp:  # the same tries, without their waits
            mp.setattr(s3mod, "RETRY_BASE", 0.001)
            mp.setattr(s3mod, "RETRY_CAP", 0.002)
            with pytest.raises(SeglakeError, match="SlowDown"):
                gc.mark(meta, store, gc.GCOptions(missing_tolerance=0, force=True), run_id="broken")
        assert calls["n"] == s3mod.RETRY_ATTEMPTS  # that page, tried and retried, never skipped
        client.meta.events.unregister("before-parameter-build.s3.ListObjectsV2", fail_second_page)
        assert not store.exists("_gc/broken/summary.json") and not store.exists("_gc/latest.json")
        with pytest.raises(NotFound):
            gc.sweep(meta, store, "broken")
        assert sum(1 for _ in store.list("insert_log/1/9/")) == 1_100


@pytest.mark.parametrize("batch", [0, -1, True, 1.5, 10**10])
def test_a_sweep_batch_out_of_range_is_refused_before_any_delete(meta, store, coll, batch):
    """A batch of -1 once swept nothing and still removed the Dropped record whose files
    it never deleted."""
    seg = min(meta.segments.list(coll.collection_id), key=lambda s: s.segment_id)
    meta.segments.transition([seg.ref], DROPPED, now=time.time() - 2 * DAY)
    orphans = _orphans(store, coll.collection_id, 2)
    m = gc.mark(meta, store, gc.GCOptions())
    assert m.counts.dropped_segments == 1
    with pytest.raises(ValidationError, match="batch"):
        gc.sweep(meta, store, m.run_id, batch=batch)
    assert meta.segments.get(*seg.ref).state == DROPPED
    assert all(store.exists(k) for k in orphans) and all(store.exists(f.key) for f in layout.segment_files(seg))


@pytest.mark.parametrize("cid", [0, -1, True, 2**63, "1"])
def test_a_collection_scope_that_is_no_collection_id_is_refused(meta, store, coll, cid):
    """Collection ids start at 1: a scope of 0 meant 'one collection' inline but 'the whole
    store' to the Spark job (--collection-id 0)."""
    with pytest.raises(ValidationError, match="collection_id"):
        gc.run(meta, store, gc.GCOptions(collection_id=cid))
    assert not any(o.key.startswith("_gc/") for o in store.list(""))


def test_compaction_between_fixing_the_marks_revision_and_reading_it_fails_the_mark(meta, store, coll, settings,
                                                                                  monkeypatch):
    """Both engines read references at one fixed revision: compacted before (or while)
    they are read, the read fails and so does the mark (no report), inline and in the
    Spark engine's reference tasks."""
    from seglake.lifecycle.gc import dist as gcdist
    from seglake.meta.segments import Segments

    orphans = _orphans(store, coll.collection_id, 2)
    real = Segments.list

    def compact_then_list(self, *a, **kw):
        self.kv.put(self.keys.collection(10**6) + "-later", b"x")  # history moves past the revision
        self.kv._client.compact(self.kv.revision())
        return real(self, *a, **kw)

    monkeypatch.setattr(Segments, "list", compact_then_list)
    with pytest.raises(gc.GCError, match="references could not be read completely.*compacted"):
        gc.run(meta, store, gc.GCOptions())
    monkeypatch.setattr(Segments, "list", real)
    assert not any(o.key.startswith("_gc/") for o in store.list("")) and all(store.exists(k) for k in orphans)
    # the Spark engine's reference task for a key range, at a revision compacted since
    rev = meta.kv.revision()
    (lo, hi), = gcdist.segment_ranges(meta, rev)
    plan = gcdist.MarkPlan("c", time.time(), 0.0, rev, None, 0.0, gc.References(revision=rev), gc.WalView(),
                           settings.to_env())
    assert sum(1 for _ in gcdist.segment_rows(plan, lo, hi)) > 0
    meta.kv.put(meta.keys.collection(coll.collection_id) + "-later", b"x")
    meta.kv._client.compact(meta.kv.revision())
    with pytest.raises(Exception, match="compacted"):
        list(gcdist.segment_rows(plan, lo, hi))
