"""The Store interface every backend implements (local directory, S3)."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import BinaryIO, Iterable, Iterator


@dataclass(frozen=True)
class ObjectInfo:
    key: str       # relative to the store root, canonical (see layout.normalize_key)
    size: int
    mtime: float   # unix seconds


@dataclass(frozen=True)
class DeleteError:
    key: str
    error: str


class Store(abc.ABC):
    uri: str

    @abc.abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Stream every object under `prefix` (treated as a directory: 'c1' never lists 'c10/')."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size and mtime; raises NotFound."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Whole object; raises NotFound."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Atomic write: readers see the old object or the whole new one."""

    @abc.abstractmethod
    def copy(self, src: str, dst: str, atomic: bool = True) -> ObjectInfo:
        """Copy inside the store (server-side on S3). atomic=True: readers see the old
        object or the whole new one. atomic=False lets a backend write in place (a killed
        copy may leave a short file): only for destinations nobody reads until the
        writer has checked their size, such as a restore's Importing segments."""

    @abc.abstractmethod
    def delete_many(self, keys: Iterable[str]) -> list[DeleteError]:
        """Delete keys (already-missing keys are not errors); per-key failures returned."""

    @abc.abstractmethod
    def open_read(self, key: str) -> BinaryIO:
        """A seekable binary reader (for Parquet footers)."""

    @abc.abstractmethod
    def list_level(self, prefix: str = "") -> tuple[list[str], list[ObjectInfo]]:
        """One level under `prefix`: (child prefixes ending in '/', objects directly there).
        Used to split a listing across workers."""

    def exists(self, key: str) -> bool:
        from seglake.errors import NotFound
        try:
            self.head(key)
            return True
        except NotFound:
            return False

    def close(self) -> None:  # pragma: no cover - backends with resources override
        pass

    def durable_batch(self):
        """A context in which a backend may defer durability work (the local store's
        directory fsyncs) to the block's end; everything written in it is durable when
        the block exits normally. Objects on S3 are durable when the PUT returns."""
        from contextlib import nullcontext
        return nullcontext(self)
