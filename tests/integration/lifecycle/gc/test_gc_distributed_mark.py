"""The distributed GC (spark/jobs/gc_scan.py + gc_sweep.py, seglake.lifecycle.gcdist) on real
etcd, a local store and SeaweedFS S3, with a real Spark (local[2], in this process):

- the Spark mark's report and summary equal the inline mark's (one `gc.decide`), also when
  segment records are read in many key ranges and prefixes are listed in many key ranges;
- fail closed: one reference task that cannot read its part fails the mark, nothing to sweep;
- the sweep on the executors keeps what became referenced since the mark, never deletes an
  unrecognised key (even one slipped into the report), and its counts are true;
- the driver never collects per-object rows."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from seglake.dev import demo
from seglake.config import Settings
from seglake.errors import NotFound
from seglake.lifecycle import gc, snapshot
from seglake.lifecycle.gc import report as gcreport
from seglake.lifecycle.gc import dist as gcdist
from seglake.lifecycle.gc import listing as gclisting
from seglake.meta import Meta
from seglake.meta.segments import DROPPED, FLUSHED, Binlog, Segment
from seglake.storage import layout, open_store

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[4]
SMALL = demo.SeedParams(partitions=2, segments=3, rows=50, dim=4)
COMPARED = ("referenced", "candidates", "candidate_bytes", "kept", "unrecognised", "unknown_segment",
            "unreadable_directories", "dropped", "by_collection_reason", "wal")
ODD = ["README", "notes/readme.txt", "insert_log/README.md", "index_files/77/x", "snapshots/5/metadata/9.json"]


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("test-gc-distributed")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
         .config("spark.task.maxFailures", "1").getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


@pytest.fixture(params=["local", "s3"])
def env(request, settings, s3_server, root_prefix):
    """(settings, meta, store) on a local store or on SeaweedFS S3, one etcd root."""
    if request.param == "s3":
        settings = Settings.from_dict({**settings.to_dict(secrets=True), "store_uri": f"s3://seglake-test/{root_prefix}",
                                       "s3_endpoint": s3_server.endpoint, "s3_access_key": s3_server.access_key,
                                       "s3_secret_key": s3_server.secret_key})
    store = open_store(settings)
    if request.param == "s3":
        store.ensure_bucket()
    meta = Meta.from_settings(settings)
    yield settings, meta, store
    meta.close()


def _opts(**kw):
    # tolerance 0 (forced): every object written before the mark is old enough (S3 has no utime)
    return gc.GCOptions(missing_tolerance=0, drop_tolerance=0, force=True, **kw)


def _seed(meta, store):
    """Two collections, a snapshot, a Dropped segment, orphans (also of index files and in
    a segment directory), odd keys that are not seglake's."""
    import dataclasses
    c1, _ = demo.seed(meta, store, dataclasses.replace(SMALL, name="a"))
    c2, _ = demo.seed(meta, store, dataclasses.replace(SMALL, name="b"))
    snapshot.create(meta, store, "a", "s1")
    segs = sorted(meta.segments.list(c2.collection_id), key=lambda s: s.segment_id)
    meta.segments.transition([segs[0].ref], DROPPED, now=time.time() - 10)
    orphans = [f"insert_log/{c1.collection_id}/9/{i}/100/1" for i in range(7)] + \
        [f"delta_log/{c2.collection_id}/{segs[1].partition_id}/{segs[1].segment_id}/999", "index_files/1/1/9/424242/x"]
    for k in orphans + ODD:
        store.put(k, b"orphan " + k.encode())
    time.sleep(0.05)
    return c1, c2, segs[0], orphans


def _spark_mark(spark, settings, meta, store, run_id, opts=None, **kw):
    import gc_scan
    return gc_scan.spark_mark(spark, meta, store, opts or _opts(), run_id, settings.to_env(), **kw)


def _compare(store, a: str, b: str):
    sa, sb = (json.loads(store.get(f"_gc/{r}/summary.json")) for r in (a, b))
    assert {k: sa[k] for k in COMPARED} == {k: sb[k] for k in COMPARED}
    assert sa["listed"] - sa["internal"] == sb["listed"] - sb["internal"]
    ra, rb = (sorted(gc.read_report(store, r), key=lambda c: c["path"]) for r in (a, b))
    assert ra == rb
    return sa, ra


