"""etcd killed (SIGKILL) or frozen (SIGSTOP) and then restarted on the same port and
data dir, during a restore, a snapshot create and a GC sweep: the operation completes
after the restart or fails with a clear error; a re-run converges; nothing referenced is
deleted and nothing is committed twice."""

import os
import time

import pytest
from fault_harness import outage as _outage
from fault_harness import (
    assert_invariants, assert_restored, copy_progress, job_for, seed_and_snapshot, wait_until)

from seglake.lifecycle import copyjob, gc, snapshot
from seglake.storage import layout

DAY = 86400



@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_etcd_outage_during_a_restore(etcd, fmeta, fstore, fsettings, spawn, mode):
    _, snap = seed_and_snapshot(fmeta, fstore)
    child = spawn("restore_all", {"collection": "demo", "snapshot": "s1", "target": "r"}, fsettings,
                  faults="copy.after_file:sleep=0.05")
    wait_until(lambda: copy_progress(fmeta, fstore, "r", snap.files)() >= 0.3, what="30% copied")
    _outage(etcd, mode)
    done = child.wait(120).assert_ok_or_clear_error("etcd")
    job = job_for(fmeta, "r")
    if not done:  # re-run: the copy_segment_job path
        copyjob.plan(fmeta, job.job_id, 3)
        copyjob.run_inline(fmeta, fstore, job.job_id)
        copyjob.finalize(fmeta, job.job_id)
    assert_restored(fmeta, fstore, job.job_id, snap)
    assert_invariants(fmeta, fstore)


@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_etcd_outage_while_a_snapshot_commits(etcd, fmeta, fstore, fsettings, spawn, mode):
    """The outage starts once the metadata JSON is written, right before the commit
    transaction goes out; the same owner re-runs the create."""
    coll, _ = seed_and_snapshot(fmeta, fstore, snap=None)
    child = spawn("snapshot_create", {"collection": "demo", "name": "s1", "owner": "run-1"}, fsettings,
                  faults="snapshot.before_commit:sleep=0.5")
    meta_prefix = f"{layout.SNAPSHOTS}/{coll.collection_id}/metadata/"
    wait_until(lambda: any(True for _ in fstore.list(meta_prefix)), what="snapshot metadata written")
    _outage(etcd, mode)
    done = child.wait(120).assert_ok_or_clear_error("etcd")
    rec = snapshot.create(fmeta, fstore, "demo", "s1", owner="run-1", per_file=2)  # converges
    assert rec.state == "COMMITTED", (done, rec)
    flushed = sorted(s.segment_id for s in fmeta.segments.list(coll.collection_id))
    assert sorted(s.segment_id for s in snapshot.read_segments(fstore, rec)) == flushed
    assert rec.segments == len(flushed) and rec.rows == sum(s.num_rows for s in fmeta.segments.list(coll.collection_id))
    assert [r.name for r in fmeta.snapshots.list()] == ["s1"]
    assert_invariants(fmeta, fstore)


def _old_orphans(store, coll, n):
    """`n` layout-valid files of segments no record knows, two days old."""
    part = coll.partitions[0].partition_id
    keys = [layout.insert_log(coll.collection_id, part, 900_000 + i, 100, 1) for i in range(n)]
    t = time.time() - 2 * DAY
    for k in keys:
        store.put(k, b"orphan")
        os.utime(os.path.join(store.uri, k), (t, t))
    return set(keys)


def _age_everything(store):
    t = time.time() - 2 * DAY
    for o in store.list(""):
        os.utime(os.path.join(store.uri, o.key), (t, t))


@pytest.mark.parametrize("mode", ["kill", "stop"])
def test_etcd_outage_during_a_gc_sweep(etcd, fmeta, fstore, fsettings, spawn, mode):
    coll, _ = seed_and_snapshot(fmeta, fstore)
    _age_everything(fstore)  # only references protect the real files
    orphans = _old_orphans(fstore, coll, 40)
    child = spawn("gc_run", {"delete_delay": 0.05}, fsettings)
    wait_until(lambda: sum(fstore.exists(k) for k in orphans) <= 30, what="the sweep under way")
    _outage(etcd, mode)
    done = child.wait(120).assert_ok_or_clear_error("etcd", "references", "nothing deleted")
    assert_invariants(fmeta, fstore)
    left = {k for k in orphans if fstore.exists(k)}
    result = gc.run(fmeta, fstore, gc.GCOptions())  # the re-run converges, with true counts
    assert not any(fstore.exists(k) for k in orphans)
    assert result["sweep"]["deleted"] == len(left), (done, result["sweep"], len(left))
    assert_invariants(fmeta, fstore)


