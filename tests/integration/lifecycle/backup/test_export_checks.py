"""Issue 26, reproduction 6: an export never commits what verify would fail.

A data file damaged in place in the target is not reused by the next export; a killed
export's pin expires within the export's own lease; a target bucket that does not exist
is created before any work.

Real etcd, real files on local disk and SeaweedFS (S3)."""

from __future__ import annotations

import time
import uuid

import pytest

from seglake.config import Settings
from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import verify
from seglake.storage import layout
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


@pytest.fixture
def seeded(meta, store):
    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=2, segments=2, rows=200, dim=4))
    snapshot.create(meta, store, "bk", "s1")


def _flip(target, sha: str) -> None:
    raw = bytearray(target.get(layout.bundle_blob(sha)))
    raw[len(raw) // 2] ^= 0x01
    target.put(layout.bundle_blob(sha), bytes(raw))      # same size, other content


def _insert_shas(doc) -> list[str]:
    return sorted({doc["files"][k]["sha256"] for k in doc["files"] if k.startswith("insert_log/")})


def test_a_data_file_damaged_in_place_is_not_reused_by_the_next_export(meta, store, seeded, tmp_path):
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    doc = bundles.read(target, "default", "bk", "s1")
    damaged = _insert_shas(doc)[:2]
    for sha in damaged:
        _flip(target, sha)
    snapshot.create(meta, store, "bk", "s2")              # the same files: all of them "known"
    rep = exports.export(meta, store, target, "bk", "s2", **quiet)
    assert verify.verify(target, "bk", "s2", **quiet)["ok"], "the export committed what verify fails"
    assert rep["repaired_files"] == len(damaged) and rep["copied_files"] == len(damaged)
    sizes = {f["sha256"]: f["size"] for f in doc["files"].values()}
    assert rep["checked_bytes"] == sum(sizes[sha] for sha in damaged)   # rewritten: their tags changed
    # the damaged contents were replaced: s1 reads whole again too
    assert verify.verify(target, "bk", "s1", **quiet)["ok"]


def test_content_the_target_lists_by_name_and_size_is_checked_before_it_is_trusted(meta, store, seeded, tmp_path):
    """Not reused from an earlier bundle's listing: the export hashed the source file, and
    the target has a data file of that SHA-256 and size (an unfinished bundle wrote it),
    damaged in place since."""
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", bundle="first", **quiet)
    doc = bundles.read(target, "default", "bk", "first")
    for sha in _insert_shas(doc)[:1]:
        _flip(target, sha)
    # the newest bundle vouches for nothing (it is damaged): every file is hashed, and the
    # content is "present" in the target by name and size
    target.delete_many([layout.bundle_commit("default", "bk", "first")])
    rep = exports.export(meta, store, target, "bk", "s1", bundle="second", **quiet)
    assert rep["repaired_files"] == 1
    assert verify.verify(target, "bk", "second", **quiet)["ok"]


def test_an_export_pins_its_snapshot_for_its_lease_and_renews_it(meta, store, seeded, tmp_path, monkeypatch):
    """A killed export left its pin for 7 days; now the pin lives for one lease
    (EXPORT_PIN_LEASE, minutes) and the export renews it while it runs."""
    from seglake import faults

    target = LocalStore(tmp_path / "backup")
    seen = []

    def point(name):
        if name == "export.after_file" and not seen:
            (pin,) = snapshot.list_pins(meta, "bk")
            seen.append(pin)
    monkeypatch.setattr(faults, "point", point)
    exports.export(meta, store, target, "bk", "s1", threads=1, **quiet)
    (pin,) = seen
    assert pin["expires_at"] - pin["created_at"] <= 3600, "pinned for days"
    assert exports.EXPORT_PIN_LEASE <= 3600
    assert snapshot.list_pins(meta, "bk") == [], "released at the end"
    # the lease, renewed: the pin's expiry moves to one lease after the renewal
    rec = snapshot.pin(meta, "bk", "s1", 60, by="export test")
    lease = exports.PinLease(meta, rec["pin_id"], 60)
    lease.renew(now=time.time() + 30)
    (renewed,) = snapshot.list_pins(meta, "bk")
    assert renewed["expires_at"] >= rec["expires_at"] + 29
    snapshot.unpin(meta, rec["pin_id"])
    lease.renew()
    assert lease.lost and "pin" in lease.lost, "a released pin is noticed by the renewal"


def test_a_killed_exports_pin_expires_within_the_lease(meta, store, seeded, tmp_path, monkeypatch):
    """A kill (no finally runs): simulated by an unpin that never happens."""
    target = LocalStore(tmp_path / "backup")
    real_unpin = exports._unpin
    monkeypatch.setattr(exports, "_unpin", lambda meta, pin_id: None)
    exports.export(meta, store, target, "bk", "s1", **quiet)
    monkeypatch.setattr(exports, "_unpin", real_unpin)
    (pin,) = snapshot.list_pins(meta, "bk")
    assert pin["expires_at"] <= time.time() + exports.EXPORT_PIN_LEASE
    assert not snapshot.list_pins(meta, "bk", now=time.time() + exports.EXPORT_PIN_LEASE + 1)


def test_an_export_to_a_bucket_that_does_not_exist_creates_it_first(meta, store, seeded, s3_server, tmp_path):
    bucket = f"seglake-new-{uuid.uuid4().hex[:8]}"
    s = Settings.from_dict({"store_uri": str(tmp_path / "store"), "backup_uri": f"s3://{bucket}/bk",
                            "backup_s3_endpoint": s3_server.endpoint, "backup_s3_access_key": s3_server.access_key,
                            "backup_s3_secret_key": s3_server.secret_key})
    target = bundles.open_target(s)
    rep = exports.export(meta, store, target, "bk", "s1", **quiet)
    assert rep["state"] == "committed" and verify.verify(target, "bk", "s1", **quiet)["ok"]


def test_data_files_unchanged_since_their_check_are_not_read_again(meta, store, seeded, tmp_path):
    """Each bundle records the data tag (size + ETag or mtime) every data file had when the
    export checked or wrote its content: the next export reads only those whose tag
    changed (any rewrite changes it), so an unchanged target costs one listing."""
    target = LocalStore(tmp_path / "backup")
    first = exports.export(meta, store, target, "bk", "s1", **quiet)
    assert first["checked_bytes"] == 0 and first["copied_files"] > 0
    doc = bundles.read(target, "default", "bk", "s1")
    assert all(f.get("data_tag") for f in doc["files"].values())
    snapshot.create(meta, store, "bk", "s2")
    second = exports.export(meta, store, target, "bk", "s2", **quiet)
    assert (second["checked_bytes"], second["read_bytes"], second["copied_files"]) == (0, 0, 0)
    # one data file rewritten (same bytes, so not damaged): its tag changed, it alone is read
    sha = _insert_shas(doc)[0]
    target.put(layout.bundle_blob(sha), target.get(layout.bundle_blob(sha)))
    snapshot.create(meta, store, "bk", "s3")
    third = exports.export(meta, store, target, "bk", "s3", **quiet)
    size = next(f["size"] for f in doc["files"].values() if f["sha256"] == sha)
    assert (third["checked_bytes"], third["copied_files"], third["repaired_files"]) == (size, 0, 0)
    assert verify.verify(target, "bk", "s3", **quiet)["ok"]


def test_on_s3_data_tags_are_etags_and_a_damaged_data_file_is_repaired(meta, store, seeded, s3_server, tmp_path):
    s = Settings.from_dict({"store_uri": str(tmp_path / "store"),
                            "backup_uri": f"s3://seglake-test/tags{uuid.uuid4().hex[:8]}",
                            "backup_s3_endpoint": s3_server.endpoint, "backup_s3_access_key": s3_server.access_key,
                            "backup_s3_secret_key": s3_server.secret_key})
    target = bundles.open_target(s)
    exports.export(meta, store, target, "bk", "s1", **quiet)
    doc = bundles.read(target, "default", "bk", "s1")
    assert all(":etag:" in f["data_tag"] for f in doc["files"].values())
    snapshot.create(meta, store, "bk", "s2")
    assert exports.export(meta, store, target, "bk", "s2", **quiet)["checked_bytes"] == 0
    _flip(target, _insert_shas(doc)[0])
    snapshot.create(meta, store, "bk", "s3")
    rep = exports.export(meta, store, target, "bk", "s3", **quiet)
    assert rep["repaired_files"] == 1 and verify.verify(target, "bk", "s3", **quiet)["ok"]
