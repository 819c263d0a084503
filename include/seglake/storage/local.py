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

import itertools
import os
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from seglake.errors import NotFound, Unavailable
from seglake.storage.base import DeleteError, ObjectInfo, Store
from seglake.storage.layout import normalize_key, normalize_prefix

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

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        pfx = normalize_prefix(prefix)
        start = self.root / pfx if pfx else self.root
        if start.is_symlink() or not start.is_dir():
            return
        stack = [(str(start), pfx)]
        while stack:
            path, rel = stack.pop()
            try:
                entries = sorted(os.scandir(path), key=lambda e: e.name, reverse=True)
            except FileNotFoundError:
                continue  # removed while listing
            except OSError as e:
                raise Unavailable(f"cannot list {path}: {e}") from None
            files = []
            for e in entries:
                if e.is_symlink():
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

    def list_level(self, prefix: str = "") -> tuple[list[str], list[ObjectInfo]]:
        pfx = normalize_prefix(prefix)
        start = self.root / pfx if pfx else self.root
        if start.is_symlink() or not start.is_dir():
            return [], []
        dirs, files = [], []
        for e in sorted(os.scandir(start), key=lambda e: e.name):
            if e.is_symlink():
                continue
            if e.is_dir(follow_symlinks=False):
                dirs.append(f"{pfx}{e.name}/")
            elif e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
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
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(_fsync_path, files))  # data first, then the entries naming it
            list(pool.map(_fsync_path, dirs))

    def _tmp(self, dst: Path) -> Path:
        self._mkdirs(dst.parent)  # one mkdir per directory, not per file
        return dst.parent / f"{TMP_PREFIX}{dst.name}.{self._token}.{next(self._seq)}"

    def _atomic(self, key: str, write) -> ObjectInfo:
        """write(tmp), fsync it, rename it over the destination, fsync the directory (or
        leave that to the durable batch); a vanished directory is re-made once."""
        dst = self._path(key)
        for attempt in (1, 2):
            tmp = self._tmp(dst)
            try:
                write(tmp)
                _fsync_path(tmp)
                st = os.stat(tmp)
                os.replace(tmp, dst)
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

    def delete_many(self, keys: Iterable[str]) -> list[DeleteError]:
        paths = [(k, self._path(k)) for k in keys]

        def rm(item):
            k, p = item
            try:
                os.unlink(p)  # a symlink itself is removed, never what it points to
            except FileNotFoundError:
                pass
            except OSError as e:
                return DeleteError(k, str(e))
            return None

        if len(paths) < 64 or self.delete_threads <= 1:
            results = map(rm, paths)
        else:
            with ThreadPoolExecutor(self.delete_threads) as pool:
                results = list(pool.map(rm, paths, chunksize=64))
        return [r for r in results if r is not None]


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a read-only descriptor is enough on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
