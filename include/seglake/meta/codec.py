"""JSON values in etcd: compact, with a `"v"` schema version on every record."""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec

from seglake.errors import SeglakeError

SCHEMA_VERSION = 1


def encode(record: dict[str, Any]) -> bytes:
    return json.dumps({"v": SCHEMA_VERSION, **record}, separators=(",", ":"), sort_keys=False).encode()


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
_PREFIX = b'{"v":%d,' % SCHEMA_VERSION
T = TypeVar("T")


def encode_struct(obj: msgspec.Struct) -> bytes:
    """A typed record as JSON with the schema version first: {"v":1,...}."""
    body = _ENCODER.encode(obj)
    return _PREFIX + body[1:] if body != b"{}" else _PREFIX[:-1] + b"}"


def decode_struct(raw: bytes, typ: type[T], key: str = "") -> T:
    """Typed decode (unknown fields such as "v" are skipped; newer versions refused)."""
    if not raw.startswith(_PREFIX):
        decode(raw, key)  # raises a clear error for corrupt or newer records
    dec = _DECODERS.get(typ)
    if dec is None:
        dec = _DECODERS[typ] = msgspec.json.Decoder(typ)
    try:
        return dec.decode(raw)
    except msgspec.DecodeError as e:
        raise SeglakeError(f"corrupt record at {key!r}: {e}") from None
