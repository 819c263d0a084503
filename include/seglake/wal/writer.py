"""An idempotent producer on one pchannel's shared log. Many producers (processes,
clients, DAG tasks, a drop) append to one log at once; none fences another (only a
newer holder of the same producer id fences the older one).

One file on purpose (~830 lines): the producer's queue, its writer thread and its
committer thread share one state machine (sequence numbers, the pending fragment, the
commit order); the idempotence rule holds only across all three together. The producer
record's rules, its holder and call numbers live in wal/producers.py.

    append(msgs, seq): validate -> queue -> [writer thread] encode one fragment with
        RELATIVE ticks -> write it under a fresh name (durable) -> [committer thread, FIFO]
        ONE etcd txn: log record unchanged -> log.last = n, last_tt; index record n
        (key, size, crc32c, tt0, span); this producer's record (seq) -> acknowledge

Guarantees
- Validation happens before anything is queued: a bad message fails the whole call and
  nothing of it is appended. One call's messages land in one fragment (all or none).
- Producers never fence each other: a lost commit race re-reads the log and commits the
  same file at the next place, with ticks above the new last tick. Ticks come from the
  one global TSO at commit (tt0 > log.last_tt), so they rise in log order.
- Idempotent, and an acknowledgement means written: every append carries (producer
  id, sequence number = call << 20 | append index, payload digest of its call). The
  producer's etcd record, written in the same transaction as the fragment, remembers
  whole calls (digest, the append indexes committed, their log places; the MAX_CALLS
  highest-numbered calls, so a call of any size and calls committed out of order are all
  remembered); the fragment's index record lists its calls' offsets. A retried append
  (same seq: after a timeout, an error, or from a new process using the same producer
  id) returns the ids of its first commit and appends nothing -- only when its digest is
  the call's; another payload under a used seq is refused naming both digests. A call
  below the record's floor, or numbered by its time (client calls) and older than the
  retry window with no record remembering it, is refused: never appended twice.
- One holder per named producer id (Holder): a client claims it, every commit compares
  the claim, so an older holder is fenced (ProducerFenced) instead of being handed
  another process's commits. Claims live on the holder's lease; a named id's records
  have none: wal.log.expire_producers removes them two windows (wal_producer_expiry)
  after their last commit, judged by the TSO, which it moves past that instant first;
  a fresh id's live on the lease (FRESH_WINDOW) and go at its client's close. A call no
  record remembers is judged again at commit by the commit's linearizable tick.
- A commit compares the collection record each of its messages was judged on: a drop
  begun since (Created -> Dropping) refuses the call; no insert is acknowledged after it.
- Durable before visible: the fragment is synced (local) / stored (S3) before the etcd
  commit; an acknowledged append survives SIGKILL. A fragment written more than
  MAX_COMMIT_DELAY ago is never committed (GC may reclaim unreferenced files after its
  tolerance, whose floor is far above it).
- A failed commit fails every call still in the pipeline with a retriable error (the
  state is reset to what etcd holds); retrying them is safe (idempotent).
- Transactions (one vchannel each, as in Milvus) are tracked with the ticks they get:
  a call is refused whole (ValidationError, nothing appended) when it holds a body or
  CommitTxn of a txn that is not open on this producer (never begun, already ended,
  begun before a takeover, or its vchannel dropped), a body on another vchannel than
  its BeginTxn, a BeginTxn of an open txn id, or a body or commit whose tick is at or
  past the txn's expiry (last message tick + keepalive). A RollbackTxn is always
  accepted. A CommitTxn of k bodies takes k+1 ticks: the scanner gives the bodies the k
  ticks just below the commit's, in their order (wal/txn.py).
- The term is the log's: only a takeover (`takeover()`, a new owner, the lifetime
  state machine of wal/lifetime.py) bumps it; it ends every open txn begun before it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace

from seglake.errors import ClockSkewError, Conflict, SeglakeError, StateError, Unavailable, ValidationError
from seglake.meta import keys as keymod
from seglake.meta.alloc import compose_ts
from seglake.meta.catalog import CREATED, DROPPED, DROPPING, pchannel_of
from seglake.meta.codec import decode, encode
from seglake.meta.kv import KeyValue, Put, absent, retry_on_conflict, unchanged
from seglake.storage import layout
from seglake.wal import message as M
from seglake.wal.log import (FragRecord, LogState, TermRecord, WalLog, check_wal_settings,
                             encode_fragment_parts, parts_checksum, put_exclusive)
from seglake.wal.message import Message, MessageId
from seglake.wal.producers import (CALL_BITS, INDEX_MASK, MAX_CALL, MAX_CALLS, Holder, ProducerFenced, _in_ranges,
                                   _record, _remember, call_ms, clock_call, future_call, now_ms,
                                   payload_digest)

MAX_INFLIGHT = 4
PIPELINE_DEPTH = 2        # fragments written ahead of their commit
COLLECTION_CACHE_SECONDS = 1.0
MAX_COMMIT_DELAY = 60.0   # seconds between a fragment's write and its commit, at most
MAX_TXN_KEEPALIVE_MS = 3600 * 1000


class ExpiredTermError(StateError):
    """A takeover at a term that is not above the pchannel's current term."""


