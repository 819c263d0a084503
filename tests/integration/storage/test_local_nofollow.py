"""Every local store operation on a key refuses a symlink at any level of its path
(issue 8 hardening): a directory inside the store swapped for a symlink to a directory
outside must not let a write land, or a read come from, outside the store. Real files,
real symlinks; each case swaps the link in AFTER the store has used the real directory
(so no cache of an earlier walk can hide it)."""

import os

import pytest

from seglake.storage.base import SymlinkRefused
from seglake.storage.local import LocalStore
from seglake.wal.log import put_exclusive

SECRET = b"outside the store"


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def resolver(request, monkeypatch):
    """Every case twice: through openat2 (one call for the whole path, where the kernel has
    it) and through the component-by-component walk alone (older kernels, seccomp)."""
    from seglake.storage import local

    if request.param == "walk":
        monkeypatch.setattr(local, "_OPENAT2", None)
    elif local._OPENAT2 is None:
        pytest.skip("openat2 is not available on this kernel")
    return request.param


@pytest.fixture
def swapped(tmp_path):
    """(store, outside dir): `a/b` was a real directory of the store, now a symlink to
    `outside`, which holds `f` (the same name as the store's file) and `src`."""
    store = LocalStore(tmp_path / "store")
    store.put("a/b/f", b"inside")
    store.put("a/b/src", b"inside src")
    store.put("ok/src", b"fine")
    assert store.get("a/b/f") == b"inside"  # the real directory was walked once
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_bytes(SECRET)
    (outside / "src").write_bytes(SECRET)
    real = tmp_path / "store/a/b"
    os.rename(real, tmp_path / "moved-away")
    os.symlink(outside, real)
    return store, outside


def _outside_untouched(outside):
    assert sorted(os.listdir(outside)) == ["f", "src"]
    assert (outside / "f").read_bytes() == SECRET and (outside / "src").read_bytes() == SECRET


def _read_all(store, key):
    with store.open_read(key) as f:
        return f.read()


READS = {
    "get": lambda s: s.get("a/b/f"),
    "open_read": lambda s: _read_all(s, "a/b/f"),
    "open_read_unbuffered": lambda s: s.open_read("a/b/f", buffering=0).read(),
    "head": lambda s: s.head("a/b/f"),
    "checksum": lambda s: s.checksum("a/b/f"),
    "exists": lambda s: s.exists("a/b/f"),
    "copy_from": lambda s: s.copy("a/b/src", "ok/dst"),
    "copy_checked_from": lambda s: s.copy_checked("a/b/src", "ok/dst"),
}
WRITES = {
    "put": lambda s: s.put("a/b/f", b"evil"),
    "put_new": lambda s: s.put("a/b/new", b"evil"),
    "put_deeper": lambda s: s.put("a/b/c/d/new", b"evil"),
    "put_writer": lambda s: s.put_writer("a/b/f", lambda f: f.write(b"evil")),
    "copy_to": lambda s: s.copy("ok/src", "a/b/f"),
    "copy_to_in_place": lambda s: s.copy("ok/src", "a/b/f", atomic=False),
    "copy_checked_to": lambda s: s.copy_checked("ok/src", "a/b/new"),
    "wal_put_exclusive": lambda s: put_exclusive(s, "a/b/new", b"evil"),
}


@pytest.mark.parametrize("op", sorted(READS))
def test_a_read_through_a_swapped_directory_is_refused(swapped, op):
    store, outside = swapped
    with pytest.raises(SymlinkRefused, match="'a/b' is a symlink"):
        READS[op](store)
    _outside_untouched(outside)
    assert not os.path.exists(store.root / "ok/dst")


@pytest.mark.parametrize("op", sorted(WRITES))
def test_a_write_through_a_swapped_directory_is_refused(swapped, op):
    store, outside = swapped
    with pytest.raises(SymlinkRefused, match="'a/b' is a symlink"):
        WRITES[op](store)
    _outside_untouched(outside)


