"""Ingest through the WAL: a Python API for DAG tasks and programs, used by the CLI.

One file on purpose (~440 lines): the ingest API (insert, delete, transactions, the
multi-pchannel append and its AppendIncomplete) and the status read it is used with.

    client = WalClient(meta, store, settings)
    client.insert("coll", table, partition="_default", txn=False)
    client.delete("coll", [1, 2, 3])
    client.close()

- Rows are routed to the collection's vchannels by a hash of the primary key; each
  batch (at most `batch_rows` rows) is one append per pchannel, committed whole in one
  fragment and followed there by a TimeTick. Batches are queued so that serializing
  the next overlaps writing the previous (group commit may put several in a fragment).
- A collection gets a CreateCollection message on each of its vchannels before its
  first data message (create_collection() does it at creation; insert/delete make sure
  of it for collections made elsewhere). A duplicate CreateCollection is harmless: the
  flusher ignores it.
- txn=True: BeginTxn, the batches, CommitTxn on ONE vchannel (as in Milvus): rows that
  route to several vchannels are refused before anything is appended. On any error
  RollbackTxn is appended and the error re-raised (a failed txn call changed nothing:
  retry it as a new call).
- The client holds one producer per pchannel it touches (wal/writer.py); producers of
  any number of clients and processes append side by side, none fences another. A
  named `producer_id` has one live holder: the newest client claims it and the older
  one is fenced (ProducerFenced from its next commit on, never another's commit).
- Idempotent calls: each call has a sequence number (`seq`, default: a new one that
  carries its time) and a payload digest; its appends are numbered from it. A
  retriable failure is retried inside the call with the same numbers. A call that still
  fails raises AppendIncomplete naming the pchannels that committed; calling again with
  `seq=err.result.seq` and the same rows (same client, or a new one with the same
  `producer_id`) appends the rest and nothing twice, within the retry window
  (`wal_producer_expiry` after the producer's last commit; later it is refused). Other
  rows under a used seq are refused naming both digests.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from seglake.meta import codec
from seglake.errors import Conflict, SeglakeError, ValidationError
from seglake.meta import keys as keymod
from seglake.meta.catalog import DEFAULT_DB, DEFAULT_PARTITION, pchannel_of
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Put
from seglake.wal import message as M
from seglake.wal.log import check_wal_settings
from seglake.wal.message import Message, MessageId
from seglake.wal.producers import (CALL_BITS, MAX_CALL, Holder, ProducerFenced, call_at, call_ms, clock_call,
                                   future_call, now_ms)
from seglake.wal.writer import Retry, WalWriter, _valid_pid

MAX_BATCH_ROWS = 1_000_000
APPENDS_PER_CALL = 1 << CALL_BITS   # a call's appends are numbered call * APPENDS_PER_CALL + i
ROLLBACK_APPEND = APPENDS_PER_CALL - 1   # a txn call's RollbackTxn: its own number, never a CommitTxn's
NUMBERS_AHEAD = 200           # a named client reserves its call numbers this many (~0.2 s) at a time
ISSUED_KEPT = 4096            # a client with a fresh producer id recognises this many of its own calls
RETRIES = 6                   # a retriable append is retried this often (same seq)
ANNOUNCED = "wal_announced"
ROWS_BEFORE_LOG = "rows_before_log"   # set with ANNOUNCED when the collection already had segments (written
                                      # directly: `demo seed`, a pre-WAL store): rows its log does not hold


@dataclass
class IngestResult:
    collection: str
    rows: int = 0
    deletes: int = 0
    batches: int = 0
    txns: int = 0
    pchannels: list[str] = field(default_factory=list)
    # per pchannel: [first, last] message id written by this call (ids order one pchannel only)
    positions: dict[str, list[str]] = field(default_factory=dict)
    committed: dict[str, int] = field(default_factory=dict)   # pchannel -> appends committed
    seq: int | None = 0       # the call's sequence number (a retry passes it again; None: the call was
                              # fenced before it was numbered, nothing appended: its retry is a new call)

    def to_json(self) -> dict:
        return dict(self.__dict__)


def route(pks: np.ndarray, shards: int) -> np.ndarray:
    """Shard index of each primary key (deterministic, spread by a multiplicative hash)."""
    if shards == 1:
        return np.zeros(len(pks), dtype=np.int64)
    h = (pks.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)
    return (h % np.uint64(shards)).astype(np.int64)


def check_count(name: str, value, *, minimum: int = 1, maximum: int = 10**9) -> int:
    """A count from the edge: an int (not bool, NaN or inf) within [minimum, maximum]."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        raise ValidationError(f"{name} must be a finite integer, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise ValidationError(f"{name} must be an integer in {minimum}..{maximum}, got {value!r}")
    return value


def shard_pks(shards: int, n: int, first_pk: int, shard: int = 0) -> np.ndarray:
    """The first n primary keys >= first_pk that route to `shard` (a transaction spans
    one vchannel: its rows must route to one shard)."""
    out, lo = [], first_pk
    while sum(len(o) for o in out) < n:
        cand = np.arange(lo, lo + 4 * n * shards, dtype=np.int64)
        out.append(cand[route(cand, shards) == shard])
        lo += len(cand)
    return np.concatenate(out)[:n]