class Retry(Unavailable):
    """Not committed: the call may be retried as is (same sequence number)."""


@dataclass
class _Request:
    """One append call: its messages, their bodies already serialized (by the caller's
    thread, overlapping the writer's I/O), and the outcome once committed."""

    messages: list[Message]
    bodies: list[memoryview]
    size: int
    seq: int
    digest: str = ""          # of the call (given by the caller) or of this append alone
    colls: dict = field(default_factory=dict)   # collection id -> the record its messages were judged on
    done: threading.Event = field(default_factory=threading.Event)
    ids: list[MessageId] | None = None
    error: BaseException | None = None

    def result(self, timeout: float | None = 60.0) -> list[MessageId]:
        if not self.done.wait(timeout):
            raise Unavailable(f"WAL append not acknowledged within {timeout} s (it may still commit; "
                              f"retrying with the same sequence number is safe)")
        if self.error is not None:
            raise self.error
        return self.ids

    def finish(self, ids=None, error=None) -> None:
        if not self.done.is_set():
            self.ids, self.error = ids, error
            self.done.set()


@dataclass
class _Txn:
    vchannel: str
    keepalive: int      # hybrid-timestamp units
    expires: int        # tick at or after which nothing of it is accepted
    term: int
    bodies: int = 0


@dataclass
class _Fragment:
    """One encoded and written fragment waiting for its commit."""

    reqs: list[_Request]
    offsets: list[tuple[int, int]]            # per request: (first offset, message count)
    txn_msgs: list[tuple[Message, int]]       # (message, relative tick) the txn state sees
    key: str
    size: int
    crc: int
    records: int
    span: int
    written_at: float
    rels: dict = field(default_factory=dict)   # per request seq: its first message's relative tick


def takeover(meta, pchannel: str, *, term: int | None = None, name: str = "") -> int:
    """Bump the pchannel's term (default: current + 1) with one CAS: a new owner. Every
    open transaction begun under an older term ends (its commit is refused). Producers
    are not fenced: they go on appending at the new term. ExpiredTermError when `term`
    is not above the current one."""
    log = WalLog(meta, None, pchannel)
    name = name or f"{socket.gethostname()}:{os.getpid()}"

    def attempt() -> int:
        tkv, lkv = meta.kv.get(log.term_key), meta.kv.get(log.log_key)
        cur = TermRecord.from_kv(tkv)
        st = LogState.from_kv(lkv)
        new = max(cur.term, st.term) + 1 if term is None else term
        if isinstance(new, bool) or not isinstance(new, int) or new <= max(cur.term, st.term):
            raise ExpiredTermError(f"pchannel {pchannel}: expired term {new!r}, the current term is "
                                   f"{max(cur.term, st.term)}")
        rec = encode({"term": new, "writer": name, "opened_at": time.time()})
        ops = [Put(log.term_key, rec)]
        if lkv is not None:   # the log record carries the term every commit compares
            ops.append(Put(log.log_key, replace(st, term=new).encoded()))
        meta.kv.txn([unchanged(tkv) if tkv else absent(log.term_key),
                     unchanged(lkv) if lkv else absent(log.log_key)], ops)
        return new
    return retry_on_conflict(attempt, f"take over pchannel {pchannel}")


