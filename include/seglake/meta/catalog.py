"""Collections: schema, partitions, shards -> virtual channels, and state.

    Created --drop--> Dropping --(segments dropped, channels released)--> Dropped
    Importing (a restore target: not usable yet) --last step of the copy job--> Created
    Importing --rollback (one txn, name freed)--> Dropped

A name is unique per database through create-if-absent on `catalog/names/{db}/{name}`;
the collection record and the name key are written in one guarded transaction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Iterator

from seglake import limits
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Delete, Put, absent, retry_on_conflict, unchanged
from seglake.names import validate_name

if TYPE_CHECKING:
    from seglake.meta import Meta

CREATED, DROPPING, DROPPED, IMPORTING = "Created", "Dropping", "Dropped", "Importing"
COLLECTION_TRANSITIONS = {CREATED: {DROPPING}, DROPPING: {DROPPED}, DROPPED: set(),
                          IMPORTING: {CREATED, DROPPED}}

SCALAR_TYPES = {"Bool", "Int8", "Int16", "Int32", "Int64", "Float", "Double", "VarChar"}
VECTOR_TYPES = {"FloatVector"}
MAX_DIM = 32768
FIELD_ID_MIN = 100      # Milvus's first user field id; 0 and 1 are RowID and Timestamp
PCHANNEL_COUNT = 16
PCHANNEL_PREFIX = "seglake-dml_"   # pchannel names: pchannel_name(i)
DEFAULT_PARTITION = "_default"
DEFAULT_DB = "default"


@dataclass(frozen=True)
class Field:
    field_id: int
    name: str
    dtype: str
    is_primary: bool = False
    dim: int | None = None


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...]

    @classmethod
    def build(cls, fields: list[dict] | list[Field]) -> "Schema":
        """Assign field ids from 100 (Milvus's first user field id) and validate."""
        out = []
        for i, f in enumerate(fields):
            if isinstance(f, Field):
                out.append(f)
            else:
                out.append(Field(field_id=f.get("field_id", 100 + i), name=f["name"], dtype=f["dtype"],
                                 is_primary=bool(f.get("is_primary", False)), dim=f.get("dim")))
        schema = cls(tuple(out))
        schema.validate()
        return schema

    def validate(self) -> None:
        """Names full-match the field pattern; ids are integers in FIELD_ID_MIN..ID_MAX
        (0 and 1 are the row id and timestamp columns), unique; is_primary a bool; a
        vector's dim an integer in 1..MAX_DIM, a scalar's None; one Int64 primary key; a
        vector field."""
        names, ids = set(), set()
        for f in self.fields:
            validate_name("field", f.name)
            if type(f.field_id) is not int or not FIELD_ID_MIN <= f.field_id <= limits.ID_MAX:
                raise ValidationError(f"field {f.name!r}: field_id {f.field_id!r} is not an integer in "
                                      f"{FIELD_ID_MIN}..{limits.ID_MAX}")
            if type(f.is_primary) is not bool:
                raise ValidationError(f"field {f.name!r}: is_primary {f.is_primary!r} is not true or false")
            if f.name in names or f.field_id in ids:
                raise ValidationError(f"duplicate field {f.name!r} / id {f.field_id}")
            names.add(f.name)
            ids.add(f.field_id)
            if f.dtype in VECTOR_TYPES:
                if type(f.dim) is not int or not 1 <= f.dim <= MAX_DIM:
                    raise ValidationError(f"vector field {f.name!r} needs dim in 1..{MAX_DIM}, got {f.dim!r}")
            elif f.dtype not in SCALAR_TYPES:
                raise ValidationError(f"field {f.name!r}: unknown type {f.dtype!r}")
            elif f.dim is not None:
                raise ValidationError(f"field {f.name!r}: a {f.dtype} field has no dim (got {f.dim!r})")
        primaries = [f for f in self.fields if f.is_primary]
        if len(primaries) != 1 or primaries[0].dtype != "Int64":
            raise ValidationError("schema needs exactly one Int64 primary key field")
        if not any(f.dtype in VECTOR_TYPES for f in self.fields):
            raise ValidationError("schema needs a FloatVector field")

    @property
    def primary(self) -> Field:
        return next(f for f in self.fields if f.is_primary)

    def to_json(self) -> list[dict]:
        return [asdict(f) for f in self.fields]

    @classmethod
    def from_json(cls, data: list[dict]) -> "Schema":
        return cls(tuple(Field(**f) for f in data))


@dataclass(frozen=True)
class Partition:
    partition_id: int
    name: str


@dataclass(frozen=True)
class Collection:
    collection_id: int
    name: str
    db: str
    schema: Schema
    partitions: tuple[Partition, ...]
    shards: int
    vchannels: tuple[str, ...]
    state: str = CREATED
    created_ts: int = 0
    properties: dict = field(default_factory=dict)

    def partition(self, name: str) -> Partition:
        for p in self.partitions:
            if p.name == name:
                return p
        raise NotFound(f"partition {name!r} not found in collection {self.name!r}")

    def to_json(self) -> dict:
        return {
            "collection_id": self.collection_id, "name": self.name, "db": self.db,
            "schema": self.schema.to_json(),
            "partitions": [asdict(p) for p in self.partitions],
            "shards": self.shards, "vchannels": list(self.vchannels), "state": self.state,
            "created_ts": self.created_ts, "properties": self.properties,
        }

    @classmethod
    def from_json(cls, d: dict) -> "Collection":
        return cls(
            collection_id=d["collection_id"], name=d["name"], db=d["db"],
            schema=Schema.from_json(d["schema"]),
            partitions=tuple(Partition(**p) for p in d["partitions"]),
            shards=d["shards"], vchannels=tuple(d["vchannels"]), state=d["state"],
            created_ts=d.get("created_ts", 0), properties=d.get("properties", {}),
        )


def pchannel_name(i: int) -> str:
    """The i-th physical channel (0 <= i < PCHANNEL_COUNT): `seglake-dml_{i}`."""
    return f"{PCHANNEL_PREFIX}{i}"


def vchannel_names(collection_id: int, shards: int) -> tuple[str, ...]:
    """Milvus style: shard i of collection c rides pchannel `seglake-dml_{k}` as `..._{c}v{i}`."""
    return tuple(f"{pchannel_name((collection_id + i) % PCHANNEL_COUNT)}_{collection_id}v{i}" for i in range(shards))


def pchannel_of(vchannel: str) -> str:
    return vchannel.rsplit("_", 1)[0]


def shard_of(vchannel: str) -> int:
    """The shard index i of a vchannel `..._{c}v{i}` (restore maps source shard i to
    target shard i, so rows stay where the WAL routes their primary keys)."""
    tail = vchannel.rsplit("_", 1)[-1]
    c, sep, i = tail.partition("v")
    if not (sep and c.isdigit() and i.isdigit() and c.isascii() and i.isascii()):
        raise ValueError(f"not a vchannel name: {vchannel!r}")
    return int(i)


class Catalog:
    def __init__(self, meta: "Meta"):
        self.meta = meta
        self.kv = meta.kv
        self.keys = meta.keys

    def create(self, name: str, schema: Schema | list[dict], *, db: str = DEFAULT_DB,
               partitions: list[str] | None = None, shards: int = 1,
               properties: dict | None = None, state: str = CREATED) -> Collection:
        """Create-if-absent on the name: of two concurrent creates, exactly one wins.
        state=Importing creates a restore target that readers must not use yet."""
        validate_name("collection", name)
        validate_name("db", db)
        schema = schema if isinstance(schema, Schema) else Schema.build(schema)
        schema.validate()
        partitions = partitions or [DEFAULT_PARTITION]
        for p in partitions:
            validate_name("partition", p)
        if len(set(partitions)) != len(partitions):
            raise ValidationError("duplicate partition names")
        if not isinstance(shards, int) or not 1 <= shards <= 64:
            raise ValidationError(f"shards must be in 1..64, got {shards!r}")
        if state not in (CREATED, IMPORTING):
            raise ValidationError(f"a collection is created Created or Importing, not {state!r}")
        if self.kv.get(self.keys.collection_name(db, name)) is not None:
            raise Conflict(f"collection {name!r} already exists in db {db!r}")

        first = self.meta.ids.allocate(1 + len(partitions))
        coll = Collection(
            collection_id=first, name=name, db=db, schema=schema,
            partitions=tuple(Partition(first + 1 + i, p) for i, p in enumerate(partitions)),
            shards=shards, vchannels=vchannel_names(first, shards),
            created_ts=self.meta.tso.now(), properties=dict(properties or {}), state=state,
        )
        name_key = self.keys.collection_name(db, name)
        self.kv.txn(
            [absent(name_key)],
            [Put(self.keys.collection(first), encode(coll.to_json())), Put(name_key, str(first))],
            reason=f"collection {name!r} already exists in db {db!r}",
        )
        return coll

    def get(self, collection_id: int) -> Collection:
        kv = self.kv.get(self.keys.collection(collection_id))
        if kv is None:
            raise NotFound(f"collection id {collection_id} not found")
        return Collection.from_json(decode(kv.value, kv.key))

    def get_by_name(self, name: str, db: str = DEFAULT_DB) -> Collection:
        validate_name("collection", name)
        validate_name("db", db)
        kv = self.kv.get(self.keys.collection_name(db, name))
        if kv is None:
            raise NotFound(f"collection {name!r} not found in db {db!r}")
        return self.get(int(kv.value))

    def list(self, db: str | None = None, include_dropped: bool = False) -> Iterator[Collection]:
        for kv in self.kv.range(self.keys.collections_prefix()):
            c = Collection.from_json(decode(kv.value, kv.key))
            if (db is None or c.db == db) and (include_dropped or c.state != DROPPED):
                yield c

    def set_state(self, collection_id: int, to_state: str, expect: str | None = None) -> Collection:
        """Compare-guarded state change; idempotent when already in `to_state`."""
        key = self.keys.collection(collection_id)
        kv = self.kv.get(key)
        if kv is None:
            raise NotFound(f"collection id {collection_id} not found")
        coll = Collection.from_json(decode(kv.value, key))
        if coll.state == to_state:
            return coll
        if expect is not None and coll.state != expect:
            raise StateError(f"collection {coll.name!r} is {coll.state}, expected {expect}")
        if to_state not in COLLECTION_TRANSITIONS[coll.state]:
            raise StateError(f"collection {coll.name!r}: {coll.state} -> {to_state} not allowed")
        new = Collection(**{**coll.__dict__, "state": to_state})
        self.kv.txn([unchanged(kv)], [Put(key, encode(new.to_json()))])
        return new

    def remove(self, collection_id: int, reason: str = "") -> Collection:
        """Mark a collection Dropped and free its name in one guarded transaction (the
        record stays so GC can still find its segments). Idempotent. Used by a restore's
        rollback, where the collection never became usable."""
        key = self.keys.collection(collection_id)

        def attempt() -> Collection:
            kv = self.kv.get(key)
            if kv is None:
                raise NotFound(f"collection id {collection_id} not found")
            coll = Collection.from_json(decode(kv.value, key))
            name_key = self.keys.collection_name(coll.db, coll.name)
            name_kv = self.kv.get(name_key)
            ops = []
            compares = [unchanged(kv)]
            if name_kv is not None and name_kv.value == str(collection_id).encode():
                ops.append(Delete(name_key))
                compares.append(unchanged(name_kv))
            if coll.state == DROPPED and not ops:
                return coll
            props = {**coll.properties, **({"dropped_reason": reason} if reason else {})}
            new = Collection(**{**coll.__dict__, "state": DROPPED, "properties": props})
            self.kv.txn(compares, [Put(key, encode(new.to_json())), *ops])
            return new
        return retry_on_conflict(attempt, f"remove collection id {collection_id}")

    def set_properties(self, collection_id: int, **props) -> Collection:
        key = self.keys.collection(collection_id)
        kv = self.kv.get(key)
        if kv is None:
            raise NotFound(f"collection id {collection_id} not found")
        coll = Collection.from_json(decode(kv.value, key))
        new = Collection(**{**coll.__dict__, "properties": {**coll.properties, **props}})
        self.kv.txn([unchanged(kv)], [Put(key, encode(new.to_json()))])
        return new

    def purge(self, collection_id: int) -> None:
        """Remove a collection's records outright: its segments, then the record, then
        the name (children before the parent, so a crash leaves a resumable state)."""
        coll = self.get(collection_id)
        self.kv.delete_prefix(self.keys.segments_prefix(collection_id))
        self.kv.write([Delete(self.keys.collection(collection_id)),
                       Delete(self.keys.collection_name(coll.db, coll.name))])