def synthetic_rows(coll, n: int, first_pk: int, seed: int = 0, shard: int | None = None) -> pa.Table:
    """n rows in the collection's schema: sequential primary keys from first_pk (only
    those of `shard` when given), random vectors and scalars (like `seglake demo seed`)."""
    rng = np.random.default_rng(seed)
    pks = np.arange(first_pk, first_pk + n, dtype=np.int64) if shard is None else shard_pks(coll.shards, n, first_pk, shard)
    cols = {}
    for f in coll.schema.fields:
        t = M.arrow_type(f)
        if f.is_primary:
            cols[f.name] = pa.array(pks)
        elif f.dtype == "FloatVector":
            flat = pa.array(rng.random(n * f.dim, dtype=np.float32))
            cols[f.name] = pa.FixedSizeListArray.from_arrays(flat, f.dim)
        elif f.dtype == "VarChar":
            cols[f.name] = pa.array([f"r{i}" for i in range(first_pk, first_pk + n)])
        elif f.dtype == "Bool":
            cols[f.name] = pa.array(rng.random(n) < 0.5)
        elif pa.types.is_integer(t):
            cols[f.name] = pa.array(rng.integers(0, 100, n)).cast(t)
        else:
            cols[f.name] = pa.array(rng.random(n) * 100).cast(t)
    return pa.table(cols, schema=M.arrow_schema(coll.schema))


