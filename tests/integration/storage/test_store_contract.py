"""The Store contract, run against the local directory store and a real S3 server."""

import os
import time

import pytest

from seglake.errors import NotFound


def test_put_get_head(any_store):
    info = any_store.put("a/b/c.bin", b"hello")
    assert info.key == "a/b/c.bin" and info.size == 5
    assert any_store.get("a/b/c.bin") == b"hello"
    head = any_store.head("/a/b/c.bin")
    assert head.size == 5 and abs(head.mtime - time.time()) < 120
    with any_store.open_read("a/b/c.bin") as f:
        f.seek(1)
        assert f.read() == b"ello"
    any_store.put("a/b/c.bin", b"replaced")
    assert any_store.get("a/b/c.bin") == b"replaced"
    with pytest.raises(NotFound):
        any_store.head("a/b/missing")
    with pytest.raises(NotFound):
        any_store.get("a/b/missing")
    assert not any_store.exists("a/b/missing") and any_store.exists("a/b/c.bin")


def test_read_upto_reads_at_most_n_bytes(any_store):
    data = os.urandom(70_000)
    any_store.put("r/obj", data)
    assert any_store.read_upto("r/obj", len(data) + 1) == data      # all of it, when shorter
    assert any_store.read_upto("r/obj", 1000) == data[:1000]         # never more than n
    with pytest.raises(NotFound):
        any_store.read_upto("r/missing", 10)


def test_list_under_a_prefix_never_crosses_into_a_longer_name(any_store):
    for k in ["c1/x", "c1/sub/y", "c10/z", "c1x", "c2/w"]:
        any_store.put(k, b"12345")
    got = sorted(o.key for o in any_store.list("c1"))
    assert got == ["c1/sub/y", "c1/x"]
    assert sorted(o.key for o in any_store.list("c1/")) == got
    objs = list(any_store.list(""))
    assert sorted(o.key for o in objs) == ["c1/sub/y", "c1/x", "c10/z", "c1x", "c2/w"]
    assert all(o.size == 5 and o.mtime > 0 for o in objs)
    assert list(any_store.list("nope/")) == []


def test_copy(any_store):
    any_store.put("src/f", b"x" * 1000)
    info = any_store.copy("src/f", "dst/deep/f")
    assert info.size == 1000 and any_store.get("dst/deep/f") == b"x" * 1000
    with pytest.raises(NotFound):
        any_store.copy("src/missing", "dst/g")


def test_delete_many_2500_keys(any_store):
    keys = [f"del/{i // 100}/{i}" for i in range(2500)]
    if hasattr(any_store, "client"):  # S3: upload in parallel to keep the test short
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda k: any_store.client.put_object(
                Bucket=any_store.bucket, Key=any_store._full(k), Body=b"d"), keys))
    else:
        for k in keys:
            any_store.put(k, b"d")
    any_store.put("keep/me", b"k")
    assert sum(1 for _ in any_store.list("del")) == 2500
    errors = any_store.delete_many(keys + ["del/already-gone"])
    assert errors == []
    assert list(any_store.list("del")) == []
    assert any_store.get("keep/me") == b"k"
    assert any_store.delete_many(keys[:10]) == []  # idempotent


def test_bad_keys_are_refused_before_any_io(any_store):
    for bad in ["../escape", "a/../../b", ""]:
        with pytest.raises(ValueError):
            any_store.put(bad, b"x")


def test_local_store_never_follows_a_symlink_out_of_the_root(tmp_path):
    from seglake.storage.base import SymlinkRefused
    from seglake.storage.local import LocalStore

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"keep")
    store = LocalStore(tmp_path / "root")
    store.put("c/real", b"r")
    os.symlink(outside, tmp_path / "root" / "c" / "link")
    os.symlink(outside / "precious", tmp_path / "root" / "c" / "filelink")
    assert [o.key for o in store.list("")] == ["c/real"]
    assert list(store.list("c/link")) == []
    with pytest.raises(SymlinkRefused):  # refused by name, never followed
        store.head("c/filelink")
    assert (outside / "precious").read_bytes() == b"keep"


def test_local_put_is_atomic_and_leaves_no_temp_files(tmp_path):
    from seglake.storage.local import LocalStore

    store = LocalStore(tmp_path)
    store.put("k", b"1" * 10)
    store.copy("k", "k2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k", "k2"]


def test_s3_copy_is_server_side(s3_store, monkeypatch):
    s3_store.put("big/src", os.urandom(256 * 1024))
    monkeypatch.setattr(s3_store, "get", lambda *a, **k: pytest.fail("copy must not download"))
    s3_store.copy("big/src", "big/dst")
    assert s3_store.head("big/dst").size == 256 * 1024


def test_list_level(any_store):
    for k in ["top.txt", "a/x", "a/b/y", "c/z"]:
        any_store.put(k, b"1")
    dirs, files = any_store.list_level("")
    assert sorted(dirs) == ["a/", "c/"] and [f.key for f in files] == ["top.txt"]
    dirs, files = any_store.list_level("a")
    assert dirs == ["a/b/"] and [f.key for f in files] == ["a/x"]


def test_put_writer_streams_a_big_object_and_a_failed_write_leaves_nothing(any_store):
    import hashlib
    import os

    chunk = os.urandom(1 << 20)
    want = hashlib.sha256(chunk * 20).hexdigest()

    def write(f):
        for _ in range(20):   # 20 MiB: past the S3 store's spool and the multipart threshold
            f.write(chunk)
    info = any_store.put_writer("pw/big", write)
    assert info.size == 20 << 20
    got = hashlib.sha256()
    with any_store.open_read("pw/big") as f:
        for c in iter(lambda: f.read(1 << 20), b""):
            got.update(c)
    assert got.hexdigest() == want

    def broken(f):
        f.write(chunk)
        raise RuntimeError("the source changed")
    with pytest.raises(RuntimeError):
        any_store.put_writer("pw/broken", broken)
    assert not any_store.exists("pw/broken")
