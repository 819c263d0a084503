"""Issue 19: export a snapshot to another store as a bundle, incrementally; restore from
the bundle alone into a fresh etcd and a fresh store; verify a bundle; refusals.

Real etcd, real files on local disk and SeaweedFS (S3) as a second store."""

from __future__ import annotations

import json
import os
import time
import uuid

import numpy as np
import pytest

from seglake.dev import demo
from seglake.config import Settings
from seglake.errors import ConfigError, Conflict, NotFound
from seglake.lifecycle import copyjob, snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports, verify
from seglake.lifecycle.backup import bundle_restore
from seglake.meta import Meta
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.storage import layout, open_store
from seglake.storage.local import LocalStore

from bundle_restore_helpers import collection_rows as _rows, restore_bundle
from pacing import assert_paced, timed

quiet = dict(say=lambda line: None)


def _age(target, key: str, seconds: float) -> None:
    """As if `key` had last been written `seconds` ago by the target's (local) clock."""
    t = time.time() - seconds
    os.utime(target.root / key, (t, t))


def _seed(meta, store, name="bk", segments=3):
    coll, _ = demo.seed(meta, store, demo.SeedParams(name=name, partitions=2, segments=segments, rows=200, dim=4))
    snapshot.create(meta, store, name, "s1")
    return coll


def _add_segment(meta, store, coll, seed=7):
    params = demo.SeedParams(name=coll.name, partitions=2, segments=1, rows=200, dim=4)
    seg = demo._write_segment(meta, store, coll, coll.partitions[0].partition_id, 0, params,
                              np.random.default_rng(seed))
    meta.segments.save([seg])


def _fresh(etcd_server, tmp_path, **extra):
    """Another seglake: its own etcd root and its own store directory."""
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / f"store_{uuid.uuid4().hex[:6]}"), "etcd_timeout": 5, **extra})
    return Meta.from_settings(s), open_store(s)


def _stored_bytes(store) -> int:
    return sum(o.size for prefix in ("insert_log/", "delta_log/", "stats_log/", "index_files/")
               for o in store.list(prefix))


def _restore_all(meta, store, target, name, bundle, to):
    return restore_bundle(meta, store, target, name, bundle, to)[0]


def test_export_then_disaster_restore_from_the_bundle_alone(meta, store, etcd_server, tmp_path):
    _seed(meta, store)
    want = _rows(meta, store, "bk")
    target = LocalStore(tmp_path / "backup")
    rep = exports.export(meta, store, target, "bk", "s1", **quiet)
    rec = meta.snapshots.find(meta.catalog.get_by_name("bk").collection_id, "s1")
    assert rep["state"] == "committed" and (rep["files"], rep["bytes"]) == (rec.files, rec.bytes)
    assert rep["copied_bytes"] == sum(bundles.blobs(target).values()) > 0   # equal contents stored once
    assert rep["rows"] == rec.rows and len(want) > 0
    assert not rec.holds, "the export's pin is released at the end"
    # the source store and etcd are gone: a new etcd root and an empty store
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = _restore_all(meta2, store2, target, "bk", "s1", "bk")   # under its old name again
        assert _rows(meta2, store2, "bk") == want
        # each byte copied once, straight to its final key: no import, no snapshot, no hold left
        job = copyjob.describe_job(meta2, out["job_id"])["progress"]
        assert (job["copied_files"], job["copied_bytes"]) == (rec.files, rec.bytes)
        assert _stored_bytes(store2) == rec.bytes
        assert list(meta2.snapshots.list()) == [] and imports.list_imports(meta2) == []
        assert holds.holders(target, "default", "bk", "s1") == []
        # restored again under another name: a second copy of its own
        _restore_all(meta2, store2, target, "bk", "s1", "bk_again")
        assert _rows(meta2, store2, "bk_again") == want and _stored_bytes(store2) == 2 * rec.bytes
        # new writes get ticks above every restored row
        assert meta2.tso.now() > json.loads(target.get(layout.bundle_doc("default", "bk", "s1")))["source"]["max_ts"]
    finally:
        meta2.close()


