"""Local-directory store: the embedded default.

Atomic puts and copies (temp file in the same directory, then rename). Listing never
follows symlinks and skips them, so nothing outside the root is ever reached. Temp
files start with '.seglake-tmp-' and are listed like any other file (GC judges them).
"""

from __future__ import annotations

import os
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator

from seglake.errors import NotFound, Unavailable
from seglake.storage.base import DeleteError, ObjectInfo, Store
from seglake.storage.layout import normalize_key, normalize_prefix

TMP_PREFIX = ".seglake-tmp-"


class LocalStore(Store):
    def __init__(self, root: str | os.PathLike, delete_threads: int = 4):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.uri = str(self.root)
        self.delete_threads = delete_threads

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
        dst.parent.mkdir(parents=True, exist_ok=True)
        return dst.parent / f"{TMP_PREFIX}{dst.name}.{uuid.uuid4().hex[:12]}"

    def put(self, key: str, data: bytes) -> ObjectInfo:
        dst = self._path(key)
        tmp = self._tmp(dst)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, dst)
        finally:
            if tmp.exists():
                tmp.unlink()
        return self.head(key)

    def copy(self, src: str, dst: str) -> ObjectInfo:
        s, d = self._path(src), self._path(dst)
        tmp = self._tmp(d)
        try:
            shutil.copyfile(s, tmp)  # sendfile / copy_file_range in the kernel
            os.replace(tmp, d)
        except FileNotFoundError:
            if not s.exists():
                raise NotFound(f"copy source {src!r} not found in {self.uri}") from None
            raise
        finally:
            if tmp.exists():
                tmp.unlink()
        return self.head(dst)

    def delete_many(self, keys: Iterable[str]) -> list[DeleteError]:
        paths = [(k, self._path(k)) for k in keys]

        def rm(item):
            k, p = item
            try:
                if p.is_symlink() or not p.is_dir():
                    os.unlink(p)
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