# each split on one store kind (the store is the listing's business, the split the mark's;
# both stores with both splits doubled the module's slowest test for no new path)
@pytest.mark.parametrize("env,split", [("local", {}), ("s3", {"segment_range_keys": 2, "split_at": 3, "parts": 5})],
                         indirect=["env"])
def test_spark_mark_equals_inline_mark(spark, env, split):
    settings, meta, store = env
    c1, c2, dropped, orphans = _seed(meta, store)
    if split:  # many key ranges really were read
        rev = meta.kv.revision()
        assert len(gcdist.segment_ranges(meta, rev, split["segment_range_keys"])) > 4
    inline = gc.mark(meta, store, _opts(dry_run=True), run_id="inline")
    m = _spark_mark(spark, settings, meta, store, "spark", _opts(dry_run=True), **split)
    assert m.candidates == [] and m.engine == "spark"  # the driver kept no candidate row
    s, report = _compare(store, "spark", "inline")
    dropped_files = {f.key for f in layout.segment_files(dropped)}
    assert {c["path"] for c in report} == set(orphans) | dropped_files
    assert s["dropped"]["segments"] == 1 and s["unrecognised"]["files"] == len(ODD)
    assert s["referenced"] == inline.counts.referenced > 0
    # one collection: the one with the snapshot on one store, the one with the Dropped segment on the other
    for scope in ((c2 if split else c1).collection_id,):
        gc.mark(meta, store, _opts(dry_run=True, collection_id=scope), run_id=f"inline-{scope}")
        _spark_mark(spark, settings, meta, store, f"spark-{scope}", _opts(dry_run=True, collection_id=scope), **split)
        _compare(store, f"spark-{scope}", f"inline-{scope}")


def test_spark_mark_then_spark_sweep_deletes_exactly_the_candidates(spark, env):
    import gc_sweep
    settings, meta, store = env
    _, c2, dropped, orphans = _seed(meta, store)
    before = {o.key for o in store.list("")}
    refs = gc.load_references(meta, store)
    m = _spark_mark(spark, settings, meta, store, "run1", segment_range_keys=2, split_at=3, parts=3)
    assert len(m.report_parts) >= 2
    out = gc_sweep.spark_sweep(spark, store, "run1", settings.to_env())
    doomed = set(orphans) | {f.key for f in layout.segment_files(dropped)}
    after = {o.key for o in store.list("")}
    assert before - after == doomed and out.deleted == len(doomed) and out.error_count == 0
    assert refs.files <= after and all(k in after for k in ODD)
    assert out.dropped_records_removed == 1
    with pytest.raises(NotFound):
        meta.segments.get(*dropped.ref)
    swept = gc.latest_summary(store)["swept"]
    assert swept["deleted"] == len(doomed) and swept["dropped"]["segments"] == 1
    # re-running the sweep is idempotent and counts only what it did
    again = gc_sweep.spark_sweep(spark, store, "run1", settings.to_env())
    assert again.deleted == 0 and again.already_gone == len(doomed) and again.dropped_records_removed == 0


def test_inline_sweep_reads_a_spark_report_and_a_legacy_one(spark, settings, meta, store):
    _, _, dropped, orphans = _seed(meta, store)
    _spark_mark(spark, settings, meta, store, "multi", parts=4)
    assert len(gc.report_parts(gc.latest_summary(store))) >= 2
    half = orphans[:3]
    # a legacy report (one candidates.parquet + dropped.json, no part list) of the same run shape
    legacy = [c for c in gc.read_report(store, "multi") if c["path"] in half]
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(legacy), sink)
    store.put("_gc/legacy/candidates.parquet", sink.getvalue())
    store.put("_gc/legacy/dropped.json", json.dumps({"segments": []}).encode())
    s = {k: v for k, v in gc.latest_summary(store).items() if k != "report_parts"}
    store.put("_gc/legacy/summary.json", json.dumps({**s, "run_id": "legacy", "candidates": len(legacy)}).encode())
    out = gc.sweep(meta, store, "legacy")
    assert out.deleted == 3 and not any(store.exists(k) for k in half)
    out = gc.sweep(meta, store, "multi")
    assert out.deleted == len(orphans) - 3 + len(list(layout.segment_files(dropped))) and out.already_gone == 3
    assert out.dropped_records_removed == 1