def test_second_export_of_an_unchanged_collection_copies_nothing_and_a_change_copies_only_it(meta, store, tmp_path):
    coll = _seed(meta, store)
    target = LocalStore(tmp_path / "backup")
    first = exports.export(meta, store, target, "bk", "s1", **quiet)
    snapshot.create(meta, store, "bk", "s2")          # same segments, a new snapshot
    said = []
    second = exports.export(meta, store, target, "bk", "s2", say=said.append)
    assert (second["copied_files"], second["copied_bytes"], second["read_bytes"]) == (0, 0, 0)
    assert second["reused_files"] == second["files"] == first["files"]
    # the last line counts each file once (it said twice the files it had: reused + deduped)
    assert f"0 files (0 B) copied, {second['files']} already in the target" in said[-1], said[-1]
    _add_segment(meta, store, coll)
    snapshot.create(meta, store, "bk", "s3")
    third = exports.export(meta, store, target, "bk", "s3", **quiet)
    new_files = third["files"] - first["files"]
    assert third["reused_files"] == first["files"] and new_files > 0
    assert third["copied_files"] + third["deduplicated_files"] == new_files and third["copied_files"] > 0
    assert 0 < third["copied_bytes"] < first["copied_bytes"]
    # the bundles share their data files; each lists them all
    assert len(bundles.blobs(target)) == third["unique_blobs"]
    assert [b["bundle"] for b in bundles.list_bundles(target)] == ["s1", "s2", "s3"]
    # exporting the same snapshot again under its name: nothing to do; another snapshot: refused
    assert exports.export(meta, store, target, "bk", "s3", **quiet)["already"] is True
    with pytest.raises(Conflict, match="already exists in the backup target for snapshot 's1'"):
        exports.export(meta, store, target, "bk", "s2", bundle="s1", **quiet)


def test_verify_names_every_bad_file_and_an_import_refuses_a_damaged_one(meta, store, etcd_server, tmp_path):
    _seed(meta, store, segments=1)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    ok = verify.verify(target, "bk", "s1", meta=meta, **quiet)
    assert ok["ok"] and ok["problem_count"] == 0 and ok["rows"] > 0
    doc = bundles.read(target, "default", "bk", "s1")
    insert = sorted(k for k in doc["files"] if k.startswith("insert_log/"))
    damaged, gone = doc["files"][insert[0]]["sha256"], doc["files"][insert[1]]["sha256"]
    raw = bytearray(target.get(layout.bundle_blob(damaged)))
    raw[len(raw) // 2] ^= 0xFF
    target.put(layout.bundle_blob(damaged), bytes(raw))      # same size, other content
    target.delete_many([layout.bundle_blob(gone)])
    bad = verify.verify(target, "bk", "s1", meta=meta, **quiet)
    named = {p["file"]: p["problem"] for p in bad["problems"]}
    assert not bad["ok"] and insert[0] in named and insert[1] in named, named
    assert "content differs" in named[insert[0]] and "missing" in named[insert[1]]
    recorded = verify.list_verifications(meta)
    assert [(r["bundle"], r["ok"]) for r in recorded] == [("s1", False)]
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        with pytest.raises(bundles.BundleError):
            bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "bk_back", **quiet)
        assert not [r for r in meta2.snapshots.list() if r.state == "COMMITTED"]
        with pytest.raises(NotFound):
            meta2.catalog.get_by_name("bk_back")
    finally:
        meta2.close()


def test_a_tampered_bundle_document_is_refused(meta, store, tmp_path):
    _seed(meta, store, segments=1)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    key = layout.bundle_doc("default", "bk", "s1")
    doc = json.loads(target.get(key))
    doc["totals"]["rows"] += 1
    target.put(key, json.dumps(doc).encode())
    with pytest.raises(bundles.BundleError, match="does not match the SHA-256"):
        bundles.read(target, "default", "bk", "s1")
    assert not verify.verify(target, "bk", "s1", **quiet)["ok"]


