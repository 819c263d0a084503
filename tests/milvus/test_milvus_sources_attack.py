"""Registered Milvus sources under attack (issue 29 Deliver 4): two sources naming the same
collection, a collection dropped and recreated in Milvus (same name, new id) between
scheduled runs. Real etcd; the recreated collection against a real Milvus 2.3.5 and
SeaweedFS, the captures in a local target."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import pytest

from tests.milvus.conftest import own_milvus

from seglake.errors import ValidationError
from seglake.lifecycle.backup import bundle as bundles
from seglake.milvus import sources
from seglake.storage.local import LocalStore

BUCKET = "milvus-attack"
quiet = dict(say=lambda line: None)


@pytest.mark.etcd
def test_two_sources_may_not_capture_the_same_collection(meta, etcd_server, tmp_path):
    """Both would write `sched_<time>` bundles of that collection to the same place in the
    target: one's run called the other's capture "already captured" (its own Milvus never
    captured) and pruned the other's captures by its own policy."""
    base = {"milvus_etcd": etcd_server.endpoint, "milvus_root": f"none-{uuid.uuid4().hex[:6]}",
            "bucket": "milvus-bucket"}
    sources.set_source(meta, "a", {**base, "collections": "docs,imgs", "keep_last": 5})
    with pytest.raises(ValidationError, match=r"source 'a' already captures default\.imgs") as e:
        sources.set_source(meta, "b", {**base, "bucket": "other-bucket", "collections": ["logs", "imgs"],
                                       "keep_last": 1})
    assert "docs" not in str(e.value)
    assert [d["name"] for d in sources.list_sources(meta)] == ["a"]           # nothing written
    sources.set_source(meta, "b", {**base, "collections": "imgs", "db": "other", "keep_last": 1})  # other db
    assert sources.set_source(meta, "a", {**base, "collections": "docs,imgs", "keep_last": 2})["keep_last"] == 2
    # a record written beside that check (an older seglake, a race): the run judges neither's bundles
    raw = meta.kv.get(meta.keys.milvus_source("b")).value.decode()
    meta.kv.put(meta.keys.milvus_source("c"), raw.replace('"other"', '"default"').replace('"name": "b"',
                                                                                          '"name": "c"'))
    target = LocalStore(tmp_path / "backup")
    settings = SimpleNamespace(etcd_timeout=5, copy_threads=1)
    got = {r["collection"]: r for r in sources.run(meta, target, settings, "a", now=time.time(), dry_run=True,
                                                   **quiet)}
    assert "source 'c' already captures default.imgs" in got["imgs"]["error"], got
    assert got["imgs"]["bundle"] is None and got["imgs"]["pruned"] == []
    assert "error" not in got["docs"] and got["docs"]["bundle"].startswith("sched_")
    assert "FAILED" in sources.report_line(got["imgs"])


def test_a_local_bucket_path_is_checked_like_every_path():
    """A Milvus local storage path (`bucket` absolute) full-matches the roots' pattern: '/',
    '..' or '.' segments, empty segments and spaces were accepted."""
    good = {"milvus_etcd": "127.0.0.1:2379", "bucket": "/var/lib/milvus", "collections": "a", "keep_last": 1}
    assert sources.parse_source(good)["bucket"] == "/var/lib/milvus"
    for bad in ("/", "/tmp/../etc", "/a/./b", "/a//b", "/a b", "/a/\n"):
        with pytest.raises(ValidationError, match="Milvus bucket"):
            sources.parse_source({**good, "bucket": bad})


@pytest.fixture(scope="module")
def msrv(milvus_python, etcd_server, s3_server, tmp_path_factory):
    yield from own_milvus(etcd_server, s3_server, tmp_path_factory, BUCKET, "att")


@pytest.mark.etcd
@pytest.mark.s3
@pytest.mark.milvus
def test_a_recreated_collection_is_captured_and_its_predecessor_kept(msrv, milvus_python, s3_server, meta,
                                                                      tmp_path, monkeypatch):
    """Dropped and created again under the same name (a new collection id) between two
    runs: the earlier collection's capture in this period no longer makes the new one "not
    due" (it went uncaptured until the next period), and the schedule judges only the
    current collection's captures: the predecessor's are kept, never pruned nor counted."""
    from seglake.config import Settings
    from tests.milvus.conftest import milvus_client

    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_SECRET_KEY", s3_server.secret_key)
    settings = Settings.load()
    coll = f"re_{uuid.uuid4().hex[:6]}"
    make = lambda n: ({"op": "create", "name": coll, "shards": 1, "dim": 2},    # noqa: E731
                      {"op": "insert", "name": coll, "pks": list(range(n))}, {"op": "flush", "name": coll})
    milvus_client(milvus_python, msrv.address, *make(20), timeout=300)
    doc = {"milvus_etcd": msrv.etcd_endpoint, "milvus_root": msrv.etcd_root, "bucket": BUCKET,
           "bucket_root": msrv.s3.root_path, "collections": coll, "keep_daily": 7}
    sources.set_source(meta, "src", doc)
    target = LocalStore(tmp_path / "backup")
    t2 = int(time.time()) // 60 * 60
    t1 = t2 - 120
    if time.gmtime(t1).tm_mday != time.gmtime(t2).tm_mday:
        t1, t2 = t2 + 1, t2 + 60                      # both in one day (the clock allows MAX_AHEAD)
    (r1,) = sources.run(meta, target, settings, "src", now=t1, **quiet)
    assert r1["captured"]["rows"] == 20 and r1["verify"]["ok"], r1
    cid = lambda b: bundles.read(target, "default", coll, b)["source"]["collection_id"]   # noqa: E731
    old = cid(r1["bundle"])
    milvus_client(milvus_python, msrv.address, {"op": "drop", "name": coll}, *make(5), timeout=300)

    (r2,) = sources.run(meta, target, settings, "src", now=t2, **quiet)
    assert "error" not in r2 and r2["captured"] is not None, r2        # was: "not due" (the old one's capture)
    assert r2["captured"]["rows"] == 5 and cid(r2["bundle"]) != old and r2["verify"]["ok"]
    assert r2["earlier"] == [r1["bundle"]] and r1["bundle"] not in r2["kept"]

    sources.set_source(meta, "src", {**doc, "keep_daily": None, "keep_last": 1})
    (r3,) = sources.run(meta, target, settings, "src", now=t2 + 60, **quiet)
    assert r3["pruned"] == [r2["bundle"]] and list(r3["kept"]) == [r3["bundle"]], {k: v for k, v in r3.items() if k != "policy"}
    done = [b for _, _, b, c in bundles.find(target, "default", coll) if c]
    assert sorted(done) == sorted([r1["bundle"], r3["bundle"]])      # the predecessor's capture kept
    assert cid(r1["bundle"]) == old


