"""Local-directory store: the embedded default.

Atomic puts and copies (temp file in the same directory, then rename). Durable on
return: `put` and `copy` fsync the file, then its directory (and every directory they
created), so an etcd commit that follows never references a file a power cut can
take back. Inside `durable_batch()` the directory fsyncs (once per directory) and the
file fsyncs of in-place copies are deferred to the end of the block and run there in
parallel (concurrent fsyncs share journal commits), before the block returns; an
atomic write still fsyncs its data before the rename, so an object replaced under its
name is never seen empty after a crash. Listing never
follows symlinks and skips them, so nothing outside the root is ever reached. Temp
files start with '.seglake-tmp-' and are listed like any other file (GC judges them).
"""

from __future__ import annotations

import errno
import itertools
import mmap
import os
import stat
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from seglake.errors import NotFound, Unavailable
from seglake.storage.base import (SYMLINK, UNREADABLE, ChecksumMismatch, DeleteError, DeleteOutcome, ObjectInfo, Store,
                                   crc_name, crc_update)
from seglake.storage.layout import check_key, normalize_key, normalize_prefix

TMP_PREFIX = ".seglake-tmp-"


class LocalStore(Store):
    def __init__(self, root: str | os.PathLike, delete_threads: int = 8):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.uri = str(self.root)
        self.delete_threads = delete_threads
        self._dirs: set[Path] = set()
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._batch = threading.local()  # .dirs: inside durable_batch(), dirs to fsync at its end

    def __getstate__(self):  # picklable for worker processes: caches are per process
        d = dict(self.__dict__)
        d["_dirs"], d["_seq"], d["_batch"] = set(), None, None
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._batch = threading.local()

    def _path(self, key: str) -> Path:
        return self.root / normalize_key(key)

    def _real_dir(self, pfx: str) -> str | None:
        """The directory of a canonical prefix if every component below the root is a
        real directory (no symlink anywhere on the way), else None."""
        path = str(self.root)
        for name in filter(None, pfx.split("/")):
            path = os.path.join(path, name)
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return None
            except OSError:
                return None
        return path

    def list(self, prefix: str = "", report_unreadable: bool = False) -> Iterator[ObjectInfo]:
        """Regular files only, keys exactly as named on disk (a name that is not valid
        UTF-8 comes through with surrogate escapes, for the caller to report, never to
        be re-encoded into another key). Symlinks are neither followed nor listed."""
        pfx = normalize_prefix(prefix)
        start = self._real_dir(pfx)
        if start is not None:
            yield from _walk(start, pfx, report_unreadable)

    def list_level(self, prefix: str = "", report_unreadable: bool = False) -> tuple[list[str], list[ObjectInfo]]:
        pfx = normalize_prefix(prefix)
        start = self._real_dir(pfx)
        if start is None:
            return [], []
        dirs, files = [], []
        try:
            entries = sorted(_scandir(start), key=lambda e: e.name)
        except FileNotFoundError:
            return [], []
        except OSError as e:
            if report_unreadable and pfx:
                return [], [ObjectInfo(pfx, UNREADABLE, 0.0)]
            raise Unavailable(f"cannot list {start!r}: {e.strerror}") from None
        for e in entries:
            if e.is_symlink():
                if report_unreadable:  # GC must see it: files may be reachable under two keys
                    files.append(ObjectInfo(pfx + e.name, SYMLINK, 0.0))
                continue
            if e.is_dir(follow_symlinks=False):
                if _canonical(pfx + e.name):
                    dirs.append(f"{pfx}{e.name}/")
                else:  # a prefix list() could not take: its objects come back here instead
                    files += _walk(e.path, f"{pfx}{e.name}/", report_unreadable)
            elif e.is_file(follow_symlinks=False):
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                files.append(ObjectInfo(pfx + e.name, st.st_size, st.st_mtime))
        return dirs, files

    def head(self, key: str) -> ObjectInfo:
        p = self._path(key)
        try:
            st = os.stat(p, follow_symlinks=False)
        except FileNotFoundError:
            raise NotFound(f"object {key!r} not found in {self.uri}") from None
        if not os.path.isfile(p) or os.path.islink(p):
            raise NotFound(f"object {key!r} not found in {self.uri}")
        return ObjectInfo(normalize_key(key), st.st_size, st.st_mtime)

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"object {key!r} not found in {self.uri}") from None

    def open_read(self, key: str) -> BinaryIO:
        try:
            return open(self._path(key), "rb")
        except (FileNotFoundError, IsADirectoryError):
            raise NotFound(f"object {key!r} not found in {self.uri}") from None

    # -- durable writes ------------------------------------------------------------------
    def _mkdirs(self, d: Path) -> None:
        """Make `d` (once per process); the parents of directories made here are
        fsynced with the file, so the new entries are durable too."""
        if d in self._dirs:
            return
        made, cur = [], d
        while not cur.is_dir() and cur != self.root:
            made.append(cur)
            cur = cur.parent
        d.mkdir(parents=True, exist_ok=True)
        self._dirs.add(d)
        for m in made:
            self._sync_dir(m.parent)

    def _sync_dir(self, d: Path) -> None:
        pending = getattr(self._batch, "dirs", None)
        if pending is not None:
            pending.add(d)
        else:
            _fsync_path(d)

    def _sync_new_file(self, path: Path) -> None:
        """A file nobody reads until the writer checked it (in place): deferrable."""
        pending = getattr(self._batch, "files", None)
        if pending is not None:
            pending.append(path)
        else:
            _fsync_path(path)

    @contextmanager
    def durable_batch(self, threads: int = 8):
        """Defer this thread's directory fsyncs and in-place file fsyncs to the end of
        the block and run them there in parallel: every file written in it is durable
        when the block exits normally (a nested block leaves that to the outermost)."""
        if getattr(self._batch, "dirs", None) is not None:
            yield self
            return
        self._batch.dirs, self._batch.files = set(), []
        try:
            yield self
        finally:
            dirs, files = self._batch.dirs, self._batch.files
            self._batch.dirs = self._batch.files = None
        if len(dirs) + len(files) < 16 or threads <= 1:
            for p in [*files, *dirs]:
                _fsync_path(p)
            return
        pool = _fsync_pool(threads)  # one job per slice: a task per fsync costs more than the fsync
        for paths in (files, sorted(dirs)):  # data first, then the entries naming it
            list(pool.map(_fsync_all, [paths[i::threads] for i in range(threads)]))

    def _tmp(self, dst: Path) -> Path:
        self._mkdirs(dst.parent)  # one mkdir per directory, not per file
        return dst.parent / f"{TMP_PREFIX}{dst.name}.{self._token}.{next(self._seq)}"

    def _atomic(self, key: str, write, defer_data: bool = False) -> ObjectInfo:
        """write(tmp), fsync it, rename it over the destination, fsync the directory (or
        leave that to the durable batch); a vanished directory is re-made once. With
        defer_data the data fsync is deferred too, as for an in-place write: only for a
        destination nobody reads until the writer checked it."""
        dst = self._path(key)
        for attempt in (1, 2):
            tmp = self._tmp(dst)
            try:
                write(tmp)
                if not defer_data:
                    _fsync_path(tmp)
                st = os.stat(tmp)
                os.replace(tmp, dst)
                if defer_data:
                    self._sync_new_file(dst)
                self._sync_dir(dst.parent)
                return ObjectInfo(normalize_key(key), st.st_size, st.st_mtime)
            except FileNotFoundError:
                _unlink_quiet(tmp)
                if attempt == 2 or dst.parent.is_dir():
                    raise
                self._dirs.discard(dst.parent)  # removed behind our back: make it again
            except BaseException:
                _unlink_quiet(tmp)
                raise
        raise AssertionError("unreachable")

    def _in_place(self, key: str, write) -> ObjectInfo:
        """write(destination) directly: one rename fewer per file (costly on ext4); the
        file and its directory entry are fsynced before returning, as in _atomic."""
        dst = self._path(key)
        self._mkdirs(dst.parent)
        try:
            write(dst)
        except FileNotFoundError:
            if dst.parent.is_dir():
                raise
            self._dirs.discard(dst.parent)
            self._mkdirs(dst.parent)
            write(dst)
        self._sync_new_file(dst)
        st = os.stat(dst)
        self._sync_dir(dst.parent)
        return ObjectInfo(normalize_key(key), st.st_size, st.st_mtime)

    def put(self, key: str, data: bytes) -> ObjectInfo:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                f.write(data)
        return self._atomic(key, write)

    def copy(self, src: str, dst: str, atomic: bool = True) -> ObjectInfo:
        s = self._path(src)
        try:
            # shutil.copyfile uses sendfile in the kernel: no bytes through Python
            if atomic:
                return self._atomic(dst, lambda tmp: shutil.copyfile(s, tmp))
            return self._in_place(dst, lambda path: shutil.copyfile(s, path))
        except FileNotFoundError:
            if not s.is_file():
                raise NotFound(f"copy source {src!r} not found in {self.uri}") from None
            raise

    def copy_checked(self, src: str, dst: str) -> tuple[ObjectInfo, str]:
        """One pass: read the source once, checksum what is read, write it to this call's
        own temp file, rename it over the destination (atomic). The checksum is the one of
        the bytes the destination holds; its size is checked against the bytes read.
        Large files are read through a read-only mapping (one copy fewer); seglake never
        rewrites a file in place, so a mapped source cannot shrink under the copy. The data
        fsync is deferred like an in-place copy's (inside durable_batch(), to its end): a
        copy target is not read until its writer's batch ended, and a retry re-checks
        every file it finds by checksum, so a file cut short by a crash is copied again."""
        s = self._path(src)
        state = {}

        def write(tmp: Path) -> None:
            with open(s, "rb", buffering=0) as fi, open(tmp, "wb", buffering=0) as fo:
                size = os.fstat(fi.fileno()).st_size
                crc = _copy_mapped(fi, fo, size) if size > MAP_MIN_BYTES else _copy_buffered(fi, fo)
            state.update(crc=crc, n=size)
        try:
            info = self._atomic(dst, write, defer_data=True)
        except FileNotFoundError:
            if not s.is_file():
                raise NotFound(f"copy source {src!r} not found in {self.uri}") from None
            raise
        if info.size != state["n"]:
            raise ChecksumMismatch(f"copy of {src} to {dst}: wrote {info.size} bytes of {state['n']}")
        return info, crc_name(state["crc"])

    def delete_checked(self, objects: Iterable[str | ObjectInfo]) -> DeleteOutcome:
        """Delete through directory descriptors opened component by component from the
        root with O_NOFOLLOW: a symlink anywhere on the path (even one swapped in after
        the listing) stops the walk, so nothing outside the root is ever reached. Each
        object is stat'ed through the same descriptor right before its unlink."""
        out = DeleteOutcome()
        by_dir: dict[str, list[tuple[str, str, ObjectInfo | None]]] = {}
        for o in objects:
            key, expect = (o.key, o) if isinstance(o, ObjectInfo) else (o, None)
            try:
                check_key(key)
            except ValueError as e:
                out.errors.append(DeleteError(key, str(e)))
                continue
            parent, _, name = key.rpartition("/")
            by_dir.setdefault(parent, []).append((key, name, expect))
        groups = sorted(by_dir.items())
        n = sum(len(g) for _, g in groups)
        workers = min(self.delete_threads, max(1, n // 64))
        if workers <= 1:
            parts = [self._delete_groups(groups)]
        else:  # contiguous runs of sorted directories: each worker reuses its open chain
            step = -(-len(groups) // workers)
            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(self._delete_groups, [groups[i:i + step] for i in range(0, len(groups), step)]))
        for part in parts:
            out.deleted += part.deleted
            out.missing += part.missing
            out.changed += part.changed
            out.errors += part.errors
        return out

    def _delete_groups(self, groups) -> DeleteOutcome:
        out = DeleteOutcome()
        try:
            chain = _DirChain(str(self.root))
        except OSError as e:  # the root itself swapped for a symlink or gone: touch nothing
            out.errors += [DeleteError(k, f"cannot open the store root: {e.strerror}") for _, g in groups for k, _, _ in g]
            return out
        with chain:
            for parent, items in groups:
                try:
                    fd = chain.open(parent.split("/") if parent else [])
                except FileNotFoundError:
                    out.missing += [k for k, _, _ in items]
                    continue
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or a file on the path
                        out.changed += [k for k, _, _ in items]
                    else:
                        out.errors += [DeleteError(k, f"cannot open {parent!r}: {e.strerror}") for k, _, _ in items]
                    continue
                for key, name, expect in items:
                    _unlink_at(fd, key, name, expect, out)
        return out


class _DirChain:
    """Directory descriptors from the root down, opened with O_NOFOLLOW|O_DIRECTORY one
    component at a time relative to the previous one; consecutive calls share the
    common prefix."""

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)

    def __init__(self, root: str):
        self.fds: list[int] = [os.open(root, self.FLAGS)]
        self.names: list[str] = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for fd in self.fds:
            os.close(fd)
        self.fds, self.names = [], []

    def open(self, parts: list[str]) -> int:
        keep = 0
        while keep < min(len(parts), len(self.names)) and parts[keep] == self.names[keep]:
            keep += 1
        while len(self.names) > keep:
            self.names.pop()
            os.close(self.fds.pop())
        for name in parts[keep:]:
            fd = os.open(name, self.FLAGS, dir_fd=self.fds[-1])
            self.fds.append(fd)
            self.names.append(name)
        return self.fds[-1]


def _unlink_at(dir_fd: int, key: str, name: str, expect: ObjectInfo | None, out: DeleteOutcome) -> None:
    """Unlink `name` in `dir_fd` if it is still what the caller expects; record the outcome."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        out.missing.append(key)
        return
    except OSError as e:
        out.errors.append(DeleteError(key, e.strerror or str(e)))
        return
    if stat.S_ISDIR(st.st_mode):
        out.errors.append(DeleteError(key, "is a directory"))
        return
    if expect is not None and (not stat.S_ISREG(st.st_mode) or st.st_size != expect.size
                               or st.st_mtime != expect.mtime):
        out.changed.append(key)  # not the object the caller saw: never delete it
        return
    try:
        os.unlink(name, dir_fd=dir_fd)  # a symlink itself is removed, never what it points to
    except FileNotFoundError:
        out.missing.append(key)  # another deleter won: not counted here
    except OSError as e:
        out.errors.append(DeleteError(key, e.strerror or str(e)))
    else:
        out.deleted.append(key)


def _walk(start: str, pfx: str, report_unreadable: bool = False) -> Iterator[ObjectInfo]:
    """Every regular file below the directory `start`, keyed `pfx` + its relative path;
    an unreadable directory raises, or with report_unreadable comes back as
    ObjectInfo(its prefix, UNREADABLE, 0.0)."""
    stack = [(start, pfx)]
    while stack:
        path, rel = stack.pop()
        try:
            entries = sorted(_scandir(path), key=lambda e: e.name, reverse=True)
        except FileNotFoundError:
            continue  # removed while listing
        except OSError as e:
            if report_unreadable and rel:  # (the store root itself must be readable)
                yield ObjectInfo(rel, UNREADABLE, 0.0)
                continue
            raise Unavailable(f"cannot list {path!r}: {e.strerror}") from None
        files = []
        for e in entries:
            if e.is_symlink():
                if report_unreadable:  # GC must see it: files may be reachable under two keys
                    yield ObjectInfo(rel + e.name, SYMLINK, 0.0)
                continue
            if e.is_dir(follow_symlinks=False):
                stack.append((e.path, rel + e.name + "/"))
            elif e.is_file(follow_symlinks=False):
                files.append(e)
        for e in reversed(files):
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            yield ObjectInfo(rel + e.name, st.st_size, st.st_mtime)


def _canonical(key: str) -> bool:
    try:
        check_key(key)
        return True
    except ValueError:
        return False


def _scandir(path: str) -> list[os.DirEntry]:
    with os.scandir(path) as it:
        return list(it)


_local = threading.local()
MAP_MIN_BYTES = 4 << 20


def _copy_buffered(fi, fo) -> int:
    """Copy through a 1 MiB buffer kept per thread (allocating one per file costs more
    than a small copy); returns the CRC of the bytes written."""
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray(1 << 20)
    crc = 0
    while k := fi.readinto(buf):
        with memoryview(buf)[:k] as view:
            crc = crc_update(view, crc)
            _write_all(fo, view)
    return crc


def _copy_mapped(fi, fo, size: int) -> int:
    crc = 0
    with mmap.mmap(fi.fileno(), size, access=mmap.ACCESS_READ) as m, memoryview(m) as whole:
        for off in range(0, size, 8 << 20):
            with whole[off:off + (8 << 20)] as view:
                crc = crc_update(view, crc)
                _write_all(fo, view)
    return crc


def _write_all(fo, view: memoryview) -> None:
    n = 0
    while n < len(view):
        n += fo.write(view[n:])


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a read-only descriptor is enough on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _fsync_pool(threads: int) -> ThreadPoolExecutor:
    """A pool per process and size, kept (starting threads for every batch costs more
    than the fsyncs on a fast disk); a forked child makes its own."""
    key = (os.getpid(), threads)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(threads, thread_name_prefix="fsync")
        return pool


def _fsync_all(paths) -> None:
    for p in paths:
        _fsync_path(p)


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
