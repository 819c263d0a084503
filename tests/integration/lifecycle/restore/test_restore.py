"""Restore through copy-segment jobs against real etcd + real files (engine level)."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from seglake import faults
from seglake.dev import demo
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.lifecycle import copyjob, restore, snapshot, verify
from seglake.meta.copyjobs import JOB_COMPLETED, JOB_EXECUTING, JOB_FAILED, TASK_FAILED
from seglake.meta.segments import DROPPED, FLUSHED, IMPORTING
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=5, rows=200, dim=8)

KILL_BEFORE_JOB_TXN = """
import os, signal, sys
from seglake.config import Settings
from seglake.lifecycle import restore
from seglake.meta import Meta, kv
from seglake.storage import open_store
s = Settings.load()
meta = Meta.from_settings(s)
txn = kv.KV.txn
def killing(self, compares, ops, reason=None):
    if any(getattr(o, "key", "").startswith(meta.keys.copy_jobs_prefix()) for o in ops):
        os.kill(os.getpid(), signal.SIGKILL)  # killed right before the job would exist
    return txn(self, compares, ops, reason)
kv.KV.txn = killing
restore.restore(meta, open_store(s), 'demo', 's1', sys.argv[1], owner=sys.argv[2])
"""


@pytest.fixture
def snap(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    return coll



def _target_files(meta, coll_id):
    return sorted(f.key for s in meta.segments.list(coll_id) for f in layout.segment_files(s))


def _run(meta, store, job_id, per_task=3, threads=2):
    copyjob.plan(meta, job_id, per_task)
    copyjob.run_inline(meta, store, job_id, threads=threads)
    return copyjob.finalize(meta, job_id)


def test_restore_copies_every_file_and_leaves_the_source_untouched(meta, store, snap):
    source_before = sorted((o.key, o.size) for o in store.list(""))
    job_id = restore.restore(meta, store, "demo", "s1", "copy1")
    job, _ = meta.copyjobs.get(job_id)
    assert job.state == "Pending" and job.total_segments == 10
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == (job_id,)
    target = meta.catalog.get_by_name("copy1")
    assert all(s.state == IMPORTING for s in meta.segments.list(target.collection_id))
    job = _run(meta, store, job_id)
    assert job.state == JOB_COMPLETED and job.total_rows == 2000
    assert meta.copyjobs.get(job_id)[0].total_tasks == 4  # 10 segments, 3 per task
    report = verify.verify_collection(meta, store, "copy1")
    assert report["ok"] and report["rows"] == 2000 and report["segments_checked"] == 10
    src = {s.segment_id: s for s in meta.segments.list(snap.collection_id)}
    tgt = list(meta.segments.list(target.collection_id))
    assert all(s.state == FLUSHED for s in tgt)
    assert sorted(s.total_size() for s in tgt) == sorted(s.total_size() for s in src.values())
    assert sorted(s.source["segment_id"] for s in tgt) == sorted(src)
    now = sorted((o.key, o.size) for o in store.list(""))
    assert set(source_before) <= set(now)  # nothing of the source changed
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == ()
    p = copyjob.progress(meta, job_id)
    assert (p["copied_segments"], p["copied_files"], p["copied_bytes"]) == (10, job.total_files, job.total_bytes)
    assert [j["job_id"] for j in copyjob.list_jobs(meta, "copy1")] == [job_id]


def test_a_missing_source_file_fails_the_job_and_rolls_back(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "broken")
    seg = sorted(meta.segments.list(snap.collection_id), key=lambda s: (s.partition_id, s.segment_id))[4]
    victim = list(layout.segment_files(seg))[1].key
    store.delete_many([victim])
    job = _run(meta, store, job_id)
    assert job.state == JOB_FAILED and victim in job.reason and "tasks failed" in job.reason
    tasks = meta.copyjobs.tasks(job_id)
    assert any(victim in t.reason for t in tasks) and all(t.state in ("Completed", "Failed") for t in tasks)
    with pytest.raises(NotFound):
        meta.catalog.get_by_name("broken")
    target_id = job.target_collection_id
    assert all(s.state == DROPPED for s in meta.segments.list(target_id))
    assert meta.catalog.get(target_id).state == "Dropped"
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == ()
    assert copyjob.finalize(meta, job_id).state == JOB_FAILED  # idempotent
    restore.restore(meta, store, "demo", "s1", "broken") and None  # the name is free again


def test_timeout_fails_with_reason_timeout(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "slow", timeout=0.5)
    copyjob.plan(meta, job_id, 3)
    time.sleep(0.6)
    assert copyjob.wait_status(meta, job_id)[0] == "success"
    job = copyjob.finalize(meta, job_id)
    assert job.state == JOB_FAILED and job.reason == "timeout"
    assert all(t.state == TASK_FAILED for t in meta.copyjobs.tasks(job_id))


def test_planning_twice_never_duplicates_tasks(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "twice")
    with faults.inject("copy.after_plan_tasks"), pytest.raises(faults.InjectedFault):
        copyjob.plan(meta, job_id, 3)
    assert meta.copyjobs.get(job_id)[0].state == "Pending"
    copyjob.plan(meta, job_id, 3)
    copyjob.plan(meta, job_id, 3)
    assert [t.task_id for t in meta.copyjobs.tasks(job_id)] == [0, 1, 2, 3]
    assert meta.copyjobs.get(job_id)[0].state == JOB_EXECUTING


def test_an_interrupted_copy_resumes_skips_done_files_and_cleans_leftovers(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "resumed")
    copyjob.plan(meta, job_id, 10)
    with faults.inject("copy.after_file", at=30), pytest.raises(faults.InjectedFault):
        copyjob.run_inline(meta, store, job_id)
    target = meta.copyjobs.get(job_id)[0].target_collection_id
    seg = next(iter(sorted(meta.segments.list(target), key=lambda s: s.segment_id)))
    stray = layout.insert_log(*seg.ref, 100, 999_999)
    store.put(stray, b"a temp file left by a killed copy")
    tasks = copyjob.run_inline(meta, store, job_id)
    assert tasks[0].skipped_files == 30 and tasks[0].attempt == 2
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    p = copyjob.progress(meta, job_id)   # the bars: all done, though attempt 2 copied less than all
    assert p["done_bytes"] == p["total_bytes"]
    # "copied": every attempt's recorded copies (attempt 1's as it last saved them before it died:
    # nothing here, it died before its first save; tests/dags/test_attack_s20_ui.py's F9 saves each file)
    t = meta.copyjobs.tasks(job_id)[0]
    assert 0 < t.copied_bytes < t.total_bytes and p["copied_bytes"] == t.earlier_bytes + t.copied_bytes
    assert p["copied_files"] == p["total_files"]
    assert not store.exists(stray)
    assert sorted(o.key for o in _listing(store, target, meta)) == _target_files(meta, target)


def _listing(store, coll_id, meta=None):
    """Objects under the collection's log prefixes and (with meta) its segments' index dirs."""
    keys = []
    for p in layout.collection_prefixes(coll_id):
        keys.extend(store.list(p))
    for s in (meta.segments.list(coll_id) if meta else []):
        for d in {layout.index_dir(f.build_id, f.version, s.partition_id, s.segment_id) for f in s.index_files}:
            keys.extend(store.list(d))
    return keys


def test_two_concurrent_restores_to_one_target_make_one_job(meta, store, snap):
    """Same restore three times at once: they converge on one job (or report a lost race)."""
    out = []

    def go():
        try:
            out.append(restore.restore(meta, store, "demo", "s1", "same"))
        except restore.RestoreRaceLost as e:
            out.append(e)

    threads = [threading.Thread(target=go) for _ in range(3)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    jobs = {r for r in out if isinstance(r, int)}
    assert len(out) == 3 and len(jobs) == 1
    assert [j.job_id for j in meta.copyjobs.list()] == list(jobs)
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == tuple(jobs)
    assert meta.catalog.get_by_name("same").state == "Importing"


def test_bad_restores_are_refused_without_side_effects(meta, store, snap):
    snapshot.begin(meta, "demo", "pending")
    other, _ = demo.seed(meta, store, demo.SeedParams(name="other", partitions=1, segments=1, rows=10, dim=4))

    def state():
        return (meta.kv.count(meta.keys.copy_jobs_prefix()), len(list(meta.catalog.list())),
                meta.snapshots.get(snap.collection_id, "s1")[0].pins)

    before = state()
    for args, err, match in [
        (("demo", "pending", "t"), StateError, "PENDING"),
        (("demo", "nope", "t"), NotFound, "nope"),
        (("demo", "s1", "other"), Conflict, "already exists"),
        (("demo", "s1", "bad-name"), ValidationError, "invalid collection name"),
        (("nope", "s1", "t"), NotFound, "nope"),
    ]:
        with pytest.raises(err, match=match):
            restore.restore(meta, store, *args)
    assert state() == before
    rec = meta.snapshots.get(snap.collection_id, "s1")[0]
    meta.snapshots.update(meta.snapshots.get(snap.collection_id, "s1")[1], rec.replace(state="DELETING"))
    with pytest.raises(StateError, match="DELETING"):
        restore.restore(meta, store, "demo", "s1", "t")
    assert state()[:2] == before[:2]


def test_dropping_a_snapshot_that_a_running_job_pins_is_refused(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "pinned")
    with pytest.raises(Conflict, match=str(job_id)):
        snapshot.drop(meta, store, "demo", "s1")
    _run(meta, store, job_id)
    snapshot.drop(meta, store, "demo", "s1")  # unpinned once the job finished


def test_a_killed_restore_is_resumed_by_a_retrigger_with_the_same_conf(meta, store, snap, settings):
    """SIGKILL between the target and the job: the same restore (any owner) resumes it;
    another snapshot into that name is refused naming the job and how to resume."""
    env = {**os.environ, **settings.to_env()}
    proc = subprocess.run([sys.executable, "-c", KILL_BEFORE_JOB_TXN, "again", "run-1"], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    target = meta.catalog.get_by_name("again")
    assert target.state == "Importing" and meta.kv.count(meta.keys.copy_jobs_prefix()) == 0
    snapshot.create(meta, store, "demo", "s2")
    with pytest.raises(Conflict, match=r"restore job \d+ .*snapshot='s1'.*copy_segment_job"):
        restore.restore(meta, store, "demo", "s2", "again", owner="run-3")
    job_id = restore.restore(meta, store, "demo", "s1", "again", owner="run-2")
    assert job_id == target.properties["restore_job_id"]
    assert restore.restore(meta, store, "demo", "s1", "again", owner="run-1") == job_id
    assert _run(meta, store, job_id).state == JOB_COMPLETED
    assert meta.catalog.get_by_name("again").collection_id == target.collection_id
    assert len(list(meta.segments.list(target.collection_id))) == 10
    assert restore.restore(meta, store, "demo", "s1", "again") == job_id  # finished: changes nothing
    assert meta.catalog.get_by_name("again").state == "Created"


def test_retention_removes_finished_jobs_and_their_tasks(meta, store, snap):
    done = restore.restore(meta, store, "demo", "s1", "r1")
    _run(meta, store, done)
    failed = restore.restore(meta, store, "demo", "s1", "r2", timeout=0.01)
    time.sleep(0.05)
    copyjob.finalize(meta, failed)
    running = restore.restore(meta, store, "demo", "s1", "r3")
    assert copyjob.cleanup_expired(meta, retention=3600) == []
    time.sleep(0.2)
    removed = copyjob.cleanup_expired(meta, retention=0.1)
    assert removed == [done]  # the failed job keeps its target segment records; running is running
    assert meta.kv.count(meta.keys.copy_tasks_prefix(done)) == 0
    failed_job = meta.copyjobs.get(failed)[0]
    meta.kv.delete_prefix(meta.keys.segments_prefix(failed_job.target_collection_id))  # what GC does later
    assert copyjob.cleanup_expired(meta, retention=0.1) == [failed]
    assert [j.job_id for j in meta.copyjobs.list()] == [running]


def test_a_killed_inline_worker_process_resumes_to_the_same_file_set(meta, store, snap, settings):
    job_id = restore.restore(meta, store, "demo", "s1", "killed")
    copyjob.plan(meta, job_id, 3)
    job = meta.copyjobs.get(job_id)[0]
    env = {**os.environ, **settings.to_env(), "SEGLAKE_FAULTS": f"copy.after_file:kill@{job.total_files // 2}"}
    code = ("from seglake.config import Settings; from seglake.meta import Meta; "
            "from seglake.storage import open_store; from seglake.lifecycle import copyjob; "
            f"s = Settings.load(); copyjob.run_inline(Meta.from_settings(s), open_store(s), {job_id})")
    proc = subprocess.run([sys.executable, "-c", code], env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    copied = sum(1 for _ in _listing(store, job.target_collection_id))
    assert 0 < copied < job.total_files
    copyjob.run_inline(meta, store, job_id)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    assert sorted(o.key for o in _listing(store, job.target_collection_id, meta)) == \
        _target_files(meta, job.target_collection_id)
    assert [t.task_id for t in meta.copyjobs.tasks(job_id)] == [0, 1, 2, 3]
    assert verify.verify_collection(meta, store, "killed")["ok"]


def test_restore_on_s3_copies_server_side(meta, s3_store, monkeypatch):
    demo.seed(meta, s3_store, demo.SeedParams(partitions=1, segments=3, rows=100, dim=4))
    snapshot.create(meta, s3_store, "demo", "s3snap")
    job_id = restore.restore(meta, s3_store, "demo", "s3snap", "s3copy")
    monkeypatch.setattr(s3_store, "get", lambda *a, **k: pytest.fail("a copy must not download"))
    monkeypatch.setattr(s3_store, "put", lambda *a, **k: pytest.fail("a copy must not upload"))
    copyjob.plan(meta, job_id, 2)
    copyjob.run_inline(meta, s3_store, job_id, threads=8)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    monkeypatch.undo()
    assert verify.verify_collection(meta, s3_store, "s3copy")["ok"]


def test_cli_jobs(meta, store, snap, settings, monkeypatch, capsys):
    import json

    from seglake import cli

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    job_id = restore.restore(meta, store, "demo", "s1", "clijob")
    assert cli.main(["jobs", "describe", str(job_id)]) == 0
    assert "Pending" in capsys.readouterr().out
    _run(meta, store, job_id)
    assert cli.main(["jobs", "list", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["state"] == "Completed" and row["progress"]["copied_segments"] == 10
    assert cli.main(["jobs", "describe", str(job_id), "--watch", "--interval", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "100.0%" in out and "segments 10/10" in out
    assert cli.main(["jobs", "list", "--collection", "clijob"]) == 0
    assert "Completed" in capsys.readouterr().out


def test_the_job_keeps_the_dag_run_that_made_it_and_a_bad_origin_is_refused(meta, store, snap):
    from seglake.errors import ValidationError

    origin = {"dag_id": "snapshot_restore", "run_id": "manual__x"}
    job_id = restore.restore(meta, store, "demo", "s1", "demo_origin", origin=origin)
    assert meta.copyjobs.get(job_id)[0].origin == origin
    for bad in ({"dag_id": "x"}, {"dag_id": "", "run_id": "r"}, {"dag_id": 1, "run_id": "r"}, "run"):
        with pytest.raises(ValidationError, match="restore origin"):
            restore.restore(meta, store, "demo", "s1", "demo_origin2", origin=bad)
    with pytest.raises(NotFound):
        meta.catalog.get_by_name("demo_origin2")


def test_jobs_are_listed_by_id_not_as_text(meta, store, snap):
    """etcd lists job keys as text (.../jobs/100 before .../jobs/99): `jobs list` showed a
    newer job above an older one once ids crossed a power of ten."""
    first = restore.restore(meta, store, "demo", "s1", "copy_a")
    meta.ids.allocate(10 ** len(str(first)) - first)        # the next ids have one more digit
    second = restore.restore(meta, store, "demo", "s1", "copy_b")
    assert len(str(second)) > len(str(first))
    assert [j["job_id"] for j in copyjob.list_jobs(meta)] == [first, second]
