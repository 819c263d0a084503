"""The Store interface every backend implements (local directory, S3)."""

from __future__ import annotations

import abc
import io
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, Iterable, Iterator

from seglake.errors import SeglakeError


@dataclass(frozen=True)
class ObjectInfo:
    key: str       # relative to the store root, canonical (see layout.normalize_key)
    size: int
    mtime: float   # unix seconds


@dataclass(frozen=True)
class Listed:
    """An object as a listing described it. md5: the content's MD5 when the store vouches
    that its entity tag is one (a single-part S3 object), else ''."""
    key: str
    size: int
    mtime: float
    etag: str = ""
    md5: str = ""
    ctime_ns: int = 0   # a local file's inode change time: any write changes it, utime cannot set it back


UNREADABLE = -1  # the size of a directory listed with report_unreadable that could not be read
SYMLINK = -2     # the size of a symlink (file or directory) listed with report_unreadable


@dataclass(frozen=True)
class DeleteError:
    key: str
    error: str


try:  # CRC-32C in hardware (~9 GB/s here); zlib's CRC-32 (~2 GB/s) where it is missing
    from crc32c import crc32c as crc_update

    CRC_KIND = "crc32c"
except ImportError:  # pragma: no cover - depends on the environment
    from zlib import crc32 as crc_update

    CRC_KIND = "crc32"


def crc_name(crc: int) -> str:
    """A checksum string naming its algorithm, so values of different kinds never match."""
    return f"{CRC_KIND}:{crc:08x}"


class ChecksumMismatch(SeglakeError):
    """A copied object's content differs from its source."""


class SymlinkRefused(SeglakeError):
    """A local store operation met a symlink on its key's path (or the root swapped for
    one): refused, never followed, so no read or write lands outside the store."""

@dataclass
class DeleteOutcome:
    """What one delete call did, key by key: counts built from it are true even when
    another process deletes the same keys at the same time."""
    deleted: list[str] = field(default_factory=list)   # removed by this call
    missing: list[str] = field(default_factory=list)   # already gone (someone else removed it)
    changed: list[str] = field(default_factory=list)   # not the object expected: kept
    errors: list[DeleteError] = field(default_factory=list)


