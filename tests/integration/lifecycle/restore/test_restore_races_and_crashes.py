"""Restore and copy jobs under races, crashes and late steps (issue 8, items 6, 7, 10, 11,
12 and the resume point), against real etcd + real files."""

import threading

import pytest

from seglake.dev import demo
from seglake.errors import Conflict, NotFound, StateError
from seglake.lifecycle import copyjob, restore, snapshot, verify
from seglake.lifecycle.copyjob import copying
from seglake.meta import kv as kvmod
from seglake.meta import segments as segmod
from seglake.meta.copyjobs import JOB_COMPLETED, JOB_FAILED, TASK_COMPLETED
from seglake.meta.segments import DROPPED, FLUSHED, IMPORTING
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=5, rows=200, dim=8)


@pytest.fixture
def snap(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    return coll


def _run(meta, store, job_id, per_task=3):
    copyjob.plan(meta, job_id, per_task)
    copyjob.run_inline(meta, store, job_id)
    return copyjob.finalize(meta, job_id)


def _assert_rolled_back(meta, name):
    """No live collection under the name; every collection ever made under it is Dropped
    with only Dropped segments; no copy job."""
    with pytest.raises(NotFound):
        meta.catalog.get_by_name(name)
    made = [c for c in meta.catalog.list(include_dropped=True) if c.name == name]
    assert made and all(c.state == "Dropped" for c in made)
    for c in made:
        assert all(s.state == DROPPED for s in meta.segments.list(c.collection_id))
    assert meta.kv.count(meta.keys.copy_jobs_prefix()) == 0


# -- item 6: a snapshot dropped while the restore is being set up -------------------------
@pytest.mark.parametrize("when", ["after_target_created", "after_segments_saved"])
def test_a_restore_racing_a_snapshot_drop_rolls_back_and_says_so(meta, store, snap, monkeypatch, when):
    """The drop wins at any point after the target exists: the target is rolled back
    (name free, nothing left Importing) and the error says the snapshot was dropped."""
    def drop_now():
        snapshot.drop(meta, store, "demo", "s1")

    if when == "after_target_created":
        original = meta.catalog.create

        def create(*a, **k):
            coll = original(*a, **k)
            drop_now()
            return coll
        monkeypatch.setattr(meta.catalog, "create", create)
    else:
        original = meta.segments.save

        def save(segs):
            n = original(segs)
            drop_now()
            return n
        monkeypatch.setattr(meta.segments, "save", save)
    with pytest.raises(StateError, match=r"snapshot 's1' .*was dropped.*rolled back"):
        restore.restore(meta, store, "demo", "s1", "racer")
    _assert_rolled_back(meta, "racer")
    assert meta.snapshots.find(snap.collection_id, "s1") is None


def test_a_snapshot_dropped_before_the_target_exists_creates_nothing(meta, store, snap, monkeypatch):
    from seglake.lifecycle.snapshot import read as snapshot_read
    original = snapshot_read.read_segments

    def read_segments(store_, rec):
        snapshot.drop(meta, store, "demo", "s1")
        return original(store_, rec)
    monkeypatch.setattr(snapshot_read, "read_segments", read_segments)
    with pytest.raises(StateError, match="was dropped"):
        restore.restore(meta, store, "demo", "s1", "never")
    assert [c.name for c in meta.catalog.list(include_dropped=True)] == ["demo"]


# -- item 7: a losing driver never rolls back the winner's target -------------------------
def test_a_second_driver_of_the_same_run_converges_on_the_job(meta, store, snap, monkeypatch):
    """Driver B (same run) saves its segments; meanwhile driver A creates the job. B's
    final transaction then loses: B must return the job, not drop the target."""
    original = meta.segments.save
    inner = {}

    def save(segs):
        n = original(segs)
        if not inner:
            inner["job"] = None
            inner["job"] = restore.restore(meta, store, "demo", "s1", "twin", owner="run-1")
        return n
    monkeypatch.setattr(meta.segments, "save", save)
    job_id = restore.restore(meta, store, "demo", "s1", "twin", owner="run-1")
    monkeypatch.undo()
    assert job_id == inner["job"]
    target = meta.catalog.get_by_name("twin")
    assert target.state == "Importing"
    assert all(s.state == IMPORTING for s in meta.segments.list(target.collection_id))
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == (job_id,)
    job = _run(meta, store, job_id)
    assert job.state == JOB_COMPLETED and job.total_rows == 2000


def test_a_concurrent_pin_by_another_restore_does_not_roll_back(meta, store, snap, monkeypatch):
    """Another restore pins the snapshot right before our job txn: that changes only the
    snapshot's revision; ours must re-read and succeed, nothing rolled back."""
    original = kvmod.KV.txn
    other = {}

    def txn(self, compares, ops, reason=None):
        if not other and any(getattr(o, "key", "").startswith(meta.keys.copy_jobs_prefix()) for o in ops):
            other["job"] = None
            other["job"] = restore.restore(meta, store, "demo", "s1", "other")
        return original(self, compares, ops, reason)
    monkeypatch.setattr(kvmod.KV, "txn", txn)
    mine = restore.restore(meta, store, "demo", "s1", "mine")
    monkeypatch.undo()
    assert sorted(meta.snapshots.get(snap.collection_id, "s1")[0].pins) == sorted([mine, other["job"]])
    assert sorted(c.name for c in meta.catalog.list()) == ["demo", "mine", "other"]
    assert _run(meta, store, mine).state == JOB_COMPLETED
    assert _run(meta, store, other["job"]).state == JOB_COMPLETED


def test_a_driver_whose_claim_was_taken_reports_the_lost_race_and_touches_nothing(meta, store, snap,
                                                                                  monkeypatch):
    """A creates the target; before A's job txn, B (a re-trigger of the same restore)
    claims it and crashes before its own job txn. A lost: typed error, target intact."""
    original = kvmod.KV.txn
    state = {"hooked": False}

    def txn(self, compares, ops, reason=None):
        if not state["hooked"] and any(getattr(o, "key", "").startswith(meta.keys.copy_jobs_prefix()) for o in ops):
            state["hooked"] = True
            monkeypatch.setattr(kvmod.KV, "txn", crash_on_job)
            with pytest.raises(_Crash, match="B crashed"):
                restore.restore(meta, store, "demo", "s1", "claimed", owner="run-B")
            monkeypatch.setattr(kvmod.KV, "txn", txn)
        return original(self, compares, ops, reason)

    def crash_on_job(self, compares, ops, reason=None):
        if any(getattr(o, "key", "").startswith(meta.keys.copy_jobs_prefix()) for o in ops):
            raise _Crash("B crashed")
        return original(self, compares, ops, reason)

    monkeypatch.setattr(kvmod.KV, "txn", txn)
    with pytest.raises(restore.RestoreRaceLost, match="another driver"):
        restore.restore(meta, store, "demo", "s1", "claimed", owner="run-A")
    monkeypatch.undo()
    target = meta.catalog.get_by_name("claimed")
    assert target.state == "Importing"
    assert all(s.state == IMPORTING for s in meta.segments.list(target.collection_id))
    job_id = restore.restore(meta, store, "demo", "s1", "claimed", owner="run-B")  # B re-run resumes
    assert _run(meta, store, job_id).state == JOB_COMPLETED


class _Crash(BaseException):
    """A crash of the driver itself (no except clause of the engine catches it)."""

    def __init__(self, msg):
        super().__init__(msg)


# -- item 10: completion wins over a deadline reached afterwards ----------------------------
def test_a_finished_copy_is_completed_even_if_finalize_runs_after_the_deadline(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "late", timeout=30)
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id)
    late = meta.copyjobs.get(job_id)[0].timeout_at + 60
    assert copyjob.wait_status(meta, job_id, now=late) == ("success", f"copy job {job_id}: all 4 tasks completed")
    job = copyjob.finalize(meta, job_id, now=late)
    assert job.state == JOB_COMPLETED and job.total_rows == 2000
    assert meta.catalog.get_by_name("late").state == "Created"
    assert verify.verify_collection(meta, store, "late")["ok"]


