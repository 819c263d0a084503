"""Ingest through the WAL: a Python API for DAG tasks and programs, used by the CLI.

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
- txn=True: per vchannel BeginTxn, the batches, CommitTxn; on any error RollbackTxn is
  appended for the open transactions and the error re-raised.
- The client holds one writer per pchannel it touches, each at a new term: a second
  client writing the same pchannel fences the first (its next append raises Fenced).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from seglake.errors import ValidationError
from seglake.meta.catalog import DEFAULT_DB, DEFAULT_PARTITION, pchannel_of
from seglake.wal import message as M
from seglake.wal.log import check_wal_settings
from seglake.wal.message import Message, MessageId
from seglake.wal.writer import WalWriter

MAX_BATCH_ROWS = 1_000_000
ANNOUNCED = "wal_announced"


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


def synthetic_rows(coll, n: int, first_pk: int, seed: int = 0) -> pa.Table:
    """n rows in the collection's schema: sequential primary keys from first_pk, random
    vectors and scalars (like `seglake demo seed`)."""
    rng = np.random.default_rng(seed)
    cols = {}
    for f in coll.schema.fields:
        t = M.arrow_type(f)
        if f.is_primary:
            cols[f.name] = pa.array(np.arange(first_pk, first_pk + n, dtype=np.int64))
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
    def __init__(self, meta, store, settings, *, clock=time.time, batch_rows: int = 10000):
        check_wal_settings(settings)
        self.meta, self.store, self.settings, self.clock = meta, store, settings, clock
        self.batch_rows = check_count("batch rows", batch_rows, maximum=MAX_BATCH_ROWS)
        self._writers: dict[str, WalWriter] = {}

    def writer(self, pchannel: str) -> WalWriter:
        w = self._writers.get(pchannel)
        if w is None:
            w = self._writers[pchannel] = WalWriter.open(self.meta, self.store, pchannel, self.settings,
                                                         clock=self.clock)
        return w

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()

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
        for p, msgs in sorted(by_p.items()):
            self.writer(p).append(msgs)
        return self.meta.catalog.set_properties(coll.collection_id, **{ANNOUNCED: True})

    def _collection(self, name: str, db: str):
        return self.announce(self.meta.catalog.get_by_name(name, db))

    # -- data -------------------------------------------------------------------------------
    def insert(self, collection: str, data: pa.Table | pa.RecordBatch, *, partition: str = DEFAULT_PARTITION,
               db: str = DEFAULT_DB, txn: bool = False) -> IngestResult:
        if not isinstance(data, (pa.Table, pa.RecordBatch)):
            raise ValidationError(f"insert: rows must be an Arrow table or record batch, got {type(data).__name__}")
        coll = self.meta.catalog.get_by_name(collection, db)
        part = coll.partition(partition)
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if table.num_rows == 0:
            raise ValidationError("insert: no rows")
        # validate every batch before anything is appended
        batches = [M.conform_batch(b, coll.schema) for b in table.to_batches(max_chunksize=self.batch_rows)
                   if b.num_rows]
        coll = self.announce(coll)
        pk = coll.schema.primary.name
        res = IngestResult(coll.name)

        def messages(batch: pa.RecordBatch, txn_ids: dict[str, int]):
            shard = route(batch.column(pk).to_numpy(zero_copy_only=False), coll.shards)
            out = []
            for i, v in enumerate(coll.vchannels):
                idx = np.nonzero(shard == i)[0] if coll.shards > 1 else None
                part_batch = batch if idx is None else batch.take(pa.array(idx))
                if part_batch.num_rows:
                    out.append(Message.insert(v, coll.collection_id, part.partition_id, part_batch,
                                              txn_id=txn_ids.get(v, 0)))
            return out

        self._run(coll, batches, messages, txn, res)
        res.rows = table.num_rows
        return res

    def delete(self, collection: str, pks, *, db: str = DEFAULT_DB, txn: bool = False) -> IngestResult:
        coll = self.meta.catalog.get_by_name(collection, db)
        try:
            arr = pa.array(pks, pa.int64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
            raise ValidationError(f"delete: primary keys must be 64-bit integers: {e}") from None
        if len(arr) == 0 or arr.null_count:
            raise ValidationError("delete: give at least one primary key, none null")
        coll = self.announce(coll)
        res = IngestResult(coll.name)
        chunks = [arr[i:i + self.batch_rows] for i in range(0, len(arr), self.batch_rows)]

        def messages(chunk: pa.Array, txn_ids: dict[str, int]):
            shard = route(chunk.to_numpy(), coll.shards)
            ts = self.meta.tso.now()
            out = []
            for i, v in enumerate(coll.vchannels):
                sel = chunk.to_numpy()[shard == i]
                if len(sel):
                    out.append(Message.delete(v, coll.collection_id, sel, np.full(len(sel), ts, np.uint64),
                                              txn_id=txn_ids.get(v, 0)))
            return out

        self._run(coll, chunks, messages, txn, res)
        res.deletes = len(arr)
        return res

    def flush(self, collection: str, *, db: str = DEFAULT_DB) -> IngestResult:
        """Append a Flush on each vchannel: the flusher seals the growing segments up to
        this message's time tick."""
        coll = self._collection(collection, db)
        res = IngestResult(coll.name)
        self._append_grouped(res, [Message(M.FLUSH, v, collection_id=coll.collection_id) for v in coll.vchannels])
        return res

    def _run(self, coll, chunks, messages, txn: bool, res: IngestResult) -> None:
        """Append each chunk's messages (one append per pchannel); in a txn per vchannel."""
        txn_ids: dict[str, int] = {}
        if txn:
            first = self.meta.ids.allocate(len(coll.vchannels))
            txn_ids = {v: first + i for i, v in enumerate(coll.vchannels)}
            keep_ms = max(1, int(self.settings.wal_txn_keepalive * 1000))
            self._append_grouped(res, [Message.begin_txn(v, t, keep_ms) for v, t in txn_ids.items()])
            res.txns = len(txn_ids)
        pending: list = []
        try:
            for chunk in chunks:   # queued: serialization overlaps the writers' I/O
                pending += self._submit(res, messages(chunk, txn_ids))
                res.batches += 1
            self._wait(res, pending)
        except BaseException:
            if txn:
                try:
                    self._append_grouped(res, [Message.rollback_txn(v, t) for v, t in txn_ids.items()])
                except Exception:  # noqa: BLE001 - the transaction expires anyway
                    pass
            raise
        if txn:
            self._append_grouped(res, [Message.commit_txn(v, t) for v, t in txn_ids.items()])

    def _submit(self, res: IngestResult, msgs: list[Message]) -> list:
        """Queue one append per pchannel (each lands whole in one fragment)."""
        by_p: dict[str, list[Message]] = {}
        for m in msgs:
            by_p.setdefault(pchannel_of(m.vchannel), []).append(m)
        out = []
        for p, group in sorted(by_p.items()):
            out.append((p, self.writer(p).append_async(group)))
            if p not in res.pchannels:
                res.pchannels.append(p)
        return out

    def _wait(self, res: IngestResult, pending: list) -> list[MessageId]:
        out = []
        for p, req in pending:
            ids = req.result()
            out += ids
            pos = res.positions.setdefault(p, [str(min(ids)), str(max(ids))])
            if MessageId.parse(pos[1]) < max(ids):
                pos[1] = str(max(ids))
        return out

    def _append_grouped(self, res: IngestResult, msgs: list[Message]) -> list[MessageId]:
        return self._wait(res, self._submit(res, msgs))