def test_an_export_without_its_commit_marker_is_no_bundle(meta, store, tmp_path):
    _seed(meta, store, segments=1)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    target.delete_many([layout.bundle_commit("default", "bk", "s1")])
    with pytest.raises(NotFound, match="no commit marker"):
        bundles.read(target, "default", "bk", "s1")
    assert [b["state"] for b in bundles.list_bundles(target)] == ["incomplete"]
    assert exports.export(meta, store, target, "bk", "s1", **quiet)["copied_files"] == 0  # resumed: data is there


def test_the_target_must_be_another_store(settings, tmp_path):
    for uri in (settings.store_uri, settings.store_uri + "/sub", str(tmp_path)):
        with pytest.raises(ConfigError, match="another store"):
            bundles.open_target(settings, uri)
    with pytest.raises(ConfigError, match="not an absolute path"):
        bundles.open_target(settings, "relative/dir")
    assert bundles.open_target(settings, str(tmp_path / "elsewhere")).uri.endswith("elsewhere")


def test_cross_store_on_s3_local_source_to_seaweedfs_and_back(meta, store, etcd_server, s3_server, tmp_path):
    _seed(meta, store)
    want = _rows(meta, store, "bk")
    s = Settings.from_dict({"store_uri": str(tmp_path / "store"), "backup_uri": f"s3://seglake-test/bk{uuid.uuid4().hex[:8]}",
                            "backup_s3_endpoint": s3_server.endpoint, "backup_s3_access_key": s3_server.access_key,
                            "backup_s3_secret_key": s3_server.secret_key})
    target = bundles.open_target(s)
    target.ensure_bucket()
    rep = exports.export(meta, store, target, "bk", "s1", **quiet)
    assert rep["copied_files"] + rep["deduplicated_files"] == rep["files"]
    assert verify.verify(target, "bk", "s1", **quiet)["ok"]
    again = exports.export(meta, store, target, "bk", "s1", bundle="s1_again", **quiet)
    assert again["copied_bytes"] == 0 and again["read_bytes"] == 0
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        _restore_all(meta2, store2, target, "bk", "s1", "bk_back")
        assert _rows(meta2, store2, "bk_back") == want
    finally:
        meta2.close()