def test_a_damaged_report_part_stops_the_sweep_before_deleting(spark, settings, meta, store):
    _, _, _, orphans = _seed(meta, store)
    m = _spark_mark(spark, settings, meta, store, "dmg", parts=2)
    idx = m.report_parts[0][0]
    key = gc.part_key("dmg", gc.CANDIDATES, idx)
    rows = gcreport._get_parquet(store, key)
    gcreport._put_parquet(store, key, gcreport._REPORT_COLUMNS, rows[:-1])  # a row short
    with pytest.raises(gc.GCError, match="damaged"):
        gc.sweep_part(meta, store, "dmg", m.refs_revision, m.report_parts[0], gc.References(revision=m.refs_revision),
                      gc.SweepResult())
    assert all(store.exists(r["path"]) for r in rows[:-1])


def test_a_reference_task_that_fails_fails_the_mark(spark, settings, meta, store):
    """A corrupt segment record in one key range, or an unreadable manifest of one of two
    snapshots, or a symlink in the store: the task fails, the job fails, no summary."""
    c1, c2, dropped, orphans = _seed(meta, store)
    snapshot.create(meta, store, "b", "s2")
    ok = _spark_mark(spark, settings, meta, store, "ok", segment_range_keys=2)
    assert ok.counts.candidates > 0
    # 1. one segment record in its own key range is not decodable
    bad_key = meta.keys.segment(c1.collection_id, 999, 999)
    meta.kv.put(bad_key, b"{not json")
    with pytest.raises(Exception, match="references could not|Py4J|Job aborted|decode|999"):
        _spark_mark(spark, settings, meta, store, "bad-seg", segment_range_keys=2)
    meta.kv.delete(bad_key)
    # 2. one manifest truncated
    rec = meta.snapshots.list(c2.collection_id).__next__()
    man = snapshot.read_metadata(store, rec)["manifests"][0]["key"]
    good = store.get(man)
    store.put(man, good[:20])
    with pytest.raises(Exception):
        _spark_mark(spark, settings, meta, store, "bad-manifest")
    store.put(man, good)
    # 3. a symlink inside a collection prefix
    link = Path(store.uri) / "insert_log" / str(c1.collection_id) / "alias"
    os.symlink(Path(store.uri) / "insert_log" / str(c2.collection_id), link)
    with pytest.raises(Exception, match="symlink"):
        _spark_mark(spark, settings, meta, store, "bad-link", split_at=1)
    link.unlink()
    for run in ("bad-seg", "bad-manifest", "bad-link"):
        assert not store.exists(f"_gc/{run}/summary.json")
        with pytest.raises(NotFound):
            gc.sweep(meta, store, run)
    assert all(store.exists(k) for k in orphans)


