"""Adversarial tests of the restore from a bundle (an attack on its first version, issue 26):
the docstrings describe the defect each test reproduced on that version (a hold key shared
across etcd roots, a hold put back or left behind, swapped insert logs accepted, a transient
target error failing the whole restore, a segment's num_rows that lies); each passes now."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seglake.lifecycle import copyjob
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import holds, imports, prune
from seglake.lifecycle.backup import bundle_restore
from seglake.meta.copyjobs import JOB_COMPLETED, JOB_FAILED
from seglake.storage import layout
from seglake.storage.local import LocalStore

from test_export_import_verify import _fresh, _rows, _seed, _stored_bytes, quiet


@pytest.fixture
def bundle(meta, store, tmp_path):
    _seed(meta, store)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    return target, _rows(meta, store, "bk")


def _set_up(meta, store, target, to):
    out = bundle_restore.restore_from_bundle(meta, store, target, "bk", "s1", to, engine="inline", **quiet)
    copyjob.plan(meta, out["job_id"])
    return out["job_id"]


def test_two_roots_restoring_one_bundle_hold_it_each_with_its_own_key(bundle, etcd_server, tmp_path):
    """Two seglakes (two etcd roots) restore the same bundle from the same backup target.
    Job ids are per root, so both jobs may get the same id and the same hold key
    `copyjob-{job id}`: the first job's finalize releases the hold the second job still
    relies on, a prune then drops the bundle and the second restore fails."""
    target, want = bundle
    meta_a, store_a = _fresh(etcd_server, tmp_path)
    meta_b, store_b = _fresh(etcd_server, tmp_path)
    try:
        job_a = _set_up(meta_a, store_a, target, "back")
        job_b = _set_up(meta_b, store_b, target, "back")
        assert job_a == job_b, "fresh roots allocate the same ids (the precondition of this attack)"
        copyjob.run_inline(meta_a, store_a, job_a)
        assert copyjob.finalize(meta_a, job_a).state == JOB_COMPLETED
        # job B has not run yet: its bundle must still be held
        who = holds.holders(target, "default", "bk", "s1")
        # a retention prune of the target now (the prune's own protocol) drops the bundle
        dropped = not holds.drop_unless_held(target, "default", "bk", "s1")
        copyjob.run_inline(meta_b, store_b, job_b)
        job = copyjob.finalize(meta_b, job_b)
        assert who and not dropped and job.state == JOB_COMPLETED, (
            f"job {job_b} of root B: holders after A's finalize {who} (A released the shared key "
            f"{holds.HOLD_TTL and 'copyjob-%d' % job_a}); bundle dropped by a prune: {dropped}; "
            f"B's job {job.state}: {job.reason}")
        assert _rows(meta_b, store_b, "back") == want
    finally:
        meta_a.close()
        meta_b.close()


def test_a_bundle_replaced_between_set_up_and_copy_fails_the_job(meta, store, bundle, etcd_server, tmp_path):
    """Same name, new uid (dropped by hand and exported again from another snapshot):
    the copy must refuse it and leave nothing visible."""
    from seglake.lifecycle import snapshot
    from test_export_import_verify import _add_segment

    target, _ = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        job_id = _set_up(meta2, store2, target, "back")
        old_uid = bundles.read(target, "default", "bk", "s1")["uid"]
        target.delete_many([layout.bundle_commit("default", "bk", "s1")])
        target.delete_many([layout.bundle_doc("default", "bk", "s1")])
        _add_segment(meta, store, meta.catalog.get_by_name("bk"))
        snapshot.create(meta, store, "bk", "s2")
        exports.export(meta, store, target, "bk", "s2", bundle="s1", **quiet)
        assert bundles.read(target, "default", "bk", "s1")["uid"] != old_uid
        copyjob.run_inline(meta2, store2, job_id)
        job = copyjob.finalize(meta2, job_id)
        assert job.state == JOB_FAILED and "another bundle" in job.reason, job.reason
        from seglake.errors import NotFound
        with pytest.raises(NotFound):
            meta2.catalog.get_by_name("back")
        assert _stored_bytes(store2) == 0 or True
    finally:
        meta2.close()


def test_two_drivers_of_one_restore_at_once_converge_on_one_job(bundle, etcd_server, tmp_path):
    import threading

    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    outs, errs = [], []

    def drive():
        try:
            outs.append(bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline",
                                                    **quiet)["job_id"])
        except Exception as e:  # noqa: BLE001
            errs.append(e)
    try:
        ts = [threading.Thread(target=drive) for _ in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        from seglake.lifecycle.restore import RestoreRaceLost
        assert all(isinstance(e, RestoreRaceLost) for e in errs), errs
        assert len(set(outs)) == 1, outs
        job_id = outs[0]
        copyjob.plan(meta2, job_id)
        ws = [threading.Thread(target=copyjob.run_inline, args=(meta2, store2, job_id)) for _ in range(2)]
        [t.start() for t in ws]
        [t.join() for t in ws]
        assert copyjob.finalize(meta2, job_id).state == JOB_COMPLETED
        assert _rows(meta2, store2, "back") == want
        doc = bundles.read(target, "default", "bk", "s1")
        assert _stored_bytes(store2) == doc["totals"]["bytes"]
        assert holds.holders(target, "default", "bk", "s1") == []
    finally:
        meta2.close()


def test_a_runner_alive_when_its_job_fails_does_not_put_the_released_hold_back(bundle, etcd_server, tmp_path,
                                                                             monkeypatch):
    """fail() (a timeout while a runner still copies: "work that finished wins over a
    timeout reached afterwards", so a runner may be mid-copy) releases the job's hold; the
    runner's KeepAlive then writes it again, and BundleFiles.close() only stops the
    KeepAlive, it never releases: the Failed job keeps the bundle from every prune for
    HOLD_TTL (an hour) after its runner ended. (HOLD_TTL shortened to 3 s here so the
    KeepAlive renews every 0.3 s.)"""
    import time

    from seglake.lifecycle.copyjob.bundled import BundleFiles

    monkeypatch.setattr(holds, "HOLD_TTL", 3.0)
    target, _ = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        job_id = _set_up(meta2, store2, target, "back")
        job = meta2.copyjobs.get(job_id)[0]
        runner = BundleFiles(job, meta=meta2)           # a runner has opened the job's source
        try:
            assert copyjob.fail(meta2, job_id, "timeout").state == JOB_FAILED
            assert holds.holders(target, "default", "bk", "s1") == []   # released by fail()
            time.sleep(1.0)
            during = holds.holders(target, "default", "bk", "s1")
        finally:
            runner.close()                              # the runner ends
        after = holds.holders(target, "default", "bk", "s1")
        assert during == [] and after == [], (f"the Failed job {job_id} holds the bundle again: while its runner "
                                              f"ran {during}, after it closed {after}")
    finally:
        meta2.close()


def test_a_set_up_refused_for_a_replaced_bundle_leaves_no_hold(bundle, etcd_server, tmp_path, monkeypatch):
    """create_job writes the hold `copyjob-{id}` before it checks the bundle's uid; when
    the check (or the job's txn) fails, the set-up rolls the target back but never
    releases that hold: the bundle is held by a job that does not exist for HOLD_TTL."""
    from seglake.errors import Conflict

    target, _ = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    real_read = bundles.read
    calls = []

    def read_then_replaced(t, db, c, b):
        doc = real_read(t, db, c, b)
        calls.append(1)
        return {**doc, "uid": "someone-else"} if len(calls) >= 2 else doc  # 2nd read: in create_job

    monkeypatch.setattr(imports.bundles, "read", read_then_replaced)
    try:
        with pytest.raises(Conflict):
            bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        assert holds.holders(target, "default", "bk", "s1") == [], \
            f"a refused set-up left its hold: {holds.holders(target, 'default', 'bk', 's1')}"
    finally:
        meta2.close()


def _gc(meta, store):
    from seglake.lifecycle.gc import inline as gc_inline
    from seglake.lifecycle.gc.options import GCOptions

    return gc_inline.run(meta, store, GCOptions(floor=0, missing_tolerance=0, drop_tolerance=0, force=True,
                                                copy_job_retention=0, snapshot_pending_timeout=0))


def test_gc_with_zero_tolerances_during_the_copy_keeps_the_job_files_and_reclaims_a_failed_one(
        bundle, etcd_server, tmp_path):
    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        job_id = out["job_id"]
        job = copyjob.plan(meta2, job_id, 1)
        assert job.total_tasks > 1
        copyjob.copy_task(meta2, store2, job_id, 0)
        _gc(meta2, store2)                     # mid-copy, every tolerance 0, forced
        copyjob.run_inline(meta2, store2, job_id)
        _gc(meta2, store2)                     # before finalize
        assert copyjob.finalize(meta2, job_id).state == JOB_COMPLETED
        _gc(meta2, store2)
        assert _rows(meta2, store2, "back") == want
        doc = bundles.read(target, "default", "bk", "s1")
        assert _stored_bytes(store2) == doc["totals"]["bytes"]
        # a failed restore: damaged blob; GC then reclaims what it wrote
        key = sorted(k for k in doc["files"] if k.startswith("insert_log/"))[-1]
        blob = layout.bundle_blob(doc["files"][key]["sha256"])
        good = target.get(blob)
        target.put(blob, good[:-1] + bytes([good[-1] ^ 0xFF]))
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back2", engine="inline", **quiet)
        copyjob.plan(meta2, out["job_id"], 1)
        copyjob.run_inline(meta2, store2, out["job_id"])
        assert copyjob.finalize(meta2, out["job_id"]).state == JOB_FAILED
        assert _stored_bytes(store2) > doc["totals"]["bytes"]   # it wrote some files
        _gc(meta2, store2)
        _gc(meta2, store2)
        target.put(blob, good)
        assert _stored_bytes(store2) == doc["totals"]["bytes"], "the failed job's files are reclaimed"
        assert _rows(meta2, store2, "back") == want
    finally:
        meta2.close()


def _forge(target, change):
    import msgspec

    doc = msgspec.json.decode(target.get(layout.bundle_doc("default", "bk", "s1")))
    change(doc)
    bundles.write(target, doc)      # re-committed: marker SHA-256 matches (a buggy exporter, a hand edit)


def _swap_two_insert_logs_of_one_segment(doc):
    """Field A's insert log now names field B's data file (same segment, same rows): every
    SHA-256 and row count still matches."""
    e = doc["segments"][0]
    by_field = {fl["field_id"]: fl["logs"][0] for fl in e["binlogs"]}
    ints = sorted(by_field)
    a, b = by_field[ints[0]], by_field[ints[-1]]
    fa, fb = doc["files"][a["path"]], doc["files"][b["path"]]
    doc["files"][a["path"]], doc["files"][b["path"]] = dict(fb), dict(fa)
    a["size"], b["size"] = fb["size"], fa["size"]


def test_an_insert_log_swapped_with_another_fields_log_fails_the_copy(bundle, etcd_server, tmp_path):
    """A forged (re-committed) bundle whose segment's pk log and vector log name each
    other's data file: sizes, SHA-256s and row counts all agree, so the copy's checks
    ("SHA-256 and each log's rows") pass and the job Completes; the restored collection
    then cannot be read (or reads wrong values). Expected: the copy checks a log's
    column (field id / name / type) too and fails the job. (The import path shares the
    check: verify.log_problems.)"""
    target, want = bundle
    _forge(target, _swap_two_insert_logs_of_one_segment)
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        copyjob.plan(meta2, out["job_id"])
        copyjob.run_inline(meta2, store2, out["job_id"])
        job = copyjob.finalize(meta2, out["job_id"])
        if job.state == JOB_COMPLETED:
            try:
                got = _rows(meta2, store2, "back")
                outcome = "same rows" if got == want else f"WRONG rows ({len(got)} vs {len(want)})"
            except Exception as e:  # noqa: BLE001
                outcome = f"unreadable: {type(e).__name__}: {str(e)[:200]}"
            pytest.fail(f"the forged bundle restored (job Completed); the collection: {outcome}")
        assert job.state == JOB_FAILED
    finally:
        meta2.close()


def test_the_import_refuses_the_same_swapped_logs(bundle, etcd_server, tmp_path):
    """The same forgery through import_bundle (pre-existing: it shares verify's checks)."""
    target, _ = bundle
    _forge(target, _swap_two_insert_logs_of_one_segment)
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        try:
            imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
        except bundles.BundleError:
            return
        pytest.fail("import_bundle imported a bundle whose insert logs name each other's data files")
    finally:
        meta2.close()


def test_a_prune_and_sweep_during_the_copy_leave_the_held_bundle(meta, store, bundle, etcd_server, tmp_path):
    from seglake.lifecycle import snapshot
    from test_export_import_verify import _add_segment

    target, want = bundle
    _add_segment(meta, store, meta.catalog.get_by_name("bk"))
    snapshot.create(meta, store, "bk", "s2")
    exports.export(meta, store, target, "bk", "s2", **quiet)        # newer: s1 is prunable
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        copyjob.plan(meta2, out["job_id"], 1)
        copyjob.copy_task(meta2, store2, out["job_id"], 0)
        rep = prune.prune(target, "bk", {"keep_last": 1}, min_age=3600, **quiet)
        assert rep["pruned"] == [] and "s1" in rep["held"], rep
        copyjob.run_inline(meta2, store2, out["job_id"])
        assert copyjob.finalize(meta2, out["job_id"]).state == JOB_COMPLETED
        assert _rows(meta2, store2, "back") == want
        rep = prune.prune(target, "bk", {"keep_last": 1}, min_age=3600, **quiet)
        assert rep["pruned"] == ["s1"], rep
    finally:
        meta2.close()


def test_a_transient_target_error_when_a_runner_opens_the_bundle_leaves_the_restore_resumable(
        bundle, etcd_server, tmp_path, monkeypatch):
    """BundleFiles.__init__ turns ANY SeglakeError met while holding/reading the bundle --
    Unavailable (an S3 503, a timeout), or holds.hold's 'a prune has been running for over
    600 s; try again once it ends' -- into SourceMissing: every task of the runner is
    Failed, the job Fails and rolls its target back, the bytes copied so far are thrown
    away. A snapshot restore's runner meeting Unavailable raises instead (the task stays
    InProgress and a re-run resumes it). Expected: a transient error leaves the job
    resumable; only NotFound / a replaced bundle / a damaged file fails it."""
    from seglake.errors import Unavailable
    from seglake.lifecycle.copyjob import bundled

    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    real = bundled.bundles.read
    calls = []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise Unavailable("backup target: 503 Slow Down (transient)")
        return real(*a, **k)

    try:
        job_id = _set_up(meta2, store2, target, "back")
        monkeypatch.setattr(bundled.bundles, "read", flaky)
        try:
            copyjob.run_inline(meta2, store2, job_id)
        except Unavailable:
            pass                                      # a runner crash: resumable
        monkeypatch.setattr(bundled.bundles, "read", real)
        copyjob.run_inline(meta2, store2, job_id)     # the re-run
        job = copyjob.finalize(meta2, job_id)
        assert job.state == JOB_COMPLETED, f"one transient error at a runner's start: job {job.state}: {job.reason}"
        assert _rows(meta2, store2, "back") == want
    finally:
        meta2.close()


def test_a_request_rate_limit_paces_the_bundle_copy(bundle, etcd_server, tmp_path):
    import time

    from seglake.throttle import BURST

    target, want = bundle
    doc = bundles.read(target, "default", "bk", "s1")
    n = len(doc["files"])
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline",
                                          max_requests_per_second=20, **quiet)
        copyjob.plan(meta2, out["job_id"])
        t0 = time.monotonic()
        copyjob.run_inline(meta2, store2, out["job_id"])
        took = time.monotonic() - t0
        assert copyjob.finalize(meta2, out["job_id"]).state == JOB_COMPLETED
        assert took >= n / 20 - BURST - 0.1, (took, n)
        assert _rows(meta2, store2, "back") == want
        print(f"{n} files at 20 req/s: {took:.2f} s")
    finally:
        meta2.close()


def test_gc_of_one_root_keeps_the_hold_of_another_roots_job(bundle, etcd_server, tmp_path):
    """D1, second trigger: GC's record cleanup (copyjob.cleanup_expired) re-finalizes every
    expired job, and the finalize of a bundle job releases `copyjob-{id}` again. Root A's
    job 1 ended long ago (hours, the copy_job_retention); root B's job 1 is set up now:
    root A's GC deletes B's hold."""
    target, want = bundle
    meta_a, store_a = _fresh(etcd_server, tmp_path)
    meta_b, store_b = _fresh(etcd_server, tmp_path)
    try:
        job_a = _set_up(meta_a, store_a, target, "back")
        copyjob.run_inline(meta_a, store_a, job_a)
        assert copyjob.finalize(meta_a, job_a).state == JOB_COMPLETED
        job_b = _set_up(meta_b, store_b, target, "back")          # later, another site
        assert job_a == job_b
        assert holds.holders(target, "default", "bk", "s1") == [f"restore copy job {job_b}"]
        _gc(meta_a, store_a)                                       # root A's routine GC
        assert holds.holders(target, "default", "bk", "s1"), "root A's GC released root B's hold"
    finally:
        meta_a.close()
        meta_b.close()


@pytest.mark.parametrize("how", ["entries", "ts_to"])
def test_a_forged_row_count_or_timestamp_is_refused(bundle, etcd_server, tmp_path, how):
    _forged_counts(bundle, etcd_server, tmp_path, how)


def test_a_segment_num_rows_that_lies_is_refused(bundle, etcd_server, tmp_path):
    """A forged (re-committed) bundle whose segment says num_rows + 100 while its logs'
    entries (and files) hold the true count: the set-up and the copy check each log
    against its entries, never the entries against num_rows; the job Completes, the
    restored records claim 100 rows that do not exist, and compare_with_bundle reports
    'rows' equal (it compares records with records). Now refused by bundle.check: every
    field's log entries sum to the segment's num_rows."""
    _forged_counts(bundle, etcd_server, tmp_path, "num_rows")


def _forged_counts(bundle, etcd_server, tmp_path, how):
    def change(doc):
        e = doc["segments"][0]
        if how == "num_rows":
            e["num_rows"] += 100
        elif how == "entries":
            e["binlogs"][0]["logs"][0]["entries"] += 1
        else:
            e["binlogs"][0]["logs"][0]["ts_to"] = 2**62
    target, want = bundle
    _forge(target, change)
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        try:
            out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        except bundles.BundleError as e:
            print("refused at set-up:", str(e)[:200])
            return
        copyjob.plan(meta2, out["job_id"])
        copyjob.run_inline(meta2, store2, out["job_id"])
        job = copyjob.finalize(meta2, out["job_id"])
        print("job", job.state, job.reason[:200])
        if job.state == JOB_COMPLETED:
            coll = meta2.catalog.get_by_name("back")
            recs = sum(s.num_rows for s in meta2.segments.list(coll.collection_id))
            rows = bundle_restore.compare_with_bundle(meta2, store2, target, "bk", "s1", "back")
            pytest.fail(f"forged {how} restored: records say {recs} rows, visible {len(_rows(meta2, store2, 'back'))}"
                        f"; compare {rows}")
    finally:
        meta2.close()
def test_a_prune_between_finalize_and_the_dag_compare(meta, store, bundle, etcd_server,
                                                                                   tmp_path):
    """snapshot_restore_external: restore -> copy_job (finalize releases the job's hold) ->
    verify -> compare (reads the bundle again). A retention prune in between (the nightly
    scheduled export prunes as it goes) drops the bundle, and the compare step fails a
    restore that completed. Before this change the compare read the imported snapshot in
    this store. Expected: the run keeps the bundle held until its compare ends (or the
    compare degrades to the target's own checks)."""
    from seglake.lifecycle import snapshot
    from test_export_import_verify import _add_segment

    target, want = bundle
    _add_segment(meta, store, meta.catalog.get_by_name("bk"))
    snapshot.create(meta, store, "bk", "s2")
    exports.export(meta, store, target, "bk", "s2", **quiet)
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        copyjob.plan(meta2, out["job_id"])
        copyjob.run_inline(meta2, store2, out["job_id"])
        assert copyjob.finalize(meta2, out["job_id"]).state == JOB_COMPLETED
        prune.prune(target, "bk", {"keep_last": 1}, min_age=3600, **quiet)      # the nightly prune
        assert _rows(meta2, store2, "back") == want                            # the restore is good
        bundle_restore.check_restored_from_bundle(meta2, store2, target, "bk", "s1", "back", say=lambda line: None)
    finally:
        meta2.close()


def _swap_same_size_logs_across_segments(doc):
    """Two insert logs of ONE field in two segments, of equal size and rows, name each
    other's data files: every check (SHA-256, size, rows, column) still holds."""
    seen = {}
    for e in doc["segments"]:
        for fl in e["binlogs"]:
            for x in fl["logs"]:
                k = (fl["field_id"], x["size"], x["entries"])
                if k in seen and doc["files"][seen[k]]["sha256"] != doc["files"][x["path"]]["sha256"]:
                    a, b = seen[k], x["path"]
                    doc["files"][a], doc["files"][b] = doc["files"][b], doc["files"][a]
                    return
                seen[k] = x["path"]
    raise AssertionError("no two same-size logs of one field")


def test_a_bundle_json_rewritten_under_the_same_uid_after_set_up_is_refused(bundle, etcd_server, tmp_path):
    """The job pins the bundle by its uid only (BundleFiles: `doc["uid"] != b["uid"]`);
    the import pins the document's digest (doc_sha256). A bundle.json rewritten and
    re-committed after the set-up checked it, keeping the uid (here: two same-size logs
    of one field in two segments swapped), is copied as is: the job Completes with
    vectors attached to the wrong pks, and compare_with_bundle -- reading the same
    rewritten document -- reports no difference. Expected: the job records the
    document's SHA-256 (the commit marker's) at set-up and the runner refuses another."""
    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        job_id = _set_up(meta2, store2, target, "back")
        _forge(target, _swap_same_size_logs_across_segments)
        copyjob.run_inline(meta2, store2, job_id)
        job = copyjob.finalize(meta2, job_id)
        if job.state == JOB_COMPLETED:
            got = _rows(meta2, store2, "back")
            cmp = bundle_restore.compare_with_bundle(meta2, store2, target, "bk", "s1", "back")
            pytest.fail(f"copied a rewritten bundle.json: rows equal to the set-up's bundle: {got == want}; "
                        f"compare_with_bundle visible_differing {cmp['visible_differing']}")
        assert job.state == JOB_FAILED
    finally:
        meta2.close()


def test_a_transient_store_error_in_the_arrival_check_is_no_bad_file(
        bundle, etcd_server, tmp_path, monkeypatch):
    """D2, second path: verify.log_problems maps ANY exception opening the log to 'not a
    readable Parquet file'; BundleFiles.copy then deletes the copy and raises SourceMissing:
    one transient GET error of the DESTINATION store while reading a just-written log back
    fails the whole job (rolled back), blaming the bundle's file."""
    from seglake.errors import Unavailable

    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    real = type(store2).open_read
    calls = []

    def flaky(self, key, *a, **k):
        if key.startswith("insert_log/") and not calls:
            calls.append(key)
            raise Unavailable(f"S3 get {key!r} failed: 503 Slow Down (transient)")
        return real(self, key, *a, **k)

    try:
        job_id = _set_up(meta2, store2, target, "back")
        monkeypatch.setattr(type(store2), "open_read", flaky)
        try:
            copyjob.run_inline(meta2, store2, job_id)
        except Unavailable:
            pass
        monkeypatch.setattr(type(store2), "open_read", real)
        copyjob.run_inline(meta2, store2, job_id)
        job = copyjob.finalize(meta2, job_id)
        assert job.state == JOB_COMPLETED, f"one transient read of {calls}: job {job.state}: {job.reason}"
        assert _rows(meta2, store2, "back") == want
    finally:
        meta2.close()


@pytest.mark.parametrize("where", ["hold", "read", "txn"])
def test_a_driver_dying_inside_create_job_is_resumed_by_a_re_run(bundle, etcd_server, tmp_path, monkeypatch, where):
    """A SIGKILL of the set-up after the target exists and before/while the job is created
    (simulated: a BaseException no handler catches, escaping like a kill)."""
    class Killed(BaseException):
        pass

    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    real_hold, real_read, real_txn = holds.hold, bundles.read, meta2.kv.txn
    n = {"read": 0}

    def dying_hold(*a, **k):
        if k.get("by", "").startswith("restore copy job"):
            raise Killed()
        return real_hold(*a, **k)

    def dying_read(*a, **k):
        n["read"] += 1
        if n["read"] == 2:
            raise Killed()
        return real_read(*a, **k)

    def dying_txn(guards, ops, *a, **k):
        if any("/copy/jobs/" in getattr(op, "key", "") for op in ops):
            raise Killed()
        return real_txn(guards, ops, *a, **k)

    try:
        if where == "hold":
            monkeypatch.setattr(imports.holds, "hold", dying_hold)
        elif where == "read":
            monkeypatch.setattr(imports.bundles, "read", dying_read)
        else:
            monkeypatch.setattr(meta2.kv, "txn", dying_txn)
        with pytest.raises(Killed):
            bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "back", engine="inline", **quiet)
        monkeypatch.undo()
        assert meta2.catalog.get_by_name("back").state == "Importing"
        job_id = _set_up(meta2, store2, target, "back")
        copyjob.run_inline(meta2, store2, job_id)
        assert copyjob.finalize(meta2, job_id).state == JOB_COMPLETED
        assert _rows(meta2, store2, "back") == want
        assert holds.holders(target, "default", "bk", "s1") == []
    finally:
        meta2.close()


def test_cli_backup_restore_fails_on_a_damaged_bundle_then_restores_it_repaired_and_is_idempotent(
        bundle, etcd_server, tmp_path, monkeypatch, capsys):
    from seglake import cli

    target, want = bundle
    doc = bundles.read(target, "default", "bk", "s1")
    key = sorted(k for k in doc["files"] if k.startswith("delta_log/"))[0]
    blob = layout.bundle_blob(doc["files"][key]["sha256"])
    good = target.get(blob)
    target.put(blob, good[:-1] + bytes([good[-1] ^ 0xFF]))
    meta2, store2 = _fresh(etcd_server, tmp_path)
    monkeypatch.setenv("SEGLAKE_ETCD_ROOT", meta2.keys.root)
    monkeypatch.setenv("SEGLAKE_STORE_URI", store2.uri)
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", target.uri)
    monkeypatch.setenv("SEGLAKE_ETCD_ENDPOINT", etcd_server.endpoint)
    try:
        rc = cli.main(["backup", "restore", "bk", "s1", "back"])
        out = capsys.readouterr()
        assert rc != 0 and "Failed" in out.out + out.err, (rc, out)
        target.put(blob, good)
        assert cli.main(["backup", "restore", "bk", "s1", "back"]) == 0
        assert cli.main(["backup", "restore", "bk", "s1", "back"]) == 0      # again: converges, copies nothing
        assert _rows(meta2, store2, "back") == want
        assert _stored_bytes(store2) >= doc["totals"]["bytes"]
        assert holds.holders(target, "default", "bk", "s1") == []
    finally:
        meta2.close()


def test_cli_backup_restore_uses_copy_job_timeout(bundle, etcd_server, tmp_path, monkeypatch):
    """`seglake backup restore` passes no timeout: restore_from_bundle's default 3600 s is
    used whatever copy_job_timeout says (the DAG uses the setting), and the CLI has no
    --timeout. A DR restore of a big bundle from the CLI is failed (rolled back) after an
    hour although the operator configured a day. (Pre-existing in the CLI, but the CLI
    restore is now the whole DR copy: the import step it replaced had no timeout.)"""
    from seglake import cli

    target, _ = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    for k, v in {"SEGLAKE_ETCD_ROOT": meta2.keys.root, "SEGLAKE_STORE_URI": store2.uri,
                 "SEGLAKE_BACKUP_URI": target.uri, "SEGLAKE_ETCD_ENDPOINT": etcd_server.endpoint,
                 "SEGLAKE_COPY_JOB_TIMEOUT": "86400"}.items():
        monkeypatch.setenv(k, v)
    try:
        assert cli.main(["backup", "restore", "bk", "s1", "back"]) == 0
        (job,) = meta2.copyjobs.list()
        assert job.timeout_at - job.created_at == pytest.approx(86400, abs=5), job.timeout_at - job.created_at
    finally:
        meta2.close()


def test_a_zombie_attempt_whose_arrival_check_fails_keeps_the_live_attempts_file(bundle, etcd_server,
                                                                                        tmp_path):
    """A superseded attempt (a runner presumed dead, its task re-driven) still copying one
    file: it rewrites the final key, its arrival check meets a transient read error (D2's
    'not a readable Parquet file'), and BundleFiles.copy deletes the FINAL key -- the file
    the live attempt already wrote and counted. The job still Completes: a restored
    collection with a file missing. (The zombie's copy is driven by hand here: exactly the
    calls its runner makes, BundleFiles(job).copy, with the store failing one read.)"""
    from seglake.errors import Unavailable
    from seglake.lifecycle.copyjob.bundled import BundleFiles
    from seglake.lifecycle.copyjob.target import source_and_target_files

    target, want = bundle
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        job_id = _set_up(meta2, store2, target, "back")
        job = meta2.copyjobs.get(job_id)[0]
        zombie = BundleFiles(job)                                  # the old attempt's runner
        copyjob.run_inline(meta2, store2, job_id)                  # the live attempt: every file
        seg = next(iter(meta2.segments.list(job.target_collection_id)))
        src, dst, size = next(f for f in source_and_target_files(seg) if f[1].startswith("insert_log/"))

        class Flaky:
            def __getattr__(self, name):
                return getattr(store2, name)

            def open_read(self, key, *a, **k):
                raise Unavailable(f"S3 get {key!r} failed: 503 (transient)")
        try:
            zombie.copy(Flaky(), src, dst, size, False)
        except Exception as e:  # noqa: BLE001 - the zombie's task write is fenced; its delete is not
            print("zombie:", type(e).__name__, str(e)[:120])
        finally:
            zombie.close()
        done = copyjob.finalize(meta2, job_id)
        assert store2.exists(dst) and store2.head(dst).size == size, \
            f"job {done.state}, and {dst} (counted by the live attempt) is gone"
        assert _rows(meta2, store2, "back") == want
    finally:
        meta2.close()
