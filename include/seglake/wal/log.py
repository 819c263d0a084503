"""One append-only log per pchannel: immutable, checksummed fragment files in the Store,
their order and their ticks in etcd.

One file on purpose (~440 lines): the fragment format and the etcd index that orders
fragments are one contract; the reader and the writer of both live together.

Fragment file (format 2) `wal/{pchannel}/{hint:020d}-{token}.frag` (layout.wal_fragment):

    MAGIC | u64 term | u64 hint | records... | footer
    record  = u32 length | u32 crc32c(payload) | payload (message.encode(), tick RELATIVE)
    footer  = u32 record count | u64 records' bytes | u32 crc32c(header + count + bytes) | END

- A producer writes its fragment under a name no one else uses (a random token), before
  it knows the fragment's place in the log: producers never wait for or fence each other.
- The fragment becomes part of the log with ONE etcd transaction that compares the log
  record `{root}/wal/{p}/log` (unchanged since read) and writes, together: the log record
  (last = n, last_tt), the index record `{root}/wal_index/{p}/frags/{n:020d}` (object key,
  size, crc32c of the whole file, first tick `tt0`, tick span, records, term, producer)
  and the producer's record (its sequence numbers: retries are idempotent). A lost race
  re-reads the log and commits the SAME file at the next place.
- Ticks are given at that commit: tt0 > the log's last tick, from the one global TSO;
  a message's tick = tt0 + its relative tick. So ticks increase in log order on every
  pchannel, and every tick in the system comes from the TSO.
- Reading compares the file with its index record (size and crc32c of the whole file):
  an overwritten, swapped, truncated or missing fragment raises CorruptFragment naming
  it, on every store, with or without conditional PUTs. Nothing is skipped silently.

A log written before the index (format 1: numbered files with absolute ticks, a `holes`
list) is read as is: its record keeps `legacy_last`; fragments up to it are the numbered
files (checked by their own footer and record crcs), later ones come from the index. The
first commit of a format-2 producer converts the record in place.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import time
from dataclasses import dataclass, field, replace
from typing import Iterator

import crc32c

from seglake.errors import Conflict, CorruptRecord, NotFound, SeglakeError, Unavailable, ValidationError
from seglake.names import check_text
from seglake.meta import codec, keys as keymod
from seglake.meta.codec import decode, encode
from seglake.meta.kv import KeyValue, Put, absent, unchanged
from seglake.storage import layout
from seglake.wal.message import Message, MessageId

MAGIC = b"SLWAL1\n\0"
END = b"SLWALEND"
_HEAD = struct.Struct("<QQ")
_REC = struct.Struct("<II")
_FOOT = struct.Struct("<IQI")
from seglake.meta.catalog import PCHANNEL_PREFIX  # noqa: E402  (pchannel names live in the catalog)
LOG_FORMAT = 2
logger = logging.getLogger(__name__)


class CorruptFragment(SeglakeError):
    """A fragment's bytes do not check out (truncated, bit flip, swapped, missing)."""


class Fenced(SeglakeError):
    """A writer or flusher whose term is no longer the pchannel's term."""


def validate_pchannel(pchannel: str) -> str:
    from seglake.meta.catalog import PCHANNEL_COUNT

    num = pchannel[len(PCHANNEL_PREFIX):] if isinstance(pchannel, str) and pchannel.startswith(PCHANNEL_PREFIX) else ""
    if not (re.fullmatch(r"(?:0|[1-9][0-9]{0,2})", num, re.ASCII) and int(num) < PCHANNEL_COUNT):
        raise ValidationError(f"unknown pchannel {pchannel!r} (expected {PCHANNEL_PREFIX}0..{PCHANNEL_COUNT - 1})")
    return pchannel


def all_pchannels() -> list[str]:
    from seglake.meta.catalog import PCHANNEL_COUNT, pchannel_name
    return [pchannel_name(i) for i in range(PCHANNEL_COUNT)]


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


def encode_fragment_parts(term: int, hint: int, records: list[list]) -> list:
    """The fragment as a list of buffers (no join: large bodies are written in place).
    Each record is a list of buffers (message.encode_parts)."""
    head = _HEAD.pack(term, hint)
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


def parts_checksum(parts: list) -> tuple[int, int]:
    """(size, crc32c) of a fragment given as buffers."""
    crc, size = 0, 0
    for p in parts:
        crc = checksum(p, crc)
        size += len(p)
    return size, crc


