"""Operators' pins (Milvus 3.0's pin_snapshot_data / unpin_snapshot_data)."""

from __future__ import annotations

import logging
import time


from seglake.errors import NotFound, StateError, ValidationError
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB
from seglake.names import check_text, validate_name
from seglake.progress import utc_time
from seglake import limits
from seglake.lifecycle.snapshot.read import resolve

log = logging.getLogger(__name__)


# -- operators' pins (Milvus 3.0's pin_snapshot_data / unpin_snapshot_data) ------------------
def pin(meta: Meta, collection: str, name: str, ttl: float, *, db: str = DEFAULT_DB, by: str = "",
        collection_id: int | None = None, now: float | None = None) -> dict:
    """Pin a COMMITTED snapshot for `ttl` seconds (1 s .. 365 days): it cannot be dropped
    (nor expire), so GC keeps every file it references; returns the pin (its `pin_id` is
    what unpin takes). Checked before any change; the pin vanishes by itself at expiry."""
    ttl = limits.check("pin_ttl", "pin ttl (seconds)", ttl)
    check_text("pin 'by'", by, 256)
    rec, _ = resolve(meta, collection, name, db=db, collection_id=collection_id)
    now = time.time() if now is None else now
    if meta.snapshots.expired(rec, now):
        raise StateError(f"snapshot {name!r} expired at {utc_time(rec.expires_at)} (its TTL); GC removes it: "
                         f"an expired snapshot cannot be pinned")
    pin_id = meta.ids.allocate()
    meta.snapshots.hold(rec.collection_id, rec.name, pin_id, now + ttl, now, by=by)
    return meta.snapshots.pin_record(pin_id) or {"pin_id": pin_id}


def unpin(meta: Meta, pin_id: int) -> dict:
    """Remove pin `pin_id`; NotFound (one sentence) for an unknown or expired-and-removed id."""
    if isinstance(pin_id, bool) or not isinstance(pin_id, int) or pin_id <= 0:
        raise ValidationError(f"pin id must be a positive integer, got {pin_id!r}")
    return meta.snapshots.release(pin_id)


def list_pins(meta: Meta, collection: str | None = None, *, db: str = DEFAULT_DB,
              now: float | None = None) -> list[dict]:
    """Unexpired pins (of one collection by name, or all), oldest first."""
    now = time.time() if now is None else now
    cid = None
    if collection is not None:
        validate_name("collection", collection)
        try:   # the live collection of that name: its pins, not a dropped namesake's
            cid = meta.catalog.get_by_name(collection, db).collection_id
        except NotFound:
            pass
    docs = meta.snapshots.pin_records()
    for d in docs:
        if "unreadable" in d:   # damaged: named in the log, never judged expired (remove_expired_holds)
            log.warning("pin record %s is unreadable (kept, not listed): %s", d["key"], d["unreadable"])
    out = [d for d in docs if "unreadable" not in d and d["expires_at"] > now
           and (collection is None or (d["collection_id"] == cid if cid is not None
                                       else (d["collection"] == collection and d["db"] == db)))]
    return sorted(out, key=lambda d: (d["created_at"], d["pin_id"]))
