"""One append-only log per pchannel: immutable, checksummed fragments in the Store,
their metadata in etcd.

Fragment file `wal/{pchannel}/{n:020d}.frag` (layout.wal_fragment):

    MAGIC | u64 term | u64 fragment | records... | footer
    record  = u32 length | u32 crc32c(payload) | payload (message.encode())
    footer  = u32 record count | u64 records' bytes | u32 crc32c(header + count + bytes) | END

- A fragment becomes visible atomically and only once: locally a synced temp file
  hard-linked to its name (the link fails if the name exists: exclusive create), on S3
  one PUT with `If-None-Match: *` (412 when the name exists).
- It counts as part of the log only once the etcd log record (`{root}/wal/{p}/log`)
  says so: committed fragments are first..last minus `holes` (numbers a writer had to
  skip because an uncommitted file, e.g. a fenced writer's, already held the name).
- Reading checks the magic, the footer and every record's crc: a truncated or corrupt
  fragment raises CorruptFragment naming the key; a committed fragment that is missing
  raises too. Nothing is ever skipped silently.
"""

from __future__ import annotations

import json
import re
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Iterator

import crc32c

from seglake.errors import NotFound, SeglakeError, Unavailable, ValidationError
from seglake.meta import keys as keymod
from seglake.meta.codec import decode, encode
from seglake.meta.kv import KeyValue
from seglake.storage import layout
from seglake.wal.message import Message, MessageId

MAGIC = b"SLWAL1\n\0"
END = b"SLWALEND"
_HEAD = struct.Struct("<QQ")
_REC = struct.Struct("<II")
_FOOT = struct.Struct("<IQI")
PCHANNEL_PREFIX = "seglake-dml_"


class CorruptFragment(SeglakeError):
    """A fragment's bytes do not check out (truncated, bit flip, wrong header)."""


class Fenced(SeglakeError):
    """The writer's term is no longer the pchannel's term: a newer writer owns it."""


def validate_pchannel(pchannel: str) -> str:
    from seglake.meta.catalog import PCHANNEL_COUNT

    num = pchannel[len(PCHANNEL_PREFIX):] if isinstance(pchannel, str) and pchannel.startswith(PCHANNEL_PREFIX) else ""
    if not (re.fullmatch(r"(?:0|[1-9][0-9]{0,2})", num, re.ASCII) and int(num) < PCHANNEL_COUNT):
        raise ValidationError(f"unknown pchannel {pchannel!r} (expected {PCHANNEL_PREFIX}0..{PCHANNEL_COUNT - 1})")
    return pchannel


def all_pchannels() -> list[str]:
    from seglake.meta.catalog import PCHANNEL_COUNT
    return [f"{PCHANNEL_PREFIX}{i}" for i in range(PCHANNEL_COUNT)]


def check_wal_settings(s) -> None:
    """The WAL's config keys are finite and in range (refused before any side effect)."""
    from seglake import limits

    for k in ("wal_fragment_bytes", "wal_fragment_records", "wal_batch_time", "wal_txn_keepalive",
              "wal_scanner_startup_delay", "wal_pause_poll"):
        limits.check(k, f"config key {k!r}", getattr(s, k))


# -- fragment encoding ------------------------------------------------------------------
def checksum(data, value: int = 0) -> int:
    """CRC32C (hardware accelerated), chainable over parts."""
    return crc32c.crc32c(data, value=value)


def encode_fragment_parts(term: int, fragment: int, records: list[list]) -> list:
    """The fragment as a list of buffers (no join: large bodies are written in place).
    Each record is a list of buffers (message.encode_parts)."""
    head = _HEAD.pack(term, fragment)
    parts: list = [MAGIC + head]
    size = 0
    for rec in records:
        n, crc = 0, 0
        for b in rec:
            crc = checksum(b, crc)
            n += len(b)
        parts.append(_REC.pack(n, crc))
        parts.extend(rec)
        size += _REC.size + n
    foot_crc = checksum(head + struct.pack("<IQ", len(records), size))
    parts.append(_FOOT.pack(len(records), size, foot_crc) + END)
    return parts


def encode_fragment(term: int, fragment: int, payloads: list[bytes]) -> bytes:
    return b"".join(bytes(p) for p in encode_fragment_parts(term, fragment, [[p] for p in payloads]))