def test_a_fault_in_one_manifest_task_fails_the_spark_submit_job(settings, meta, store):
    """Through a real spark-submit with SEGLAKE_FAULTS reaching the executors."""
    import subprocess
    _, _, _, orphans = _seed(meta, store)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    env.update(settings.to_env())
    env.update({"PYTHONPATH": f"{REPO / 'include'}:{env.get('PYTHONPATH', '')}", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
                "SEGLAKE_FAULTS": "gc.mark.manifest:raise"})
    cmd = ["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=2", str(REPO / "spark" / "jobs" / "gc_scan.py"),
           "--run-id", "faulty", "--missing-tolerance", "0", "--drop-tolerance", "0", "--force", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "injected fault at gc.mark.manifest" in p.stderr + p.stdout
    assert not store.exists("_gc/faulty/summary.json") and all(store.exists(k) for k in orphans)


def test_the_sweep_keeps_what_became_referenced_since_the_mark(spark, env):
    import gc_sweep
    settings, meta, store = env
    c1, _, dropped, orphans = _seed(meta, store)
    _spark_mark(spark, settings, meta, store, "race", parts=3)
    assert {c["path"] for c in gc.read_report(store, "race")} >= set(orphans)
    # after the mark: a flush commits a record naming an orphan file (written before its record)
    key = orphans[0]
    p = layout.parse_key(key)
    meta.segments.save([Segment(segment_id=p.segment_id, collection_id=p.collection_id, partition_id=p.partition_id,
                                channel=c1.vchannels[0], state=FLUSHED, num_rows=1,
                                binlogs={p.field_id: (Binlog(p.log_id, 10, 1),)})])
    # ... and the Dropped segment's record is written again (it is judged afresh next run)
    kv = meta.kv.get(meta.keys.segment(*dropped.ref))
    meta.kv.put(kv.key, kv.value)
    out = gc_sweep.spark_sweep(spark, store, "race", settings.to_env())
    assert store.exists(key)                                   # referenced since the mark: kept
    assert all(store.exists(f.key) for f in layout.segment_files(dropped))  # its record changed: kept
    assert meta.segments.get(*dropped.ref).state == DROPPED    # record kept too
    assert all(store.exists(k) for k in ODD)
    assert out.rechecked_kept == 1 + len(list(layout.segment_files(dropped)))
    assert out.dropped_records_kept == 1 and out.dropped_records_removed == 0
    assert out.deleted == len(orphans) - 1
    assert not any(store.exists(k) for k in orphans if k != key)
    # an unrecognised key in a report row is never collectable, whatever the row says
    row = {"path": "notes/readme.txt", "size": 1, "mtime": 0.0, "reason": gc.ORPHAN, "collection_id": 1,
           "segment_id": 1}
    assert not gc.still_collectable(row, gc.References())


def test_a_report_part_not_written_by_its_mark_is_refused_by_the_spark_sweep(spark, env):
    """A part replaced by a copy of another part (same counts), on the executors: that
    task fails before deleting anything in it, the job fails."""
    import gc_sweep
    settings, meta, store = env
    _seed(meta, store)
    for i in range(40):  # enough orphans that several parts hold some
        store.put(f"insert_log/1/8/{5000 + i}/100/1", b"x")
    time.sleep(0.05)
    m = _spark_mark(spark, settings, meta, store, "swap", parts=6)
    a, b = sorted(m.report_parts, key=lambda p: p[1])[-2:]
    victims = [c["path"] for c in gc.read_part(store, "swap", b)[0]]
    assert victims
    summary = json.loads(store.get("_gc/swap/summary.json"))  # b's counts made a's: only the digest differs
    summary["report_parts"] = [p if p[0] != b[0] else [b[0], a[1], a[2], *b[3:]] for p in summary["report_parts"]]
    store.put("_gc/swap/summary.json", json.dumps(summary).encode())
    for kind in (gc.CANDIDATES, gc.DROPPED_PARTS):
        store.put(gc.part_key("swap", kind, b[0]), store.get(gc.part_key("swap", kind, a[0])))
    with pytest.raises(Exception, match="not the file its mark wrote"):
        gc_sweep.spark_sweep(spark, store, "swap", settings.to_env())
    assert all(store.exists(k) for k in victims)
    assert gc.latest_summary(store)["swept"] is None


def test_spark_and_inline_marks_agree_on_odd_keys_and_colliding_prefixes(spark, env):
    """Keys with '%', spaces, unicode, a 200-character name, an object named like a
    collection's prefix (S3), collection c's prefix inside c*10's: both engines list each
    key once and judge it alike, whole store and scoped to c (which never reaches c*10)."""
    settings, meta, store = env
    c1, _, _, _ = _seed(meta, store)
    c = c1.collection_id
    odd = [f"insert_log/{c}/9/9/100/%31", f"insert_log/{c}/9/9/100/a b", f"insert_log/{c}/9/9/100/\u00fc",
           f"insert_log/{c}/9/9/100/" + "9" * 200, "index_files/1/1/9/9/x y%"]
    if store.uri.startswith("s3://"):
        odd += [f"insert_log/{c}", f"insert_log/{c}/9", f"delta_log/{c}/9/9"]  # objects named like prefixes
    neighbour = [f"insert_log/{c}0/9/9/100/1", f"delta_log/{c}0/9/9/1", f"stats_log/{c}1/9/9/100/1"]
    for k in odd + neighbour:
        store.put(k, b"odd " + k.encode())
    time.sleep(0.05)
    for scope in (None, c):
        name = f"odd-{scope}"
        gc.mark(meta, store, _opts(dry_run=True, collection_id=scope), run_id=f"inline-{name}")
        _spark_mark(spark, settings, meta, store, f"spark-{name}", _opts(dry_run=True, collection_id=scope),
                    split_at=2, segment_range_keys=2, parts=5)
        s, report = _compare(store, f"spark-{name}", f"inline-{name}")
        paths = {r["path"] for r in report}
        assert len(report) == len(paths) and not paths & set(odd)
        if scope is None:
            assert set(neighbour) <= paths and s["unrecognised"]["files"] == len(ODD) + len(odd)
        else:
            assert not paths & set(neighbour) and all(r["collection_id"] == c for r in report)


def test_the_driver_never_collects_per_object_rows(spark, settings, meta, store, monkeypatch):
    """Every collect the mark and the sweep make on the driver returns at most LIMIT rows,
    on a store with many times more objects than that."""
    import gc_sweep
    from pyspark.rdd import RDD
    from pyspark.sql import DataFrame

    _seed(meta, store)
    for i in range(500):
        store.put(f"insert_log/1/2/{1000 + i}/100/1", b"x")
    assert sum(1 for _ in store.list("")) > 500
    LIMIT, seen = 64, []
    real_collect = RDD.collect

    def collect(self):
        out = real_collect(self)
        seen.append(len(out))
        assert len(out) <= LIMIT, f"the driver collected {len(out)} rows"
        return out

    def no(*a, **k):
        raise AssertionError("the driver must not pull DataFrame rows")

    monkeypatch.setattr(RDD, "collect", collect)
    for name in ("collect", "toPandas", "toLocalIterator", "take", "head", "tail"):
        monkeypatch.setattr(DataFrame, name, no)
    m = _spark_mark(spark, settings, meta, store, "rss", parts=4, split_at=50)
    assert m.counts.candidates >= 500
    out = gc_sweep.spark_sweep(spark, store, "rss", settings.to_env())
    assert out.deleted == m.counts.candidates and seen and max(seen) <= LIMIT


def test_a_large_prefix_cut_into_units_is_listed_exactly_once(any_store):
    """A delimiter walk cuts a prefix into units by leading child-name strings; the units
    and the objects found on the way list every object once, on both backends (SeaweedFS
    lists in directory order, not key order: no unit may rely on the order)."""
    keys = [f"insert_log/1/{p}/{s}/100/{n}" for p in (2, 3) for s in (5, 50, 500, 51, 6, 7) for n in (1, 2)]
    keys += ["insert_log/1/2.txt", "insert_log/1/2-x/1", "insert_log/1/20/1", "insert_log/1/a.txt", "insert_log/1/3/x"]
    for k in keys:
        any_store.put(k, b"x")
    whole = sorted(o.key for o in any_store.list("insert_log/1/"))
    assert whole == sorted(keys)
    for want, depth in ((1, 0), (2, 0), (4, 1), (16, 3), (100, 3)):
        units, got = [], []
        for kind, x in gclisting.split_units(any_store, "insert_log/1/", want, depth):
            if kind == "obj":
                got.append(x.key)
            else:
                units.append(x)
                got += [o.key for o in any_store.list_names(*x)]
        assert sorted(got) == whole, (want, depth, units)
        if want in (4, 16):  # (100 walks down to the files: every object found on the way)
            assert len(units) >= 4
    assert gclisting.name_groups(["1/", "10/", "11/", "12/", "2/", "3-x/", "3/"], 3) == ["1/", "10", "11", "12", "2", "3"]


def test_segment_ranges_cover_every_record_once(meta):
    recs = [Segment(segment_id=s, collection_id=c, partition_id=p, channel="ch_0", state=FLUSHED, num_rows=1)
            for c in (1, 12, 123) for p in (7, 70) for s in range(1, 30)]
    meta.segments.save(recs)
    meta.kv.put(meta.keys.segments_prefix() + "zz-odd", b"{}")
    rev = meta.kv.revision()
    meta.segments.save([Segment(segment_id=99_999, collection_id=1, partition_id=7, channel="ch_0",
                                state=FLUSHED, num_rows=1)])  # after the revision: not in it
    ranges = gcdist.segment_ranges(meta, rev, target=10)
    assert len(ranges) > 10
    got = [kv.key for lo, hi in ranges for kv in meta.kv.range(lo, end=hi, revision=rev, keys_only=True)]
    want = [kv.key for kv in meta.kv.range(meta.keys.segments_prefix(), revision=rev, keys_only=True)]
    assert got == want and len(want) == len(recs) + 1


def test_spark_job_counts_out_of_range_are_refused_before_any_work(spark, settings, meta, store):
    import gc_sweep
    from seglake.errors import ValidationError
    _, _, _, orphans = _seed(meta, store)
    for kw in ({"parts": -1}, {"split_at": -5}, {"segment_range_keys": -2}):
        with pytest.raises(ValidationError, match=next(iter(kw)).replace("_", "-")):
            _spark_mark(spark, settings, meta, store, "counts", **kw)
    assert not store.exists("_gc/counts/summary.json")
    gc.mark(meta, store, _opts(), run_id="counts")
    with pytest.raises(ValidationError, match="batch"):
        gc_sweep.spark_sweep(spark, store, "counts", settings.to_env(), batch=-1)
    assert all(store.exists(k) for k in orphans)