class Store(abc.ABC):
    uri: str
    # True when the ObjectInfo put/put_writer return is what a listing of the object says
    # (its size and mtime, no ETag), so a caller may keep it instead of asking again
    put_info_as_listed: bool = False

    @abc.abstractmethod
    def list(self, prefix: str = "", report_unreadable: bool = False) -> Iterator[ObjectInfo]:
        """Stream every object under `prefix` (treated as a directory: 'c1' never lists 'c10/').
        report_unreadable: a directory below the root that cannot be read comes back as
        ObjectInfo(its prefix ending in '/', UNREADABLE, 0.0) instead of failing the listing."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size and mtime; raises NotFound."""

    @abc.abstractmethod
    def get(self, key: str) -> bytes:
        """Whole object; raises NotFound."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Atomic write: readers see the old object or the whole new one."""

    def put_writer(self, key: str, write: Callable[[BinaryIO], Any]) -> ObjectInfo:
        """Like put, for content produced by write(a writable binary file): the object
        appears whole and durable, or not at all. A backend may stream it into a temp
        object (the local store does); this default buffers it for one put. `write` may
        be called more than once (a backend retries a write whose temp object vanished):
        each call must write the whole content from its start."""
        buf = io.BytesIO()
        write(buf)
        return self.put(key, buf.getvalue())

    @abc.abstractmethod
    def copy(self, src: str, dst: str, atomic: bool = True) -> ObjectInfo:
        """Copy inside the store (server-side on S3). atomic=True: readers see the old
        object or the whole new one. atomic=False lets a backend write in place (a killed
        copy may leave a short file): only for destinations nobody reads until the
        writer has checked their size, such as a restore's Importing segments."""

    def delete_many(self, keys: Iterable[str]) -> list[DeleteError]:
        """Delete keys (already-missing keys are not errors); per-key failures returned."""
        return self.delete_checked(keys).errors

    @abc.abstractmethod
    def delete_checked(self, objects: Iterable[str | ObjectInfo],
                       guard: Callable[[], None] | None = None) -> DeleteOutcome:
        """Delete exactly these keys, as given (a key that is not canonical is an error,
        never normalised into another key). For an ObjectInfo, only if the object there is
        still that one (same size and mtime); otherwise it is kept and reported `changed`.
        Never follows a symlink. `guard()` is called right before each delete (each
        request of a batched one) and raises to stop: a lease the deletes rely on (a
        sweep's lock) is checked after every pause, not once before them all."""

    @abc.abstractmethod
    def open_read(self, key: str) -> BinaryIO:
        """A seekable binary reader (for Parquet footers)."""

    def read_upto(self, key: str, n: int) -> bytes:
        """The object's first `n` bytes (all of it when it is shorter)."""
        with self.open_read(key) as f:
            return f.read(n)

    @abc.abstractmethod
    def list_level(self, prefix: str = "", report_unreadable: bool = False) -> tuple[list[str], list[ObjectInfo]]:
        """One level under `prefix`: (child prefixes ending in '/', objects directly there).
        Used to split a listing across workers."""

    def list_names(self, prefix: str, start: str, report_unreadable: bool = False) -> Iterator[ObjectInfo]:
        """Every object below the child prefixes of `prefix` whose names begin with
        `start` ('' : all of them); objects directly in `prefix` are not included (its
        `list_level` returns those). Names cut at any strings this way cover a prefix's
        children once each, without relying on listing order. This default lists the
        matching children of `list_level` one by one; S3 lists Prefix=prefix+start."""
        from seglake.storage.layout import normalize_prefix

        prefix = normalize_prefix(prefix)
        dirs, _files = self.list_level(prefix, report_unreadable=report_unreadable)
        for d in dirs:
            if d[len(prefix):].startswith(start):
                yield from self.list(d, report_unreadable=report_unreadable)

    def checksum(self, key: str) -> str:
        """A checksum of the object's content (CRC-32C streamed here; a backend may
        answer from its own metadata). Equal for equal content within one store."""
        crc = 0
        with self.open_read(key) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                crc = crc_update(chunk, crc)
        return crc_name(crc)

    def copy_checked(self, src: str, dst: str) -> tuple[ObjectInfo, str]:
        """Atomic copy (each call writes its own temporary object, the destination appears
        whole) whose content is checked against the source: (info, source checksum).
        Raises ChecksumMismatch. Backends override this with a one-pass version."""
        info = self.copy(src, dst, atomic=True)
        want, got = self.checksum(src), self.checksum(dst)
        if want != got:
            raise ChecksumMismatch(f"copy of {src} to {dst}: target checksum {got}, source {want}")
        return info, want

    def describe(self, keys: Iterable[str]) -> dict[str, Listed]:
        """What the store can say about `keys` without a request per key (S3: from
        listings). A key left out is unknown, not absent. This default says nothing: a
        store without recorded content hashes (the local one) checks by reading."""
        return {}

    def list_described(self, prefix: str) -> Iterator[Listed]:
        """Every object under `prefix`, as list() finds it, with whatever content hash
        the store records for it (S3: the ETag)."""
        for o in self.list(prefix):
            yield Listed(o.key, o.size, o.mtime)

    def copy_listed(self, src: Listed, dst: str) -> tuple[ObjectInfo, str]:
        """copy_checked of a source as describe() found it: a backend may copy it in one
        request, conditional on that description. This default is copy_checked."""
        return self.copy_checked(src.key, dst)

    def exists(self, key: str) -> bool:
        from seglake.errors import NotFound
        try:
            self.head(key)
            return True
        except NotFound:
            return False

    def close(self) -> None:  # pragma: no cover - backends with resources override
        pass

    def current_batch(self):
        """The handle of this thread's open durable batch (see LocalStore), or None."""
        return None

    def joined_batch(self, handle):
        """A block whose durability work joins another thread's batch `handle` (see
        LocalStore); here as durable_batch."""
        return self.durable_batch()

    def durable_batch(self):
        """A context in which a backend may defer durability work (the local store's
        directory fsyncs) to the block's end; everything written in it is durable when
        the block exits normally. Objects on S3 are durable when the PUT returns."""
        from contextlib import nullcontext
        return nullcontext(self)