def test_a_timeout_racing_completion_never_rolls_back_a_completed_job(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "race10", timeout=30)
    _run(meta, store, job_id)
    job = copyjob.fail(meta, job_id, "timeout", now=meta.copyjobs.get(job_id)[0].timeout_at + 1)
    assert job.state == JOB_COMPLETED
    assert meta.catalog.get_by_name("race10").state == "Created"


# -- item 11: content, not size; one writer per visible file --------------------------------
def _copied_target_files(meta, store, job_id):
    job = meta.copyjobs.get(job_id)[0]
    segs = sorted(meta.segments.list(job.target_collection_id), key=lambda s: s.segment_id)
    return [(src, dst) for s in segs for src, dst, _ in copyjob.source_and_target_files(s)]


def test_a_full_size_file_with_a_zero_hole_is_copied_again(meta, store, snap):
    from seglake import faults

    job_id = restore.restore(meta, store, "demo", "s1", "holes")
    copyjob.plan(meta, job_id, 10)
    with faults.inject("copy.after_file", at=12), pytest.raises(faults.InjectedFault):
        copyjob.run_inline(meta, store, job_id)
    # a file the killed run copied (which ones depends on the copy order: by source ids as
    # strings), the largest, so the hole fits inside it
    copied = [(s, d) for s, d in _copied_target_files(meta, store, job_id) if store.exists(d)]
    assert copied
    src, dst = max(copied, key=lambda sd: store.head(sd[0]).size)
    good = store.get(src)
    assert len(good) > 1000
    assert store.get(dst) == good
    store.put(dst, good[:100] + b"\0" * (len(good) - 200) + good[-100:])  # same size, a hole
    tasks = copyjob.run_inline(meta, store, job_id)
    assert tasks[0].state == TASK_COMPLETED and tasks[0].attempt == 2
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    for s, d in _copied_target_files(meta, store, job_id):
        assert store.get(d) == store.get(s), d


