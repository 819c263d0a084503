"""JSON values in etcd: compact, with a `"v"` schema version on every record."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec

from seglake.errors import SeglakeError

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


def decode(raw: bytes, key: str = "") -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise SeglakeError(f"corrupt record at {key!r}: {e}") from None
    if not isinstance(data, dict) or "v" not in data:
        raise SeglakeError(f"corrupt record at {key!r}: no schema version")
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
        raise SeglakeError(f"corrupt record at {key!r}: {e}") from None
