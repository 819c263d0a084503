"""A term-fenced writer of one pchannel's log.

    open: CAS {root}/wal/{p}/term  T -> T+1 (compare term AND log record unchanged)
    append(msgs): validate -> queue -> [group commit thread] assign ids and time ticks
        -> write fragment (exclusive create) -> ONE etcd txn: term unchanged since open
        AND log unchanged -> log.last = n -> acknowledge

Guarantees
- Validation happens before anything is queued: a bad message fails the whole call and
  nothing of it is appended. One call's messages land in one fragment (all or none).
- Fencing: every commit compares the term key's revision taken at open. Once a newer
  writer opened, an older writer's commit fails with Fenced, and its fragment (if the
  name was free) is never part of the log: the new writer skips the name as a hole.
- Durable before visible: the fragment is synced (local) / stored (S3) before the etcd
  commit that makes it part of the log; an acknowledged append survives SIGKILL.
  Fragment n+1 may be written while n commits (one committer thread, in order); a failed
  commit poisons the writer (every later append fails; reopen at a new term), so a
  fragment written after a failed one never becomes visible.
- Time ticks: strictly increasing per pchannel across writers and clock steps back:
  every tick is > the log's persisted high-water mark `last_tt`, which advances in the
  same transaction that commits the fragment. Every append call is followed, in its
  fragment, by a TimeTick that confirms it.
- Transactions: the writer mirrors the scanner's txn buffer with the ticks it assigns,
  so it never acknowledges what a consumer would drop. A call is refused whole
  (ValidationError, nothing appended) when it holds a body or CommitTxn of a txn that is
  not open on this writer (never begun, already ended, or begun under an older term:
  a failover ends every open txn, and a DropCollection every txn that touched its
  vchannel), a BeginTxn of an open txn id, or a body or commit
  whose tick is at or past the txn's expiry (last message tick + keepalive). A
  RollbackTxn is always accepted.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace

from seglake.errors import Conflict, NotFound, SeglakeError, StateError, Unavailable, ValidationError
from seglake.meta.alloc import compose_ts
from seglake.meta.catalog import CREATED, DROPPED, DROPPING, pchannel_of
from seglake.meta.kv import Compare, KeyValue, Put, absent, retry_on_conflict, unchanged
from seglake.wal import message as M
from seglake.wal.log import (Fenced, LogState, TermRecord, WalLog, check_wal_settings, encode_fragment_parts,
                             put_exclusive)
from seglake.wal.message import Message, MessageId

MAX_HOLES_PER_FRAGMENT = 64
MAX_INFLIGHT = 4
PIPELINE_DEPTH = 2   # fragments written ahead of their commit
COLLECTION_CACHE_SECONDS = 1.0


class ExpiredTermError(StateError):
    """Opening at a term that is not above the pchannel's current term."""


@dataclass
class _Request:
    """One append call: its messages, their bodies already serialized (by the caller's
    thread, overlapping the writer's I/O), and the outcome once committed."""

    messages: list[Message]
    bodies: list[memoryview]
    size: int
    done: threading.Event = field(default_factory=threading.Event)
    ids: list[MessageId] | None = None
    error: BaseException | None = None

    def result(self, timeout: float | None = 60.0) -> list[MessageId]:
        if not self.done.wait(timeout):
            raise Unavailable(f"WAL append not acknowledged within {timeout} s (it may still commit)")
        if self.error is not None:
            raise self.error
        return self.ids