def test_cli_export_list_verify_and_restore_into_another_seglake(meta, store, settings, etcd_server, tmp_path,
                                                                 monkeypatch, capsys):
    from seglake import cli

    _seed(meta, store, segments=1)
    want = _rows(meta, store, "bk")
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))
    assert cli.main(["snapshots", "export", "bk", "s1", "--bundle", "nightly"]) == 0
    assert "bundle default.bk/nightly committed" in capsys.readouterr().out
    assert cli.main(["backup", "list", "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert (item["bundle"], item["state"], item["snapshot"]) == ("nightly", "committed", "s1")
    assert cli.main(["backup", "verify", "bk", "nightly"]) == 0
    assert "OK" in capsys.readouterr().out
    assert cli.main(["backup", "prune", "bk", "--keep-last", "1", "--dry-run"]) == 0
    assert "would drop 0 bundles (none), kept 1" in capsys.readouterr().out
    meta2, store2 = _fresh(etcd_server, tmp_path)
    monkeypatch.setenv("SEGLAKE_ETCD_ROOT", meta2.keys.root)
    monkeypatch.setenv("SEGLAKE_STORE_URI", store2.uri)
    try:
        assert cli.main(["backup", "restore", "bk", "nightly", "bk_back"]) == 0
        assert "copy job" in capsys.readouterr().out
        assert _rows(meta2, store2, "bk_back") == want
    finally:
        meta2.close()


def test_a_64_mib_export_at_8_mib_per_second_takes_8_seconds(meta, store, tmp_path):
    from seglake.throttle import BURST

    MiB = 1 << 20
    demo.seed(meta, store, demo.SeedParams(name="big", partitions=1, segments=4, rows=32768, dim=128))
    snapshot.create(meta, store, "big", "s")
    target = LocalStore(tmp_path / "backup")
    # the same copies unthrottled first: what the work itself takes on this machine now
    _, export_alone = timed(exports.export, meta, store, LocalStore(tmp_path / "fast"), "big", "s", threads=4,
                            **quiet)
    _, import_alone = timed(imports.import_bundle, meta, store, LocalStore(tmp_path / "fast"), "big", "s",
                            as_collection="big_fast", threads=4, **quiet)
    rep, took = timed(exports.export, meta, store, target, "big", "s", max_bytes_per_second=8 * MiB, threads=4,
                      **quiet)
    assert 60 * MiB <= rep["copied_bytes"] <= 72 * MiB, rep["copied_bytes"]
    assert_paced(took, rep["copied_bytes"] / (8 * MiB) - BURST, export_alone)
    assert rep["throttle"]["limit_bytes_per_second"] == 8 * MiB and rep["throttle"]["waited_s"] > 5
    # the same bundle imported at 16 MiB/s: it reads the bundle twice under the limit (the
    # check before it writes anything, then the copy): the export's time again
    _, took = timed(imports.import_bundle, meta, store, target, "big", "s", as_collection="big_copy",
                    max_bytes_per_second=16 * MiB, threads=4, **quiet)
    assert_paced(took, 2 * rep["bytes"] / (16 * MiB) - BURST, import_alone)


def _three_bundles(meta, store, tmp_path):
    """Bundles s1..s3 of `bk`, each one segment more; (target, s1's visible rows)."""
    coll = _seed(meta, store, segments=1)
    first = _rows(meta, store, "bk")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    for i in (2, 3):
        _add_segment(meta, store, coll, seed=i)
        snapshot.create(meta, store, "bk", f"s{i}")
        exports.export(meta, store, target, "bk", f"s{i}", **quiet)
    return target, first


def test_prune_by_policy_then_sweep_only_unreferenced_old_data(meta, store, etcd_server, tmp_path):
    from seglake.lifecycle.backup import prune

    target, _ = _three_bundles(meta, store, tmp_path)
    doc3 = bundles.read(target, "default", "bk", "s3")
    before = bundles.blobs(target)
    dry = prune.prune(target, "bk", {"keep_last": 1}, dry_run=True, **quiet)
    assert dry["pruned"] == ["s1", "s2"] and [b["bundle"] for b in bundles.list_bundles(target)] == ["s1", "s2", "s3"]
    rep = prune.prune(target, "bk", {"keep_last": 1}, **quiet)
    assert rep["pruned"] == ["s1", "s2"] and [b["bundle"] for b in bundles.list_bundles(target)] == ["s3"]
    assert rep["sweep"]["deleted"] == 0 and rep["sweep"]["kept_young"] == 0   # every blob is s3's: nothing to sweep
    # a blob nobody lists: young -> kept; old -> swept
    orphan = layout.bundle_blob("ab" * 32)
    target.put(orphan, b"no bundle lists me")
    assert prune.sweep_data(target, **quiet)["kept_young"] == 1 and target.exists(orphan)
    swept = prune.sweep_data(target, now=time.time() + 2 * 86400, **quiet)
    assert swept["deleted"] == 1 and not target.exists(orphan)
    assert set(bundles.blobs(target)) == {f["sha256"] for f in doc3["files"].values()} == set(before)
    assert verify.verify(target, "bk", "s3", **quiet)["ok"]
    assert list(target.list(layout.sweep_locks_prefix())) == []


def test_a_sweep_refuses_on_an_unreadable_bundle(meta, store, tmp_path):
    from seglake.lifecycle.backup import prune

    _seed(meta, store, segments=1)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    orphan = layout.bundle_blob("cd" * 32)
    target.put(orphan, b"old")
    target.put(layout.bundle_doc("default", "bk", "broken"), b"{not json")
    with pytest.raises(prune.SweepRefused, match="unreadable: nothing swept"):
        prune.sweep_data(target, now=time.time() + 2 * 86400, **quiet)
    assert target.exists(orphan) and list(target.list(layout.sweep_locks_prefix())) == []


def test_an_export_copies_back_what_a_sweep_took_and_waits_for_a_running_sweep(meta, store, tmp_path, monkeypatch):
    from seglake.errors import SeglakeError

    coll = _seed(meta, store, segments=1)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    _add_segment(meta, store, coll)
    snapshot.create(meta, store, "bk", "s2")
    real = bundles.write_doc
    taken = sorted(bundles.blobs(target))[:3]

    def sweep_first(t, doc):   # a sweep that ran before s2's bundle.json existed took 3 reused files
        t.put(layout.sweep_started(), json.dumps({"token": "sweep-1", "at": time.time()}).encode())  # as it starts
        t.delete_many([layout.bundle_blob(sha) for sha in taken])
        return real(t, doc)
    monkeypatch.setattr(bundles, "write_doc", sweep_first)
    rep = exports.export(meta, store, target, "bk", "s2", **quiet)
    assert rep["copied_again"] == 3 and verify.verify(target, "bk", "s2", **quiet)["ok"]
    monkeypatch.setattr(bundles, "write_doc", real)
    # no sweep started since the export listed the target: it is not listed again before the commit
    real_blobs, listings = bundles.blobs, []
    monkeypatch.setattr(bundles, "blobs", lambda t: listings.append(1) or real_blobs(t))
    _add_segment(meta, store, coll)
    snapshot.create(meta, store, "bk", "s2b")
    assert exports.export(meta, store, target, "bk", "s2b", **quiet)["copied_again"] == 0 and listings == []
    assert verify.verify(target, "bk", "s2b", **quiet)["ok"]
    monkeypatch.setattr(bundles, "blobs", real_blobs)
    # a live sweep lock: the export waits for it (here: gives up) and commits nothing
    target.put(layout.sweep_lock("other"), json.dumps({"at": time.time()}).encode())
    snapshot.create(meta, store, "bk", "s3")
    monkeypatch.setattr(exports, "SWEEP_WAIT", 1.5)
    with pytest.raises(SeglakeError, match="held its lock"):
        exports.export(meta, store, target, "bk", "s3", **quiet)
    with pytest.raises(NotFound):
        bundles.read(target, "default", "bk", "s3")
    # a dead sweep's lock is ignored: one last renewed 11 min ago (a SIGKILLed sweep's; a live
    # sweep renews it every minute) holds an export back no longer
    target.put(layout.sweep_lock("other"), json.dumps({"at": time.time() - 660}).encode())
    _age(target, layout.sweep_lock("other"), 660)      # by the target's clock too
    assert exports.export(meta, store, target, "bk", "s3", **quiet)["state"] == "committed"


def test_a_crashed_export_and_a_crashed_import_resume(meta, store, etcd_server, tmp_path, monkeypatch):
    _seed(meta, store)
    want = _rows(meta, store, "bk")
    target = LocalStore(tmp_path / "backup")
    real_put, calls = LocalStore.put, []

    def crash_after_10(self, key, data):
        if self is target and key.startswith("data/"):
            calls.append(key)
            if len(calls) > 10:
                raise OSError("killed")
        return real_put(self, key, data)
    monkeypatch.setattr(LocalStore, "put", crash_after_10)
    with pytest.raises(OSError):
        exports.export(meta, store, target, "bk", "s1", threads=1, **quiet)
    monkeypatch.setattr(LocalStore, "put", real_put)
    assert [e["state"] for e in exports.list_exports(meta)] == ["failed"]
    rec = meta.snapshots.find(meta.catalog.get_by_name("bk").collection_id, "s1")
    assert not rec.holds, "the failed export released its pin"
    rep = exports.export(meta, store, target, "bk", "s1", **quiet)
    assert rep["deduplicated_files"] >= 10 and rep["state"] == "committed"

    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        calls.clear()

        def crash_in_store2(self, key, data):
            if self is store2 and key.startswith("insert_log/"):
                calls.append(key)
                if len(calls) > 10:
                    raise OSError("killed")
            return real_put(self, key, data)
        monkeypatch.setattr(LocalStore, "put", crash_in_store2)
        with pytest.raises(OSError):
            imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
        monkeypatch.setattr(LocalStore, "put", real_put)
        (pending,) = meta2.snapshots.list()
        assert pending.state == "PENDING" and pending.error and "killed" in pending.error
        again = imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
        assert again["kept_files"] >= 10 and again["snapshot_id"] == pending.snapshot_id
        # a restore from the bundle killed mid-copy resumes: what it wrote whole is kept
        calls.clear()
        real_writer = LocalStore.put_writer

        def crash_writer_in_store2(self, key, write):   # logs are written from the checked spool
            if self is store2 and key.startswith("insert_log/"):
                calls.append(key)
                if len(calls) > 10:
                    raise OSError("killed")
            return real_writer(self, key, write)
        monkeypatch.setattr(LocalStore, "put_writer", crash_writer_in_store2)
        out = bundle_restore.restore_from_bundle(meta2, store2, target, "bk", "s1", "bk_back", engine="inline", **quiet)
        copyjob.plan(meta2, out["job_id"])
        with pytest.raises(OSError):
            copyjob.run_inline(meta2, store2, out["job_id"])
        monkeypatch.setattr(LocalStore, "put_writer", real_writer)
        copyjob.run_inline(meta2, store2, out["job_id"])
        assert copyjob.finalize(meta2, out["job_id"]).state == JOB_COMPLETED
        assert sum(t.skipped_files for t in meta2.copyjobs.tasks(out["job_id"])) >= 10
        assert _rows(meta2, store2, "bk_back") == want
    finally:
        meta2.close()


def test_s3_to_s3_two_buckets_with_their_own_settings(etcd_server, s3_server, tmp_path):
    """Source store on one SeaweedFS bucket, the backup on another; restore into a third
    seglake whose store is a third bucket."""
    tag = uuid.uuid4().hex[:8]
    creds = {"access_key": s3_server.access_key, "secret_key": s3_server.secret_key}

    def seglake(bucket: str) -> tuple:
        s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"s3s3{uuid.uuid4().hex[:8]}",
                                "store_uri": f"s3://{bucket}/{tag}", "s3_endpoint": s3_server.endpoint,
                                "s3_access_key": creds["access_key"], "s3_secret_key": creds["secret_key"],
                                "backup_uri": f"s3://seglake-bk-target/{tag}",
                                "backup_s3_endpoint": s3_server.endpoint,
                                "backup_s3_access_key": creds["access_key"],
                                "backup_s3_secret_key": creds["secret_key"], "etcd_timeout": 5})
        st = open_store(s)
        st.ensure_bucket()
        return s, Meta.from_settings(s), st

    s1, meta1, store1 = seglake("seglake-bk-source")
    s2, meta2, store2 = seglake("seglake-bk-dr")
    try:
        _seed(meta1, store1, segments=2)
        want = _rows(meta1, store1, "bk")
        target = bundles.open_target(s1)
        target.ensure_bucket()
        rep = exports.export(meta1, store1, target, "bk", "s1", **quiet)
        assert rep["copied_files"] + rep["deduplicated_files"] == rep["files"]
        assert exports.export(meta1, store1, target, "bk", "s1", bundle="again", **quiet)["read_bytes"] == 0
        _restore_all(meta2, store2, bundles.open_target(s2), "bk", "s1", "bk_back")
        assert _rows(meta2, store2, "bk_back") == want
    finally:
        meta1.close()
        meta2.close()