def test_gc_started_while_etcd_is_frozen_fails_closed(etcd, fmeta, fstore, fsettings, spawn):
    coll, _ = seed_and_snapshot(fmeta, fstore)
    _age_everything(fstore)
    orphans = _old_orphans(fstore, coll, 5)
    before = sorted(o.key for o in fstore.list(""))
    etcd.pause()
    try:
        out = spawn("gc_run", {}, fsettings).wait(60)
    finally:
        etcd.resume()
    assert not out.assert_ok_or_clear_error("etcd", "references"), "GC ran with etcd frozen"
    assert sorted(o.key for o in fstore.list("")) == before  # nothing deleted, no report written
    assert_invariants(fmeta, fstore)
    assert orphans <= {o.key for o in fstore.list("")}


def test_a_commit_whose_answer_is_lost_is_recognised_as_done(etcd, fmeta, fstore, fsettings, spawn):
    """etcd applies the snapshot's commit transaction, the answer is lost (UNAVAILABLE)
    and the client retries: the retry must recognise its own write and report the
    snapshot COMMITTED, not a conflict."""
    from fault_harness import LostReplyProxy

    coll, _ = seed_and_snapshot(fmeta, fstore, snap=None)
    proxy = LostReplyProxy(etcd.ports["client"])
    try:
        child = spawn("snapshot_create", {"collection": "demo", "name": "s1", "owner": "run-1"},
                      fsettings.replace(etcd_endpoint=proxy.endpoint), faults="snapshot.before_commit:sleep=0.5")
        wait_until(lambda: any(True for _ in fstore.list(f"{layout.SNAPSHOTS}/{coll.collection_id}/metadata/")),
                   what="snapshot metadata written")
        proxy.arm()  # the next request is the commit
        out = child.wait(60)
    finally:
        proxy.close()
    assert proxy.cuts == 1, "the commit's answer was never cut"
    rec = fmeta.snapshots.get(coll.collection_id, "s1")[0]
    assert rec.state == "COMMITTED"
    assert out.rc == 0, f"the snapshot committed, but its creator reported:\n{out.err[-2000:]}"
    assert out.result["state"] == "COMMITTED"
    assert_invariants(fmeta, fstore)


@pytest.mark.parametrize("write,patterns", [
    ("job_created", [b"/copy/jobs/", b"/snapshots/"]),          # restore's last txn: job + pin
    ("job_executing", [b"/copy/jobs/", b'"state":"Executing"']),  # plan's flip
    ("task_completed", [b"/copy/tasks/", b'"state":"Completed"']),
    ("job_completed", [b"/copy/jobs/", b'"state":"Completed"']),  # finalize
], ids=["job_created", "job_executing", "task_completed", "job_completed"])
def test_a_restore_write_whose_answer_is_lost_is_recognised_as_done(etcd, fmeta, fstore, fsettings, spawn,
                                                                     write, patterns):
    """One of the restore's guarded writes is applied by etcd but its answer is lost:
    the driver must recognise its own write and finish the restore -- never report a
    conflict, roll back its own target, or complete with 0 rows."""
    from fault_harness import LostReplyProxy

    _, snap = seed_and_snapshot(fmeta, fstore)
    proxy = LostReplyProxy(etcd.ports["client"])
    proxy.arm(*patterns)
    try:
        out = spawn("restore_all", {"collection": "demo", "snapshot": "s1", "target": "r", "owner": "run-1"},
                    fsettings.replace(etcd_endpoint=proxy.endpoint)).wait(120)
    finally:
        proxy.close()
    assert proxy.cuts == 1, f"no {write} write was seen"
    assert out.rc == 0, f"the restore's {write} write was applied, but the driver reported:\n{out.err[-2000:]}"
    assert out.result["state"] == "Completed"
    assert_restored(fmeta, fstore, out.result["job_id"], snap)
    assert_invariants(fmeta, fstore)