# -- status --------------------------------------------------------------------------------
def read_checkpoint(meta, vchannel: str) -> dict | None:
    """A consumer checkpoint `{root}/channels/{vchannel}/checkpoint`:
    {"message_id": [term, fragment, offset], "time_tick": tt} (written by the flusher)."""
    import json

    kv = meta.kv.get(meta.keys.channel_checkpoint(vchannel))
    return None if kv is None else json.loads(kv.value)


def wal_status(meta, pchannel: str | None = None) -> list[dict]:
    """Per pchannel: term, writer, last time tick, fragments, bytes, paused, consumer lag."""
    from seglake.meta.alloc import physical_ms
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
            cp = read_checkpoint(meta, v)
            lag = None if cp is None else max(0, physical_ms(st.last_tt) - physical_ms(cp.get("time_tick", 0)))
            consumers.append({"vchannel": v, "checkpoint": None if cp is None else cp.get("message_id"),
                              "lag_ms": lag})
        paused = pause_state(meta, p)
        rows.append({"pchannel": p, "term": term.term, "writer": term.writer, "last_time_tick": st.last_tt,
                     "fragments": sum(1 for _ in st.fragments()), "last_fragment": st.last,
                     "bytes": st.bytes, "records": st.records, "paused": paused is not None,
                     "pause_scope": None if paused is None else ("global" if paused["key"].endswith("/_pause") else "pchannel"),
                     "consumers": consumers})
    return rows