def decode_fragment(key: str, data, expect_fragment: int | None = None, *,
                    check_records: bool = True) -> tuple[int, list[memoryview]]:
    """(term, record payloads) of a fragment; CorruptFragment naming `key` otherwise.
    check_records=False skips the per-record crcs (the caller checked the whole file)."""
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
        if pos + n > end or (check_records and checksum(payload) != crc):
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
    EEXIST) + directory fsync. S3: a PUT with If-None-Match: * (412 when it exists;
    a server that ignores the condition is caught on read by the index's crc), transient
    failures retried (S3Store.put_exclusive)."""
    from seglake.storage.local import LocalStore
    from seglake.storage.s3 import S3Store

    parts = [data] if isinstance(data, (bytes, bytearray, memoryview)) else list(data)
    if isinstance(store, LocalStore):  # the store's no-follow walk; link(2) fails on an existing name
        try:
            return store.put_exclusive(key, lambda fd: _write_all(fd, parts))
        except OSError as e:
            raise Unavailable(f"cannot write WAL fragment {key} in {store.uri}: {e.strerror or e}") from None
    if isinstance(store, S3Store):   # retried there; a retry that meets its own write says True
        return store.put_exclusive(key, b"".join(bytes(p) if not isinstance(p, bytes) else p for p in parts))
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
    """The etcd record of a pchannel's log. Fragments first..last: format-1 numbered files
    up to `legacy_last` (minus `holes`), index records above."""

    first: int = 1
    last: int = 0
    holes: list[int] = field(default_factory=list)
    last_tt: int = 0          # highest tick of any committed message (ticks rise in log order)
    bytes: int = 0
    records: int = 0
    term: int = 0             # the log's term: bumped only by a takeover (wal/writer.py)
    legacy_last: int = 0      # format-1 fragments end here (0: none)
    sealed_tt: int = 0        # no commit from now on carries a tick at or below this (the WAL archive's seal)
    kv: KeyValue | None = None

    def legacy(self, start: int = 1) -> Iterator[int]:
        holes = set(self.holes)
        for n in range(max(self.first, start), min(self.last, self.legacy_last) + 1):
            if n not in holes:
                yield n

    def to_json(self) -> dict:
        return {"format": LOG_FORMAT, "first": self.first, "last": self.last, "holes": self.holes,
                "last_tt": self.last_tt, "bytes": self.bytes, "records": self.records, "term": self.term,
                "legacy_last": self.legacy_last, "sealed_tt": self.sealed_tt}

    @property
    def floor_tt(self) -> int:
        """A new fragment's ticks are above this: the last committed tick, or the seal."""
        return max(self.last_tt, self.sealed_tt)

    @classmethod
    def from_kv(cls, kv: KeyValue | None) -> "LogState":
        if kv is None:
            return cls()
        d = decode(kv.value, kv.key)
        fmt = d.get("format", 1)
        if fmt > LOG_FORMAT:
            raise ValidationError(f"WAL log record {kv.key} has format {fmt}, newer than {LOG_FORMAT}")
        legacy_last = d["last"] if fmt == 1 else d.get("legacy_last", 0)
        return cls(d["first"], d["last"], list(d.get("holes", ())), d["last_tt"], d["bytes"], d["records"],
                   d.get("term", 0), legacy_last, d.get("sealed_tt", 0), kv=kv)

    def encoded(self) -> bytes:
        return encode(self.to_json())


@dataclass(frozen=True)
class FragRecord:
    """Fragment n of the log as its index records it (format 1: synthesized)."""

    n: int
    key: str
    size: int | None
    crc: int | None
    tt0: int                  # tick of relative tick 0 (format 1: 0, ticks are absolute)
    span: int                 # relative ticks used: the last message's tick is tt0 + span - 1
    records: int
    term: int
    producer: str = ""
    fmt: int = 2
    calls: tuple = ()         # the producer's appends in it: (seq, first offset, count)

    def to_json(self) -> dict:
        return {"key": self.key, "size": self.size, "crc": self.crc, "tt0": self.tt0, "span": self.span,
                "records": self.records, "term": self.term, "producer": self.producer,
                "calls": [list(c) for c in self.calls]}

    @classmethod
    def from_kv(cls, n: int, kv: KeyValue) -> "FragRecord":
        d = decode(kv.value, kv.key)
        return cls(n, d["key"], d["size"], d["crc"], d["tt0"], d["span"], d["records"], d["term"],
                   d.get("producer", ""), calls=tuple(tuple(c) for c in d.get("calls", ())))


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
        self.frags_prefix = keymod.wal_frags_prefix(meta.keys, pchannel)

    def state(self) -> LogState:
        return LogState.from_kv(self.meta.kv.get(self.log_key))

    def term(self) -> TermRecord:
        return TermRecord.from_kv(self.meta.kv.get(self.term_key))

    def frag_key(self, n: int) -> str:
        return keymod.wal_frag(self.meta.keys, self.pchannel, n)

    def fragments(self, start: int = 1, state: LogState | None = None) -> Iterator[FragRecord]:
        """The committed fragments from number `start`, in order (paged index reads at the
        revision of the first page; nothing above `state.last`)."""
        st = self.state() if state is None else state
        for n in st.legacy(start):
            yield FragRecord(n, layout.wal_fragment(self.pchannel, n), None, None, 0, 0, 0, 0, fmt=1)
        lo = max(start, st.first, st.legacy_last + 1)
        if lo > st.last:
            return
        after = self.frag_key(lo - 1) if lo > 1 else None
        expect = lo
        for kv in self.meta.kv.range(self.frags_prefix, start_after=after, end=self.frag_key(st.last + 1)):
            n = int(kv.key[len(self.frags_prefix):])
            if n != expect:
                raise CorruptFragment(f"WAL {self.pchannel}: index record of fragment {expect} is missing "
                                      f"(next is {n}); the log is damaged")
            yield FragRecord.from_kv(n, kv)
            expect += 1
        if expect != st.last + 1:
            raise CorruptFragment(f"WAL {self.pchannel}: index records end at {expect - 1}, the log says {st.last}")

    def read_fragment(self, rec: FragRecord) -> list[Message]:
        """Every message of a committed fragment, checked against its index record; loud on
        any damage. Ticks are absolute, ids (term, n, offset)."""
        return read_committed(self.store, rec)

    def messages(self, start: MessageId | None = None) -> Iterator[Message]:
        """Committed messages from `start` (inclusive) or the beginning, in id order."""
        for rec in self.fragments(start.fragment if start else 1):
            for m in self.read_fragment(rec):
                if start is None or not m.id < start:
                    yield m


def read_committed(store, rec: FragRecord) -> list[Message]:
    """Every message of the committed fragment `rec`, read from `store` (the log's store,
    or an archive of it: lifecycle/backup/archive.py) and checked against its index
    record; loud on any damage. Ticks are absolute, ids (term, n, offset)."""
    try:
        data = _read_whole(store, rec.key)
    except NotFound:
        raise CorruptFragment(f"WAL fragment {rec.key} (#{rec.n}): committed in etcd but missing from "
                              f"{store.uri}") from None
    return decode_committed(rec, data)


def decode_committed(rec: FragRecord, data) -> list[Message]:
    """The messages of the bytes `data` of committed fragment `rec` (read_committed)."""
    key = rec.key
    if rec.fmt == 1:
        term, payloads = decode_fragment(key, data, rec.n)
    else:
        if len(data) != rec.size or checksum(data) != rec.crc:
            raise CorruptFragment(f"WAL fragment {key} (#{rec.n}): {len(data)} bytes / crc32c "
                                  f"{checksum(data):08x} do not match the index ({rec.size} bytes / "
                                  f"{rec.crc:08x}): overwritten, swapped or damaged")
        term, payloads = decode_fragment(key, data, check_records=False)
        term = rec.term
    out = []
    for i, p in enumerate(payloads):
        try:
            m = Message.decode(p, MessageId(term, rec.n, i))
        except (ValueError, KeyError, struct.error) as e:
            raise CorruptFragment(f"WAL fragment {key}: record {i} does not decode: {e}") from None
        if rec.fmt != 1:
            m = replace(m, time_tick=rec.tt0 + m.time_tick, term=term, producer=rec.producer)
        out.append(m)
    return out


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
            return {"key": key, **codec.loads(kv.value, key)}   # damaged: raises (consumers stay held)
    return None


def set_pause(meta, pchannel: str | None, paused: bool, reason: str = "") -> None:
    """Set or clear the pause flag of one pchannel (or the global one). Idempotent."""
    if pchannel is not None:
        validate_pchannel(pchannel)
    check_text("wal pause reason", reason, 1024)
    key = keymod.wal_pause(meta.keys, pchannel)
    if paused:
        meta.kv.put(key, json.dumps({"paused_at": time.time(), "reason": reason}))
    else:
        meta.kv.delete(key)


def expire_producers(meta, pchannel: str, idle_seconds: float | None = None, *, now_tt: int = 0) -> int:
    """Remove the records of named producers idle on `pchannel` for more than two retry
    windows: 2 x max(the record's own window `w`, `idle_seconds`; the latter alone for a
    record without one), by its last commit's tick `tt` against a LINEARIZABLE TSO tick
    (above `now_tt`, if given) reserved first. That reservation moves the TSO's mark past
    the instant the records are judged at, so once a record is gone every process's TSO
    is past its calls' age: a retry of one of them is judged by the commit's tick (writer:
    WalWriter._refusal), never by a clock that may be slow or set back, and is refused, not
    appended twice. A record that remembers calls the caller numbered (below 2**40, they
    carry no time), or whose floor is such a call, is shrunk to its floor instead (no
    calls, kept): their retries stay refused for good. A record without `tt` is stamped
    first (its clock starts then). A record on a lease (a fresh id's; an older version's)
    expires by itself and is left alone. Each change compares the record, so a producer
    committing meanwhile keeps it. Returns how many records were removed or shrunk."""
    from seglake import limits
    from seglake.meta.alloc import physical_ms
    from seglake.meta.kv import Delete
    from seglake.wal.producers import CALL_BITS, CLOCK_BASE

    if idle_seconds is not None:
        idle_seconds = limits.check("wal_producer_expiry", "producer expiry (seconds)", idle_seconds)
    if isinstance(now_tt, bool) or not isinstance(now_tt, int) or now_tt < 0:
        raise ValidationError(f"now_tt must be a TSO timestamp (an int >= 0), got {now_tt!r}")
    recs = [kv for kv in meta.kv.range(keymod.wal_producers_prefix(meta.keys, pchannel)) if not kv.lease]
    if not recs:
        return 0
    now = physical_ms(meta.tso.reserve(1, above=now_tt, linearizable=True))
    changed = 0
    for kv in recs:
        rec = decode(kv.value, kv.key)
        try:   # a window that is not a number (a string "0.001", a negative one): damaged, kept
            window = max(codec.number(rec, "w", kv.key, hi=limits.YEAR) if rec.get("w") is not None else 0, idle_seconds or 0.0)
        except CorruptRecord as e:
            logger.warning("%s: producer record kept", e)
            continue
        try:
            if type(rec.get("tt")) is not int or rec["tt"] < 0:   # none (or damaged): its clock starts now
                meta.kv.txn([unchanged(kv)], [Put(kv.key, encode({**rec, "tt": meta.tso.now()}))])
            elif window > 0 and now - physical_ms(rec["tt"]) > 2 * window * 1000:
                calls = [int(c) for c in rec.get("calls", {})]
                top = max([int(rec.get("floor", 0)), int(rec.get("seq", 0)) >> CALL_BITS, *calls])
                if 0 < min([int(rec.get("floor") or top), *calls]) < CLOCK_BASE:
                    if calls or rec.get("floor") != top:
                        meta.kv.txn([unchanged(kv)], [Put(kv.key, encode(
                            {"calls": {}, "floor": top, "seq": rec.get("seq", 0), "tt": rec["tt"],
                             "w": window, "name": rec.get("name", "")}))])
                        changed += 1
                else:
                    meta.kv.txn([unchanged(kv)], [Delete(kv.key)])
                    changed += 1
        except Conflict:   # the producer committed meanwhile: it is alive
            pass
    return changed


def seal_up_to(meta, pchannel: str, ts: int) -> int:
    """Make the log of `pchannel` whole up to `ts`: from now on no commit carries a tick at
    or below it. A commit's ticks are reserved before its etcd txn, so one on its way (tick
    reserved, txn not yet sent) may still land BELOW the log's last tick as read now; a
    reader that takes the log as all there is up to `ts` (a restore to a time of this
    store's log, past its last tick) seals it first: ONE txn guarded on the log record,
    sealed_tt = ts (the writer reserves above floor_tt, and a commit that read the record
    before fails its compare and reserves again). No write when the log's last tick or
    an earlier seal is already at or past `ts` (ticks rise in log order). Returns the
    record's floor tick after it."""
    log = WalLog(meta, None, pchannel)
    for _ in range(100):
        st = log.state()
        if st.floor_tt >= ts:
            return st.floor_tt
        try:
            meta.kv.txn([unchanged(st.kv) if st.kv is not None else absent(log.log_key)],
                        [Put(log.log_key, replace(st, sealed_tt=ts, kv=None).encoded())])
            return ts
        except Conflict:   # a commit came first: read again (its ticks may still lie below ts)
            continue
    raise Conflict(f"WAL {pchannel}: could not seal the log at tick {ts} after 100 attempts (commits racing)")