def test_a_target_with_wrong_credentials_is_a_clear_error_before_any_change(meta, store, s3_server, tmp_path):
    from seglake.errors import SeglakeError

    _seed(meta, store, segments=1)
    secret = "wrong-" + uuid.uuid4().hex
    s = Settings.from_dict({"store_uri": str(tmp_path / "store"), "backup_uri": "s3://seglake-test/nocreds",
                            "backup_s3_endpoint": s3_server.endpoint, "backup_s3_access_key": "nobody",
                            "backup_s3_secret_key": secret})
    target = bundles.open_target(s)
    with pytest.raises(SeglakeError) as e:
        exports.export(meta, store, target, "bk", "s1", **quiet)
    assert secret not in str(e.value)
    rec = meta.snapshots.find(meta.catalog.get_by_name("bk").collection_id, "s1")
    assert not rec.holds and exports.list_exports(meta) == [], "nothing pinned or recorded"


@pytest.mark.parametrize("forge", ["uid", "max_ts", "duplicate_segment", "unlisted_partition", "shard", "entry"])
def test_a_forged_bundle_is_refused_before_the_import_writes_anything(meta, store, etcd_server, tmp_path, forge):
    """bundle.json edited and its commit marker recomputed to match: the import must
    refuse it from the document alone, before any etcd key or file exists."""
    _seed(meta, store, segments=2)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    doc = bundles.read(target, "default", "bk", "s1")
    seg = doc["segments"]
    if forge == "uid":
        doc["uid"] = "../../x"
    elif forge == "max_ts":
        doc["source"]["max_ts"] = 2**70
    elif forge == "duplicate_segment":
        seg[1]["segment_id"] = seg[0]["segment_id"]
    elif forge == "unlisted_partition":
        seg[0]["partition_id"] = 999999
    elif forge == "shard":
        seg[0]["channel"] = seg[0]["channel"].rsplit("v", 1)[0] + "v9"
    else:
        del seg[0]["num_rows"]
    bundles.write(target, doc)   # a matching marker: only the content can tell
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        with pytest.raises(bundles.BundleError):
            imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
        assert list(meta2.kv.range(meta2.keys.prefix, keys_only=True)) == []
        assert list(store2.list("")) == []
    finally:
        meta2.close()