class WalWriter:
    """Use `WalWriter.open(...)`; the constructor takes an already-won term."""

    def __init__(self, log: WalLog, term: int, term_rev: int, state: LogState, settings, *,
                 clock=time.time, name: str = ""):
        check_wal_settings(settings)
        self.log, self.meta, self.store = log, log.meta, log.store
        self.pchannel = log.pchannel
        self.term, self.term_rev = term, term_rev
        self.state = state
        self.settings = settings
        self.clock = clock
        self.name = name
        self._last_tt = state.last_tt
        self._next_n = state.last + 1
        self._pending_holes: list[int] = []   # names lost to a failed write, recorded at the next commit
        self._broken: BaseException | None = None
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._fenced: Fenced | None = None
        self._colls: dict[int, tuple[float, object]] = {}
        # open txn id -> (keepalive ts, expiry tick, vchannels it touched)
        self._txns: dict[int, tuple[int, int, frozenset]] = {}
        self._thread = threading.Thread(target=self._run, name=f"wal-writer-{self.pchannel}", daemon=True)
        self._thread.start()

    # -- open ----------------------------------------------------------------------------
    @classmethod
    def open(cls, meta, store, pchannel: str, settings, *, term: int | None = None,
             clock=time.time, name: str | None = None) -> "WalWriter":
        """Take the pchannel at `term` (default: current + 1) with one CAS. A term that is
        not above the current one is refused (ExpiredTermError)."""
        check_wal_settings(settings)   # before the term is taken
        log = WalLog(meta, store, pchannel)
        name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        from seglake.meta.codec import encode

        def attempt() -> "WalWriter":
            tkv, lkv = meta.kv.get(log.term_key), meta.kv.get(log.log_key)
            cur = TermRecord.from_kv(tkv)
            new = cur.term + 1 if term is None else term
            if isinstance(new, bool) or not isinstance(new, int) or new <= cur.term:
                raise ExpiredTermError(f"pchannel {pchannel}: expired term {new!r}, the current term is {cur.term}")
            rec = encode({"term": new, "writer": name, "opened_at": time.time()})
            # the log record is compared too: the high-water mark read here is final
            guards = [unchanged(tkv) if tkv else absent(log.term_key),
                      unchanged(lkv) if lkv else absent(log.log_key)]
            rev = meta.kv.txn(guards, [Put(log.term_key, rec)])
            return cls(log, new, rev, LogState.from_kv(lkv), settings, clock=clock, name=name)
        # a concurrent commit or open changed a record: re-read (an explicit term that
        # another writer reached meanwhile then fails as expired)
        return retry_on_conflict(attempt, f"open WAL writer on {pchannel}")

    @property
    def fenced(self) -> bool:
        return self._fenced is not None

    @property
    def last_time_tick(self) -> int:
        return self._last_tt

    # -- append -------------------------------------------------------------------------------
    def append(self, messages: list[Message] | Message, timeout: float | None = 60.0) -> list[MessageId]:
        """Validate, then append all `messages` atomically; returns their ids once durable
        and committed. Raises ValidationError (nothing appended) or Fenced."""
        return self.append_async(messages).result(timeout)

    def append_async(self, messages: list[Message] | Message) -> _Request:
        """Validate and queue; `.result()` waits for the acknowledgement. At most
        MAX_INFLIGHT calls are queued per writer (the caller blocks beyond that)."""
        msgs = [messages] if isinstance(messages, Message) else list(messages)
        if not msgs:
            raise ValidationError("append needs at least one message")
        msgs = [self._validate(m) for m in msgs]
        bodies = [m.body_bytes() for m in msgs]
        req = _Request(msgs, bodies, sum(128 + len(b) for b in bodies))
        with self._cond:
            while len(self._queue) >= MAX_INFLIGHT and self._broken is None and not self._closed:
                self._cond.wait()
            if self._broken is not None:
                raise self._broken
            if self._closed:
                raise SeglakeError(f"WAL writer of {self.pchannel} is closed")
            self._queue.append(req)
            self._cond.notify_all()
        return req

    def close(self) -> None:
        """Stop accepting appends, commit what is queued, stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def __enter__(self) -> "WalWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- validation --------------------------------------------------------------------------
    def _collection(self, cid: int):
        hit = self._colls.get(cid)
        now = time.monotonic()
        if hit is None or now - hit[0] > COLLECTION_CACHE_SECONDS:
            try:
                coll = self.meta.catalog.get(cid)
            except NotFound:
                raise ValidationError(f"unknown collection id {cid}") from None
            self._colls[cid] = hit = (now, coll)
        return hit[1]

    def _validate(self, m: Message) -> Message:
        if m.id is not None or m.term:
            raise ValidationError(f"{m.type}: a message to append must not carry an id or term")
        if m.type == M.TIME_TICK:
            if m.vchannel:
                raise ValidationError("a TimeTick is never addressed to a vchannel")
            return m
        if m.type in M.TXN_CONTROL or m.txn_id:
            if isinstance(m.txn_id, bool) or not isinstance(m.txn_id, int) or m.txn_id <= 0:
                raise ValidationError(f"{m.type}: txn id must be a positive int, got {m.txn_id!r}")
            if m.type not in M.TXN_CONTROL and m.type not in M.TXN_BODY:
                raise ValidationError(f"{m.type} cannot be part of a transaction")
        if m.type == M.BEGIN_TXN:
            ka = m.props.get("keepalive_ms")
            if isinstance(ka, bool) or not isinstance(ka, int) or not 1 <= ka <= 7 * 86400 * 1000:
                raise ValidationError(f"BeginTxn keepalive_ms must be in 1..{7 * 86400 * 1000}, got {ka!r}")
        if m.vchannel == "":
            if m.type != M.FLUSH:   # only a Flush may reach every vchannel of the pchannel
                raise ValidationError(f"{m.type} needs a vchannel (only Flush and TimeTick are broadcast)")
            return m
        if pchannel_of(m.vchannel) != self.pchannel:
            raise ValidationError(f"unknown vchannel {m.vchannel!r} on pchannel {self.pchannel}")
        if m.type in M.TXN_CONTROL:
            return m
        coll = self._collection(m.collection_id)
        if m.vchannel not in coll.vchannels:
            raise ValidationError(f"unknown vchannel {m.vchannel!r}: collection {coll.name!r} has "
                                  f"{', '.join(coll.vchannels)}")
        if m.vchannel in coll.properties.get("released_vchannels", ()):
            raise ValidationError(f"{m.type} refused: vchannel {m.vchannel!r} was released by the drop "
                                  f"of collection {coll.name!r} (id {coll.collection_id})")
        allowed = {M.DROP_COLLECTION: (CREATED, DROPPING)}.get(m.type, (CREATED,))
        if coll.state not in allowed:
            raise ValidationError(f"{m.type} refused: collection {coll.name!r} is {coll.state}"
                                  + (" (its channels are released)" if coll.state == DROPPED else ""))
        if m.type in (M.INSERT, M.DELETE, M.CREATE_PARTITION, M.DROP_PARTITION) and m.partition_id:
            if m.partition_id not in {p.partition_id for p in coll.partitions}:
                raise ValidationError(f"unknown partition id {m.partition_id} in collection {coll.name!r}")
        if m.type == M.INSERT:
            if m.body is None or m.body.num_rows == 0:
                raise ValidationError("Insert needs at least one row")
            if not m.partition_id:
                raise ValidationError("Insert needs a partition id")
            return replace(m, body=M.conform_batch(m.body, coll.schema))
        if m.type == M.DELETE:
            b = m.body
            if b is None or b.schema != M.DELETE_SCHEMA or b.num_rows == 0 or b.column(0).null_count:
                raise ValidationError("Delete needs primary keys (int64, no nulls) and timestamps")
        return m

    # -- group commit ------------------------------------------------------------------------
    def _take(self) -> list[_Request] | None:
        """Wait for work, let the batching window fill, and take one fragment's worth."""
        s = self.settings
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = time.monotonic() + s.wal_batch_time
            while not self._closed:
                size = sum(r.size for r in self._queue)
                count = sum(len(r.messages) for r in self._queue)
                left = deadline - time.monotonic()
                if size >= s.wal_fragment_bytes or count >= s.wal_fragment_records or left <= 0:
                    break
                self._cond.wait(left)
            taken, size, count = [], 0, 0
            while self._queue:
                r = self._queue[0]
                if taken and (size + r.size > s.wal_fragment_bytes
                              or count + len(r.messages) > s.wal_fragment_records):
                    break
                taken.append(self._queue.popleft())
                size += r.size
                count += len(r.messages)
            self._cond.notify_all()   # room for blocked append_async callers
            return taken

    def _run(self) -> None:
        """Writer thread: fragments are written in order; each is handed to the committer
        (one thread, FIFO) so fragment n+1 is written while n commits."""
        from concurrent.futures import ThreadPoolExecutor

        committer = ThreadPoolExecutor(1, thread_name_prefix=f"wal-commit-{self.pchannel}")
        inflight: deque = deque()
        try:
            while True:
                reqs = self._take()
                if reqs is None:
                    return
                while len(inflight) >= PIPELINE_DEPTH:
                    inflight.popleft().result()
                if self._broken is not None:
                    self._fail(reqs, self._broken)
                    continue
                try:
                    job = self._write(reqs)
                except BaseException as e:  # noqa: BLE001 - handed to every waiting caller
                    if isinstance(e, Fenced):
                        self._poison(e)
                    self._fail(reqs, e)
                    continue
                if job is None:   # every call was refused
                    continue
                inflight.append(committer.submit(self._commit_job, *job))
        finally:
            for f in inflight:
                f.result()
            committer.shutdown(wait=True)

    def _fail(self, reqs: list[_Request], e: BaseException) -> None:
        for r in reqs:
            if not r.done.is_set():   # a call refused earlier keeps its own error
                r.error = e
                r.done.set()

    def _poison(self, e: BaseException) -> None:
        """After a failed commit (or a fence) nothing more is appended by this writer:
        fragments written after the failed one must never become visible. Reopen (a
        new term) to continue."""
        with self._cond:
            if self._broken is None:
                self._broken = e
            if isinstance(e, Fenced) and self._fenced is None:
                self._fenced = e
            rest = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        self._fail(rest, e)

    def _commit_job(self, reqs, ids, n, records, nbytes, last_tt, holes) -> None:
        if self._broken is not None:
            self._fail(reqs, self._broken)
            return
        try:
            self._commit(n, records, nbytes, last_tt, holes)
        except BaseException as e:  # noqa: BLE001
            self._poison(e)
            self._fail(reqs, e)
            return
        for r, rid in zip(reqs, ids, strict=True):
            r.ids = rid
            r.done.set()

    def _tick(self) -> int:
        tt = max(compose_ts(int(self.clock() * 1000)), self._last_tt + 1)
        self._last_tt = tt
        return tt

    def _write(self, reqs: list[_Request]) -> tuple:
        """Assign ids and ticks, write fragment `n` durably under an exclusive name;
        a taken name (someone's uncommitted file) becomes a hole and the next is tried."""
        if self._fenced:
            raise self._fenced
        n = self._next_n
        holes: list[int] = []
        for _ in range(MAX_HOLES_PER_FRAGMENT):
            saved_tt = self._last_tt
            records, ids, offset, taken, txns = [], [], 0, [], dict(self._txns)
            for r in reqs:
                if r.done.is_set():   # refused in an earlier attempt
                    continue
                r_tt, r_txns, r_records, rid = self._last_tt, dict(txns), [], []
                try:
                    for m, body in zip(r.messages, r.bodies, strict=True):
                        mid = MessageId(self.term, n, offset + len(rid))
                        tt = self._tick()
                        _txn_step(r_txns, m, tt)
                        r_records.append(replace(m, time_tick=tt, term=self.term, id=mid).encode_parts(body))
                        rid.append(mid)
                except ValidationError as e:   # this call only: nothing of it is written
                    self._last_tt = r_tt
                    self._fail([r], e)
                    continue
                txns = r_txns
                records += r_records
                offset += len(rid)
                taken.append(r)
                ids.append(rid)
                # every append call is followed by a TimeTick that confirms it
                records.append(replace(Message.time_tick_msg(), time_tick=self._tick(), term=self.term,
                                       id=MessageId(self.term, n, offset)).encode_parts())
                offset += 1
            if not taken:
                return None
            parts = encode_fragment_parts(self.term, n, records)
            try:
                created = put_exclusive(self.store, self.log.fragment_key(n), parts)
            except BaseException:
                self._last_tt = saved_tt
                self._next_n = n + 1   # the name may or may not exist now: never reuse it
                self._pending_holes.append(n)
                raise
            if created:
                self._next_n = n + 1
                self._txns = {k: v for k, v in txns.items() if v[1] > self._last_tt}   # expired ones end
                holes, self._pending_holes = self._pending_holes + holes, []
                return taken, ids, n, len(records), sum(len(p) for p in parts), self._last_tt, holes
            self._last_tt = saved_tt
            self._check_term()
            holes.append(n)
            n += 1
        raise SeglakeError(f"WAL {self.pchannel}: {MAX_HOLES_PER_FRAGMENT} fragment names taken after {n}")

    def _check_term(self) -> None:
        cur = TermRecord.from_kv(self.meta.kv.get(self.log.term_key))
        if cur.kv is None or cur.kv.mod_revision != self.term_rev:
            raise Fenced(f"WAL writer of {self.pchannel} at term {self.term} is fenced: "
                         f"term {cur.term} was opened by {cur.writer or '?'}")

    def _commit(self, n: int, records: int, nbytes: int, last_tt: int, holes: list[int]) -> None:
        """ONE etcd txn: term unchanged since open AND log record unchanged -> last = n."""
        st = self.state
        new = LogState(first=st.first, last=n, holes=sorted(set(st.holes) | {h for h in holes if h > st.last}),
                       last_tt=last_tt, bytes=st.bytes + nbytes, records=st.records + records,
                       term=self.term, truncated_before=st.truncated_before)
        guards = [Compare(self.log.term_key, "mod", "==", self.term_rev),
                  unchanged(st.kv) if st.kv else absent(self.log.log_key)]
        try:
            rev = self.meta.kv.txn(guards, [Put(self.log.log_key, new.encoded())])
        except Conflict:
            self._check_term()
            raise Conflict(f"WAL {self.pchannel}: the log record changed under writer term {self.term}") from None
        except Unavailable:
            back = self.log.state()   # the outcome is unknown: read back what etcd holds
            if not (back.last == n and back.term == self.term):
                raise
            rev = back.kv.mod_revision
        new.kv = KeyValue(self.log.log_key, new.encoded(), rev, st.kv.create_revision if st.kv else rev,
                          (st.kv.version if st.kv else 0) + 1)
        self.state = new