@pytest.mark.etcd
@pytest.mark.s3
@pytest.mark.milvus
def test_a_data_file_damaged_in_place_is_written_again_by_the_next_capture(msrv, milvus_python, s3_server, meta,
                                                                          tmp_path, monkeypatch):
    """One byte of a data file flipped in the target, its size and mtime kept: its tag
    changed all the same (a local tag holds the inode change time, which no call sets
    back), so the next capture writes it again from Milvus's bucket and verifies. (It was
    reused forever, every run failing verify; then reused once, found by verify.)"""
    import os

    from seglake.config import Settings
    from seglake.storage import layout
    from tests.milvus.conftest import milvus_client

    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_SECRET_KEY", s3_server.secret_key)
    settings = Settings.load()
    coll = f"dmg_{uuid.uuid4().hex[:6]}"
    milvus_client(milvus_python, msrv.address, {"op": "create", "name": coll, "shards": 1, "dim": 2},
                  {"op": "insert", "name": coll, "pks": list(range(40))}, {"op": "flush", "name": coll}, timeout=300)
    sources.set_source(meta, "dmg", {"milvus_etcd": msrv.etcd_endpoint, "milvus_root": msrv.etcd_root,
                                     "bucket": BUCKET, "bucket_root": msrv.s3.root_path, "collections": coll,
                                     "keep_last": 5})
    target = LocalStore(tmp_path / "backup")
    t1 = int(time.time()) // 60 * 60 - 180
    (r1,) = sources.run(meta, target, settings, "dmg", now=t1, **quiet)
    assert r1["verify"]["ok"] and "error" not in r1, r1
    files = bundles.read(target, "default", coll, r1["bundle"])["files"]
    key, f = max(((k, f) for k, f in files.items() if k.startswith("insert_log/")), key=lambda kf: kf[1]["size"])
    blob = tmp_path / "backup" / layout.bundle_blob(f["sha256"])
    st = blob.stat()
    raw = bytearray(blob.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    blob.write_bytes(bytes(raw))
    os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))              # same size, same mtime ...

    # ... but not the same inode change time (a local data tag holds it, atk s20 F6): the next
    # capture no longer trusts the file and writes it again at once; that run verifies
    (r2,) = sources.run(meta, target, settings, "dmg", now=t1 + 60, **quiet)
    assert r2["captured"]["copied_files"] == 1 and r2["verify"]["ok"] and "error" not in r2, r2
    assert key in files
    assert bundles.sha256_of(target, layout.bundle_blob(f["sha256"]))[0] == f["sha256"]


@pytest.mark.etcd
def test_a_hostile_pin_record_holds_its_bundle_and_stops_nothing(meta, tmp_path):
    """A pin record written by hand or damaged: an expiry beyond time_t (1e300, inf) raised
    OverflowError out of the prune (through run_all, which stopped every other source);
    now it holds the bundle as unreadable. A pin's `by` text is printable (it is logged:
    a line break forged report lines)."""
    from seglake.storage import layout

    key = meta.keys.milvus_pin("default", "docs", "sched_20261127T1200Z")
    for exp in (1e300, float("inf"), float("nan"), "soon", [1], None):
        meta.kv.put(key, '{"expires_at": %s, "by": "x"}' % ("1e300" if exp == 1e300 else "Infinity"
                                                          if exp == float("inf") else "NaN" if exp != exp
                                                          else '"soon"' if exp == "soon" else "[1]" if exp == [1]
                                                          else "null"))
        assert sources.pinned_by(meta, "default", "docs", "sched_20261127T1200Z") == \
            [f"an unreadable pin record {key} (kept)"], exp
    meta.kv.put(key, '{"expires_at": %f, "by": "ops\\nverify OK"}' % (time.time() + 60))
    (line,) = sources.pinned_by(meta, "default", "docs", "sched_20261127T1200Z")
    assert "\n" not in line and line.startswith("pin by ops verify OK until ")
    target = LocalStore(tmp_path / "backup")
    target.put(layout.bundle_commit("default", "docs", "sched_20261127T1200Z"), b"{}")
    with pytest.raises(ValidationError, match="printable"):
        sources.pin(meta, target, "default", "docs", "sched_20261127T1200Z", 3600, by="a\nb")
