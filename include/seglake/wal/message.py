"""Typed, versioned WAL messages and their binary record encoding.

A message has a type, a vchannel (`""` = broadcast to every vchannel of the pchannel),
a time tick (hybrid timestamp, assigned by the writer at append), a txn id (0 = none),
the WAL term that wrote it and its MessageId (term, fragment, offset), which orders
every message of a pchannel. Insert and Delete carry an Arrow record batch body.

Record encoding (one record per message, inside a fragment, see log.py):

    u32 header_len | u32 body_len | header (JSON) | body (Arrow IPC stream, may be empty)

The record checksum is kept by the fragment (log.py), not here.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field, replace
from functools import total_ordering

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from seglake.meta import codec
from seglake.errors import ValidationError

VERSION = 1

CREATE_COLLECTION = "CreateCollection"
DROP_COLLECTION = "DropCollection"
CREATE_PARTITION = "CreatePartition"
DROP_PARTITION = "DropPartition"
INSERT = "Insert"
DELETE = "Delete"
FLUSH = "Flush"
TIME_TICK = "TimeTick"
BEGIN_TXN = "BeginTxn"
COMMIT_TXN = "CommitTxn"
ROLLBACK_TXN = "RollbackTxn"

TYPES = (CREATE_COLLECTION, DROP_COLLECTION, CREATE_PARTITION, DROP_PARTITION, INSERT, DELETE,
         FLUSH, TIME_TICK, BEGIN_TXN, COMMIT_TXN, ROLLBACK_TXN)
TXN_CONTROL = (BEGIN_TXN, COMMIT_TXN, ROLLBACK_TXN)
# messages that may ride inside a transaction
TXN_BODY = (INSERT, DELETE)
DELETE_SCHEMA = pa.schema([("pk", pa.int64()), ("ts", pa.uint64())])

_LENS = struct.Struct("<II")


@total_ordering
@dataclass(frozen=True)
class MessageId:
    """Position of a message in its pchannel's log; ordered by (fragment, offset).
    Fragment numbers increase across terms, so the term never reorders ids."""

    term: int
    fragment: int
    offset: int

    def _key(self) -> tuple[int, int]:
        return (self.fragment, self.offset)

    def __lt__(self, other: "MessageId") -> bool:
        return self._key() < other._key()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageId) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        return f"{self.term}:{self.fragment}:{self.offset}"

    def to_json(self) -> list[int]:
        return [self.term, self.fragment, self.offset]

    @classmethod
    def parse(cls, value: "str | list | tuple | MessageId") -> "MessageId":
        if isinstance(value, MessageId):
            return value
        parts = value.split(":") if isinstance(value, str) else list(value)
        try:
            t, f, o = (int(p) for p in parts)
        except (TypeError, ValueError):
            raise ValidationError(f"message id {value!r} is not term:fragment:offset") from None
        if min(t, f, o) < 0:
            raise ValidationError(f"message id {value!r} has a negative part")
        return cls(t, f, o)


@dataclass(frozen=True)
class Message:
    type: str
    vchannel: str = ""
    time_tick: int = 0
    txn_id: int = 0
    term: int = 0
    id: MessageId | None = None
    collection_id: int = 0
    partition_id: int = 0
    props: dict = field(default_factory=dict)   # type-specific small values (JSON)
    body: pa.RecordBatch | None = None
    version: int = VERSION
    producer: str = ""   # the producer that appended it (from the log's index; "" in a format-1 log)

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValidationError(f"unknown message type {self.type!r}")

    @property
    def rows(self) -> int:
        return 0 if self.body is None else self.body.num_rows

    def estimate_size(self) -> int:
        """Bytes held (buffer sizes: 25x cheaper than nbytes, which walks slices)."""
        return 128 + (0 if self.body is None else self.body.get_total_buffer_size())

    def with_position(self, time_tick: int, term: int, mid: MessageId) -> "Message":
        return replace(self, time_tick=time_tick, term=term, id=mid)

    # -- constructors ---------------------------------------------------------------
    @classmethod
    def insert(cls, vchannel: str, collection_id: int, partition_id: int, batch: pa.RecordBatch,
               txn_id: int = 0) -> "Message":
        return cls(INSERT, vchannel, collection_id=collection_id, partition_id=partition_id,
                   body=batch, txn_id=txn_id)

    @classmethod
    def delete(cls, vchannel: str, collection_id: int, pks, ts, txn_id: int = 0,
               partition_id: int = 0) -> "Message":
        batch = pa.record_batch([pa.array(pks, pa.int64()), pa.array(ts, pa.uint64())], schema=DELETE_SCHEMA)
        return cls(DELETE, vchannel, collection_id=collection_id, partition_id=partition_id,
                   body=batch, txn_id=txn_id)

    @classmethod
    def time_tick_msg(cls) -> "Message":
        return cls(TIME_TICK)

    @classmethod
    def begin_txn(cls, vchannel: str, txn_id: int, keepalive_ms: int) -> "Message":
        return cls(BEGIN_TXN, vchannel, txn_id=txn_id, props={"keepalive_ms": int(keepalive_ms)})

    @classmethod
    def commit_txn(cls, vchannel: str, txn_id: int) -> "Message":
        return cls(COMMIT_TXN, vchannel, txn_id=txn_id)

    @classmethod
    def rollback_txn(cls, vchannel: str, txn_id: int) -> "Message":
        return cls(ROLLBACK_TXN, vchannel, txn_id=txn_id)

    # -- record encoding ------------------------------------------------------------
    def body_bytes(self) -> memoryview:
        """The body as Arrow IPC stream bytes (no copy beyond the serialization)."""
        return memoryview(b"") if self.body is None else memoryview(_ipc(self.body))

    def encode_parts(self, body: memoryview | None = None) -> list:
        """The record as buffers to write one after another (header, body)."""
        header = {"v": self.version, "type": self.type, "vch": self.vchannel, "tt": self.time_tick,
                  "txn": self.txn_id, "term": self.term, "coll": self.collection_id,
                  "part": self.partition_id, "props": self.props}
        hb = json.dumps(header, separators=(",", ":")).encode()
        body = self.body_bytes() if body is None else body
        return [_LENS.pack(len(hb), len(body)) + hb, body]

    def encode(self) -> bytes:
        return b"".join(bytes(p) for p in self.encode_parts())

    @classmethod
    def decode(cls, data: memoryview | bytes, mid: MessageId) -> "Message":
        hlen, blen = _LENS.unpack_from(data, 0)
        start = _LENS.size
        h = codec.loads(bytes(data[start:start + hlen]), f"message {mid}")
        if h.get("v", 0) > VERSION:
            raise ValidationError(f"message {mid} has version {h.get('v')}, newer than {VERSION}")
        body = None
        if blen:
            buf = pa.py_buffer(data[start + hlen:start + hlen + blen])
            with pa.ipc.open_stream(buf) as reader:
                body = reader.read_next_batch()
        return cls(h["type"], h["vch"], h["tt"], h["txn"], h["term"], mid, h["coll"], h["part"],
                   h.get("props", {}), body, h["v"])


def _ipc(batch: pa.RecordBatch) -> pa.Buffer:
    """Arrow IPC stream bytes, written into one buffer sized up front (a growing
    output stream re-allocates and copies several times for large batches)."""
    size = batch.schema.serialize().size + pa.ipc.get_record_batch_size(batch) + 256
    buf = pa.allocate_buffer(size)
    sink = pa.FixedSizeBufferWriter(buf)
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return buf.slice(0, sink.tell())


def arrow_type(f) -> pa.DataType:
    """The Arrow type of a catalog field (seglake.meta.catalog.Field)."""
    scalar = {"Bool": pa.bool_(), "Int8": pa.int8(), "Int16": pa.int16(), "Int32": pa.int32(),
              "Int64": pa.int64(), "Float": pa.float32(), "Double": pa.float64(), "VarChar": pa.string()}
    if f.dtype == "FloatVector":
        return pa.list_(pa.float32(), f.dim)
    return scalar[f.dtype]


def arrow_schema(schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, arrow_type(f), nullable=not f.is_primary) for f in schema.fields])


# An upsert's or a delete's one timestamp (at or below every tick of its messages): a
# delete's is taken before any of its appends; an upsert's is its first append's tick
# (that message carries none: its tick is it; wal/client.py), held by the producer record
# from that commit on. The delete, and an upsert's rows with its implied delete, are
# stamped with it, so a call carried by several appends, or retried later on a pchannel
# its first try missed, has one time. (The prop's name is the one upserts first carried
# it under.)
CALL_TS = "upsert_ts"


def call_ts(m) -> int | None:
    """A message's call timestamp capped at its tick, or None (then its tick is its time)."""
    ts = m.props.get(CALL_TS)
    return min(ts, m.time_tick) if isinstance(ts, int) and not isinstance(ts, bool) and ts > 0 else None