def _txn_step(txns: dict[int, tuple[int, int]], m: Message, tt: int) -> None:
    """Apply `m` (tick `tt`) to the open txns, as the scanner's txn buffer will; raise
    ValidationError for what it would drop (see the module docstring)."""
    if m.type == M.DROP_COLLECTION:   # a txn touching a dropped vchannel can never commit
        for txn_id in [i for i, t in txns.items() if m.vchannel in t[2]]:
            txns.pop(txn_id)
    if not m.txn_id:
        return
    if m.type == M.ROLLBACK_TXN:
        txns.pop(m.txn_id, None)
        return
    if m.type == M.BEGIN_TXN:
        if m.txn_id in txns:
            raise ValidationError(f"BeginTxn refused: txn {m.txn_id} is already open")
        ka = compose_ts(int(m.props["keepalive_ms"]))
        txns[m.txn_id] = (ka, tt + ka, frozenset((m.vchannel,)))
        return
    cur = txns.get(m.txn_id)
    if cur is None:
        raise ValidationError(f"{m.type} refused: txn {m.txn_id} is not open on this writer (never begun, "
                              f"already ended, a vchannel it touched dropped, or begun under an older "
                              f"term); nothing appended")
    ka, expires, vchannels = cur
    if tt >= expires:
        txns.pop(m.txn_id)
        raise ValidationError(f"{m.type} refused: txn {m.txn_id} expired (its keepalive passed since its last "
                              f"message); nothing of it will be consumed: roll back and retry")
    if m.type == M.COMMIT_TXN:
        txns.pop(m.txn_id)
    else:
        txns[m.txn_id] = (ka, max(expires, tt + ka), vchannels | {m.vchannel})
