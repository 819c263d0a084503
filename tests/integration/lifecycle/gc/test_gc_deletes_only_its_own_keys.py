"""GC safety against real etcd, real files and a real SeaweedFS S3: GC only ever deletes
keys of its own layout, never through a symlink, only the object its mark saw; reports
say what a real run does; two runs at once and a run killed mid-sweep lose nothing
referenced and count true."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from seglake.dev import demo
from seglake.lifecycle import gc, snapshot
from seglake.errors import SeglakeError, ValidationError
from seglake.meta.segments import DROPPED
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=2, rows=100, dim=4)
DAY = 86400
REPO = Path(__file__).resolve().parents[4]


def _age_path(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def _age(store, key, seconds=2 * DAY):
    _age_path(os.path.join(store.uri, key), seconds)


def _write(store, rel, data=b"x", age=2 * DAY):
    """A file written straight to disk (bytes or str name), bypassing the store's checks."""
    root = os.fsencode(store.uri)
    path = os.path.join(root, os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    _age_path(path, age)
    return path


@pytest.fixture
def coll(meta, store):
    c, _ = demo.seed(meta, store, SMALL)
    for o in store.list(""):
        _age(store, o.key)
    return c


def _referenced_exist(meta, store):
    refs = gc.load_references(meta, store)
    return all(store.exists(k) for k in refs.files)


def _drop(meta, segs, ago=2 * DAY):
    meta.segments.transition([s.ref for s in segs], DROPPED, now=time.time() - ago)


# -- 1. only keys of seglake's own layout ------------------------------------------------------
def _odd_local_keys(c):
    """Keys that look close to seglake's but are not its own (str or raw bytes names)."""
    return [
        "README", "notes/readme.txt", "insert_log/README.md", "wal/dml_0/00000000000000000001.frag",
        f"insert_log/{c}/9/9/100/01", f"insert_log/{c}/9/9/100/+2", f"insert_log/{c}/9/9/100/ 3",
        f"insert_log/{c}/9/9/100/4 ", f"insert_log/{c}/9/9/100/5\n", f"insert_log/{c}/9/9/100/\u0666",
        f"insert_log/{c}/9/9/100/\uff17", f"insert_log/{c}/09/9/100/1", f"insert_log/{c}/9/9/100/8.parquet",
        f"insert_log/{c}/9/9/100/99999999999999999999", f"insert_log/{c}/9/8/100/5/extra",
        f"insert_log/{c}/9/9/100/.seglake-tmp-7.123-abcd.0", f"delta_log/{c}/9/9/100/1", f"stats_log/{c}/9/9/1",
        f"insert_log/{c + 1000}", "insert_log/-1/9/9/100/1", f"Insert_log/{c}/9/9/100/1",
        "index_files/1/1/9/9/.hidden", "index_files/1/1/9/9/a b", "index_files/1/1/9/9/.seglake-tmp-x.1-ab.0",
        f"snapshots/{c}/metadata/999999.json", f"snapshots/{c}/metadata/01.json",
        f"snapshots/{c}/manifests/999999/0.avro", f"snapshots/{c}/manifests/1/0.avro.tmp",
        f"insert_log/{c}/9/9/100\\7",  # a name with a backslash next to the YOUNG real file 100/7
        b"insert_log/%d/9/9/100/\xff" % c, b"notes/\xfe\xff.bin", b"insert_log/%d/9/\xff/100/1" % c,
    ]


def _exists(store, rel):
    return os.path.lexists(os.path.join(os.fsencode(store.uri), os.fsencode(rel)))


@pytest.mark.parametrize("scope", ["store", "collection"])
def test_gc_never_deletes_keys_outside_its_layout_and_is_not_blocked_by_them(meta, store, coll, scope):
    c = coll.collection_id
    odd = _odd_local_keys(c)
    for k in odd:
        _write(store, k)
    orphan = _write(store, f"insert_log/{c}/9/9/100/3")
    young = _write(store, f"insert_log/{c}/9/9/100/7", age=0)
    cid = c if scope == "collection" else None
    dry = gc.run(meta, store, gc.GCOptions(dry_run=True, collection_id=cid))
    res = gc.run(meta, store, gc.GCOptions(collection_id=cid))
    assert [k for k in odd if not _exists(store, k)] == []
    assert not os.path.exists(orphan) and os.path.exists(young)
    assert _referenced_exist(meta, store)
    assert res["sweep"]["deleted"] == dry["mark"]["candidates"] == 1
    listed_odd = len(odd) if scope == "store" else sum(
        1 for k in odd if os.fsdecode(k).startswith((f"insert_log/{c}/", f"delta_log/{c}/", f"stats_log/{c}/",
                                                     f"snapshots/{c}/", "index_files/")))
    u = res["mark"]["unrecognised"]
    assert u["files"] == listed_odd and u["bytes"] == listed_odd
    assert len(u["sample"]) == min(gc.SAMPLE, listed_odd)
    json.dumps(gc.latest_summary(store), ensure_ascii=False).encode("utf-8")  # undecodable names: still UTF-8


def test_a_backslash_name_is_never_deleted_as_its_slash_twin(store):
    young = _write(store, "insert_log/1/2/3/100/1", b"young", age=0)
    odd = _write(store, "insert_log/1/2/3/100\\1", b"odd")
    errors = store.delete_many(["insert_log/1/2/3/100\\1"])
    assert errors and "not canonical" in errors[0].error
    assert os.path.exists(young) and os.path.exists(odd)
    for bad in ["/insert_log/1/2/3/100/1", "insert_log/1/2/3/100/1/", "insert_log//1/2/3/100/1"]:
        assert store.delete_checked([bad]).errors and os.path.exists(young)


def test_s3_gc_never_deletes_keys_outside_its_layout(meta, s3_store):
    c, _ = demo.seed(meta, s3_store, SMALL)
    cid = c.collection_id
    odd = ["README", "notes/readme.txt", "insert_log/README.md", "wal/dml_0/1.frag",
           f"insert_log//{cid}/9/9/100/1", f"/insert_log/{cid}/9/9/100/1", f"insert_log/{cid}/9/9/100//1",
           f"insert_log/{cid}/9/9/100%2F1", f"insert_log%2F{cid}/9/9/100/1", f"insert_log/{cid}/9/9/100/%31",
           f"insert_log\\{cid}\\9\\9\\100\\1", f"insert_log/{cid}/9/9/100/01", f"insert_log/{cid}/9/9/100/1 ",
           f"insert_log/{cid}/9/9/100/1\n", f"insert_log/{cid}/9/9/100/\u0661", f"insert_log/{cid}/9/9/100/1/x",
           f"snapshots/{cid}/metadata/424242.json", "index_files/1/1/9/9/a b"]
    raw = lambda k: f"{s3_store.base}/{k}"  # noqa: E731 - the exact key, unchecked
    for k in odd:
        s3_store.client.put_object(Bucket=s3_store.bucket, Key=raw(k), Body=b"o")
    orphan = f"insert_log/{cid}/9/9/100/2"
    s3_store.put(orphan, b"o")
    time.sleep(5.2)
    young = f"insert_log/{cid}/9/9/100/1"  # the key several odd ones "normalise" to
    put_at = time.time()
    s3_store.put(young, b"young")
    before = {o.key for o in s3_store.list("")}
    stored_odd = [k for k in odd if k in before]  # SeaweedFS itself folds '//', a leading '/' and '\\'
    assert len(stored_odd) >= 12
    started = time.time()
    res = gc.run(meta, s3_store, gc.GCOptions(missing_tolerance=5, force=True))
    after = {o.key for o in s3_store.list("")}
    # young is kept when the mark started within the tolerance of its write (a loaded machine may
    # start it later: then young is an orphan old enough, judged by this run's own clock)
    if started - put_at < 5:
        assert before - after == {orphan} and s3_store.get(young) == b"young"
    else:
        assert orphan in before - after <= {orphan, young}
    assert res["sweep"]["deleted"] == len(before - after) and res["mark"]["unrecognised"]["files"] == len(stored_odd)
    assert _referenced_exist(meta, s3_store)
    out = s3_store.delete_checked(["a//b", "/README", "README/"])
    assert len(out.errors) == 3 and not out.deleted


# -- 2. never through a symlink; only the object the mark saw --------------------------------------
@pytest.mark.parametrize("level", ["field_dir", "segment_dir", "collection_dir", "store_top"])
def test_a_symlink_swapped_in_after_the_mark_is_never_followed(meta, store, coll, tmp_path, level):
    c = coll.collection_id
    orphans = [f"insert_log/{c}/9/9/100/{i}" for i in range(3)]
    for k in orphans:
        _write(store, k, b"orphan")
    m = gc.mark(meta, store, gc.GCOptions())
    assert sorted(x["path"] for x in m.candidates) == orphans
    swapped = {"field_dir": f"insert_log/{c}/9/9/100", "segment_dir": f"insert_log/{c}/9",
               "collection_dir": f"insert_log/{c}", "store_top": "insert_log"}[level]
    outside = tmp_path / "outside"
    shutil.copytree(os.path.join(store.uri, swapped), outside, symlinks=True)  # same names, sizes, mtimes
    before = sorted(p.relative_to(outside) for p in outside.rglob("*") if p.is_file())
    shutil.rmtree(os.path.join(store.uri, swapped))
    os.symlink(outside, os.path.join(store.uri, swapped))
    s = gc.sweep(meta, store, m.run_id)
    assert sorted(p.relative_to(outside) for p in outside.rglob("*") if p.is_file()) == before
    assert s.deleted == 0 and s.changed_kept == 3 and s.errors == []


def test_a_symlink_at_the_file_itself_is_kept_and_its_target_untouched(meta, store, coll, tmp_path):
    c = coll.collection_id
    key = f"insert_log/{c}/9/9/100/1"
    path = _write(store, key, b"orphan")
    m = gc.mark(meta, store, gc.GCOptions())
    target = tmp_path / "precious"
    target.write_bytes(b"orphan")
    os.unlink(path)
    os.symlink(target, path)
    s = gc.sweep(meta, store, m.run_id)
    assert target.read_bytes() == b"orphan" and os.path.islink(path)
    assert s.deleted == 0 and s.changed_kept == 1


def test_an_object_changed_since_the_mark_is_kept_and_counted(meta, store, coll):
    c = coll.collection_id
    keys = [f"insert_log/{c}/9/9/100/{i}" for i in range(4)]
    for k in keys:
        _write(store, k, b"orphan")
    m = gc.mark(meta, store, gc.GCOptions())
    _write(store, keys[0], b"rewritten with other content")  # other size
    _age(store, keys[1], DAY * 3)  # same size, other mtime
    s = gc.sweep(meta, store, m.run_id)
    assert store.exists(keys[0]) and store.exists(keys[1])
    assert not store.exists(keys[2]) and not store.exists(keys[3])
    assert (s.deleted, s.changed_kept, s.already_gone) == (2, 2, 0)


# -- 15. reports say what a real run does --------------------------------------------------------
def test_dry_run_reports_dropped_segment_files_with_the_real_runs_totals(meta, store, coll):
    c = coll.collection_id
    segs = sorted(meta.segments.list(c), key=lambda s: s.segment_id)
    _drop(meta, segs[:2])
    orphans = [f"insert_log/{c}/9/{i}/100/1" for i in range(3)]
    for k in orphans:
        _write(store, k, b"orphan")
    dropped_files = [f for s in segs[:2] for f in layout.segment_files(s)]
    dry = gc.run(meta, store, gc.GCOptions(dry_run=True))
    d = dry["mark"]["dropped"]
    assert (d["segments"], d["files"], d["bytes"]) == (2, len(dropped_files), sum(f.size for f in dropped_files))
    assert all(store.exists(f.key) for f in dropped_files)
    dry_paths = {x["path"] for x in gc.read_report(store, dry["mark"]["run_id"])}
    assert dry_paths == set(orphans) | {f.key for f in dropped_files}
    real = gc.run(meta, store, gc.GCOptions())
    s = real["sweep"]
    assert (s["deleted"], s["deleted_bytes"]) == (dry["mark"]["candidates"], dry["mark"]["candidate_bytes"])
    assert (real["dropped"]["segments"], real["dropped"]["files"], real["dropped"]["bytes"]) == \
        (d["segments"], d["files"], d["bytes"])
    assert not any(store.exists(k) for k in dry_paths)
    assert sorted(x.segment_id for x in meta.segments.list(c)) == [x.segment_id for x in segs[2:]]
    assert _referenced_exist(meta, store)


def test_a_scoped_run_reports_index_files_of_unknown_segments(meta, store, coll):
    c = coll.collection_id
    unknown = "index_files/77/1/9/424242/centroids"
    _write(store, unknown, b"idx")
    res = gc.run(meta, store, gc.GCOptions(collection_id=c))
    assert store.exists(unknown)
    assert res["mark"]["unknown_segment"] == {"files": 1, "bytes": 3, "sample": [unknown]}
    assert "424242" in gc.format_summary(res)
    gc.run(meta, store, gc.GCOptions())  # the whole-store run judges it: an old orphan
    assert not store.exists(unknown)


def test_snapshot_files_of_unknown_snapshot_ids_are_not_collected(meta, store, coll):
    c = coll.collection_id
    rec = snapshot.create(meta, store, "demo", "s")
    strays = [layout.snapshot_manifest(c, rec.snapshot_id, 99),  # leftovers under a known snapshot id,
              layout.snapshot_attempt_manifest(c, rec.snapshot_id, 7, 0),  # e.g. a losing write attempt's
              layout.snapshot_attempt_metadata(c, rec.snapshot_id, 7)]
    foreign = [layout.snapshot_metadata(c, rec.snapshot_id + 1000), layout.snapshot_manifest(c, 5555, 0),
               layout.snapshot_attempt_manifest(c, 5555, 1, 0), layout.snapshot_attempt_metadata(c, 5555, 1)]
    for k in [*strays, *foreign]:
        _write(store, k, b"m")
    res = gc.run(meta, store, gc.GCOptions())
    assert not any(store.exists(k) for k in strays) and all(store.exists(k) for k in foreign)
    assert res["mark"]["unrecognised"]["files"] == len(foreign)
    assert snapshot.RefIndex.load(meta, store).files  # the snapshot still loads


def test_nan_and_infinite_tolerances_are_refused(meta, store, coll):
    orphan = _write(store, f"insert_log/{coll.collection_id}/9/9/100/1")
    for kw in ({"missing_tolerance": float("nan")}, {"drop_tolerance": float("inf"), "force": True},
               {"floor": float("nan")}, {"missing_tolerance": float("-inf"), "force": True}):
        with pytest.raises(ValidationError, match="finite"):
            gc.run(meta, store, gc.GCOptions(**kw))
    for ttl in (float("nan"), float("inf"), 0):
        with pytest.raises(ValidationError, match="ttl"):
            gc.pause(meta, None, ttl=ttl)
    assert os.path.exists(orphan)


# -- concurrency and kills --------------------------------------------------------------------
def _env(settings, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    env.update(settings.to_env())
    env["PYTHONPATH"] = f"{REPO / 'include'}:{env.get('PYTHONPATH', '')}"
    env.update(extra)
    return env


def _seed_garbage(meta, store, coll, n_orphans):
    c = coll.collection_id
    orphans = [f"insert_log/{c}/9/{i}/100/1" for i in range(n_orphans)]
    for k in orphans:
        _write(store, k, b"orphan")
    segs = sorted(meta.segments.list(c), key=lambda s: s.segment_id)[:2]
    _drop(meta, segs)
    garbage = set(orphans) | {f.key for s in segs for f in layout.segment_files(s)}
    return garbage, segs


def test_two_gc_processes_at_once_lose_nothing_and_count_each_file_once(meta, store, coll, settings):
    garbage, segs = _seed_garbage(meta, store, coll, 60)
    # each run waits before its first delete batch, so both marks see every candidate
    env = _env(settings, SEGLAKE_FAULTS="gc.sweep.batch:sleep=6")
    cmd = [sys.executable, "-m", "seglake.cli", "gc", "run", "--execute", "--json"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    results = [json.loads(o[0]) for o in outs]
    marked = [r["mark"]["candidates"] for r in results]
    assert max(marked) == len(garbage) and sum(marked) > len(garbage)  # both marked some of the same files
    assert sum(r["sweep"]["deleted"] for r in results) == len(garbage)
    assert sum(r["sweep"]["already_gone"] for r in results) == sum(marked) - len(garbage)
    assert sum(r["dropped"]["segments"] for r in results) == len(segs)
    assert not any(store.exists(k) for k in garbage)
    assert _referenced_exist(meta, store)
    assert not any(s.state == DROPPED for s in meta.segments.list(coll.collection_id))


def test_two_sweeps_of_one_report_in_threads_count_each_file_once(meta, store, coll):
    garbage, _ = _seed_garbage(meta, store, coll, 300)
    m = gc.mark(meta, store, gc.GCOptions())
    results = []
    threads = [threading.Thread(target=lambda: results.append(gc.sweep(meta, store, m.run_id, batch=50)))
               for _ in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sum(r.deleted for r in results) == len(garbage) and not any(r.errors for r in results)
    assert sum(r.dropped_records_removed for r in results) == 2
    assert _referenced_exist(meta, store)


SWEEP = """
import json, sys
from seglake.config import Settings
from seglake.lifecycle import gc
from seglake.meta import Meta
from seglake.storage import open_store
s = Settings.load()
with Meta.from_settings(s) as meta:
    print(json.dumps(gc.sweep(meta, open_store(s), sys.argv[1], batch=int(sys.argv[2])).summary()))
"""


@pytest.mark.parametrize("how", ["fault_kill_at_batch_3", "external_sigkill"])
def test_a_sweep_killed_mid_way_loses_nothing_and_the_rerun_counts_true(meta, store, coll, settings, how):
    garbage, segs = _seed_garbage(meta, store, coll, 60)
    m = gc.mark(meta, store, gc.GCOptions())
    assert m.summary()["candidates"] == len(garbage)
    fault = "gc.sweep.batch:kill@3" if how.startswith("fault") else "gc.sweep.batch:sleep=0.4"
    proc = subprocess.Popen([sys.executable, "-c", SWEEP, m.run_id, "10"], env=_env(settings, SEGLAKE_FAULTS=fault),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if how == "external_sigkill":
        deadline = time.time() + 60
        while sum(store.exists(k) for k in garbage) > len(garbage) - 15 and time.time() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    left = {k for k in garbage if store.exists(k)}
    assert 0 < len(left) < len(garbage)
    if how.startswith("fault"):
        assert len(left) == len(garbage) - 20  # two whole batches went before the kill
    assert _referenced_exist(meta, store)
    part = gc.latest_summary(store)["swept"]   # what it deleted before the kill, said as partial
    assert part is None or (part["partial"] is True and part["deleted"] <= len(garbage) - len(left))
    rerun = subprocess.run([sys.executable, "-c", SWEEP, m.run_id, "10"], env=_env(settings),
                           capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    s = json.loads(rerun.stdout)
    assert s["deleted"] == len(left) and s["already_gone"] == len(garbage) - len(left) and s["error_count"] == 0
    assert s["dropped"]["segments"] == len(segs)
    assert not any(store.exists(k) for k in garbage) and _referenced_exist(meta, store)
    assert gc.latest_summary(store)["swept"]["deleted"] == len(left)


# -- 16. the CLI -------------------------------------------------------------------------------
def test_cli_gc_run_is_a_dry_run_unless_executed(meta, store, coll, settings, monkeypatch, capsys):
    from seglake import cli

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    orphan = _write(store, f"insert_log/{coll.collection_id}/9/9/100/1", b"o" * 10)
    odd = _write(store, "notes/readme.txt")
    assert cli.main(["gc", "run"]) == 0
    out = capsys.readouterr().out
    assert os.path.exists(orphan) and "dry run" in out and "1 candidates" in out and "unrecognised" in out
    assert cli.main(["gc", "run", "--collection", "demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mark"]["candidates"] == 1 and os.path.exists(orphan)
    for bad in (["--missing-tolerance-hours", "nan"], ["--drop-tolerance-hours", "inf"],
                ["--missing-tolerance-hours", "-1"]):
        with pytest.raises(SystemExit):
            cli.main(["gc", "run", "--execute", *bad])
        assert "finite" in capsys.readouterr().err
    assert cli.main(["gc", "run", "--execute", "--missing-tolerance-hours", "0.1"]) == 2
    assert "floor" in capsys.readouterr().err and os.path.exists(orphan)
    assert cli.main(["gc", "run", "--execute"]) == 0
    assert "1 files, 10 bytes deleted" in capsys.readouterr().out
    assert not os.path.exists(orphan) and os.path.exists(odd)


def test_a_store_root_swapped_for_a_symlink_deletes_nothing(tmp_path):
    from seglake.storage.local import LocalStore

    store = LocalStore(tmp_path / "root")
    store.put("insert_log/1/2/3/100/1", b"x")
    outside = tmp_path / "outside"
    shutil.copytree(tmp_path / "root", outside)
    shutil.rmtree(tmp_path / "root")
    os.symlink(outside, tmp_path / "root")
    out = store.delete_checked(["insert_log/1/2/3/100/1"])
    assert out.errors and not out.deleted and (outside / "insert_log/1/2/3/100/1").exists()


def spark_listing(settings, prefixes=("",), levels=1, split_at=1, want=4) -> list[str]:
    """The keys the Spark mark's executors list (gcdist.listing_rows: walk_top ->
    plan_units -> list_unit_rows, the same steps in one process), every prefix split."""
    from seglake.lifecycle.gc import dist as gcdist
    plan = gcdist.MarkPlan("listing", 0.0, 0.0, 0, None, 0.0, gc.References(), gc.WalView(), settings.to_env())
    return [row[0] for row in gcdist.listing_rows(plan, list(prefixes), levels, split_at, want)]


def test_the_split_listing_sees_exactly_what_the_plain_listing_sees(store, s3_store, settings, s3_store_settings):
    """The Spark engine lists by units (gcdist); odd directory names (that no prefix can
    address), keys with '%', spaces, unicode, an object and a 'directory' of one name,
    must neither crash it nor be lost or listed twice."""
    for rel in ["README", "notes\\dir/f", b"\xffdir/f", "insert_log/a\\b/1", "insert_log/1/x\\y/z",
                b"insert_log/\xfe/1", "insert_log/1 /2/3/100/1", "insert_log/1/2/3/100/1", "wal/p\n/1"]:
        _write(store, rel)
    s3_keys = ["README", "notes\\dir/f", "insert_log/a%2Fb/1", "insert_log/1/x y/z", "insert_log/1/2/3/100/1",
               "insert_log/1", "insert_log/1/2", "insert_log/1/2/3/100/%31", "insert_log/1/2/3/100/\u00fc \u2603",
               "insert_log/1/2/3/100/" + "L" * 200, "insert_log/10/2/3/100/1", "insert_log/1+/x", "insert_log/1%/x"]
    for k in s3_keys:
        s3_store.client.put_object(Bucket=s3_store.bucket, Key=f"{s3_store.base}/{k}", Body=b"o")
    s3_settings = s3_store_settings
    for st, st_settings, n in ((store, settings, 9), (s3_store, s3_settings, len(s3_keys))):
        for prefixes, levels in (([""], 1), (["insert_log/"], 0), (["insert_log/1/", "insert_log/10/"], 0)):
            for split_at in (1, 1000):
                split = spark_listing(st_settings, prefixes, levels, split_at)
                plain = [layout.display_key(o.key) for p in prefixes for o in st.list(p)]
                assert sorted(split) == sorted(plain) and len(split) == len(set(split)), (prefixes, split_at)
        assert len(list(st.list(""))) == n


def test_an_unreadable_directory_is_reported_and_never_blocks_the_run(meta, store, coll, monkeypatch, settings):
    """e.g. a root-owned lost+found (0700) at the top of a store on its own mount, seen by
    a non-root worker: the run goes on, reports the directory, deletes nothing in it."""
    from seglake.storage import local

    c = coll.collection_id
    hidden = [_write(store, "lost+found/#123"), _write(store, f"insert_log/{c}/8/8/100/1")]
    orphan = _write(store, f"insert_log/{c}/9/9/100/1")
    real = local._scandir
    denied = {os.path.join(store.uri, "lost+found"), os.path.join(store.uri, f"insert_log/{c}/8")}

    def scandir(fd):  # the store lists by directory descriptor
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path in denied:
            raise PermissionError(13, "Permission denied", path)
        return real(fd)

    monkeypatch.setattr(local, "_scandir", scandir)
    res = gc.run(meta, store, gc.GCOptions())
    assert all(os.path.exists(p) for p in hidden) and not os.path.exists(orphan)
    assert res["mark"]["unreadable_directories"]["sample"] == ["insert_log/%d/8/" % c, "lost+found/"]
    assert "could not be read" in gc.format_summary(res)
    assert {"lost+found/", f"insert_log/{c}/8/"} <= set(spark_listing(settings))  # the Spark listing too
    with pytest.raises(SeglakeError, match="cannot list"):  # plain listings still refuse
        list(store.list(""))