def upsert_ts(m) -> int | None:
    """An upsert's one timestamp: its rows' and its delete's (its call's, capped at its
    tick; an upsert written without one: its tick). None for a message that is no upsert."""
    if not m.props.get("upsert"):
        return None
    return call_ts(m) or m.time_tick


def conform_batch(batch: pa.RecordBatch | pa.Table, schema, what: str = "insert") -> pa.RecordBatch:
    """The batch in exactly the collection's Arrow schema, or ValidationError naming the
    first problem: missing or unknown column, wrong type, vector dim, null primary key."""
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else \
            pa.RecordBatch.from_pylist([], schema=batch.schema)
    names = set(batch.schema.names)
    wanted = [f.name for f in schema.fields]
    missing = [n for n in wanted if n not in names]
    unknown = sorted(names - set(wanted))
    if missing:
        raise ValidationError(f"{what}: missing column(s) {', '.join(missing)} (schema: {', '.join(wanted)})")
    if unknown:
        raise ValidationError(f"{what}: unknown column(s) {', '.join(unknown)} (schema: {', '.join(wanted)})")
    cols = []
    for f in schema.fields:
        col = batch.column(f.name)
        target = arrow_type(f)
        if f.dtype == "FloatVector":
            t = col.type
            if pa.types.is_fixed_size_list(t):
                if t.list_size != f.dim:
                    raise ValidationError(f"{what}: vector field {f.name!r} has dim {t.list_size}, schema says {f.dim}")
            elif pa.types.is_list(t) or pa.types.is_large_list(t):
                lens = pa.compute.list_value_length(col)
                if len(col) and (pa.compute.min(lens).as_py() != f.dim or pa.compute.max(lens).as_py() != f.dim):
                    raise ValidationError(f"{what}: vector field {f.name!r} rows must have dim {f.dim}")
            else:
                raise ValidationError(f"{what}: field {f.name!r} must be a list of float, got {t}")
            if not pa.types.is_floating(t.value_type):
                raise ValidationError(f"{what}: vector field {f.name!r} must hold floats, got {t.value_type}")
        elif not _compatible(col.type, target):
            raise ValidationError(f"{what}: field {f.name!r} must be {f.dtype}, got {col.type}")
        if col.type != target:
            try:
                col = col.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise ValidationError(f"{what}: field {f.name!r} does not fit {f.dtype}: {e}") from None
        if col.null_count and (f.is_primary or f.dtype == "FloatVector"):
            raise ValidationError(f"{what}: field {f.name!r} must not contain nulls")
        if f.dtype in ("FloatVector", "Float", "Double") and len(col) and not _all_finite(col):
            raise ValidationError(f"{what}: field {f.name!r} contains NaN or infinity (as Milvus, refused)")
        cols.append(col)
    return pa.RecordBatch.from_arrays(cols, schema=arrow_schema(schema))


def _all_finite(col: pa.Array) -> bool:
    import numpy as np

    if isinstance(col, pa.ChunkedArray):
        return all(_all_finite(c) for c in col.chunks)
    if pa.types.is_fixed_size_list(col.type):
        return bool(np.isfinite(col.flatten().to_numpy(zero_copy_only=False)).all())
    return pa.compute.all(pa.compute.is_finite(col)).as_py() is not False


def _compatible(have: pa.DataType, want: pa.DataType) -> bool:
    if have == want:
        return True
    if pa.types.is_integer(want):
        return pa.types.is_integer(have) and not pa.types.is_floating(have)
    if pa.types.is_floating(want):
        return pa.types.is_floating(have)
    if pa.types.is_string(want):
        return pa.types.is_string(have) or pa.types.is_large_string(have)
    return False