class WalWriter:
    """A producer on one pchannel. Use `WalWriter.open(...)`."""

    def __init__(self, log: WalLog, state: LogState, settings, *, producer_id: str, prod_kv: KeyValue | None,
                 clock=time.time, name: str = "", holder: Holder | None = None):
        check_wal_settings(settings)
        self.log, self.meta, self.store = log, log.meta, log.store
        self.pchannel = log.pchannel
        self.settings, self.clock, self.name = settings, clock, name
        self.producer_id = producer_id
        self.holder = holder or Holder(self.meta, producer_id, settings, named=False, name=name)
        self.prod_key = keymod.wal_producer(self.meta.keys, self.pchannel, producer_id)
        # the one global TSO; a given clock (tests: a skewed or jumping writer clock)
        # drives this producer's own allocator on the same etcd key
        if clock is time.time:
            self.tso = self.meta.tso
        else:
            from seglake.meta.alloc import TSO
            self.tso = TSO(self.meta.kv, self.meta.keys.alloc_tso(), clock=clock,
                           max_clock_skew=settings.max_clock_skew)
        # committed state (what etcd holds) ...
        self.state = state
        self._prod_kv = prod_kv
        self._prod = _record(prod_kv)
        self._txns: dict[int, _Txn] = {}
        # ... and the provisional state of fragments built but not yet committed
        self._p_txns: dict[int, _Txn] = {}
        self._p_inflight: set[int] = set()   # seqs built into fragments not yet committed
        # txn fragments whose commit outcome was never learned: a later re-read that finds
        # them committed applies their txn state (a BeginTxn whose answer was lost opened its txn)
        self._unresolved: dict[str, _Fragment] = {}
        self._last_call = 0
        self._seq_lock = threading.Lock()
        self._queue: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._colls: dict[int, tuple[float, object, KeyValue]] = {}
        self._places: dict[int, dict[int, list[MessageId]]] = {}   # call -> seq -> ids (read from the index)
        self._epoch = 0     # bumped at every reset: fragments built before it are failed
        self._plock = threading.Lock()   # the provisional state: built (writer) vs reset (committer)
        self._stale = False
        self._committing = 0   # fragments handed to the committer, not yet answered
        self.commits = self.races = 0
        self._thread = threading.Thread(target=self._run, name=f"wal-writer-{self.pchannel}", daemon=True)
        self._thread.start()

    # -- open ----------------------------------------------------------------------------
    @classmethod
    def open(cls, meta, store, pchannel: str, settings, *, term: int | None = None, producer_id: str | None = None,
             clock=time.time, name: str | None = None, holder: Holder | None = None) -> "WalWriter":
        """A producer on `pchannel`. `producer_id` (default: a fresh one) names it across
        retries and processes: a named id is claimed (Holder; a client's producers share
        its holder), fencing any older holder. `term` given: take the pchannel over at
        that term first (ExpiredTermError when it is not above the current one)."""
        check_wal_settings(settings)
        log = WalLog(meta, store, pchannel)
        name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        pid = producer_id or f"p-{uuid.uuid4().hex}"
        if not isinstance(pid, str) or not _valid_pid(pid):
            raise ValidationError(f"producer id must be 1..64 of [A-Za-z0-9._-], got {pid!r}")
        if term is not None:
            takeover(meta, pchannel, term=term, name=name)
        if holder is None:
            holder = Holder(meta, pid, settings, named=producer_id is not None, name=name)
        prod_kv = meta.kv.get(keymod.wal_producer(meta.keys, pchannel, pid))
        return cls(log, log.state(), settings, producer_id=pid, prod_kv=prod_kv, clock=clock, name=name,
                   holder=holder)

    @property
    def term(self) -> int:
        return self.state.term

    @property
    def last_time_tick(self) -> int:
        return self.state.last_tt

    def next_seq(self) -> int:
        """A fresh sequence number for a new call (retries reuse the call's own): the
        first append of a clock-numbered call."""
        with self._seq_lock:
            self._last_call = clock_call(self.tso, self._last_call, self.clock)
            return self._last_call << CALL_BITS

    # -- append -------------------------------------------------------------------------------
    def append(self, messages: list[Message] | Message, timeout: float | None = 60.0, *,
               seq: int | None = None) -> list[MessageId]:
        """Validate, then append all `messages` atomically; returns their ids once durable
        and committed. Raises ValidationError (nothing appended) or Retry (not committed;
        a retry with the same `seq` is safe)."""
        return self.append_async(messages, seq=seq).result(timeout)

    def append_async(self, messages: list[Message] | Message, *, seq: int | None = None,
                     digest: str | None = None) -> _Request:
        """Validate and queue; `.result()` waits for the acknowledgement. At most
        MAX_INFLIGHT calls are queued per producer (the caller blocks beyond that).
        `seq` = call << CALL_BITS | append index (next_seq(): a new call of one append);
        `digest`: the payload digest of the whole call this append belongs to (a call of
        several appends must give it; default: this append's own, so appends numbered
        as one call without it are refused as another payload under a used call)."""
        msgs = [messages] if isinstance(messages, Message) else list(messages)
        if not msgs:
            raise ValidationError("append needs at least one message")
        if seq is None:
            seq = self.next_seq()
        elif isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < MAX_CALL << CALL_BITS:
            raise ValidationError(f"sequence number must be an int in 1..2**62, got {seq!r}")
        colls: dict[int, KeyValue] = {}
        msgs = [self._validate(m, colls) for m in msgs]
        bodies = [m.body_bytes() for m in msgs]
        req = _Request(msgs, bodies, sum(128 + len(b) for b in bodies), seq,
                       digest or payload_digest(msgs, bodies), colls)
        with self._cond:
            while len(self._queue) >= MAX_INFLIGHT and not self._closed:
                self._cond.wait()
            if self._closed:
                raise SeglakeError(f"WAL producer on {self.pchannel} is closed")
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
        """The collection (cached briefly for validation); the commit compares the record
        it was judged on, so a drop begun since is never acknowledged past."""
        hit = self._colls.get(cid)
        now = time.monotonic()
        if hit is None or now - hit[0] > COLLECTION_CACHE_SECONDS:
            from seglake.meta.catalog import Collection
            kv = self.meta.kv.get(self.meta.keys.collection(cid))
            if kv is None:
                raise ValidationError(f"unknown collection id {cid}")
            self._colls[cid] = hit = (now, Collection.from_json(decode(kv.value, kv.key)), kv)
        return hit[1], hit[2]

    def _validate(self, m: Message, colls: dict) -> Message:
        """`m` checked (ValidationError otherwise); `colls` gets the collection record it
        was judged on."""
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
            if isinstance(ka, bool) or not isinstance(ka, int) or not 1 <= ka <= MAX_TXN_KEEPALIVE_MS:
                raise ValidationError(f"BeginTxn keepalive_ms must be in 1..{MAX_TXN_KEEPALIVE_MS}, got {ka!r}")
        if m.vchannel == "":
            if m.type != M.FLUSH:   # only a Flush may reach every vchannel of the pchannel
                raise ValidationError(f"{m.type} needs a vchannel (only Flush and TimeTick are broadcast)")
            return m
        if pchannel_of(m.vchannel) != self.pchannel:
            raise ValidationError(f"unknown vchannel {m.vchannel!r} on pchannel {self.pchannel}")
        if m.type in M.TXN_CONTROL and not (m.type == M.COMMIT_TXN and m.collection_id):
            return m   # (a CommitTxn naming its collection is judged on it: no commit once a drop began)
        coll, colls[m.collection_id] = self._collection(m.collection_id)
        _judge(coll, m)
        if m.type == M.INSERT:
            if m.body is None or m.body.num_rows == 0:
                raise ValidationError("Insert needs at least one row")
            if not m.partition_id:
                raise ValidationError("Insert needs a partition id")
            ts = m.props.get("upsert_ts")
            if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or not 0 < ts < 2**63):
                raise ValidationError(f"Insert upsert_ts must be a timestamp (a positive int), got {ts!r}")
            return replace(m, body=M.conform_batch(m.body, coll.schema))
        if m.type == M.DELETE:
            b = m.body
            if b is None or b.schema != M.DELETE_SCHEMA or b.num_rows == 0 or b.column(0).null_count:
                raise ValidationError("Delete needs primary keys (int64, no nulls)")
            ts = m.props.get(M.CALL_TS)
            if ts is not None and (isinstance(ts, bool) or not isinstance(ts, int) or not 0 < ts < 2**63):
                raise ValidationError(f"Delete {M.CALL_TS} must be a timestamp (a positive int), got {ts!r}")
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
            # group commit: while a commit is in flight, let the window fill; an idle
            # producer writes at once (a lone append does not wait for company)
            deadline = time.monotonic() + (s.wal_batch_time if self._committing else 0.0)
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
        """Writer thread: fragments are encoded and written in order; each is handed to
        the committer (one thread, FIFO) so fragment n+1 is written while n commits."""
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
                try:
                    frag, epoch = self._build(reqs)
                except BaseException as e:  # noqa: BLE001 - handed to every waiting caller
                    # nothing of these calls was committed: retrying them is safe (a clock
                    # too far behind the TSO is said as such: retrying at once cannot help)
                    keep = isinstance(e, (ValidationError, Retry, ClockSkewError, ProducerFenced))
                    self._reset(e if keep else Retry(
                        f"WAL {self.pchannel}: fragment not written ({type(e).__name__}: {e}); retry the call"),
                        reqs)
                    continue
                if frag is None:   # every call was answered without a write
                    continue
                with self._cond:
                    self._committing += 1
                inflight.append(committer.submit(self._commit_job, frag, epoch))
        finally:
            for f in inflight:
                f.result()
            committer.shutdown(wait=True)

    def _reset(self, error: BaseException, reqs: list[_Request] = ()) -> None:
        """After a failure: fail `reqs` and everything built but uncommitted (their
        fragments are never committed), return to what etcd holds."""
        with self._plock:
            self._epoch += 1
            self._stale = True   # what etcd holds may have moved (an unknown outcome): re-read first
            self._p_txns = {k: replace(v) for k, v in self._txns.items()}
            self._p_inflight.clear()
        for r in reqs:
            r.finish(error=error)

    def _est_tick(self, rel: int) -> int:
        return max(self.tso.now(), self.state.floor_tt + 1) + rel

    def _build(self, reqs: list[_Request]) -> tuple[_Fragment | None, int]:
        """Encode one fragment from the calls (relative ticks, ids unknown until commit);
        answer at once the calls that are retries of committed ones or refused; write the
        fragment under a fresh name, durably. Returns it with the epoch it was built in."""
        with self._plock:
            if self._stale:
                self._refresh()
                self._p_txns = {k: replace(v) for k, v in self._txns.items()}
                self._stale = False
            built = self._encode(reqs)
            epoch = self._epoch
        if built is None:
            return None, epoch
        taken, offsets, txn_msgs, records, rel, rels = built
        hint = self.state.last + 1
        parts = encode_fragment_parts(self.state.term, hint, records)
        size, crc = parts_checksum(parts)
        while True:
            key = layout.wal_fragment(self.pchannel, hint, os.urandom(6).hex())
            if put_exclusive(self.store, key, parts):
                break
        return _Fragment(taken, offsets, txn_msgs, key, size, crc, len(records), rel + 1, time.monotonic(),
                         rels=rels), epoch

    def _encode(self, reqs: list[_Request]):
        records, offsets, taken, txn_msgs, rels = [], [], [], [], {}
        rel, off = 0, 0
        base = self._est_tick(0)
        for r in reqs:
            if r.seq in self._p_inflight or not self._is_new(r):
                self._answer_retry(r)
                continue
            p_txns = {k: replace(v) for k, v in self._p_txns.items()}
            r_records, r_txn, r_rel, count = [], [], rel, 0
            t0 = self._prod["calls"].get(str(r.seq >> CALL_BITS), {}).get("t0")
            try:
                for m, body in zip(r.messages, r.bodies, strict=True):
                    if m.type == M.TIME_TICK:
                        continue   # the fragment's closing TimeTick confirms the call
                    if m.type == M.COMMIT_TXN:
                        t = p_txns.get(m.txn_id)
                        k = t.bodies if t is not None else 0
                        r_rel += k
                        m = replace(m, props={**m.props, "bodies": k})
                    if t0 and m.props.get("upsert_ts") not in (None, t0):   # a retry: the call's one ts
                        m = replace(m, props={**m.props, "upsert_ts": t0})
                    _txn_step(p_txns, m, base + r_rel, self.state.term)
                    if m.txn_id or m.type == M.DROP_COLLECTION:
                        r_txn.append((m, r_rel))
                    r_records.append(replace(m, time_tick=r_rel, term=0, id=None).encode_parts(body))
                    r_rel += 1
                    count += 1
            except ValidationError as e:   # this call only: nothing of it is written
                r.finish(error=e)
                continue
            self._p_txns = p_txns
            self._p_inflight.add(r.seq)
            records += r_records
            txn_msgs += r_txn
            offsets.append((off, count))
            rels[r.seq] = rel
            off += count
            rel = r_rel
            taken.append(r)
        if not taken:
            return None
        # the closing TimeTick confirms every message of the fragment
        records.append(replace(Message.time_tick_msg(), time_tick=rel, term=0).encode_parts())
        return taken, offsets, txn_msgs, records, rel, rels

    # -- the producer record: which calls committed -------------------------------------------
    def remembered(self, call: int) -> dict | None:
        """The producer record's entry of `call` ({"d": digest, "done": ..., "n": ...}), or
        None when it remembers no such call (as this producer last read or wrote it)."""
        return self._prod["calls"].get(str(call))

    @property
    def floor(self) -> int:
        """The producer record's floor (as this producer last read or wrote it)."""
        return int(self._prod["floor"])

    def forgotten(self, call: int) -> bool:
        """Whether `call` is at or below the record's floor and not remembered (refused here)."""
        return str(call) not in self._prod["calls"] and call <= self.floor

    def _is_new(self, r: _Request) -> bool:
        """Whether `r` is to be appended: not a committed append, not refused."""
        call, idx = r.seq >> CALL_BITS, r.seq & INDEX_MASK
        entry = self._prod["calls"].get(str(call))
        if self.holder.fenced is not None:
            return False
        if entry is not None:
            return entry["d"] == r.digest and not _in_ranges(entry["done"], idx)
        return not self._refusal(r)

    def _refusal(self, r: _Request, tick: int = 0) -> str:
        """Why `r`, of a call this record does not remember, cannot be appended ('' if it can),
        judged at `tick` (the commit's linearizable one) or, at build, by this process's clock:
        - at or below the record's floor: no longer remembered (a duplicate cannot be told);
        - client-numbered and older than the retry window: its record may have gone."""
        from seglake.meta.alloc import physical_ms

        call = r.seq >> CALL_BITS
        if call <= self._prod["floor"]:
            return (f"call {call} is at or below the producer record's floor (call {self._prod['floor']}): older "
                    f"than the last {MAX_CALLS} calls it remembers, or forgotten")
        now = physical_ms(tick) if tick else now_ms(self.tso, self.clock)
        made = call_ms(call)
        if made is not None:
            if not tick:
                ahead = future_call(call, now, self.settings.max_clock_skew)
                if ahead:
                    return ahead
            age = (now - made) / 1000.0
            if age > self.holder.window:
                return (f"call {call} was made {age:.0f} s ago, beyond the producer's retry window of "
                        f"{self.holder.window:g} s (its record may have expired)")
        return ""

    def _answer_retry(self, r: _Request) -> None:
        """A call not to append: fenced, refused (another payload under a used seq, or
        too old to tell), Retry while an earlier copy is in the pipeline, else the ids of
        its first commit."""
        call, idx = r.seq >> CALL_BITS, r.seq & INDEX_MASK
        entry = self._prod["calls"].get(str(call))
        if self.holder.fenced is not None:
            r.finish(error=self.holder.fenced)
        elif entry is not None and entry["d"] != r.digest:
            r.finish(error=ValidationError(
                f"producer {self.producer_id} on {self.pchannel}: seq {call} (append {idx}) was committed with "
                f"payload digest {entry['d']}, this call's digest is {r.digest}: another payload under a used "
                f"sequence number is refused (nothing appended); give a new call a new seq"))
        elif entry is not None and _in_ranges(entry["done"], idx):
            try:
                r.finish(ids=self._ids_of(r.seq))
            except SeglakeError as e:
                r.finish(error=Retry(f"WAL {self.pchannel}: seq {r.seq} is committed, its ids cannot be read "
                                     f"({e}); retry"))
        elif r.seq in self._p_inflight:   # an earlier copy of this call is being committed
            r.finish(error=Retry(f"producer {self.producer_id}: seq {r.seq} is being committed; retry"))
        else:
            r.finish(error=ValidationError(f"producer {self.producer_id} on {self.pchannel}: seq {call} (append "
                                           f"{idx}) refused: {self._refusal(r)}"))

    def _ids_of(self, seq: int) -> list[MessageId]:
        """The ids of a committed append, from the index records of the fragments its call
        went to (each lists its calls' places); [] when they were truncated away."""
        call = seq >> CALL_BITS
        places = self._places.get(call)
        if places is None or seq not in places:
            lo, hi = self._prod["calls"][str(call)]["n"]
            places = {}
            for kv in self.meta.kv.range(self.log.frags_prefix, start_after=self.log.frag_key(lo - 1),
                                         end=self.log.frag_key(hi + 1)):
                rec = FragRecord.from_kv(int(kv.key[len(self.log.frags_prefix):]), kv)
                if rec.producer != self.producer_id:
                    continue
                for q, first, count in rec.calls:
                    if q >> CALL_BITS == call:
                        places[q] = [MessageId(rec.term, rec.n, first + i) for i in range(count)]
            self._places = {call: places}
        return places.get(seq, [])

    def _place(self, seq: int) -> int | None:
        ids = self._ids_of(seq)
        return ids[0].fragment if ids else None

    def _commit_job(self, frag: _Fragment, epoch: int) -> None:
        try:
            self._commit_one(frag, epoch)
        finally:
            with self._cond:
                self._committing -= 1

    def _commit_one(self, frag: _Fragment, epoch: int) -> None:
        if epoch != self._epoch:   # built before a reset: never committed
            for r in frag.reqs:
                r.finish(error=Retry(f"WAL {self.pchannel}: an earlier fragment failed; retry the call"))
            return
        try:
            placed = self._commit(frag)
        except BaseException as e:  # noqa: BLE001
            if not isinstance(e, (Conflict, Retry, ValidationError, ProducerFenced)):
                self.holder.forget_lease()   # e.g. the lease ran out while idle: a new one next time
            if frag.txn_msgs and not isinstance(e, ValidationError):
                self._unresolved[frag.key] = frag
                while len(self._unresolved) > 64:
                    self._unresolved.pop(next(iter(self._unresolved)))
            # (a ValidationError here is a txn that expired between build and commit: the
            # retry refuses that call alone, the others of the fragment are innocent)
            err = e if isinstance(e, (Retry, ProducerFenced)) or (isinstance(e, SeglakeError) and not isinstance(
                e, (ValidationError, Unavailable, Conflict))) else \
                Retry(f"WAL {self.pchannel}: not committed ({type(e).__name__}: {e}); retry the call")
            self._reset(err, frag.reqs)
            return
        if placed is None:   # committed earlier, its answer lost: each call from its record entry
            for r in frag.reqs:
                self._answer_retry(r)
            return
        n, term = placed
        for r, (first, count) in zip(frag.reqs, frag.offsets, strict=True):
            r.finish(ids=[MessageId(term, n, first + i) for i in range(count)])

    def _commit(self, frag: _Fragment) -> tuple[int, int] | None:
        """ONE etcd txn per attempt: log record unchanged -> log, index record, producer
        record. A lost race re-reads and retries at the next place."""
        seqs = [r.seq for r in frag.reqs]
        for attempt in range(1000):
            if time.monotonic() - frag.written_at > MAX_COMMIT_DELAY:
                raise Retry(f"WAL {self.pchannel}: fragment {frag.key} waited over {MAX_COMMIT_DELAY:g} s "
                            f"for its commit; not committed, retry the call")
            st = self.state
            tt0 = self.tso.reserve(frag.span, above=st.floor_tt, linearizable=True)
            txns = {k: replace(v) for k, v in self._txns.items()}
            for m, rel in frag.txn_msgs:   # the exact ticks: refuse what a consumer would drop
                _txn_step(txns, m, tt0 + rel, st.term)
            n = st.last + 1
            places = tuple((r.seq, first, count) for r, (first, count) in zip(frag.reqs, frag.offsets, strict=True))
            rec = FragRecord(n, frag.key, frag.size, frag.crc, tt0, frag.span, frag.records, st.term,
                             self.producer_id, calls=places)
            # judged again by this commit's linearizable tick (the build judged by this
            # process's clock): a call no record remembers, made over a window before it, may
            # have had its record removed (expire_producers moves the TSO past that age first)
            # ... and by the record's floor as just read: a record shrunk to its floor (caller
            # numbers) or removed (_refresh: the floor past what this writer knew) since the
            # build no longer remembers a call this writer still held -- committing one of its
            # appends then made an entry without the others, and their retry appended twice
            stale = [why for r in frag.reqs if str(r.seq >> CALL_BITS) not in self._prod["calls"]
                     for why in [self._refusal(r, tt0)] if why]
            if stale:
                raise ValidationError(f"producer {self.producer_id} on {self.pchannel}: {stale[0]}; not appended")
            prod = _remember(self._prod, frag.reqs, n, self.name, tt0 + frag.span - 1, self.holder.live(),
                             window=self.holder.window, first_ticks={q: tt0 + x for q, x in frag.rels.items()})
            new = replace(st, last=n, last_tt=tt0 + frag.span - 1, bytes=st.bytes + frag.size,
                          records=st.records + frag.records, kv=None)
            colls = {cid: kv for r in frag.reqs for cid, kv in r.colls.items()}
            # the records these calls were judged on: a drop begun since fails the compare
            guards = [unchanged(st.kv) if st.kv else absent(self.log.log_key),
                      unchanged(self._prod_kv) if self._prod_kv else absent(self.prod_key),
                      *self.holder.guards(), *(unchanged(kv) for kv in colls.values())]
            ops = [Put(self.log.log_key, new.encoded()), Put(self.log.frag_key(n), encode(rec.to_json())),
                   Put(self.prod_key, encode(prod), self.holder.record_lease())]
            try:
                rev = self.meta.kv.txn(guards, ops)
            except (Conflict, Unavailable) as e:
                # a lost race, or an outcome unknown (etcd unreachable): re-read; if this
                # producer's record already holds these calls (an earlier attempt applied,
                # here or in a commit whose answer was lost before a retry), they are
                # committed: answer with that place, never append them again
                self._refresh()
                self._recheck_collections(frag.reqs)
                done = [q for q in seqs if self._done(q)]
                if len(done) == len(seqs):
                    return self._committed_at(frag, seqs)
                if done:   # some of these calls committed in another fragment: rebuild without them
                    raise Retry(f"WAL {self.pchannel}: calls {done} of producer {self.producer_id} were "
                                f"committed already; retry the others")
                self.races += isinstance(e, Conflict)
                continue
            new.kv = KeyValue(self.log.log_key, new.encoded(), rev, st.kv.create_revision if st.kv else rev,
                              (st.kv.version if st.kv else 0) + 1)
            self.state = new
            self._prod = prod
            self._prod_kv = KeyValue(self.prod_key, encode(prod), rev, rev, 0)
            self._places.clear()
            self._txns = txns
            with self._plock:
                self._p_inflight.difference_update(seqs)
            self.commits += 1
            return n, st.term
        raise Retry(f"WAL {self.pchannel}: 1000 commit races lost in a row; retry the call")

    def _refresh(self) -> None:
        """Re-read the log and this producer's record (after a lost race or an unknown
        outcome). A (producer, seq) is committed at most once whatever happens: every
        commit compares the producer record, and calls it already holds are answered
        from it, never appended again."""
        lkv = self.meta.kv.get(self.log.log_key)
        pkv = self.meta.kv.get(self.prod_key)
        self.holder.check()   # fenced: ProducerFenced, for good
        st = LogState.from_kv(lkv)
        prod = _record(pkv)
        if pkv is None:   # expired (idle past the window): what this process knew stays refused
            prod["floor"] = max(self._prod["floor"], *(int(c) for c in self._prod["calls"]), 0)
        if st.term > self.state.term:   # a takeover: txns begun before it are over
            self._txns = {k: v for k, v in self._txns.items() if v.term >= st.term}
        self.state, self._prod, self._prod_kv = st, prod, pkv
        self._places.clear()
        for key, frag in list(self._unresolved.items()):
            if self._done(frag.reqs[0].seq):
                n = self._place(frag.reqs[0].seq)
                if n is not None:
                    self._adopt(frag, n)   # (a failed read here keeps it for the next re-read)
                self._unresolved.pop(key, None)

    def _adopt(self, frag: _Fragment, n: int) -> int:
        """`frag`'s calls are in the producer record at log place `n` (a commit whose answer
        was lost): if fragment n is this one, apply the txn state its messages made, at the
        ticks the index record gives. Returns the place's term."""
        kv = self.meta.kv.get(self.log.frag_key(n))
        rec = None if kv is None else FragRecord.from_kv(n, kv)
        if rec is None or rec.key != frag.key:   # another copy of these calls committed, or truncated
            return self.state.term
        if frag.txn_msgs:
            txns = {k: replace(v) for k, v in self._txns.items()}
            try:
                for m, rel in frag.txn_msgs:
                    _txn_step(txns, m, rec.tt0 + rel, rec.term)
                self._txns = txns
            except ValidationError:   # what the scanner drops opened nothing
                pass
        return rec.term

    def _committed_at(self, frag: _Fragment, seqs: list[int]) -> None:
        """After an ambiguous commit: these calls are in the producer record (committed by
        an attempt whose answer was lost -- of this fragment, or of an earlier one built
        with other calls beside them): adopt the txn state that fragment made. The calls
        are then answered each from its own record entry (place, first, count), never
        with this fragment's offsets. Returns None (the caller's signal)."""
        with self._plock:
            self._p_inflight.difference_update(seqs)
        n = self._place(seqs[0])
        if n is not None:
            self._adopt(frag, n)
        self._unresolved.pop(frag.key, None)
        return None

    def _done(self, seq: int) -> bool:
        entry = self._prod["calls"].get(str(seq >> CALL_BITS))
        return entry is not None and _in_ranges(entry["done"], seq & INDEX_MASK)

    def _recheck_collections(self, reqs: list[_Request]) -> None:
        """After a lost compare: a collection record that changed since the calls' messages
        were judged is re-read and they are judged again on it. Still writable: the calls
        go on, compared with the new record. Not (a drop began): those calls are refused
        (ValidationError), the others of the fragment get Retry."""
        from seglake.meta.catalog import Collection

        current: dict[int, tuple] = {}
        refused = []
        for r in reqs:
            for cid, kv in r.colls.items():
                if cid not in current:
                    cur = self.meta.kv.get(kv.key)
                    current[cid] = (cur, None if cur is None else Collection.from_json(decode(cur.value, cur.key)))
                    self._colls.pop(cid, None)
                cur, coll = current[cid]
                if cur is not None and cur.mod_revision == kv.mod_revision:
                    continue
                try:
                    if coll is None:
                        raise ValidationError(f"collection id {cid} was removed")
                    for m in r.messages:
                        if m.collection_id == cid and m.vchannel:
                            _judge(coll, m)
                    r.colls[cid] = cur
                except ValidationError as e:
                    r.finish(error=e)
                    refused.append(r)
        if refused:
            raise Retry(f"WAL {self.pchannel}: {len(refused)} call(s) of this fragment were refused when a "
                        f"collection changed under them (a drop began); retry the others")