def test_two_copy_drivers_on_one_task_never_expose_a_partial_file(meta, store, monkeypatch):
    """The restore run and a re-drive copy the same files at once. Every target file a
    reader ever sees under its final name is whole; the task completes, content equal."""
    coll = meta.catalog.create("big", demo.demo_schema(4))
    part = coll.partitions[0].partition_id
    blob = bytes(range(256)) * (16 << 10)  # 4 MiB
    seg = segmod.Segment(segment_id=meta.ids.allocate(), collection_id=coll.collection_id, partition_id=part,
                         channel=coll.vchannels[0], state=FLUSHED, num_rows=10,
                         binlogs={100 + i: (segmod.Binlog(meta.ids.allocate(), len(blob), 10),) for i in range(6)})
    for f in layout.segment_files(seg):
        store.put(f.key, blob)
    meta.segments.save([seg])
    snapshot.create(meta, store, "big", "s")
    job_id = restore.restore(meta, store, "big", "s", "big2")
    copyjob.plan(meta, job_id, 10)
    dsts = [d for _, d in _copied_target_files(meta, store, job_id)]
    seen, stop = [], threading.Event()

    def watch():
        while True:  # until one full pass after both drivers ended
            last = stop.is_set()
            for d in dsts:
                try:
                    seen.append(store.head(d).size)
                except NotFound:
                    pass
            if last:
                return

    results, errors = [], []

    def drive():
        try:
            results.append(copyjob.copy_task(meta, store, job_id, 0))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    watcher = threading.Thread(target=watch)
    drivers = [threading.Thread(target=drive) for _ in range(2)]
    watcher.start()
    [t.start() for t in drivers]
    [t.join() for t in drivers]
    stop.set()
    watcher.join()
    assert seen and set(seen) == {len(blob)}, sorted(set(seen))[:5]
    task = meta.copyjobs.get_task(job_id, 0)[0]
    assert task.state == TASK_COMPLETED and not errors, (task.reason, errors)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    assert all(store.get(d) == blob for d in dsts)


def test_a_zombie_attempt_cannot_finish_a_task_a_re_drive_owns(meta, store, snap):
    """Attempt 1 (a zombie) ends while the re-drive (attempt 2) is still copying: the
    zombie must not mark the task, only attempt 2 may."""
    job_id = restore.restore(meta, store, "demo", "s1", "zombie")
    copyjob.plan(meta, job_id, 10)
    task, kv = meta.copyjobs.get_task(job_id, 0)
    zombie = copying._Owned(*meta.copyjobs.update_task_kv(kv, task.replace(state="InProgress", attempt=1)))
    _, kv = meta.copyjobs.get_task(job_id, 0)
    meta.copyjobs.update_task(kv, zombie.task.replace(attempt=2))  # the re-drive took over, mid-copy
    done = {"segments": 5, "files": 35, "bytes": 1, "skipped": 0}
    copying._finish_task(meta, zombie, done, TASK_COMPLETED, "", 0.0)
    cur = meta.copyjobs.get_task(job_id, 0)[0]
    assert (cur.state, cur.attempt) == ("InProgress", 2)
    assert copyjob.wait_status(meta, job_id)[0] == "waiting"


