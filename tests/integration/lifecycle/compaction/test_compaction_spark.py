"""The Spark engine of compaction: the executor function (run_partition) runs units from
their JSON with settings from the driver's environment dict; the job's argv is checked
before any side effect; and spark/jobs/compact.py (spark-submit, local[1]) compacts a
collection row-exactly and records its summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, mixed_workload, policy

REPO = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.etcd


def _collection(meta, store, settings, name: str) -> Writer:
    w = Writer(meta, store, settings)
    w.create(name, ["_default", "p1", "p2"], shards=2)
    for step in range(2):
        mixed_workload(w, name, step)
    return w


def test_run_partition_runs_units_from_json_with_the_drivers_settings(meta, store, settings):
    _collection(meta, store, settings, "c")
    before = exact(meta, store, "c")
    units = compaction.plan(meta, store, "c", policy(target_rows=10_000)).units
    out = list(compaction.run_partition([u.to_json() for u in units], settings.to_env()))
    assert [r["status"] for r in out] == [compaction.COMMITTED] * len(units)
    assert exact(meta, store, "c") == before
    again = list(compaction.run_partition([u.to_json() for u in units], settings.to_env()))   # a retried task
    assert [r["status"] for r in again] == [compaction.ALREADY] * len(units)
    with pytest.raises(Exception, match="does not match its content"):
        list(compaction.run_partition([{**units[0].to_json(), "partition_id": 424242}], settings.to_env()))


@pytest.mark.parametrize("argv,words", [
    (["--collection", "a b"], "collection"),
    (["--collection", "c", "--target-rows", "0"], "--target-rows"),
    (["--collection", "c", "--delete-ratio", "inf"], "--delete-ratio"),
    (["--collection", "c", "--min-segment-rows", "1e3"], "--min-segment-rows"),
])
def test_the_job_refuses_bad_argv(argv, words, capsys):
    sys.path.insert(0, str(REPO / "spark" / "jobs"))
    import compact as job
    with pytest.raises(SystemExit):
        job.parse_args(argv)
    assert words in capsys.readouterr().err


@pytest.mark.spark
def test_spark_submit_compacts_row_exactly_and_records_the_summary(meta, store, settings):
    _collection(meta, store, settings, "s")
    before = exact(meta, store, "s")
    planned = compaction.plan(meta, store, "s", policy(target_rows=10_000))
    assert planned.units
    env = {**os.environ, **settings.to_env(), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO / "include"), "SPARK_LOCAL_IP": "127.0.0.1",
           "SEGLAKE_COMPACTION_PROTECTION": "0", "SEGLAKE_COMPACTION_MIN_SEGMENT_ROWS": "1000"}
    job = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
         "--conf", "spark.ui.enabled=false", str(REPO / "spark" / "jobs" / "compact.py"),
         "--collection", "s", "--target-rows", "10000"],
        env=env, capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    assert exact(meta, store, "s") == before
    last = compaction.last_run(meta, planned.collection_id)
    assert last["engine"] == "spark" and last["counts"]["committed"] == len(planned.units)
    assert [u["unit_id"] for u in last["plan"]["units"]] == [u.unit_id for u in planned.units]
    assert compaction.plan(meta, store, "s", policy(target_rows=10_000)).units == []


def test_spark_job_killed_on_an_executor_then_re_run_converges(meta, store, settings):
    """spark-submit (local[1]) of a scheduled-style run (--targets: L0 folds, then merges by
    later runs): the executor's Python worker SIGKILLed after a unit's files, then (second job)
    right after a unit's commit; nothing visible changes; a third job converges row-exactly
    (no lost unit, nothing prepared, nothing left to plan)."""
    from seglake.lifecycle.flush.state import L0

    from compaction_helpers import rows, segments

    w = _collection(meta, store, settings, "k")
    w.delete("k", [3, 4, 25])           # alone in a flush: L0 delete segments, folded at once
    w.flush("k")
    before = exact(meta, store, "k")
    pol = policy(target_rows=15, l0_age=0.0)
    planned = compaction.plan(meta, store, "k", pol)
    assert compaction.FOLD in {u.kind for u in planned.units}       # folds first (the delete logs are old enough)
    targets = compaction.targets_json([{"collection": "k", "db": "default", "policy": pol,
                                        "collection_id": meta.catalog.get_by_name("k").collection_id}])
    env = {**os.environ, **settings.to_env(), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO / "include"), "SPARK_LOCAL_IP": "127.0.0.1"}

    def submit(faults: str = "") -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
             "--conf", "spark.ui.enabled=false", str(REPO / "spark" / "jobs" / "compact.py"),
             "--targets", targets, "--trigger", "scheduled"],
            env={**env, "SEGLAKE_FAULTS": faults}, capture_output=True, text=True, timeout=600)

    for fault in ("compaction.after_files:kill@1", "compaction.after_commit:kill@1"):
        job = submit(fault)
        assert job.returncode != 0, job.stdout[-2000:]
        assert exact(meta, store, "k") == before
    job = submit()
    assert job.returncode == 0, job.stderr[-3000:]
    assert exact(meta, store, "k") == before and rows(meta, store, "k") == w.model.visible()
    assert {r["state"] for r in compaction.unit_records(meta)} == {compaction.COMMITTED}
    assert not [s for s in segments(meta, "k") if s.level == L0]
    last = compaction.last_run(meta, planned.collection_id)
    assert last["engine"] == "spark" and last["trigger"] == "scheduled" and last["counts"]["lost"] == 0
    assert last["counts"]["committed"] == len(last["plan"]["units"])
    # a fold's outputs are merged by later runs (a plan keeps a fold's segments out of its merges)
    for _ in range(5):
        if not compaction.compact(meta, store, "k", pol).plan.units:
            break
    else:
        pytest.fail("compaction does not converge")
    assert exact(meta, store, "k") == before and rows(meta, store, "k") == w.model.visible()


def test_spark_job_one_target_refused_on_its_executors_the_next_still_compacted(meta, store, settings):
    """--targets a, b; a's unit record is corrupt, so its executor refuses it (CompactionError
    inside a Spark task, seen on the driver as a Java error): the job went no further and b
    was never compacted. Now a fails alone (the job exits 1 naming it) and b is compacted
    row-exactly (attack-compaction4)."""
    from seglake.meta.codec import decode, encode
    from compaction_helpers import rows, segments

    ws = {n: _collection(meta, store, settings, n) for n in ("a", "b")}
    pol = policy(target_rows=30)
    p = compaction.plan(meta, store, "a", pol)
    u = p.units[0]
    compaction.prepare(meta, meta.catalog.get_by_name("a"), u, 1.0, p.revision)
    key = meta.keys.compaction_unit(u.collection_id, u.unit_id)
    meta.kv.put(key, encode({**decode(meta.kv.get(key).value, key), "sources_revision": None}))
    before_b, n_b = exact(meta, store, "b"), len(segments(meta, "b"))
    targets = compaction.targets_json([{"collection": n, "db": "default", "policy": pol,
                                        "collection_id": meta.catalog.get_by_name(n).collection_id}
                                       for n in ("a", "b")])
    env = {**os.environ, **settings.to_env(), "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO / "include"), "SPARK_LOCAL_IP": "127.0.0.1"}
    job = subprocess.run(
        [str(Path(sys.executable).parent / "spark-submit"), "--master", "local[1]",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.task.maxFailures=1",
         str(REPO / "spark" / "jobs" / "compact.py"), "--targets", targets, "--trigger", "scheduled"],
        env=env, capture_output=True, text=True, timeout=600)
    assert job.returncode == 1, (job.returncode, job.stdout[-2000:], job.stderr[-2000:])
    said = [ln for ln in (job.stdout + job.stderr).splitlines() if "default.a" in ln and "corrupt" in ln]
    assert said, (job.stdout[-3000:], job.stderr[-800:])
    assert len(segments(meta, "b")) < n_b, job.stdout[-2000:]
    assert exact(meta, store, "b") == before_b and rows(meta, store, "b") == ws["b"].model.visible()
    assert rows(meta, store, "a") == ws["a"].model.visible()
