"""Local-directory store: the embedded default.

One file on purpose (~680 lines): it is one backend of the Store contract, and every
operation shares the no-follow resolver and the durable-write helpers below.

Every operation on a key (get, open_read, head, put, copy, delete) reaches it through
one resolver: directory descriptors opened from the root one component at a time with
O_NOFOLLOW, the file itself opened or made relative to its directory's descriptor. A
symlink anywhere on the path, even one swapped in a moment ago, or the root swapped for
one, is refused (SymlinkRefused) and never followed, so no read or write lands outside
the store.

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
import os
import stat
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator

from seglake.errors import NotFound, SeglakeError, Unavailable
from seglake.storage.base import (SYMLINK, UNREADABLE, ChecksumMismatch, DeleteError, DeleteOutcome, Listed,
                                   ObjectInfo, Store, SymlinkRefused, crc_name, crc_update)
from seglake.storage.layout import check_key, normalize_key, normalize_prefix

TMP_PREFIX = ".seglake-tmp-"
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | _CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC
_IN_PLACE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | _CLOEXEC


class LocalStore(Store):
    # what put/put_writer return (size, mtime of the file written: its rename keeps them)
    # is what a later listing says of it, unless the object is written again
    put_info_as_listed = True

    def __init__(self, root: str | os.PathLike, delete_threads: int = 8):
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:  # a file in the way, no permission, read-only: say so, no traceback
            raise Unavailable(f"store_uri {str(root)!r}: cannot use it as the store's directory "
                              f"({e.strerror})") from None
        self.uri = str(self.root)
        self.delete_threads = delete_threads
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._batch = threading.local()  # .dirs: inside durable_batch(), dirs to fsync at its end

    def __getstate__(self):  # picklable for worker processes: caches are per process
        d = dict(self.__dict__)
        d["_seq"], d["_batch"] = None, None
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._batch = threading.local()

    # -- the one path resolver: every operation walks from the root without following -----
    def _split(self, key: str) -> tuple[list[str], str]:
        parent, _, name = normalize_key(key).rpartition("/")
        return (parent.split("/") if parent else []), name

    def _open_dir(self, parts: list[str], key: str, op: str, create: bool = False) -> int:
        """A descriptor of the directory root/parts, opened one component at a time
        relative to the previous one with O_NOFOLLOW|O_DIRECTORY (the same walk as
        delete_checked): a symlink at any level, or the root swapped for one, raises
        SymlinkRefused and nothing is followed. create: missing directories are made
        (and their entries fsynced in the parent, or by the durable batch)."""
        try:
            fd = os.open(self.uri, _DIR_FLAGS)
        except OSError as e:
            if e.errno == errno.ENOTDIR and os.path.islink(self.uri):
                e = OSError(errno.ELOOP, "symlink")
            raise _path_error(e, key, op, [], self.uri) from None
        if parts and _OPENAT2 is not None:  # the whole walk in one call, same refusals
            nfd = _openat2(fd, "/".join(parts), _DIR_FLAGS)
            if nfd >= 0:
                os.close(fd)
                return nfd
        i = 0
        try:
            for i, name in enumerate(parts):
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, dir_fd=fd)
                    except FileExistsError:
                        pass  # made concurrently (a symlink put there is refused just below)
                    else:
                        self._sync_dir(fd, parts[:i])
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = nfd
        except OSError as e:
            if e.errno == errno.ENOTDIR and _is_symlink(parts[i], fd):  # O_DIRECTORY may win over O_NOFOLLOW
                e = OSError(errno.ELOOP, "symlink")
            os.close(fd)
            raise _path_error(e, key, op, parts[:i + 1], self.uri) from None
        return fd

    def _open_file(self, key: str, op: str = "read") -> int:
        """A read-only descriptor of the regular file `key` (no symlink at any level)."""
        fd = -1
        if _OPENAT2 is not None:  # root, then the whole path in one call; any failure: the walk says why
            try:
                rfd = os.open(self.uri, _DIR_FLAGS)
            except OSError:
                pass
            else:
                try:
                    fd = _openat2(rfd, normalize_key(key), _READ_FLAGS)
                finally:
                    os.close(rfd)
        if fd < 0:
            parts, name = self._split(key)
            dfd = self._open_dir(parts, key, op)
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dfd)
            except OSError as e:
                raise _path_error(e, key, op, [*parts, name], self.uri) from None
            finally:
                os.close(dfd)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotFound(f"object {key!r} not found in {self.uri}")
        return fd

    def _list_dir(self, pfx: str) -> int | None:
        """A descriptor of the directory of a canonical prefix, by the same no-follow walk;
        None when it does not exist or a component is a symlink (nothing to list there:
        a symlink is listed, with report_unreadable, by the listing of its parent)."""
        try:
            return self._open_dir([p for p in pfx.split("/") if p], pfx, "list")
        except (NotFound, SymlinkRefused):
            return None

    def list(self, prefix: str = "", report_unreadable: bool = False,
             _describe: bool = False) -> Iterator[ObjectInfo]:
        """Regular files only, keys exactly as named on disk (a name that is not valid
        UTF-8 comes through with surrogate escapes, for the caller to report, never to
        be re-encoded into another key). Symlinks are neither followed nor listed;
        directories are opened relative to their parent's descriptor (O_NOFOLLOW), so
        one swapped for a symlink during the walk is never entered."""
        pfx = normalize_prefix(prefix)
        try:
            fd = self._list_dir(pfx) if not report_unreadable else \
                self._open_dir([p for p in pfx.split("/") if p], pfx, "list")
        except NotFound:
            fd = None
        except SymlinkRefused:     # with report_unreadable, a symlink on the prefix itself is reported too
            yield ObjectInfo(pfx, SYMLINK, 0.0)
            return
        except OSError as e:
            if report_unreadable and pfx:
                yield ObjectInfo(pfx, UNREADABLE, 0.0)
                return
            raise Unavailable(f"cannot list {pfx or self.uri!r}: {e.strerror}") from None
        if fd is not None:
            yield from _walk(fd, pfx, report_unreadable, _describe)

    def list_level(self, prefix: str = "", report_unreadable: bool = False) -> tuple[list[str], list[ObjectInfo]]:
        pfx = normalize_prefix(prefix)
        try:
            fd = self._list_dir(pfx)
        except OSError as e:
            if report_unreadable and pfx:
                return [], [ObjectInfo(pfx, UNREADABLE, 0.0)]
            raise Unavailable(f"cannot list {pfx or self.uri!r}: {e.strerror}") from None
        if fd is None:
            return [], []
        dirs, files = [], []
        try:
            try:
                entries = sorted(_scandir(fd), key=lambda e: e.name)
            except OSError as e:
                if report_unreadable and pfx:
                    return [], [ObjectInfo(pfx, UNREADABLE, 0.0)]
                raise Unavailable(f"cannot list {pfx or self.uri!r}: {e.strerror}") from None
            for e in entries:
                if e.is_symlink():
                    if report_unreadable:  # GC must see it: files may be reachable under two keys
                        files.append(ObjectInfo(pfx + e.name, SYMLINK, 0.0))
                    continue
                if e.is_dir(follow_symlinks=False):
                    if _canonical(pfx + e.name):
                        dirs.append(f"{pfx}{e.name}/")
                    else:  # a prefix list() could not take: its objects come back here instead
                        sub = _open_sub(e.name, fd, pfx, report_unreadable, files)
                        if sub is not None:
                            files += _walk(sub, f"{pfx}{e.name}/", report_unreadable)
                elif e.is_file(follow_symlinks=False):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    files.append(ObjectInfo(pfx + e.name, st.st_size, st.st_mtime))
        finally:
            os.close(fd)
        return dirs, files

    def list_described(self, prefix: str) -> Iterator[Listed]:
        """Every file under `prefix` as list() finds it, with its inode change time (a
        rewrite that puts the mtime back -- cp -p, rsync -a, touch -r -- still changes it):
        what a data file's tag in a backup target is made of (bundle.data_tag)."""
        yield from self.list(prefix, _describe=True)   # (the walk's own stat: no second one per file)

    def listed_one(self, key: str) -> Listed | None:
        """The regular file `key` as list_described describes it (None: not there)."""
        parts, name = self._split(key)
        try:
            dfd = self._open_dir(parts, key, "head")
        except (SeglakeError, OSError):
            return None
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(dfd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return Listed(normalize_key(key), st.st_size, st.st_mtime, ctime_ns=st.st_ctime_ns)

    def head(self, key: str) -> ObjectInfo:
        parts, name = self._split(key)
        dfd = self._open_dir(parts, key, "head")
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError as e:
            raise _path_error(e, key, "head", [*parts, name], self.uri) from None
        finally:
            os.close(dfd)
        if stat.S_ISLNK(st.st_mode):
            raise _path_error(OSError(errno.ELOOP, "symlink"), key, "head", [*parts, name], self.uri)
        if not stat.S_ISREG(st.st_mode):
            raise NotFound(f"object {key!r} not found in {self.uri}")
        return ObjectInfo(normalize_key(key), st.st_size, st.st_mtime)

    def get(self, key: str) -> bytes:
        with open(self._open_file(key, "get"), "rb") as f:
            return f.read()

    def open_read(self, key: str, buffering: int = -1) -> BinaryIO:
        """A reader of the regular file `key` (buffering=0: unbuffered, as open())."""
        return open(self._open_file(key, "read"), "rb", buffering=buffering)

    def read_upto(self, key: str, n: int) -> bytes:
        """The file's first `n` bytes, read from its descriptor (no buffered reader per
        file: a small file's read costs less than setting one up)."""
        fd = self._open_file(key, "read")
        try:
            parts = []
            while n > 0 and (chunk := os.read(fd, n)):
                parts.append(chunk)
                n -= len(chunk)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            os.close(fd)

    # -- durable writes ------------------------------------------------------------------
    def _sync_dir(self, dfd: int, parts: list[str]) -> None:
        """The directory root/parts (open as `dfd`) fsynced now, or at the batch's end."""
        pending = getattr(self._batch, "dirs", None)
        if pending is not None:
            pending.add(os.path.join(self.uri, *parts))
        else:
            os.fsync(dfd)

    def _sync_data(self, fd: int, key: str, deferrable: bool) -> None:
        """The file's data fsynced now, or (deferrable, in a durable batch) at its end."""
        pending = getattr(self._batch, "files", None) if deferrable else None
        if pending is not None:
            pending.append(os.path.join(self.uri, key))
        else:
            os.fsync(fd)

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

    def current_batch(self):
        """This thread's open durable batch (a handle for joined_batch), or None."""
        dirs = getattr(self._batch, "dirs", None)
        return None if dirs is None else (dirs, self._batch.files)

    @contextmanager
    def joined_batch(self, handle):
        """This thread's directory fsyncs and in-place file fsyncs deferred into `handle`
        (current_batch() of a durable batch another thread holds open until this block
        and every other joined one has ended: a pool's workers joining their caller's
        batch, so each directory is fsynced once for the whole run, at its end). A
        thread already in a batch keeps its own; None: a batch of this block's own."""
        if handle is None or getattr(self._batch, "dirs", None) is not None:
            with self.durable_batch():
                yield self
            return
        self._batch.dirs, self._batch.files = handle
        try:
            yield self
        finally:
            self._batch.dirs = self._batch.files = None

    def _write(self, key: str, write, atomic: bool = True, defer_data: bool = False) -> ObjectInfo:
        """write(fd) into a file under `key`'s directory, reached by the no-follow walk.
        atomic: a temp file of this call, its data fsynced (unless defer_data inside a
        durable batch), renamed over the destination. Otherwise the destination itself
        (opened O_NOFOLLOW: a symlink there is refused), its fsync deferrable: only for
        a destination nobody reads until its writer checked it. Then the directory entry
        is fsynced (or left to the batch). A directory removed behind our back is
        walked (and made) again once."""
        parts, name = self._split(key)
        for attempt in (1, 2):
            try:
                dfd = self._open_dir(parts, key, "write", create=True)
            except FileNotFoundError:  # a directory removed between its mkdir and its open
                if attempt == 2:
                    raise
                continue
            target = f"{TMP_PREFIX}{name}.{self._token}.{next(self._seq)}" if atomic else name
            created = False
            try:
                try:
                    fd = os.open(target, _NEW_FLAGS if atomic else _IN_PLACE_FLAGS, 0o666, dir_fd=dfd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.EISDIR):
                        raise _path_error(e, key, "write", [*parts, name], self.uri) from None
                    raise
                created = atomic
                try:
                    write(fd)
                    self._sync_data(fd, key, deferrable=defer_data or not atomic)
                    st = os.fstat(fd)
                finally:
                    os.close(fd)
                if atomic:
                    os.replace(target, name, src_dir_fd=dfd, dst_dir_fd=dfd)
                    created = False
                self._sync_dir(dfd, parts)
                return ObjectInfo(normalize_key(key), st.st_size, st.st_mtime)
            except FileNotFoundError:
                if attempt == 2:
                    raise
            finally:
                if created:
                    _unlink_quiet(target, dfd)
                os.close(dfd)
        raise AssertionError("unreachable")

    def put(self, key: str, data: bytes) -> ObjectInfo:
        """Atomic and durable on return: the data is fsynced before the rename that makes
        it visible, the directory entry after it."""
        return self._write(key, lambda fd: _write_fd(fd, data))

    def put_writer(self, key: str, write) -> ObjectInfo:
        """write(file) straight into this call's temp file (no buffer of the whole
        object), then as put: one data fsync, rename, directory fsync."""
        def to_fd(fd: int) -> None:
            with open(fd, "wb", buffering=1 << 20, closefd=False) as f:
                write(f)
        return self._write(key, to_fd)

    def put_exclusive(self, key: str, write) -> bool:
        """write(fd) a new file under `key` iff it does not exist (temp file, fsync,
        link(2): EEXIST when taken, directory fsync). False when it exists."""
        parts, name = self._split(key)
        dfd = self._open_dir(parts, key, "write", create=True)
        tmp = f"{TMP_PREFIX}{name}.{self._token}.{next(self._seq)}"
        try:
            fd = os.open(tmp, _NEW_FLAGS, 0o644, dir_fd=dfd)
            try:
                write(fd)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                return False
            os.fsync(dfd)
            return True
        finally:
            _unlink_quiet(tmp, dfd)
            os.close(dfd)

    def copy(self, src: str, dst: str, atomic: bool = True) -> ObjectInfo:
        """Kernel copy (sendfile) from the source's descriptor: no bytes through Python."""
        sfd = self._open_source(src)
        try:
            size = os.fstat(sfd).st_size
            return self._write(dst, lambda fd: _sendfile_all(sfd, fd, size), atomic=atomic)
        finally:
            os.close(sfd)

    def _open_source(self, src: str) -> int:
        try:
            return self._open_file(src, "copy")
        except NotFound:
            raise NotFound(f"copy source {src!r} not found in {self.uri}") from None

    def copy_checked(self, src: str, dst: str) -> tuple[ObjectInfo, str]:
        """One pass: read the source once, checksum what is read, write it to this call's
        own temp file, rename it over the destination (atomic). The checksum is the one of
        the bytes the destination holds; its size is checked against the bytes read.
        The bytes go through one 4 MiB buffer per thread: memory stays flat whatever the
        file's size (a read-only mapping of the whole source, used before, put all of it in
        the process's RSS: 1 GiB copied peaked at 1,043 MB against 20 MB now, and was
        slower). The data
        fsync is deferred like an in-place copy's (inside durable_batch(), to its end): a
        copy target is not read until its writer's batch ended, and a retry re-checks
        every file it finds by checksum, so a file cut short by a crash is copied again."""
        state = {}
        with open(self._open_source(src), "rb", buffering=0) as fi:
            size = os.fstat(fi.fileno()).st_size

            def write(fd: int) -> None:
                fi.seek(0)
                with open(fd, "wb", buffering=0, closefd=False) as fo:
                    crc = _copy_buffered(fi, fo)
                state.update(crc=crc, n=size)
            info = self._write(dst, write, defer_data=True)
        if info.size != state["n"]:
            raise ChecksumMismatch(f"copy of {src} to {dst}: wrote {info.size} bytes of {state['n']}")
        return info, crc_name(state["crc"])

    def delete_checked(self, objects: Iterable[str | ObjectInfo],
                       guard: Callable[[], None] | None = None) -> DeleteOutcome:
        """Delete through directory descriptors opened component by component from the
        root with O_NOFOLLOW: a symlink anywhere on the path (even one swapped in after
        the listing) stops the walk, so nothing outside the root is ever reached. Each
        object is stat'ed through the same descriptor right before its unlink, and
        `guard()` is called right before that (Store.delete_checked)."""
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
            parts = [self._delete_groups(groups, guard)]
        else:  # contiguous runs of sorted directories: each worker reuses its open chain
            step = -(-len(groups) // workers)
            with ThreadPoolExecutor(workers) as pool:
                parts = list(pool.map(lambda g: self._delete_groups(g, guard),
                                      [groups[i:i + step] for i in range(0, len(groups), step)]))
        for part in parts:
            out.deleted += part.deleted
            out.missing += part.missing
            out.changed += part.changed
            out.errors += part.errors
        return out

    def _delete_groups(self, groups, guard: Callable[[], None] | None = None) -> DeleteOutcome:
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
                    if guard is not None:
                        guard()
                    _unlink_at(fd, key, name, expect, out)
        return out


class _DirChain:
    """Directory descriptors from the root down, opened with O_NOFOLLOW|O_DIRECTORY one
    component at a time relative to the previous one; consecutive calls share the
    common prefix."""

    FLAGS = _DIR_FLAGS

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


def _walk(fd: int, pfx: str, report_unreadable: bool = False, describe: bool = False) -> Iterator[ObjectInfo]:
    """Every regular file below the directory open as `fd` (closed here), keyed `pfx` +
    its relative path, in key order per directory: its files, then its subdirectories,
    each opened relative to its parent with O_NOFOLLOW (one swapped for a symlink after
    the scan is reported like a symlink, never entered). At most one descriptor per
    level is open. An unreadable directory raises, or with report_unreadable comes back
    as ObjectInfo(its prefix, UNREADABLE, 0.0)."""
    stack: list[tuple[int, str, Iterator[str]]] = []
    try:
        cur: tuple[int, str] | None = (fd, pfx)
        while cur is not None or stack:
            if cur is not None:
                dfd, rel = cur
                cur = None
                try:
                    entries = sorted(_scandir(dfd), key=lambda e: e.name)
                except OSError as e:
                    os.close(dfd)
                    if report_unreadable and rel:  # (the store root itself must be readable)
                        yield ObjectInfo(rel, UNREADABLE, 0.0)
                        continue
                    raise Unavailable(f"cannot list {rel!r}: {e.strerror}") from None
                subdirs = []
                for e in entries:
                    if e.is_symlink():
                        if report_unreadable:  # GC must see it: files may be reachable under two keys
                            yield ObjectInfo(rel + e.name, SYMLINK, 0.0)
                    elif e.is_dir(follow_symlinks=False):
                        subdirs.append(e.name)
                    elif e.is_file(follow_symlinks=False):
                        try:
                            st = e.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        yield (Listed(rel + e.name, st.st_size, st.st_mtime, ctime_ns=st.st_ctime_ns) if describe
                               else ObjectInfo(rel + e.name, st.st_size, st.st_mtime))
                stack.append((dfd, rel, iter(subdirs)))
                continue
            dfd, rel, names = stack[-1]
            name = next(names, None)
            if name is None:
                os.close(dfd)
                stack.pop()
                continue
            found: list[ObjectInfo] = []
            sub = _open_sub(name, dfd, rel, report_unreadable, found)
            yield from found
            if sub is not None:
                cur = (sub, f"{rel}{name}/")
    finally:
        for dfd, _, _ in stack:
            os.close(dfd)


def _open_sub(name: str, dir_fd: int, rel: str, report_unreadable: bool, out: list) -> int | None:
    """Open subdirectory `name` of `dir_fd` without following a symlink; None if it is
    gone, was swapped for a symlink (reported as one) or cannot be read (reported, or
    raised without report_unreadable)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None  # removed while listing
    except OSError as e:
        if e.errno == errno.ELOOP or (e.errno == errno.ENOTDIR and _is_symlink(name, dir_fd)):
            if report_unreadable:
                out.append(ObjectInfo(rel + name, SYMLINK, 0.0))
            return None
        if e.errno == errno.ENOTDIR:
            return None  # replaced by a file: the next listing sees it
        if report_unreadable:
            out.append(ObjectInfo(f"{rel}{name}/", UNREADABLE, 0.0))
            return None
        raise Unavailable(f"cannot list {rel + name!r}: {e.strerror}") from None


def _canonical(key: str) -> bool:
    try:
        check_key(key)
        return True
    except ValueError:
        return False


def _scandir(dir_fd: int) -> list[os.DirEntry]:
    with os.scandir(dir_fd) as it:
        return list(it)


_local = threading.local()


def _copy_buffered(fi, fo) -> int:
    """Copy through a 4 MiB buffer kept per thread (allocating one per file costs more
    than a small copy); returns the CRC of the bytes written."""
    buf = getattr(_local, "buf", None)
    if buf is None:
        buf = _local.buf = bytearray(4 << 20)
    crc = 0
    while k := fi.readinto(buf):
        with memoryview(buf)[:k] as view:
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


def _unlink_quiet(name: str, dir_fd: int) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def _write_fd(fd: int, data) -> None:
    with memoryview(data) as view, view.cast("B") as b:
        n = 0
        while n < len(b):
            n += os.write(fd, b[n:])


def _sendfile_all(src: int, dst: int, size: int) -> None:
    """Copy `size` bytes from the start of `src` in the kernel (a retry starts over)."""
    off = 0
    while off < size:
        n = os.sendfile(dst, src, off, min(size - off, 1 << 30))
        if n == 0:
            raise ChecksumMismatch(f"source shrank during the copy: {off} of {size} bytes")
        off += n


def _openat2_call():
    """openat2(2) with RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH, where the
    kernel has it (Linux >= 5.6): the no-follow walk of a key in one system call, refusing
    exactly what the walk refuses (a symlink at any level, the last one included, with
    O_NOFOLLOW) -- the walk opens and closes a descriptor per directory level, ~20 us for a
    segment file's 6 levels against ~4 us. None where it is missing (or filtered: ENOSYS,
    EPERM): the walk alone then."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        class How(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]
        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.syscall
        call.restype = ctypes.c_long
        call.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError, ImportError):
        return None
    hows = {flags: How(flags, 0, 0x02 | 0x04 | 0x08) for flags in (_DIR_FLAGS, _READ_FLAGS)}

    def openat2(dir_fd: int, path: str, flags: int) -> int:
        """A descriptor, or -1 when the call failed for any reason (the caller walks)."""
        if "\0" in path:   # a C string would end there: never opened short, the walk refuses it
            return -1
        how = hows[flags]
        fd = call(437, dir_fd, os.fsencode(path), ctypes.addressof(how), 24)   # SYS_openat2, every arch
        if fd < 0 and ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG):
            global _OPENAT2
            _OPENAT2 = None   # not available here (old kernel, seccomp): the walk from now on
        return int(fd)
    try:
        fd = os.open("/", _DIR_FLAGS)
    except OSError:
        return None
    try:
        probe = call(437, fd, b".", ctypes.addressof(hows[_DIR_FLAGS]), 24)
    finally:
        os.close(fd)
    if probe < 0:
        return None
    os.close(probe)
    return openat2


def _openat2(dir_fd: int, path: str, flags: int) -> int:
    return _OPENAT2(dir_fd, path, flags) if _OPENAT2 is not None else -1


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _path_error(e: OSError, key: str, op: str, parts: list[str], root: str) -> Exception:
    """The error of a failed walk step at root/parts: a symlink is refused by name, a
    missing object (or a file where a directory should be) is NotFound for reads."""
    where = "/".join(parts)
    if e.errno == errno.ELOOP:
        what = f"{where!r} is a symlink" if parts else "the store root is a symlink"
        return SymlinkRefused(f"refusing to {op} {key!r} in {root}: {what}; the local store never follows "
                              "a symlink below its root")
    if e.errno in (errno.ENOENT, errno.ENOTDIR) and op != "write":
        return NotFound(f"object {key!r} not found in {root}")
    if e.errno == errno.EISDIR or (e.errno == errno.ENOTDIR and op == "write"):
        return SeglakeError(f"cannot {op} {key!r} in {root}: {where!r} is in the way ({e.strerror})")
    return e


_OPENAT2 = _openat2_call()
