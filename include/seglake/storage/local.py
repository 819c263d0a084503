"""Local-directory store: the embedded default.

Atomic puts and copies (temp file in the same directory, then rename). Listing never
follows symlinks and skips them, so nothing outside the root is ever reached. Temp
files start with '.seglake-tmp-' and are listed like any other file (GC judges them).
"""

from __future__ import annotations

import itertools
import mmap
import os
import shutil
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from seglake.errors import NotFound, Unavailable
from seglake.storage.base import ChecksumMismatch, DeleteError, ObjectInfo, Store, crc_name, crc_update
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

    def __getstate__(self):  # picklable for worker processes: caches are per process
        d = dict(self.__dict__)
        d["_dirs"], d["_seq"] = set(), None
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()

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

    def _tmp(self, dst: Path) -> Path:
        parent = dst.parent
        if parent not in self._dirs:  # one mkdir per directory, not per file
            parent.mkdir(parents=True, exist_ok=True)
            self._dirs.add(parent)
        return parent / f"{TMP_PREFIX}{dst.name}.{self._token}.{next(self._seq)}"

    def _atomic(self, key: str, write) -> ObjectInfo:
        """write(tmp) then rename over the destination; a vanished directory is re-made once."""
        dst = self._path(key)
        for attempt in (1, 2):
            tmp = self._tmp(dst)
            try:
                write(tmp)
                st = os.stat(tmp)
                os.replace(tmp, dst)
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
        """write(destination) directly: one rename fewer per file (costly on ext4)."""
        dst = self._path(key)
        if dst.parent not in self._dirs:
            dst.parent.mkdir(parents=True, exist_ok=True)
            self._dirs.add(dst.parent)
        try:
            write(dst)
        except FileNotFoundError:
            if dst.parent.is_dir():
                raise
            dst.parent.mkdir(parents=True, exist_ok=True)
            write(dst)
        st = os.stat(dst)
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
        rewrites a file in place, so a mapped source cannot shrink under the copy."""
        s = self._path(src)
        state = {}

        def write(tmp: Path) -> None:
            with open(s, "rb", buffering=0) as fi, open(tmp, "wb", buffering=0) as fo:
                size = os.fstat(fi.fileno()).st_size
                crc = _copy_mapped(fi, fo, size) if size > MAP_MIN_BYTES else _copy_buffered(fi, fo)
            state.update(crc=crc, n=size)
        try:
            info = self._atomic(dst, write)
        except FileNotFoundError:
            if not s.is_file():
                raise NotFound(f"copy source {src!r} not found in {self.uri}") from None
            raise
        if info.size != state["n"]:
            raise ChecksumMismatch(f"copy of {src} to {dst}: wrote {info.size} bytes of {state['n']}")
        return info, crc_name(state["crc"])

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


def _unlink_quiet(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