def _judge(coll, m: Message) -> None:
    """The checks of `m` that depend on its collection's record (ValidationError)."""
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


def _valid_pid(pid: str) -> bool:
    import re
    return re.fullmatch(r"[A-Za-z0-9._-]{1,64}", pid, re.ASCII) is not None


def _txn_step(txns: dict[int, _Txn], m: Message, tt: int, term: int) -> None:
    """Apply `m` (tick `tt`, log term `term`) to the open txns, as the scanner's txn
    buffer will; raise ValidationError for what it would drop (module docstring)."""
    for txn_id in [i for i, t in txns.items() if t.term < term]:   # a takeover ends them
        txns.pop(txn_id)
    if m.type == M.DROP_COLLECTION:   # a txn on a dropped vchannel can never commit
        for txn_id in [i for i, t in txns.items() if t.vchannel == m.vchannel]:
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
        txns[m.txn_id] = _Txn(m.vchannel, ka, tt + ka, term)
        return
    cur = txns.get(m.txn_id)
    if cur is None:
        raise ValidationError(f"{m.type} refused: txn {m.txn_id} is not open on this producer (never begun, "
                              f"already ended, its vchannel dropped, or begun before a takeover); nothing "
                              f"appended")
    if m.vchannel != cur.vchannel:
        raise ValidationError(f"{m.type} refused: txn {m.txn_id} is on vchannel {cur.vchannel}, not "
                              f"{m.vchannel} (a transaction spans one vchannel); nothing appended")
    if tt >= cur.expires:
        txns.pop(m.txn_id)
        raise ValidationError(f"{m.type} refused: txn {m.txn_id} expired (its keepalive passed since its last "
                              f"message); nothing of it will be consumed: roll back and retry")
    if m.type == M.COMMIT_TXN:
        txns.pop(m.txn_id)
    else:
        cur.bodies += 1
        cur.expires = max(cur.expires, tt + cur.keepalive)