def test_two_overlapping_exports_of_one_bundle_leave_a_readable_bundle(meta, store, tmp_path, monkeypatch):
    """Two exports of the same snapshot to the same bundle overlap (two schedule runs, or a
    schedule run and a hand export): each writes its bundle.json (its own uid), then its
    marker. Whatever the order, the committed bundle reads back whole."""
    _seed(meta, store)
    target = LocalStore(tmp_path / "backup")
    real = bundles.write_marker
    nested = []

    def marker_after_the_other(t, doc, raw):
        if not nested:   # the first export: the second one runs whole between its bundle.json and its marker
            nested.append("running")
            exports.export(meta, store, target, "bk", "s1", threads=2, **quiet)
        return real(t, doc, raw)

    monkeypatch.setattr(bundles, "write_marker", marker_after_the_other)
    exports.export(meta, store, target, "bk", "s1", threads=2, **quiet)
    monkeypatch.setattr(bundles, "write_marker", real)
    assert verify.verify(target, "bk", "s1", threads=2, **quiet)["ok"]


def test_a_sweep_longer_than_the_lock_ttl_keeps_its_lock_alive_until_it_deleted(meta, store, tmp_path, monkeypatch):
    """A sweep of a big target reads every bundle.json twice: it may take longer than
    LOCK_TTL. Its lock must still be alive when it deletes, or an export that wrote its
    bundle.json after the sweep's second read would take the lock for a dead sweep's,
    commit, and lose files to the delete."""
    from seglake.lifecycle.backup import prune

    target = LocalStore(tmp_path / "backup")
    target.put(layout.bundle_blob("cd" * 32), b"old")
    # (1.2 s: the sweep stops once its lock went unrenewed for half of it, and a loaded
    # machine may starve the renewing thread for a few tenths of a second)
    monkeypatch.setattr(prune, "LOCK_TTL", 1.2)
    real_refs, real_delete = prune.referenced, target.delete_checked
    seen = []

    def slow_refs(t):
        time.sleep(1.5)   # a long read of every bundle.json: longer than LOCK_TTL
        return real_refs(t)

    def delete_checked(objs, guard=None):
        seen.append(prune.sweep_running(target))
        return real_delete(objs, guard=guard)

    monkeypatch.setattr(prune, "referenced", slow_refs)
    monkeypatch.setattr(target, "delete_checked", delete_checked)
    rep = prune.sweep_data(target, now=time.time() + 2 * 86400, **quiet)
    assert rep["deleted"] == 1 and seen and all(seen), seen
    assert list(target.list(layout.sweep_locks_prefix())) == []
    assert json.loads(prune.sweep_mark(target))["token"]   # the mark an export compares stays, naming this sweep


