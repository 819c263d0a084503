"""Operators' controls of GC in etcd: pauses (global or per collection, on a lease) and
the recorded settings of scheduled runs."""

from __future__ import annotations

import json
import time

from seglake.meta import codec
from seglake import limits
from seglake.names import check_text
from seglake.meta import Meta


# -- pause / resume -------------------------------------------------------------------------
def pause(meta: Meta, collection_id: int | None = None, ttl: float = 3600, reason: str = "") -> dict:
    """Pause GC globally or for one collection until `ttl` seconds pass (an etcd lease)."""
    ttl = limits.check("gc_pause_ttl", "gc pause ttl", ttl)
    check_text("gc pause reason", reason, 1024)
    key = _pause_key(meta, collection_id)
    lease = meta.kv.grant_lease(int(max(1, ttl)))
    until = time.time() + ttl
    meta.kv.put(key, json.dumps({"until": until, "reason": reason}), lease=lease)
    return {"scope": "all" if collection_id is None else collection_id, "until": until}


def resume(meta: Meta, collection_id: int | None = None) -> None:
    meta.kv.delete(_pause_key(meta, collection_id))


def _pause_key(meta: Meta, collection_id: int | None) -> str:
    return meta.keys.gc("pause", "all" if collection_id is None else str(collection_id))


def paused_scopes(meta: Meta) -> tuple[bool, set[int]]:
    """(globally paused, paused collection ids)."""
    glob, colls = False, set()
    for kv in meta.kv.range(meta.keys.gc("pause") + "/"):
        scope = kv.key.rsplit("/", 1)[1]
        if scope == "all":
            glob = True
        else:
            colls.add(int(scope))
    return glob, colls


# -- the settings of scheduled runs ------------------------------------------------------------
# A scheduled gc run never uses the form's defaults: it runs with the conf an operator
# recorded on purpose (`seglake gc schedule set`), and is refused until there is one.
def set_schedule(meta: Meta, conf: dict, floor: float, by: str = "") -> dict:
    """Record the conf of scheduled gc runs, checked first like a triggered conf (the
    DAG's contract, the tolerance floor); returns the record. Fail-fast, one put."""
    from seglake.contract import check_conf, check_gc_floor

    checked = check_conf("gc", conf)
    check_gc_floor(checked, floor)
    if checked["collection"] is not None:
        meta.catalog.get_by_name(checked["collection"], checked["db"])   # NotFound names it
    record = {"conf": checked, "set_at": time.time(), "set_by": by}
    meta.kv.put(meta.keys.gc("schedule"), json.dumps(record))
    return record


def get_schedule(meta: Meta) -> dict | None:
    """The record `set_schedule` wrote, or None."""
    kv = meta.kv.get(meta.keys.gc("schedule"))
    return None if kv is None else codec.loads(kv.value, kv.key)


def clear_schedule(meta: Meta) -> bool:
    """Remove the record (scheduled runs are refused again); True if there was one."""
    key = meta.keys.gc("schedule")
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True
