"""JSON values in etcd: compact, with a `"v"` schema version on every record."""

from __future__ import annotations

import json
from typing import Any

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