def test_restore_on_s3_checks_content_by_etag(meta, s3_store):
    demo.seed(meta, s3_store, demo.SeedParams(partitions=1, segments=2, rows=50, dim=4))
    snapshot.create(meta, s3_store, "demo", "s3snap")
    job_id = restore.restore(meta, s3_store, "demo", "s3snap", "s3copy")
    copyjob.plan(meta, job_id, 1)
    task, kv = meta.copyjobs.get_task(job_id, 0)
    meta.copyjobs.update_task(kv, task.replace(state="InProgress", attempt=1))  # makes the next run a retry
    src, dst = _copied_target_files(meta, s3_store, job_id)[0]
    good = s3_store.get(src)
    s3_store.put(dst, b"\0" * len(good))  # present, right size, wrong content
    copyjob.run_inline(meta, s3_store, job_id, threads=4)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    assert s3_store.get(dst) == good
    assert s3_store.checksum(dst) == s3_store.checksum(src) != s3_store.checksum(
        _copied_target_files(meta, s3_store, job_id)[1][0])


# -- item 12: chunked writes safe to observe half done, re-runs converge ---------------------
def test_plan_re_run_with_another_task_size_converges(meta, store, snap):
    from seglake import faults

    job_id = restore.restore(meta, store, "demo", "s1", "replan")
    with faults.inject("copy.after_plan_tasks"), pytest.raises(faults.InjectedFault):
        copyjob.plan(meta, job_id, 2)   # 5 tasks written, job still Pending
    job = copyjob.plan(meta, job_id, 7)  # a re-run with another size
    tasks = meta.copyjobs.tasks(job_id)
    targets = sorted(s.segment_id for s in meta.segments.list(job.target_collection_id))
    assert sorted(m.target_segment for t in tasks for m in t.mappings) == targets  # each exactly once
    assert job.total_tasks == len(tasks) == 5 and [t.task_id for t in tasks] == list(range(5))
    assert _run(meta, store, job_id).state == JOB_COMPLETED


def _crash_on_nth_segment_write(monkeypatch, meta, to_state, n=2):
    """Crash (like a kill) at the n-th transaction that moves segment records to `to_state`."""
    original = kvmod.KV.txn
    hits = {"n": 0}
    prefix = meta.keys.segments_prefix()
    marker = f'"state":"{to_state}"'.encode()

    def txn(self, compares, ops, reason=None):
        if any(getattr(o, "key", "").startswith(prefix) and marker in getattr(o, "value", b"") for o in ops):
            hits["n"] += 1
            if hits["n"] == n:
                raise _Crash(f"killed while moving segments to {to_state}")
        return original(self, compares, ops, reason)
    monkeypatch.setattr(kvmod.KV, "txn", txn)
    monkeypatch.setattr(segmod, "CAS_BATCH", 3)


def test_a_finish_killed_between_batches_is_never_visible_half_flushed(meta, store, snap, monkeypatch):
    job_id = restore.restore(meta, store, "demo", "s1", "half")
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id)
    _crash_on_nth_segment_write(monkeypatch, meta, FLUSHED)
    with pytest.raises(_Crash):
        copyjob.finalize(meta, job_id)
    monkeypatch.undo()
    target = meta.catalog.get(meta.copyjobs.get(job_id)[0].target_collection_id)
    states = {s.state for s in meta.segments.list(target.collection_id)}
    assert states == {FLUSHED, IMPORTING}  # the crash really came between batches
    assert target.state == "Importing"     # ... and the collection is not usable meanwhile
    with pytest.raises(StateError, match="Importing"):
        snapshot.begin(meta, "half", "too_early")
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED  # re-run converges
    assert meta.catalog.get_by_name("half").state == "Created"
    assert {s.state for s in meta.segments.list(target.collection_id)} == {FLUSHED}
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == ()


