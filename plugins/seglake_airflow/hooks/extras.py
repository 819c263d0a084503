"""The `extra` of a connection seglake reads, checked in one place: an unknown key is
refused naming the closest valid one (ConfigError), as the config refuses an unknown key.

Before, a misspelt key was ignored and its default used: `etcd_default` with
`{"endpoint": "10.0.0.5:2379"}` used the connection's host (another etcd), `{"rooot":
"prod"}` the root `seglake` (another cluster's metadata, or none); `seglake_backup` with
`{"endpoint": ...}` sent the backup to AWS instead of the local S3; a Milvus connection
with `{"s3_secret": ...}` went without its secret. A connection seglake owns (etcd,
seglake_backup, seglake_milvus, a milvus_restore target) takes only the keys seglake
reads; `aws_default` is shared with Airflow's Amazon provider, whose other keys are its
own, so there only a near miss of a key seglake reads (`endpoint`, `region`) is refused.
Only key names are said, never a value (an extra may hold a secret)."""

from __future__ import annotations

import difflib
from typing import Any, Iterable, Mapping


def checked_extra(conn_id: str, extra: Mapping[str, Any] | None, valid: Iterable[str], *,
                  shared: bool = False) -> Mapping[str, Any]:
    """`extra` (a connection's extra_dejson) when every key is one seglake reads, else
    ConfigError naming the connection, the key and the closest valid key."""
    from seglake.contract import closest
    from seglake.errors import ConfigError

    extra = extra or {}
    if not isinstance(extra, Mapping):
        raise ConfigError(f"connection {conn_id!r}: its extra must be a JSON object")
    valid = sorted(valid)
    for key in extra:
        if key in valid:
            continue
        if shared and not difflib.get_close_matches(str(key), valid, n=1, cutoff=0.6):
            continue   # another reader's key (the Amazon provider's role_arn, config_kwargs, ...)
        shown = str(key) if len(str(key)) <= 40 else str(key)[:37] + "..."
        raise ConfigError(f"connection {conn_id!r}: unknown extra key {shown!r}{closest(str(key), valid)}; "
                          f"seglake reads {', '.join(valid)}")
    return extra