class WalClient:
    def __init__(self, meta, store, settings, *, clock=time.time, batch_rows: int = 10000,
                 producer_id: str | None = None):
        check_wal_settings(settings)
        self.meta, self.store, self.settings, self.clock = meta, store, settings, clock
        self.batch_rows = check_count("batch rows", batch_rows, maximum=MAX_BATCH_ROWS)
        if producer_id is not None and (not isinstance(producer_id, str) or not _valid_pid(producer_id)):
            raise ValidationError(f"producer id must be 1..64 of [A-Za-z0-9._-], got {producer_id!r}")
        self.producer_id = producer_id or f"c-{uuid.uuid4().hex}"
        self._named = producer_id is not None
        self._holder: Holder | None = None   # claimed at first use, shared by this client's producers
        if clock is time.time:
            self.tso = meta.tso
        else:
            from seglake.meta.alloc import TSO
            self.tso = TSO(meta.kv, meta.keys.alloc_tso(), clock=clock, max_clock_skew=settings.max_clock_skew)
        self._writers: dict[str, WalWriter] = {}
        self._last_call = 0
        self._floored = False   # (a named id: the first number is drawn above the TSO at the claim)
        self._numbered_to = 0   # (a named id: the numbers up to this one are reserved under the claim)
        self._calls_running: dict[int, tuple[str, int]] = {}   # call -> (digest, threads running it)
        self._issued: set[int] = set()            # a fresh id: the calls this client numbered (its
        self._issued_order: deque[int] = deque()  # retries are its own), the last ISSUED_KEPT
        self._lock = threading.Lock()
        self._seq_lock = threading.Lock()

    def writer(self, pchannel: str) -> WalWriter:
        """This client's producer on `pchannel` (one per pchannel, opened on first use)."""
        with self._lock:
            w = self._writers.get(pchannel)
            if w is None:
                w = self._writers[pchannel] = WalWriter.open(self.meta, self.store, pchannel, self.settings,
                                                             producer_id=self.producer_id, clock=self.clock,
                                                             holder=self.holder())
            return w

    def holder(self) -> Holder:
        """This client's hold on its producer id: a named id is claimed here, once (any
        older client holding it is fenced from its next commit on)."""
        with self._seq_lock:
            if self._holder is None:
                self._holder = Holder(self.meta, self.producer_id, self.settings, named=self._named)
            return self._holder

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
        if not self._named:
            self._forget_fresh_id()

    def _forget_fresh_id(self) -> None:
        """A fresh producer id is known to this client only, and its calls are answered:
        its records (one per pchannel it wrote) are removed with their lease at close,
        instead of living 15-20 minutes each (a client per call left one record and one
        lease per call: their count had no bound). A call made before the close is then
        this client's no more (its retry is refused as not issued here, never appended
        twice); used again, the client takes a new fresh id."""
        with self._seq_lock:
            holder, self._holder = self._holder, None
            self._issued.clear()
            self._issued_order.clear()
            self.producer_id = f"c-{uuid.uuid4().hex}"
        lease = None if holder is None else holder._lease
        if lease is not None:
            try:
                self.meta.kv.revoke_lease(lease[0])
            except SeglakeError:
                pass   # they expire by themselves

    def __enter__(self) -> "WalClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- collections ----------------------------------------------------------------------
    def create_collection(self, name: str, schema, **kw):
        """Create through the catalog, then announce it on each of its vchannels."""
        coll = self.meta.catalog.create(name, schema, **kw)
        return self.announce(coll)

    def announce(self, coll):
        """Append CreateCollection on every vchannel of `coll` unless already done."""
        if coll.properties.get(ANNOUNCED):
            return coll
        by_p: dict[str, list[Message]] = {}
        for v in coll.vchannels:
            by_p.setdefault(pchannel_of(v), []).append(Message(
                M.CREATE_COLLECTION, v, collection_id=coll.collection_id,
                props={"name": coll.name, "db": coll.db, "schema": coll.schema.to_json(),
                       "partitions": [[p.partition_id, p.name] for p in coll.partitions]}))
        # seq None: the call that announces (a first insert, delete, flush) is not numbered yet,
        # so an announce that did not complete leaves nothing of it appended: its retry is a
        # new call (its error said "retry with seq=0", which every call refuses; attack s24)
        res = IngestResult(coll.name, seq=None)
        try:
            self._finish(res, self._submit(res, [m for _, msgs in sorted(by_p.items()) for m in msgs],
                                           self._call_seq(None), {}, _digest("announce", coll.collection_id)))
        except AppendIncomplete as e:
            e.args = (f"announcing collection {coll.name!r} on its vchannels (before its first write through the "
                      f"WAL) did not complete: nothing of this call was numbered or appended; retry it as a new "
                      f"call (seq=None). {e.args[0]}",)
            raise
        before = any(True for _ in self.meta.segments.list(coll.collection_id))
        return self.meta.catalog.set_properties(coll.collection_id,
                                                **{ANNOUNCED: True, **({ROWS_BEFORE_LOG: True} if before else {})})

    def _collection(self, name: str, db: str):
        return self.announce(self.meta.catalog.get_by_name(name, db))

    # -- data -------------------------------------------------------------------------------
    def insert(self, collection: str, data: pa.Table | pa.RecordBatch, *, partition: str = DEFAULT_PARTITION,
               db: str = DEFAULT_DB, txn: bool = False, upsert: bool = False, seq: int | None = None) -> IngestResult:
        """Append rows (upsert=True: each row also deletes the rows of its pk older than
        the call). See the module docstring for `txn` and `seq`."""
        what = "upsert" if upsert else "insert"
        if not isinstance(data, (pa.Table, pa.RecordBatch)):
            raise ValidationError(f"{what}: rows must be an Arrow table or record batch, got {type(data).__name__}")
        coll = self.meta.catalog.get_by_name(collection, db)
        part = coll.partition(partition)
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if table.num_rows == 0:
            raise ValidationError(f"{what}: no rows")
        # validate every batch before anything is appended. The batches are cut by row
        # offset (never at the table's chunk bounds) and copied compact: the same rows in
        # other Arrow chunks or buffers make the same appends and the same digest, so a
        # retry of them completes the call instead of being refused as another payload
        pk = coll.schema.primary.name
        table, cuts = _cuts(table, pk, self.batch_rows, together=upsert and txn)
        batches = [_compact(M.conform_batch(table.slice(i, n), coll.schema, what)) for i, n in cuts]
        shards = [route(b.column(pk).to_numpy(zero_copy_only=False), coll.shards) for b in batches]
        if txn:
            self._one_vchannel(coll, np.concatenate(shards), what)
        coll = self.announce(coll)
        res = IngestResult(coll.name)
        # an upsert: a delete and an insert at ONE timestamp per call (as Milvus: one per
        # request): the tick of its first append, one message alone, committed before any
        # other append of the call is queued; the producer record holds it from that
        # commit on (compaction's L0 fold holds back for it) and a retry keeps it (_recorded_ts);
        # its rows and its delete are stamped with it (flusher). No timestamp is taken
        # before: one that no record holds could be older than a delete a fold forgot
        # before its rows arrived. In a txn, each body's own tick (just below the commit's,
        # in the txn's order), as a txn's deletes: _cuts keeps a pk's rows in one body
        props = ({"upsert": True, **({} if txn else self._upsert_ts(coll, seq))} if upsert else {})

        def messages(i: int, txn_ids: dict[str, int]):
            batch, shard = batches[i], shards[i]
            out = []
            for j, v in enumerate(coll.vchannels):
                idx = np.nonzero(shard == j)[0] if coll.shards > 1 else None
                part_batch = batch if idx is None else batch.take(pa.array(idx))
                if part_batch.num_rows:
                    m = Message.insert(v, coll.collection_id, part.partition_id, part_batch, txn_id=txn_ids.get(v, 0))
                    out.append(replace(m, props=dict(props)) if props else m)
            return out

        def first_committed(p: str, call: int) -> None:   # the upsert's first append: its tick
            t0 = (self.writer(p).remembered(call) or {}).get("t0")
            if t0:
                props.setdefault(M.CALL_TS, t0)

        # the call's appends per pchannel (_submit numbers them so on every try), carried by
        # its first: once each pchannel's record holds them all, the call can add no row
        # with its timestamp, and compaction's L0 fold no longer holds back for it
        first_alone = None
        if upsert and not txn:
            plan: dict[str, int] = {}
            for i, shard in enumerate(shards):
                js = [j for j in range(len(coll.vchannels)) if coll.shards == 1 or (shard == j).any()]
                groups = [js[:1], js[1:]] if i == 0 else [js]
                for g in groups:
                    for q in {pchannel_of(coll.vchannels[j]) for j in g}:
                        plan[q] = plan.get(q, 0) + 1
            first_alone = (plan, first_committed)

        _check_appends(coll, shards, txn, what)
        digest = _digest(what, coll.collection_id, part.partition_id, txn, self.batch_rows,
                         *(b.serialize() for b in batches))
        self._run(coll, len(batches), messages, txn, res, seq, digest,
                  first_alone=first_alone)
        res.rows = table.num_rows
        return res

    def upsert(self, collection: str, data: pa.Table | pa.RecordBatch, **kw) -> IngestResult:
        """Insert rows that replace every older row of their primary keys (Milvus's upsert:
        a delete and an insert at one timestamp; the delete hides only strictly older rows).
        One timestamp per call, however many appends carry the rows, for its rows and its
        delete: its first append's tick (that append alone, before the others); of two
        upserts of a pk, the one whose first append commits later wins.
        In a txn: each body's tick, in the txn's order."""
        return self.insert(collection, data, upsert=True, **kw)

    def delete(self, collection: str, pks, *, db: str = DEFAULT_DB, partition: str | None = None,
               txn: bool = False, seq: int | None = None) -> IngestResult:
        """Delete every row of these primary keys older than this call (in `partition`
        only when given). The delete's timestamp is the call's one timestamp (M.CALL_TS),
        taken before its first append, kept by its retries; in a txn, its commit's tick."""
        coll = self.meta.catalog.get_by_name(collection, db)
        try:
            arr = pa.array(pks, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
            raise ValidationError(f"delete: primary keys must be 64-bit integers: {e}") from None
        if len(arr) == 0 or arr.null_count:
            raise ValidationError("delete: give at least one primary key, none null")
        part_id = 0 if partition is None else coll.partition(partition).partition_id
        chunks = [arr[i:i + self.batch_rows].to_numpy() for i in range(0, len(arr), self.batch_rows)]
        shards = [route(c, coll.shards) for c in chunks]
        if txn:
            self._one_vchannel(coll, np.concatenate(shards), "delete")
        coll = self.announce(coll)
        res = IngestResult(coll.name)
        # ONE timestamp per call (as Milvus: one per request), taken before any of its
        # appends commits and kept by its retries on every pchannel: a part retried later
        # never hides rows acknowledged after the call's first try (a txn's deletes take
        # their commit's ticks)
        props = {} if txn else {M.CALL_TS: self._call_ts(coll, seq)}

        def messages(i: int, txn_ids: dict[str, int]):
            chunk, shard = chunks[i], shards[i]
            out = []
            for j, v in enumerate(coll.vchannels):
                sel = chunk[shard == j]
                if len(sel):
                    m = Message.delete(v, coll.collection_id, sel, np.zeros(len(sel), np.uint64),
                                       txn_id=txn_ids.get(v, 0), partition_id=part_id)
                    out.append(replace(m, props=props) if props else m)
            return out

        _check_appends(coll, shards, txn, "delete")
        digest = _digest("delete", coll.collection_id, part_id, txn, self.batch_rows, *chunks)
        self._run(coll, len(chunks), messages, txn, res, seq, digest)
        res.deletes = len(arr)
        return res

    def flush(self, collection: str, *, db: str = DEFAULT_DB, seq: int | None = None) -> IngestResult:
        """Append a Flush on each vchannel: the flusher seals the growing segments up to
        this message's time tick."""
        coll = self._collection(collection, db)
        res = IngestResult(coll.name)
        call = self._numbered(res, seq)
        digest = _digest("flush", coll.collection_id)
        with self._running_call(call, digest):
            if seq is not None:
                self._check_reuse(coll, call, digest)
            self._finish(res, self._submit(res, [Message(M.FLUSH, v, collection_id=coll.collection_id)
                                                 for v in coll.vchannels], call, {}, digest))
        return res

    @staticmethod
    def _one_vchannel(coll, shards: np.ndarray, what: str) -> None:
        used = sorted({int(x) for x in np.unique(shards)})
        if len(used) > 1:
            raise ValidationError(f"{what}: a transaction spans one vchannel (as in Milvus); these rows route to "
                                  f"{len(used)} vchannels ({', '.join(coll.vchannels[i] for i in used)}): split "
                                  f"them by shard or append without txn. Nothing was appended")

    def _call_seq(self, seq: int | None) -> int:
        """The call's sequence number: given (a retry of a call, or the caller's own
        numbering), or a new one that carries its time (writer.clock_call): above every
        call this client made, and above every call an earlier holder of the producer id
        committed (those were numbered before this client claimed it, by the one TSO).
        Its time bounds its retries: one older than the retry window that no record
        remembers is refused, never appended twice."""
        if seq is not None and (isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq < MAX_CALL):
            raise ValidationError(f"seq must be an int in 1..{MAX_CALL - 1}, got {seq!r}")
        if seq is not None:
            ahead = future_call(seq, now_ms(self.tso, self.clock), self.settings.max_clock_skew)
            if ahead:
                raise ValidationError(ahead + "; nothing appended")
            if not self._named and seq not in self._issued:
                # a fresh id is known to this client only: another client's call under the
                # same number -- its res.seq, or a number of the caller's own retried from a
                # new process -- cannot be recognised here, it would be appended again
                raise ValidationError(
                    f"seq {seq} was not issued by this client, whose producer id is fresh (known to no other "
                    f"client): it cannot tell what another client's call committed. Retry from the client that "
                    f"made the call (seq=err.result.seq), or, to number calls yourself or retry them from "
                    f"another process, give every such client the same producer_id=...; nothing appended")
            with self._seq_lock:   # the client's own numbers go above every number it was given
                self._last_call = max(self._last_call, seq)
            return seq
        self.holder()   # claimed before the number is drawn
        with self._seq_lock:
            if self._named and not self._floored:   # above every call an earlier holder numbered
                from seglake.meta.alloc import physical_ms
                now = physical_ms(self.tso.reserve(1, linearizable=True))
                self._last_call = max(self._last_call, call_at(now), self._recorded_calls())
                self._floored = True
            self._last_call = clock_call(self.tso, self._last_call, self.clock)
            if self._named and self._last_call > self._numbered_to:
                self._reserve_numbers(self._last_call)
            if not self._named:
                self._issued.add(self._last_call)
                self._issued_order.append(self._last_call)
                while len(self._issued_order) > ISSUED_KEPT:
                    self._issued.discard(self._issued_order.popleft())
            return self._last_call

    def _numbered(self, res: IngestResult, seq: int | None) -> int:
        """The call's number (_call_seq) set in `res`. A named client fenced before it could
        number a new call raises ProducerFenced carrying `res` with seq None: nothing of the
        call was numbered or appended, so its retry (seq=err.result.seq) is a new call."""
        try:
            res.seq = self._call_seq(seq)
        except ProducerFenced as e:
            err = ProducerFenced(f"{e} [this call: not numbered, nothing appended; its retry is a new call "
                                 f"(seq=None)]")
            res.seq = None
            err.result = res
            raise err from e
        return res.seq

    def _reserve_numbers(self, call: int) -> None:
        """Before a named client hands out `call`: the numbers up to call + NUMBERS_AHEAD
        reserved under its claim (one guarded put per block). A holder fenced since is refused
        here, before the number is handed out; a new holder numbers above every reserved one
        (_recorded_calls). Without it a call the earlier holder numbered and never committed
        (fenced first) could be numbered again by the new holder for other rows, and the
        fenced call's retry (seq=err.result.seq, as its error says) was answered from them."""
        holder = self._holder   # claimed before the number was drawn (under _seq_lock: not holder())
        to = call + NUMBERS_AHEAD
        key = keymod.wal_producer_numbers(self.meta.keys, self.producer_id)
        for _ in range(2):
            try:
                self.meta.kv.txn(holder.guards(), [Put(key, encode({"to": to, "token": holder.token}),
                                                       lease=holder.lease())])
                self._numbered_to = to
                return
            except Conflict:
                holder.check()   # fenced: raised; the claim's lease had run out: claimed again
        raise Conflict(f"producer {self.producer_id}: could not reserve call numbers under its claim")

    def _recorded_calls(self) -> int:
        """The highest call this named producer id's records remember on any pchannel (their
        floor included): read after this client's claim, so no earlier holder commits another.
        An earlier holder's numbers may run ahead of the TSO's time (clock_call: calls faster
        than its physical clock moves, up to MAX_CALL_LEAD_MS), so the TSO alone does not
        put a new holder's first number above them: a number it reused was answered from the
        earlier call's record (the same rows: acknowledged, not appended) or refused."""
        from seglake.wal.log import all_pchannels
        from seglake.wal.producers import _record

        numbers = keymod.wal_producer_numbers(self.meta.keys, self.producer_id)
        keys = [keymod.wal_producer(self.meta.keys, p, self.producer_id) for p in all_pchannels()]
        top = 0
        for key, kv in self.meta.kv.get_many([numbers, *keys]).items():
            if kv is None:
                continue
            if key == numbers:   # what the earlier holder reserved (handed out, committed or not)
                top = max(top, int(decode(kv.value, kv.key)["to"]))
                continue
            rec = _record(kv)
            top = max(top, rec["floor"], rec.get("seq", 0) >> CALL_BITS, *(int(c) for c in rec["calls"]))
        return top

    def _run(self, coll, chunks: int, messages, txn: bool, res: IngestResult, seq: int | None, digest: str,
             first_alone=None) -> None:
        """Append each chunk's messages (one append per pchannel); in a txn on one vchannel."""
        call = self._numbered(res, seq)
        with self._running_call(call, digest):
            if seq is not None:
                self._check_reuse(coll, call, digest)
            holder = self.holder()
            holder.running(call, True)   # never evicted from the producer record while it runs
            try:
                self._run_call(coll, chunks, messages, txn, res, call, digest, first_alone)
            except AppendIncomplete as e:
                if txn:   # a retry draws new txn ids: it completes only a txn whose appends all committed
                    e.args = (f"{e.args[0]} (a transaction: that retry completes it only if all of it committed; "
                              f"refused as 'not open', nothing of it is visible: retry it as a new call, "
                              f"without seq)",)
                raise
            finally:
                holder.running(call, False)

    @contextlib.contextmanager
    def _running_call(self, call: int, digest: str):
        """While a call runs in this client, another payload under its seq (another
        thread) is refused before anything is queued: each pchannel keeps the first payload
        it commits, so two payloads racing under one new seq could each win a pchannel,
        both refused and both partly written. The same payload (a retry from another
        thread) goes on beside it."""
        with self._seq_lock:
            cur = self._calls_running.get(call)
            if cur is not None and cur[0] != digest:
                raise ValidationError(f"producer {self.producer_id}: seq {call} is running in this client with "
                                      f"payload digest {cur[0]}, this call's digest is {digest}: another payload "
                                      f"under a used sequence number is refused (nothing appended); give a new "
                                      f"call a new seq{PAYLOAD_IS}")
            self._calls_running[call] = (digest, 1 + (cur[1] if cur else 0))
        try:
            yield
        finally:
            with self._seq_lock:
                d, n = self._calls_running[call]
                if n > 1:
                    self._calls_running[call] = (d, n - 1)
                else:
                    del self._calls_running[call]

    def _recorded_ts(self, coll, seq: int | None) -> int | None:
        """The one timestamp a retry (seq given) keeps: the one its first try committed with
        on ANY pchannel of the collection (each record keeps it for its own pchannel only: a
        part retried on a pchannel that never saw the call took a new, later one, so the
        call hid rows acknowledged after its first try on one pchannel and not on another);
        None when no record holds one."""
        if isinstance(seq, int) and not isinstance(seq, bool):
            for p in sorted({pchannel_of(v) for v in coll.vchannels}):
                t0 = (self.writer(p).remembered(seq) or {}).get("t0")
                if t0:
                    return t0
        return None

    def _upsert_ts(self, coll, seq: int | None) -> dict:
        """An upsert's props: a retry keeps the timestamp a record holds for its call; a call
        none holds takes its first append's tick (no timestamp here)."""
        t0 = self._recorded_ts(coll, seq)
        return {M.CALL_TS: t0} if t0 else {}

    def _call_ts(self, coll, seq: int | None) -> int:
        """A delete's one timestamp: a retry keeps its first try's (_recorded_ts); a new call
        takes a new one."""
        return self._recorded_ts(coll, seq) or self.tso.reserve(1, linearizable=True)

    def _check_reuse(self, coll, call: int, digest: str) -> None:
        """A given seq (a retry, or the caller's own number) that this producer's record on
        ANY pchannel remembers with another payload is refused here, before anything is
        queued. Each pchannel judges only its own appends: one that remembers the call
        would refuse it while another, which never saw it, appended its part (a refused
        call that wrote); and a call retried after its collection was dropped and brought
        back under its name (a new id, other pchannels) was appended again beside the
        rows the undrop restored. The collection's pchannels are read from this client's
        producers (they hold what their records hold: the newest holder of the id is the
        only one that commits), the others from etcd (one read)."""
        from seglake.wal.log import all_pchannels
        from seglake.wal.producers import _record

        mine = {pchannel_of(v) for v in coll.vchannels}
        with self._lock:
            opened = dict(self._writers)
        entries = {p: self.writer(p).remembered(call) for p in mine}
        entries.update({p: w.remembered(call) for p, w in opened.items() if p not in mine})
        keys = {keymod.wal_producer(self.meta.keys, p, self.producer_id): p
                for p in all_pchannels() if p not in entries}
        for key, kv in self.meta.kv.get_many(list(keys)).items():
            if kv is not None:
                entries[keys[key]] = _record(kv)["calls"].get(str(call))
        for p in sorted(mine):
            if entries.get(p) is None and self.writer(p).forgotten(call):
                # a pchannel of this call no longer remembers it (below its record's floor: a
                # record of caller numbers shrunk by expire_producers, or 64 newer calls): it
                # refuses its part, so no other pchannel may append its own (a refused call
                # that wrote, with a new timestamp for an upsert or delete: the call's t0 went
                # with the entry)
                raise ValidationError(
                    f"producer {self.producer_id} on {p}: seq {call} is below the calls its record remembers "
                    f"(floor {self.writer(p).floor}): it cannot tell a duplicate; refused (nothing appended, "
                    f"on any pchannel)")
        if all(e is None for e in entries.values()):
            self._check_not_before(coll, call)
        for p, entry in sorted(entries.items()):
            if entry is not None and entry["d"] != digest:
                where = "" if p in mine else (" (a pchannel this collection does not use: the seq went to another "
                                              "collection, or to an earlier collection of this name)")
                raise ValidationError(
                    f"producer {self.producer_id} on {p}: seq {call} was committed with payload digest "
                    f"{entry['d']}{where}, this call's digest is {digest}: another payload under a used sequence "
                    f"number is refused (nothing appended, on any pchannel); give a new call a new seq{PAYLOAD_IS}")

    def _check_not_before(self, coll, call: int) -> None:
        """A given seq that no producer record of this store remembers, numbered by a client
        (it carries its time) before `coll` existed, is refused: it was a call to another
        collection -- the one this one was restored, imported or undropped from, maybe in
        another store (a DR site) -- and what of it committed there came with the copy; this
        store cannot tell which part, so appending it would write that part twice (attack s24:
        a call half-committed on the primary, retried at the DR site after a restore from its
        bundle, gave 69 rows for 60 written). A call numbered after the collection was read
        carries a time at or above its creation: numbers come from max(wall clock, the TSO),
        and the TSO lags another process's by less than a batch; the slack (max_clock_skew +
        1 s) covers a batch taken before a fast host moved the TSO. A seq the caller chose
        (below 2**40) carries no time and is not judged here."""
        from seglake.meta.alloc import physical_ms

        made = call_ms(call)
        born = int(getattr(coll, "created_ts", 0) or 0)
        if made is None or not born:
            return
        slack = int(self.settings.max_clock_skew * 1000) + 1000
        if made + slack >= physical_ms(born):
            return
        import datetime as _dt

        def at(ms: int) -> str:
            return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
        raise ValidationError(
            f"producer {self.producer_id}: seq {call} was numbered at {at(made)}, before collection {coll.name!r} "
            f"(id {coll.collection_id}) was created at {at(physical_ms(born))}, and no producer record of this store "
            f"remembers it: it was a call to another collection (the one this was restored, imported or undropped "
            f"from, maybe at another site), and what of it committed there may have come with the copy; nothing "
            f"appended. Check which of its rows the collection holds, and send the rest as a new call (seq=None)")

    def _run_call(self, coll, chunks: int, messages, txn: bool, res: IngestResult, call: int, digest: str,
                  first_alone=None) -> None:
        counter: dict[str, int] = {}   # per pchannel: the next index of this call's appends there
        txn_ids: dict[str, int] = {}
        if txn:
            v = next(m.vchannel for m in messages(0, {}))
            txn_ids = {v: self.meta.ids.allocate()}
            keep_ms = max(1, int(self.settings.wal_txn_keepalive * 1000))
            self._finish(res, self._submit(res, [Message.begin_txn(v, txn_ids[v], keep_ms)], call, counter, digest))
            res.txns = 1
        pending: list = []
        try:
            skip = 0
            if first_alone is not None:
                # the call's first message is its first append, alone, committed before the
                # others are queued (an upsert: its tick is the call's timestamp); every try
                # numbers the call's appends the same way
                plan, committed = first_alone
                m0 = messages(0, txn_ids)[0]
                m0 = replace(m0, props={**m0.props, "plan": plan})
                self._finish(res, self._submit(res, [m0], call, counter, digest))
                committed(pchannel_of(m0.vchannel), call)
                skip = 1
            for i in range(chunks):   # queued: serialization overlaps the producers' I/O
                pending += self._submit(res, messages(i, txn_ids)[skip if i == 0 else 0:], call, counter, digest)
                res.batches += 1
            self._finish(res, pending)
        except BaseException:
            if txn:
                try:   # nothing of the txn is ever consumed: a failed txn call is a new call to retry
                    # under the call's reserved last number, never one its CommitTxn uses: a
                    # retry with this seq must not be answered with the rollback's ids
                    self._finish(res, self._submit(res, [Message.rollback_txn(v, t) for v, t in txn_ids.items()],
                                                   call, {}, digest, index=ROLLBACK_APPEND))
                except Exception:  # noqa: BLE001 - the transaction expires anyway
                    pass
            raise
        if txn:
            # the CommitTxn names its collection: the writer refuses it once a drop began
            commits = [replace(Message.commit_txn(v, t), collection_id=coll.collection_id) for v, t in txn_ids.items()]
            self._finish(res, self._submit(res, commits, call, counter, digest))

    def _submit(self, res: IngestResult, msgs: list[Message], call: int, counter: dict[str, int], digest: str,
                index: int | None = None) -> list:
        """Queue one append per pchannel (each lands whole in one fragment), numbered
        call * 2**20 + i, i counting the call's appends ON THAT PCHANNEL (or `index`: a
        txn's RollbackTxn): the same call retried numbers its appends the same way, and a
        pchannel's record keeps a call's appends as one range of indexes whatever the
        number of pchannels (numbered across them, each record saw every other index: one
        range per append, a record growing with the call and rewritten at every commit).
        Each carries the call's payload digest (a used seq with another payload is refused)."""
        by_p: dict[str, list[Message]] = {}
        for m in msgs:
            by_p.setdefault(pchannel_of(m.vchannel), []).append(m)
        out = []
        for p, group in sorted(by_p.items()):
            i = counter.get(p, 0) if index is None else index
            if index is None:
                if i >= ROLLBACK_APPEND:
                    raise ValidationError(f"a call may make at most {ROLLBACK_APPEND} appends; use fewer, larger "
                                          f"batches")
                counter[p] = i + 1
            seq = call * APPENDS_PER_CALL + i
            out.append((p, group, seq, digest, self.writer(p).append_async(group, seq=seq, digest=digest)))
            if p not in res.pchannels:
                res.pchannels.append(p)
        return out

    def _finish(self, res: IngestResult, pending: list) -> list[MessageId]:
        """Wait for each append; a retriable failure is retried with the same sequence
        number (safe: idempotent). What still fails is reported with what committed."""
        out, failed, refused = [], {}, None
        for p, group, seq, digest, req in pending:
            ids = None
            for attempt in range(RETRIES + 1):
                try:
                    ids = req.result()
                    break
                except Retry as e:
                    if attempt == RETRIES or refused is not None:
                        failed[p] = e
                        break
                    time.sleep(min(1.0, 0.02 * 2 ** attempt))
                    req = self.writer(p).append_async(group, seq=seq, digest=digest)
                except (ValidationError, ProducerFenced) as e:
                    # the call is refused or fenced; the appends queued beside this one
                    # are still waited for, so the error says what committed and the
                    # call's seq (its retry completes it, from a new client when fenced)
                    refused = refused or e
                    failed[p] = e
                    break
                except Exception as e:  # noqa: BLE001 - reported with what committed
                    failed[p] = e
                    break
            if ids is None:
                continue
            out += ids
            res.committed.setdefault(p, 0)
            res.committed[p] += 1
            if ids:
                pos = res.positions.setdefault(p, [str(min(ids)), str(max(ids))])
                if MessageId.parse(pos[1]) < max(ids):
                    pos[1] = str(max(ids))
        if refused is not None:
            msg = (f"{refused} [this call: seq={res.seq}; appends committed: "
                   f"{', '.join(f'{p}: {n}' for p, n in sorted(res.committed.items())) or 'none'}]")
            try:   # a new error per call (a fenced holder raises one shared instance)
                err = type(refused)(msg)
            except Exception:  # noqa: BLE001 - a subclass with another constructor
                err = (ProducerFenced if isinstance(refused, ProducerFenced) else ValidationError)(msg)
            err.result = res
            raise err from refused
        if failed:
            raise AppendIncomplete(res, failed)
        return out


def _check_appends(coll, shards: list, txn: bool, what: str) -> None:
    """A call numbers at most ROLLBACK_APPEND appends (one per batch and pchannel, and a
    txn's BeginTxn and CommitTxn): more is refused here, before anything is queued (it
    was refused when the first append past the limit was queued, after the others had
    been sent: a refused call that wrote)."""
    pch = [pchannel_of(v) for v in coll.vchannels]
    n = sum(len({pch[int(j)] for j in np.unique(s)}) for s in shards) + (2 if txn else 0)
    if n > ROLLBACK_APPEND:
        raise ValidationError(f"{what}: a call may make at most {ROLLBACK_APPEND} appends, this one makes {n} "
                              f"(one per batch and pchannel); use fewer, larger batches or several calls. "
                              f"Nothing was appended")


def _cuts(table: pa.Table, pk: str, batch_rows: int, *, together: bool) -> tuple[pa.Table, list[tuple[int, int]]]:
    """The call's rows and their batches as (offset, rows): by row offset, `batch_rows`
    each. `together` (an upsert in a txn, whose appends take ticks of their own): every
    row of one pk in ONE batch, so the call's later append never hides its own earlier
    copy (a pk's copies in one call are all visible, as in Milvus). Only a call whose pks
    repeat across `batch_rows` rows is cut otherwise: its rows ordered by pk (stably), a
    batch ending at a pk boundary (a pk with more copies than `batch_rows` is one batch)."""
    import pyarrow.compute as pc

    n = table.num_rows
    plain = [(i, min(batch_rows, n - i)) for i in range(0, n, batch_rows)]
    if not together or n <= batch_rows or pc.count_distinct(table.column(pk)).as_py() == n:
        return table, plain
    table = table.take(pc.sort_indices(table.column(pk)))
    keys = table.column(pk).to_numpy(zero_copy_only=False)
    cuts, i = [], 0
    while i < n:
        j = min(i + batch_rows, n)
        while j < n and keys[j] == keys[j - 1]:
            j += 1
        cuts.append((i, j - i))
        i = j
    return table, cuts


def _compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch in fresh buffers of exactly its rows: its serialized bytes (the call's
    digest, the append's body) depend on its values only, never on the slice or the
    chunks it came from."""
    return batch.take(pa.array(np.arange(batch.num_rows, dtype=np.int64)))


# what a refusal of "another payload" says it is (a retry with another batch_rows differs)
PAYLOAD_IS = (" (a payload is the kind of call, collection, partition, txn, the client's batch_rows and the rows "
              "or keys: a retry must send the same rows with the same batch_rows)")


def _digest(*parts) -> str:
    """The payload digest of a call: what it appends (kind, collection, partition, txn,
    batch size, the rows or keys), never the ids a retry draws afresh (txn ids)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    # the numbering of a call's appends is part of what a digest vouches for: a call of the
    # older numbering (one counter across pchannels) retried now is another payload, refused
    h.update(b"appends numbered per pchannel\0")
    for p in parts:
        if isinstance(p, (bytes, bytearray, memoryview, pa.Buffer)):
            h.update(p)
        elif isinstance(p, np.ndarray):
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


class AppendIncomplete(SeglakeError):
    """Some appends of a call did not commit. `.result.committed` says which pchannels
    did; calling again with `seq=.result.seq` (same client, or the same producer_id)
    appends the rest and nothing twice."""

    def __init__(self, result: IngestResult, failed: dict):
        self.result, self.failed = result, failed
        super().__init__(f"{result.collection}: appends to {', '.join(sorted(failed))} did not commit "
                         f"({'; '.join(f'{p}: {e}' for p, e in sorted(failed.items()))}); committed: "
                         f"{', '.join(sorted(result.committed)) or 'none'}. Retry with seq={result.seq} "
                         f"to append the rest without duplicates (from this client, or one with the same "
                         f"producer_id)")


# -- status --------------------------------------------------------------------------------
def wal_status(meta, pchannel: str | None = None) -> list[dict]:
    """Per pchannel: term, writer, last time tick, fragments, bytes, paused, consumer lag."""
    from seglake.meta.alloc import physical_ms
    from seglake.wal.checkpoints import read_checkpoint
    from seglake.wal.log import TermRecord, WalLog, all_pchannels, pause_state, validate_pchannel

    names = [validate_pchannel(pchannel)] if pchannel else all_pchannels()
    vchannels: dict[str, list[str]] = {}
    for c in meta.catalog.list():
        for v in c.vchannels:
            vchannels.setdefault(pchannel_of(v), []).append(v)
    rows = []
    for p in names:
        log = WalLog(meta, None, p)
        st = log.state()
        term = TermRecord.from_kv(meta.kv.get(log.term_key))
        if st.kv is None and term.kv is None and not pchannel:
            continue
        consumers = []
        for v in vchannels.get(p, []):
            cp, _ = read_checkpoint(meta, v)
            lag = None if cp is None else max(0, physical_ms(st.last_tt) - physical_ms(cp.time_tick))
            consumers.append({"vchannel": v, "checkpoint": None if cp is None else cp.message_id.to_json(),
                              "lag_ms": lag})
        paused = pause_state(meta, p)
        otx = meta.kv.get(keymod.wal_open_txns(meta.keys, p))
        rows.append({"open_txns": [] if otx is None else codec.loads(otx.value, otx.key).get("txns"),
                     "pchannel": p, "term": term.term, "writer": term.writer, "last_time_tick": st.last_tt,
                     "fragments": max(0, st.last - st.first + 1 - len([h for h in st.holes if h >= st.first])), "last_fragment": st.last,
                     "bytes": st.bytes, "records": st.records, "paused": paused is not None,
                     "pause_scope": None if paused is None else ("global" if paused["key"].endswith("/_pause") else "pchannel"),
                     "consumers": consumers})
    return rows