def decode_fragment(key: str, data: bytes, expect_fragment: int | None = None) -> tuple[int, list[memoryview]]:
    """(term, record payloads) of a fragment; CorruptFragment naming `key` otherwise."""
    mv = memoryview(data)
    minimum = len(MAGIC) + _HEAD.size + _FOOT.size + len(END)
    if len(data) < minimum or bytes(mv[:len(MAGIC)]) != MAGIC:
        raise CorruptFragment(f"WAL fragment {key}: truncated or not a fragment ({len(data)} bytes)")
    if bytes(mv[-len(END):]) != END:
        raise CorruptFragment(f"WAL fragment {key}: truncated (no end marker)")
    term, frag = _HEAD.unpack_from(mv, len(MAGIC))
    count, size, foot_crc = _FOOT.unpack_from(mv, len(data) - len(END) - _FOOT.size)
    if checksum(_HEAD.pack(term, frag) + struct.pack("<IQ", count, size)) != foot_crc:
        raise CorruptFragment(f"WAL fragment {key}: footer checksum mismatch")
    body_start = len(MAGIC) + _HEAD.size
    if body_start + size + _FOOT.size + len(END) != len(data):
        raise CorruptFragment(f"WAL fragment {key}: length {len(data)} does not match its footer")
    if expect_fragment is not None and frag != expect_fragment:
        raise CorruptFragment(f"WAL fragment {key}: header says fragment {frag}")
    out, pos, end = [], body_start, body_start + size
    for i in range(count):
        if pos + _REC.size > end:
            raise CorruptFragment(f"WAL fragment {key}: record {i} truncated")
        n, crc = _REC.unpack_from(mv, pos)
        pos += _REC.size
        payload = mv[pos:pos + n]
        if pos + n > end or checksum(payload) != crc:
            raise CorruptFragment(f"WAL fragment {key}: record {i} checksum mismatch")
        out.append(payload)
        pos += n
    if pos != end:
        raise CorruptFragment(f"WAL fragment {key}: {end - pos} trailing bytes after {count} records")
    return term, out


# -- exclusive create ---------------------------------------------------------------------
def put_exclusive(store, key: str, data) -> bool:
    """Write `key` atomically and durably iff it does not exist. False when it exists.
    `data`: bytes or a list of buffers. Local: synced temp file + link(2) (fails with
    EEXIST) + directory fsync. S3: one PUT with If-None-Match: * (412 when it exists)."""
    from seglake.storage.local import LocalStore
    from seglake.storage.s3 import S3Store

    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    if isinstance(store, LocalStore):  # the store's no-follow walk; link(2) fails on an existing name
        try:
            return store.put_exclusive(key, lambda fd: _write_all(fd, parts))
        except OSError as e:
            raise Unavailable(f"cannot write WAL fragment {key} in {store.uri}: {e.strerror or e}") from None
    if isinstance(store, S3Store):
        from botocore.exceptions import BotoCoreError, ClientError
        body = b"".join(bytes(p) if not isinstance(p, bytes) else p for p in parts)
        try:
            store.client.put_object(Bucket=store.bucket, Key=store._full(key), Body=body, IfNoneMatch="*")
            return True
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            if code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
                return False
            raise store._err(e, "put", key) from None
        except BotoCoreError as e:
            raise store._err(e, "put", key) from None
    raise SeglakeError(f"the WAL needs a store with exclusive create, not {type(store).__name__}")


def _write_all(fd: int, parts: list) -> None:
    views = [memoryview(p).cast("B") for p in parts if len(p)]
    while views:
        n = os.writev(fd, views[:512])
        while n:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0


# -- log metadata in etcd -------------------------------------------------------------------
@dataclass
class LogState:
    """The etcd record of a pchannel's log. Committed fragments: first..last minus holes."""

    first: int = 1
    last: int = 0
    holes: list[int] = field(default_factory=list)
    last_tt: int = 0          # highest time tick in any committed fragment (high-water mark)
    bytes: int = 0
    records: int = 0
    term: int = 0             # term of the writer that last committed
    truncated_before: list[int] | None = None  # message id (flusher issue)
    kv: KeyValue | None = None

    def fragments(self, start: int = 1) -> Iterator[int]:
        holes = set(self.holes)
        for n in range(max(self.first, start), self.last + 1):
            if n not in holes:
                yield n

    def to_json(self) -> dict:
        return {"first": self.first, "last": self.last, "holes": self.holes, "last_tt": self.last_tt,
                "bytes": self.bytes, "records": self.records, "term": self.term,
                "truncated_before": self.truncated_before}

    @classmethod
    def from_kv(cls, kv: KeyValue | None) -> "LogState":
        if kv is None:
            return cls()
        d = decode(kv.value, kv.key)
        return cls(d["first"], d["last"], list(d["holes"]), d["last_tt"], d["bytes"], d["records"],
                   d.get("term", 0), d.get("truncated_before"), kv)

    def encoded(self) -> bytes:
        return encode(self.to_json())