def test_a_bundle_being_restored_or_verified_is_not_pruned(meta, store, etcd_server, tmp_path, monkeypatch):
    """A restore's copy job holds its bundle: a prune that runs meanwhile (here: from
    inside the copy, after its first file) keeps it, reports who holds it, and a later
    prune drops it; the restore completes with every row. A verify holds it the same way."""
    from seglake import faults
    from seglake.lifecycle.backup import prune

    import threading

    target, s1_rows = _three_bundles(meta, store, tmp_path)
    meta2, store2 = _fresh(etcd_server, tmp_path)
    reports, once = [], threading.Lock()

    def point(name):
        if name == "copy.after_file" and once.acquire(blocking=False):
            reports.append(prune.prune(target, "bk", {"keep_last": 1}, **quiet))
    monkeypatch.setattr(faults, "point", point)
    try:
        _restore_all(meta2, store2, target, "bk", "s1", "bk_back")
        assert _rows(meta2, store2, "bk_back") == s1_rows
    finally:
        meta2.close()
    (rep,) = reports
    assert rep["pruned"] == ["s2"] and list(rep["held"]) == ["s1"] and "copy job" in rep["held"]["s1"][0]
    assert [b["bundle"] for b in bundles.list_bundles(target)] == ["s1", "s3"]
    # the hold is gone with the import (the last sweep's record stays: it is no lock)
    assert [o.key for o in target.list("_locks/") if o.key != layout.sweep_started()] == []
    assert prune.prune(target, "bk", {"keep_last": 1}, **quiet)["pruned"] == ["s1"]

    # verify holds its bundle while it reads
    monkeypatch.setattr(bundles, "sha256_of", lambda *a, **k: (_ for _ in ()).throw(
        AssertionError(holds.holders(target, "default", "bk", "s3"))))
    with pytest.raises(AssertionError, match="verify"):
        verify.verify(target, "bk", "s3", threads=1, **quiet)
    assert holds.holders(target, "default", "bk", "s3") == []


