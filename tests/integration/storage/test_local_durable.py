"""The local store's writes are durable on return (issue 8 item 21): the file's data
is fsynced before it becomes visible under its name, and the directory entry (and any
directory made for it) after, all before the call returns. Real files, real fsync;
the calls are observed, not replaced."""

import os
import stat

import pytest

from seglake.storage import local as local_mod
from seglake.storage.local import LocalStore


@pytest.fixture
def events(monkeypatch):
    log = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        real_fsync(fd)
        log.append(("fsync", st.st_ino, stat.S_ISDIR(st.st_mode)))

    def replace(a, b, **kw):
        real_replace(a, b, **kw)
        log.append(("rename", os.stat(b, dir_fd=kw.get("dst_dir_fd")).st_ino, False))

    monkeypatch.setattr(local_mod.os, "fsync", fsync)
    monkeypatch.setattr(local_mod.os, "replace", replace)
    return log


def ino(p):
    return os.stat(p).st_ino


def test_put_fsyncs_the_data_before_the_rename_and_the_directory_after(tmp_path, events):
    store = LocalStore(tmp_path / "s")
    store.put("insert_log/1/2/3/100/7", b"x" * 1000)
    f = tmp_path / "s/insert_log/1/2/3/100/7"
    d = f.parent
    assert ("fsync", ino(f), False) in events
    assert events.index(("fsync", ino(f), False)) < events.index(("rename", ino(f), False))
    assert events.index(("fsync", ino(d), True)) > events.index(("rename", ino(f), False))
    # every directory made for the file is durable in its parent
    for made in ("insert_log", "insert_log/1", "insert_log/1/2", "insert_log/1/2/3"):
        assert ("fsync", ino(tmp_path / "s" / made), True) in events, made
    assert ("fsync", ino(tmp_path / "s"), True) in events


@pytest.mark.parametrize("atomic", [True, False])
def test_copy_fsyncs_file_and_directory_before_returning(tmp_path, events, atomic):
    store = LocalStore(tmp_path / "s")
    store.put("a/src", os.urandom(70_000))
    events.clear()
    store.copy("a/src", "b/c/dst", atomic=atomic)
    f = tmp_path / "s/b/c/dst"
    assert f.read_bytes() == (tmp_path / "s/a/src").read_bytes()
    assert ("fsync", ino(f), False) in events
    for d in ("b/c", "b", ""):
        assert ("fsync", ino(tmp_path / "s" / d), True) in events, d
    if atomic:
        assert events.index(("fsync", ino(f), False)) < events.index(("rename", ino(f), False))


def test_a_durable_batch_syncs_everything_once_at_its_end(tmp_path, events):
    store = LocalStore(tmp_path / "s")
    store.put("src", b"y" * 100)
    events.clear()
    keys = [f"t/{d}/{i}" for d in range(20) for i in range(5)]
    with store.durable_batch():
        for k in keys:
            store.copy("src", k, atomic=False)
        with store.durable_batch():  # nested: the outer one syncs
            store.put("t/0/extra", b"z")
        inside = list(events)
    # in place: nothing synced yet; atomic: the data before its rename, not the directory
    assert inside[0] == ("fsync", ino(tmp_path / "s/t/0/extra"), False) and inside[1][0] == "rename"
    assert len(inside) == 2
    files = [e[1] for e in events if e[0] == "fsync" and not e[2]]
    assert sorted(files[1:]) == sorted(ino(tmp_path / "s" / k) for k in keys)
    dir_syncs = [e[1] for e in events if e[2]]
    want = {ino(tmp_path / "s/t" / str(d)) for d in range(20)} | {ino(tmp_path / "s/t"), ino(tmp_path / "s")}
    assert set(dir_syncs) == want and len(dir_syncs) == len(want)
    last_file = max(i for i, e in enumerate(events) if e[0] == "fsync" and not e[2])
    assert all(i > last_file for i, e in enumerate(events) if e[2])  # data first, then entries


def test_batches_are_per_thread(tmp_path, events):
    """Another thread's writes during a batch are synced by their own call."""
    import threading

    store = LocalStore(tmp_path / "s")
    store.put("src", b"y")
    events.clear()
    with store.durable_batch():
        t = threading.Thread(target=lambda: store.copy("src", "other/x", atomic=False))
        t.start()
        t.join()
        assert ("fsync", ino(tmp_path / "s/other/x"), False) in events
        assert ("fsync", ino(tmp_path / "s/other"), True) in events


def test_workers_joining_a_batch_sync_each_directory_once_at_its_end(tmp_path, events):
    """A pool's workers joined to their caller's batch: each file's data before its rename
    (as always), every directory once, after all of it, when the caller's batch ends."""
    from concurrent.futures import ThreadPoolExecutor

    store = LocalStore(tmp_path / "s")
    keys = [f"data/{d:02x}/{i}" for d in range(6) for i in range(4)]
    with store.durable_batch():
        batch = store.current_batch()

        def one(k):
            with store.joined_batch(batch):
                store.put(k, k.encode())
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(one, keys))
        inside = list(events)
        assert store.current_batch() == batch   # the same sets, still open
    assert not [e for e in inside if e[0] == "fsync" and e[2]]   # no directory synced inside
    for k in keys:   # each file's data synced before its rename
        i = ino(tmp_path / "s" / k)
        assert inside.index(("fsync", i, False)) < inside.index(("rename", i, False))
    dir_syncs = [e[1] for e in events if e[2]]
    want = {ino(tmp_path / f"s/data/{d:02x}") for d in range(6)} | {ino(tmp_path / "s/data"), ino(tmp_path / "s")}
    assert set(dir_syncs) == want and len(dir_syncs) == len(want)
    # no batch (None): a block of its own, synced when it ends
    events.clear()
    with store.joined_batch(None):
        store.put("data/ff/x", b"x")
    assert ("fsync", ino(tmp_path / "s/data/ff"), True) in events


def test_a_failed_batch_does_not_hide_the_error(tmp_path):
    store = LocalStore(tmp_path / "s")
    with pytest.raises(RuntimeError):
        with store.durable_batch():
            store.put("k", b"v")
            raise RuntimeError("boom")
    store.put("k2", b"v")  # the batch state is gone: back to per-call syncs
    assert store.get("k2") == b"v"


def test_a_flushed_binlog_is_fsynced_once_before_its_rename(meta, store, settings, events):
    """lifecycle/flush writes Parquet through the store's public put_writer: one data
    fsync per file (it used to fsync the temp file twice), before the rename."""
    from seglake.lifecycle.flush import flush_pchannel
    from seglake.wal.client import WalClient, synthetic_rows

    from wal_helpers import make_collection, pchannels

    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c1", shards=1)
        c.insert("c1", synthetic_rows(coll, 50, 1))
    events.clear()
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    written = [o for o in store.list("insert_log/") if not o.key.rpartition("/")[2].startswith(".")]
    assert written
    for o in written:
        i = ino(store.root / o.key)
        syncs = [n for n, e in enumerate(events) if e == ("fsync", i, False)]
        assert len(syncs) == 1, f"{o.key}: {len(syncs)} data fsyncs"
        assert syncs[0] < events.index(("rename", i, False))