def test_a_rollback_killed_between_batches_is_never_visible_half_dropped(meta, store, snap, monkeypatch):
    job_id = restore.restore(meta, store, "demo", "s1", "halfdrop")
    copyjob.plan(meta, job_id, 3)
    _crash_on_nth_segment_write(monkeypatch, meta, DROPPED)
    with pytest.raises(_Crash):
        copyjob.fail(meta, job_id, "operator gave up")
    monkeypatch.undo()
    target_id = meta.copyjobs.get(job_id)[0].target_collection_id
    assert {s.state for s in meta.segments.list(target_id)} == {DROPPED, IMPORTING}
    with pytest.raises(NotFound):
        meta.catalog.get_by_name("halfdrop")  # invisible before the first segment moved
    assert meta.catalog.get(target_id).state == "Dropped"
    assert copyjob.finalize(meta, job_id).state == JOB_FAILED  # re-run converges
    assert {s.state for s in meta.segments.list(target_id)} == {DROPPED}
    assert meta.snapshots.get(snap.collection_id, "s1")[0].pins == ()


def test_cleanup_settles_a_half_done_rollback_of_a_restore_without_job(meta, store, snap, monkeypatch):
    original = meta.segments.save

    def save(segs):
        original(segs)
        raise RuntimeError("etcd went away")
    monkeypatch.setattr(meta.segments, "save", save)
    _crash_on_nth_segment_write(monkeypatch, meta, DROPPED, n=1)
    with pytest.raises(_Crash):
        restore.restore(meta, store, "demo", "s1", "orphan")
    monkeypatch.undo()
    (coll,) = [c for c in meta.catalog.list(include_dropped=True) if c.name == "orphan"]
    assert coll.state == "Dropped" and IMPORTING in {s.state for s in meta.segments.list(coll.collection_id)}
    copyjob.cleanup_expired(meta, retention=3600)
    assert {s.state for s in meta.segments.list(coll.collection_id)} == {DROPPED}


# -- resume point: the job's original engine ------------------------------------------------
def test_the_job_records_its_engine_for_a_resume(meta, store, snap):
    job_id = restore.restore(meta, store, "demo", "s1", "eng", engine="spark")
    assert meta.copyjobs.get(job_id)[0].engine == "spark"
    assert copyjob.resume_engine(meta, job_id, None) == "spark"
    assert copyjob.resume_engine(meta, job_id, "inline") == "inline"
    with pytest.raises(ValueError, match="engine"):
        copyjob.resume_engine(meta, job_id, "fast")


def test_bad_restore_numbers_are_refused_before_any_write(meta, store, snap):
    for bad in (float("nan"), float("inf"), -1, 0, 10**9):
        with pytest.raises(ValueError, match="timeout"):
            restore.restore(meta, store, "demo", "s1", "t", timeout=bad)
    with pytest.raises(ValueError, match="engine"):
        restore.restore(meta, store, "demo", "s1", "t", engine="warp")
    with pytest.raises(ValueError, match="max_per_task"):
        copyjob.plan(meta, 1, float("nan"))
    assert [c.name for c in meta.catalog.list(include_dropped=True)] == ["demo"]
    assert meta.kv.count(meta.keys.copy_jobs_prefix()) == 0


def test_a_conflicting_name_is_refused_without_touching_it(meta, store, snap):
    with pytest.raises(Conflict, match="already exists"):
        restore.restore(meta, store, "demo", "s1", "demo")
    assert meta.catalog.get_by_name("demo").state == "Created"


def test_a_target_name_held_by_a_collection_being_dropped_says_so_and_is_free_once_dropped(meta, store, snap,
                                                                                       settings):
    """A collection written through the WAL and then dropped stays Dropping (its name taken)
    until the flushers release its vchannels. A restore into that name said "the Dropping
    target of restore job N ...; choose another target name" (make demo's second run, whose
    reset left such a copy). It says it is being dropped and how the drop ends; once
    Dropped, the same restore goes through."""
    from seglake.lifecycle import drop
    from seglake.lifecycle.flush import flush_pchannel
    from seglake.wal.client import WalClient, synthetic_rows

    from wal_helpers import make_collection, pchannels

    with WalClient(meta, store, settings) as c:
        busy = make_collection(c, "busy")
        c.insert("busy", synthetic_rows(busy, 8, 1))     # in the log, not flushed: its vchannels held
    assert drop.drop_collection(meta, store, settings, "busy")["state"] == "Dropping"
    with pytest.raises(Conflict, match="'busy' already exists in db 'default': it is being dropped .*"
                                       "seglake collections drop busy --wait"):
        restore.restore(meta, store, "demo", "s1", "busy")
    for p in pchannels(busy):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    assert drop.drop_collection(meta, store, settings, "busy")["state"] == "Dropped"
    job_id = restore.restore(meta, store, "demo", "s1", "busy")
    assert _run(meta, store, job_id).state == JOB_COMPLETED
