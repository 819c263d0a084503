"""The Spark write path (spark/jobs/write_manifests.py through real spark-submit) racing
an inline attempt of the same PENDING snapshot: exactly one commits, with only its own
complete manifest set; the loser reports that it lost."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from seglake import faults
from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.meta.snapshots import COMMITTED
from seglake.storage import layout

REPO = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.spark


def test_a_spark_attempt_and_a_stalled_inline_attempt_commit_exactly_one(meta, store, settings, monkeypatch):
    coll, _ = demo.seed(meta, store, demo.SeedParams(partitions=2, segments=3, rows=100, dim=4))
    rec = snapshot.begin(meta, coll.name, "raced", owner="run-1")
    stalled, release = threading.Event(), threading.Event()
    real = faults.point

    def point(name):
        if name == "snapshot.after_manifests" and threading.current_thread().name == "inline":
            stalled.set()
            assert release.wait(300)
        return real(name)
    monkeypatch.setattr(faults, "point", point)
    out = {}

    def inline():
        try:
            out["inline"] = snapshot.write_all(meta, store, rec, per_file=2)
        except Exception as e:  # noqa: BLE001 - inspected below
            out["inline"] = e
    t = threading.Thread(target=inline, name="inline")
    t.start()
    try:
        assert stalled.wait(60)  # the inline attempt wrote its 3 manifests and stalls (a zombie)
        env = {**os.environ, **settings.to_env(), "PYSPARK_PYTHON": sys.executable,
               "PYTHONPATH": str(REPO / "include"), "SPARK_LOCAL_IP": "127.0.0.1"}
        job = subprocess.run(
            [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[2]",
             "--conf", "spark.ui.enabled=false", str(REPO / "spark" / "jobs" / "write_manifests.py"),
             "--collection-id", str(coll.collection_id), "--name", "raced", "--snapshot-id", str(rec.snapshot_id),
             "--per-file", "4"],
            env=env, capture_output=True, text=True, timeout=300)
        assert job.returncode == 0, job.stderr[-3000:]
        assert "COMMITTED" in job.stdout
    finally:
        release.set()
        t.join(60)
    assert isinstance(out["inline"], snapshot.SnapshotLost) and "lost the race" in str(out["inline"])
    committed = meta.snapshots.get(coll.collection_id, "raced")[0]
    assert committed.state == COMMITTED and committed.manifests == 2  # the Spark attempt's grouping
    doc = snapshot.read_metadata(store, committed)
    prefix = layout.snapshot_attempt_prefix(coll.collection_id, rec.snapshot_id, committed.attempt)
    assert all(m["key"].startswith(prefix) for m in doc["manifests"])
    assert sorted(s.segment_id for s in snapshot.read_segments(store, committed)) == \
        sorted(s.segment_id for s in meta.segments.list(coll.collection_id))
