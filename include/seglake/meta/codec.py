"""JSON values in etcd: compact, with a `"v"` schema version on every record; and THE
reader of every persisted record (etcd values, JSON on the store or the backup target):
`loads` refuses what Python's json reads silently (NaN, Infinity, 1e400 -- NaN compares
false both ways, so an expiry of NaN read as expired), `number` reads one numeric field
finite and in range. Both raise CorruptRecord naming the record; each destructive caller
says in one line what it keeps when a record is unreadable (fail closed)."""

from __future__ import annotations

import json
import logging
import math
from typing import Annotated, Any, TypeVar

import msgspec

from seglake.errors import CorruptRecord, SeglakeError

log = logging.getLogger(__name__)
SCHEMA_VERSION = 4      # the newest record version this seglake reads (writes: see encode_struct)
# v4: a compaction FOLD unit's record (lifecycle/compaction/folding): a seglake before
# L0 folding refuses it instead of treating it as a one-output unit (its GC would read
# an output id the record does not have)


def encode(record: dict[str, Any], version: int = 1) -> bytes:
    """A plain record as JSON with its schema version first (`version`: a record an older
    seglake must refuse rather than misread is written as a version it does not know)."""
    if not 1 <= version <= SCHEMA_VERSION:
        raise ValueError(f"record version {version} is not one this seglake writes (1..{SCHEMA_VERSION})")
    return json.dumps({"v": version, **record}, separators=(",", ":"), sort_keys=False).encode()


def loads(raw: bytes | str, key: str = "") -> Any:
    """A persisted record's JSON, strictly: msgspec's parser refuses NaN, (-)Infinity and
    numbers past a float's range, which Python's json reads as nan/inf.
    CorruptRecord (a ValueError) naming `key` for anything that is not such JSON."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise CorruptRecord(f"corrupt record at {key!r}: {e}") from None


def number(doc: Any, field: str, key: str = "", *, lo: float = 0.0, hi: float = 2.0**63, whole: bool = False) -> float:
    """doc[field] as a finite number in [lo, hi] (a time, a term, a count; `whole`: an int,
    as ids are): not a string ("nan" is one float() reads), not a bool, not null.
    CorruptRecord otherwise."""
    value = doc.get(field) if isinstance(doc, dict) else None
    if isinstance(value, bool) or not isinstance(value, int if whole else (int, float)) \
            or not (math.isfinite(value) if isinstance(value, float) else True) or not lo <= value <= hi:
        shown = "missing" if not isinstance(doc, dict) or field not in doc else repr(value)[:40]
        raise CorruptRecord(f"corrupt record at {key!r}: {field!r} is {shown}, not a number in [{lo:g}, {hi:g}]")
    return value


def readable(kvs, read=None) -> list:
    """read(kv) (default: loads) of every record in `kvs` that can be read; each one that
    cannot is named in the log and left out (a listing: its destructive readers refuse it)."""
    out = []
    for kv in kvs:
        try:
            out.append(read(kv) if read is not None else loads(kv.value, kv.key))
        except ValueError as e:
            log.warning("%s (left out of the listing)", e)
    return out


TIME_MAX = 32503680000.0   # 3000-01-01: a recorded time (epoch seconds) past it is damage
# A recorded time in a typed record (msgspec checks it at decode, not at construction): a
# negative or far-future one is damage, refused as CorruptRecord like NaN is -- a Dropped
# segment whose dropped_at is -1 was judged past every drop_tolerance at once.
Time = Annotated[float, msgspec.Meta(ge=0.0, le=TIME_MAX)]


def moment(doc: Any, field: str, key: str = "") -> float:
    """doc[field] as a recorded time: number(..., lo=0, hi=TIME_MAX), as a float."""
    return float(number(doc, field, key, hi=TIME_MAX))


def decode(raw: bytes, key: str = "") -> dict[str, Any]:
    data = loads(raw, key)
    if not isinstance(data, dict) or not isinstance(data.get("v"), int) or isinstance(data["v"], bool):
        raise CorruptRecord(f"corrupt record at {key!r}: no schema version")
    if data["v"] > SCHEMA_VERSION:
        raise SeglakeError(f"record at {key!r} has schema v{data['v']}, this seglake reads v{SCHEMA_VERSION}")
    data.pop("v")
    return data


_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[type, msgspec.json.Decoder] = {}
_PREFIXES = {v: b'{"v":%d,' % v for v in range(1, SCHEMA_VERSION + 1)}
_PREFIX = _PREFIXES[1]
T = TypeVar("T")
_KNOWN = tuple(_PREFIXES.values())   # records of a version this seglake reads: decoded at once


def encode_struct(obj: msgspec.Struct) -> bytes:
    """A typed record as JSON with its schema version first: {"v":1,...}, or the version
    the record asks for (`record_version`): a record that an older seglake would
    silently rewrite without a field that matters is written as a version it refuses
    (meta.segments.Segment with delta_partitions: v2; with compaction lineage: v3)."""
    prefix = _PREFIXES[getattr(obj, "record_version", 1)]
    body = _ENCODER.encode(obj)
    return prefix + body[1:] if body != b"{}" else prefix[:-1] + b"}"


def decode_struct(raw: bytes, typ: type[T], key: str = "") -> T:
    """Typed decode (unknown fields such as "v" are skipped; newer versions refused)."""
    if not raw.startswith(_KNOWN):
        decode(raw, key)  # raises a clear error for corrupt or newer records
    dec = _DECODERS.get(typ)
    if dec is None:
        dec = _DECODERS[typ] = msgspec.json.Decoder(typ)
    try:
        return dec.decode(raw)
    except msgspec.DecodeError as e:
        raise CorruptRecord(f"corrupt record at {key!r}: {e}") from None