@pytest.mark.parametrize("atomic", [False, True])
def test_writes_in_a_durable_batch_are_refused_too(swapped, atomic):
    """A batch defers fsyncs, never the walk: the write is refused at once."""
    store, outside = swapped
    with pytest.raises(SymlinkRefused):
        with store.durable_batch():
            store.copy("ok/src", "a/b/x", atomic=atomic)
    _outside_untouched(outside)


def test_a_symlinked_file_is_refused_for_reads_and_in_place_writes(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put("a/real", b"r")
    target = tmp_path / "precious"
    target.write_bytes(SECRET)
    os.symlink(target, tmp_path / "store/a/link")
    for op in (lambda: store.get("a/link"), lambda: store.open_read("a/link"), lambda: store.head("a/link"),
               lambda: store.copy("a/link", "a/copy"), lambda: store.copy("a/real", "a/link", atomic=False)):
        with pytest.raises(SymlinkRefused, match="'a/link' is a symlink"):
            op()
    assert target.read_bytes() == SECRET and not os.path.exists(tmp_path / "store/a/copy")
    # an atomic write replaces the link itself (rename never follows), never its target
    store.put("a/link", b"new")
    assert target.read_bytes() == SECRET and store.get("a/link") == b"new"


def test_the_root_swapped_for_a_symlink_is_refused(tmp_path):
    store = LocalStore(tmp_path / "store")
    store.put("a/f", b"inside")
    outside = tmp_path / "outside"
    (outside / "a").mkdir(parents=True)
    (outside / "a/f").write_bytes(SECRET)
    os.rename(tmp_path / "store", tmp_path / "moved")
    os.symlink(outside, tmp_path / "store")
    for op in (lambda: store.get("a/f"), lambda: store.put("a/f", b"evil"), lambda: store.put("b/new", b"evil")):
        with pytest.raises(SymlinkRefused, match="store root is a symlink"):
            op()
    assert (outside / "a/f").read_bytes() == SECRET and sorted(os.listdir(outside)) == ["a"]


def test_the_same_operations_work_without_symlinks(tmp_path):
    """The no-follow walk does everything the store did before (and makes directories)."""
    store = LocalStore(tmp_path / "store")
    store.put("x/y/z", b"1")
    store.put_writer("x/w", lambda f: f.write(b"22"))
    assert store.copy("x/y/z", "q/r/s").size == 1
    store.copy("x/w", "q/in_place", atomic=False)
    info, crc = store.copy_checked("x/w", "q/checked")
    assert info.size == 2 and crc == store.checksum("x/w")
    assert put_exclusive(store, "wal/p/1", [b"a", b"b"]) and not put_exclusive(store, "wal/p/1", b"c")
    assert store.get("wal/p/1") == b"ab" and store.head("q/in_place").size == 2
    assert sorted(o.key for o in store.list("")) == ["q/checked", "q/in_place", "q/r/s", "wal/p/1", "x/w", "x/y/z"]
    with pytest.raises(Exception, match="not found"):
        store.get("x/y")  # a directory is not an object


def test_a_listing_never_enters_a_directory_swapped_for_a_symlink_mid_walk(tmp_path, monkeypatch):
    """The walk opens each directory relative to its parent with O_NOFOLLOW: a directory
    replaced by a symlink between the parent's scan and its own open is reported as a
    symlink (report_unreadable) or skipped, and nothing outside is listed."""
    from seglake.storage import local as local_mod
    from seglake.storage.base import SYMLINK

    store = LocalStore(tmp_path / "store")
    store.put("a/b/f", b"inside")
    store.put("a/c", b"c")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    real_scandir = local_mod._scandir

    def scandir_then_swap(fd):
        entries = real_scandir(fd)
        if any(e.name == "b" for e in entries) and not os.path.islink(tmp_path / "store/a/b"):
            os.rename(tmp_path / "store/a/b", tmp_path / "moved")
            os.symlink(outside, tmp_path / "store/a/b")
        return entries
    monkeypatch.setattr(local_mod, "_scandir", scandir_then_swap)
    got = list(store.list("", report_unreadable=True))
    assert sorted((o.key, o.size) for o in got) == [("a/b", SYMLINK), ("a/c", 1)]
    assert not any("secret" in o.key for o in store.list(""))