def test_holds_and_prune_intents_exclude_each_other(meta, store, tmp_path):
    """The prune writes its intent before it looks for holds; a reader writes its hold
    before it looks for intents: a reader that finds an intent waits for it to go, then
    reads what is there; a stale hold (a dead reader) does not keep a bundle forever."""
    import threading

    from seglake.lifecycle.backup import prune

    target, _ = _three_bundles(meta, store, tmp_path)
    intent = layout.bundle_pruning("default", "bk", "s1")
    target.put(intent, json.dumps({"at": time.time()}).encode())
    with pytest.raises(bundles.BundleError, match="retention prune of it has been running"):
        with holds.held(target, "default", "bk", "s1", wait=0.5):
            pass
    assert list(target.list(layout.bundle_holds_prefix("default", "bk", "s1"))) == []
    threading.Timer(0.5, lambda: target.delete_many([intent])).start()
    t0 = time.time()
    with holds.held(target, "default", "bk", "s1", wait=30):
        assert time.time() - t0 >= 0.4
        assert bundles.read(target, "default", "bk", "s1")
    # a hold older than HOLD_TTL is a dead reader's: the prune drops the bundle
    target.put(layout.bundle_hold("default", "bk", "s1", "dead"),
               json.dumps({"at": time.time() - holds.HOLD_TTL - 1, "by": "gone"}).encode())
    _age(target, layout.bundle_hold("default", "bk", "s1", "dead"), holds.HOLD_TTL + 1)
    rep = prune.prune(target, "bk", {"keep_last": 1}, sweep=False, **quiet)
    assert rep["pruned"] == ["s1", "s2"] and rep["held"] == {}


def test_a_read_only_target_is_imported_without_a_hold(meta, store, etcd_server, tmp_path, monkeypatch):
    target, _ = _three_bundles(meta, store, tmp_path)
    real_put = type(target).put

    def put(self, key, data):
        if key.startswith("_locks/"):
            raise PermissionError("read-only")
        return real_put(self, key, data)
    monkeypatch.setattr(type(target), "put", put)
    said = []
    meta2, store2 = _fresh(etcd_server, tmp_path)
    try:
        out = imports.import_bundle(meta2, store2, target, "bk", "s3", say=said.append)
        assert out["snapshot"] == "s3"
    finally:
        meta2.close()
    assert any("could not hold bundle default.bk/s3" in line for line in said), said
