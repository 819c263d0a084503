"""The Spark mark (spark/jobs/gc_scan.py through a real spark-submit) judges and counts
exactly like the inline mark: same `listed`, `referenced`, candidates, kept and
unrecognised keys, on the whole store and on one collection."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seglake.dev import demo
from seglake.lifecycle import gc
from seglake.meta.segments import DROPPED

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[4]
SMALL = demo.SeedParams(partitions=2, segments=2, rows=100, dim=4)
COMPARED = ("referenced", "candidates", "candidate_bytes", "kept", "unrecognised", "unknown_segment",
            "dropped", "by_collection_reason", "wal")


def _write(store, rel, age=3 * 86400):
    path = os.path.join(os.fsencode(store.uri), os.fsencode(rel))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"garbage")
    t = time.time() - age
    os.utime(path, (t, t))


def _spark_mark(settings, run_id, collection_id=0):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    env.update(settings.to_env())
    env.update({"PYTHONPATH": f"{REPO / 'include'}:{env.get('PYTHONPATH', '')}", "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1",
                "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}"})
    cmd = ["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           "--conf", "spark.sql.shuffle.partitions=2", str(REPO / "spark" / "jobs" / "gc_scan.py"),
           "--run-id", run_id, "--collection-id", str(collection_id), "--dry-run", "1"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]


def test_spark_and_inline_marks_agree(meta, store, settings):
    c, _ = demo.seed(meta, store, SMALL)
    cid = c.collection_id
    # a WAL ingested and flushed: fragments below every checkpoint (truncatable) and above
    from test_gc_wal_truncation import _fragments, _ingest_and_flush, _min_checkpoint
    from wal_helpers import pchannels
    wcoll = _ingest_and_flush(meta, store, settings, name="w1")
    mins = {p: _min_checkpoint(meta, p) for p in pchannels(wcoll)}
    wal_below = {k for k, (p, n) in _fragments(store).items() if n < mins[p]}
    assert wal_below and len(_fragments(store)) > len(wal_below)
    segs = sorted(meta.segments.list(cid), key=lambda s: s.segment_id)
    meta.segments.transition([segs[0].ref], DROPPED, now=time.time() - 86400)
    for o in store.list(""):
        os.utime(os.path.join(store.uri, o.key), (time.time() - 3 * 86400,) * 2)
    for k in [f"insert_log/{cid}/9/{i}/100/1" for i in range(5)] + [
            "index_files/77/1/9/424242/centroids", "README", "notes/readme.txt", f"insert_log/{cid}/9/9/100/01",
            f"insert_log/{cid}/9/9/100/2\\3", b"insert_log/%d/9/9/100/\xff" % cid, b"notes/\xfe.bin",
            f"insert_log/{cid}/9/9/100/.seglake-tmp-1.2-ab.0", "wal/dml_0/1.frag",
            "notes\\dir/f", b"\xffdir/f", "insert_log/a\\b/1", f"insert_log/{cid}/x\\y/1"]:
        _write(store, k)
    _write(store, f"delta_log/{cid}/9/9/1", age=0)
    for scope in (0, cid):
        _spark_mark(settings, f"spark-{scope}", scope)
        spark = gc.latest_summary(store)
        inline = gc.mark(meta, store, gc.GCOptions(dry_run=True, collection_id=scope or None),
                         run_id=f"inline-{scope}").summary()
        assert {k: spark[k] for k in COMPARED} == {k: inline[k] for k in COMPARED}
        # the inline mark also lists the Spark run's own _gc/ report files: `internal`
        assert spark["listed"] - spark["internal"] == inline["listed"] - inline["internal"] > 0
        assert sorted(map(str, gc.read_report(store, f"spark-{scope}"))) == \
            sorted(map(str, gc.read_report(store, f"inline-{scope}")))
        assert inline["candidates"] == 5 + (1 if not scope else 0) + len(list(segs[0].binlogs)) + 4 + \
            (len(wal_below) if not scope else 0)
        assert {r["path"] for r in gc.read_report(store, f"spark-{scope}") if r["reason"] == gc.WAL_TRUNCATED} == \
            (wal_below if not scope else set())
        assert inline["unrecognised"]["files"] == (12 if not scope else 5)
        assert inline["unknown_segment"]["files"] == (1 if scope else 0)
        assert inline["listed"] == inline["referenced"] + inline["internal"] + inline["candidates"] + \
            inline["unrecognised"]["files"] + sum(inline["kept"].values())