@dataclass(frozen=True)
class TermRecord:
    term: int
    writer: str
    opened_at: float
    kv: KeyValue | None = None

    @classmethod
    def from_kv(cls, kv: KeyValue | None) -> "TermRecord":
        if kv is None:
            return cls(0, "", 0.0)
        d = decode(kv.value, kv.key)
        return cls(d["term"], d["writer"], d["opened_at"], kv)


class WalLog:
    """Read access to one pchannel's log (metadata + fragments)."""

    def __init__(self, meta, store, pchannel: str):
        self.meta, self.store = meta, store
        self.pchannel = validate_pchannel(pchannel)
        self.log_key = keymod.wal_log(meta.keys, pchannel)
        self.term_key = meta.keys.wal_term(pchannel)

    def state(self) -> LogState:
        return LogState.from_kv(self.meta.kv.get(self.log_key))

    def term(self) -> TermRecord:
        return TermRecord.from_kv(self.meta.kv.get(self.term_key))

    def fragment_key(self, n: int) -> str:
        return layout.wal_fragment(self.pchannel, n)

    def read_fragment(self, n: int) -> list[Message]:
        """Every message of committed fragment `n`, checked; loud on any damage."""
        key = self.fragment_key(n)
        try:
            data = _read_whole(self.store, key)
        except NotFound:
            raise CorruptFragment(f"WAL fragment {key}: committed in etcd but missing from {self.store.uri}") from None
        term, payloads = decode_fragment(key, data, n)
        out = []
        for i, p in enumerate(payloads):
            try:
                out.append(Message.decode(p, MessageId(term, n, i)))
            except (ValueError, KeyError, struct.error) as e:
                raise CorruptFragment(f"WAL fragment {key}: record {i} does not decode: {e}") from None
        return out

    def messages(self, start: MessageId | None = None) -> Iterator[Message]:
        """Committed messages from `start` (inclusive) or the beginning, in id order."""
        st = self.state()
        for n in st.fragments(start.fragment if start else 1):
            for m in self.read_fragment(n):
                if start is None or not m.id < start:
                    yield m


def _read_whole(store, key: str):
    """The object's bytes. Locally read into an Arrow-allocated buffer: its allocator keeps
    freed pages for reuse, where fresh bytes objects pay page faults on every fragment
    (the decoded batches reference this buffer without copying)."""
    from seglake.storage.local import LocalStore

    if not isinstance(store, LocalStore):
        return store.get(key)
    import pyarrow as pa
    try:
        with store.open_read(key, buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            buf = pa.allocate_buffer(size)
            view = memoryview(buf).cast("B")
            got = 0
            while got < size:
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
    except (FileNotFoundError, IsADirectoryError):
        raise NotFound(f"object {key!r} not found in {store.uri}") from None
    return view[:got]


def pause_state(meta, pchannel: str) -> dict | None:
    """The pause flag that holds `pchannel`'s consumers (its own or the global one)."""
    for key in (keymod.wal_pause(meta.keys, pchannel), keymod.wal_pause(meta.keys)):
        kv = meta.kv.get(key)
        if kv is not None:
            return {"key": key, **json.loads(kv.value)}
    return None


def set_pause(meta, pchannel: str | None, paused: bool, reason: str = "") -> None:
    """Set or clear the pause flag of one pchannel (or the global one). Idempotent."""
    if pchannel is not None:
        validate_pchannel(pchannel)
    key = keymod.wal_pause(meta.keys, pchannel)
    if paused:
        meta.kv.put(key, json.dumps({"paused_at": time.time(), "reason": reason}))
    else:
        meta.kv.delete(key)
