"""Create, two-phase: begin (PENDING, resumable by its owner), capture every Flushed
segment at one etcd revision, then the write (write.py) commits."""

from __future__ import annotations

import time


from seglake.errors import Conflict, StateError
from seglake.meta import Meta
from seglake.meta.catalog import CREATED, DEFAULT_DB
from seglake.meta.kv import retry_on_conflict
from seglake.meta.snapshots import COMMITTED, PENDING, SnapshotRecord
from seglake.names import check_text, validate_name
from seglake.storage import Store
from seglake import limits
from seglake.lifecycle.snapshot.common import SEGMENTS_PER_MANIFEST
from seglake.lifecycle.snapshot.write import write_all


def _validate_ttl(ttl: float | None) -> float | None:
    if ttl is None:
        return None
    ttl = limits.check("snapshot_ttl", "snapshot ttl (seconds)", ttl)  # finite, in range: NaN never "no TTL"
    return ttl or None  # 0 means no TTL


def begin(meta: Meta, collection: str, name: str, description: str = "", *, db: str = DEFAULT_DB,
          ttl: float | None = None, owner: str = "", now: float | None = None) -> SnapshotRecord:
    """Validate and write the PENDING record (with its first heartbeat). Idempotent for
    the same non-empty owner: a re-run resumes its record and clears a recorded failure."""
    validate_name("collection", collection)
    validate_name("snapshot", name)
    validate_name("db", db)
    ttl = _validate_ttl(ttl)
    check_text("snapshot description", description, 1024)
    coll = meta.catalog.get_by_name(collection, db)
    if coll.state != CREATED:
        raise StateError(f"collection {collection!r} is {coll.state}; snapshots need a live collection")
    now = time.time() if now is None else now
    existing = meta.snapshots.find(coll.collection_id, name)
    if existing is not None:
        if owner and existing.owner == owner and existing.state in (PENDING, COMMITTED):
            return _resume(meta, existing, now)  # our own create, re-run after a crash
        raise Conflict(f"snapshot {name!r} already exists for collection {collection!r} ({existing.state})")
    _check_not_imported(meta, coll, name)
    rec = SnapshotRecord(
        snapshot_id=meta.ids.allocate(), collection_id=coll.collection_id, collection_name=coll.name,
        db=coll.db, name=name, state=PENDING, created_at=now, description=description, owner=owner,
        expires_at=now + ttl if ttl else None, partitions=len(coll.partitions),
        requested_revision=meta.kv.revision())  # every flush that finished before this is <= it
    return meta.snapshots.create_pending(rec)


def _check_not_imported(meta: Meta, coll, name: str) -> None:
    """An imported snapshot (lifecycle/backup/imports.py) is found by its collection's NAME,
    db and snapshot name (its collection is not in the catalog), one snapshot per such
    triple: a live collection of that name taking a snapshot of that name would make the
    same `restore` by name give other rows from then on (resolve prefers the live one).
    Conflict, naming the imported one."""
    from seglake.meta import codec

    for kv in meta.kv.range(meta.keys.backup_imports_prefix()):
        try:
            plan = codec.loads(kv.value, kv.key)
            same = (plan["collection"], plan["db"], plan["snapshot"]) == (coll.name, coll.db, name)
        except (ValueError, KeyError, TypeError):
            continue
        if not same or int(plan["collection_id"]) == coll.collection_id:
            continue
        rec = meta.snapshots.find(int(plan["collection_id"]), name)
        if rec is not None and rec.snapshot_id == plan.get("snapshot_id"):
            raise Conflict(f"snapshot {name!r} of a collection named {coll.name!r} in db {coll.db!r} is an imported "
                           f"bundle ({plan.get('bundle')!r}, imported collection id {rec.collection_id}), which "
                           f"restores find by that name; take this snapshot under another name")


def _resume(meta: Meta, rec: SnapshotRecord, now: float) -> SnapshotRecord:
    """Our own PENDING record again: clear a final failure, beat, return it as it is now."""
    if rec.state != PENDING:
        return rec

    def clear_failed() -> None:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
        if cur.snapshot_id == rec.snapshot_id and cur.state == PENDING and cur.failed:
            meta.snapshots.update(kv, cur.replace(failed=False))
    retry_on_conflict(clear_failed, f"resume snapshot {rec.name!r}")
    return meta.snapshots.heartbeat(rec, now, "begin")


def create(meta: Meta, store: Store, collection: str, name: str, description: str = "", *,
           db: str = DEFAULT_DB, ttl: float | None = None, owner: str = "",
           per_file: int = SEGMENTS_PER_MANIFEST) -> SnapshotRecord:
    """Two-phase create, inline. Returns the COMMITTED record."""
    rec = begin(meta, collection, name, description, db=db, ttl=ttl, owner=owner)
    if rec.state == COMMITTED:
        return rec
    return write_all(meta, store, rec, per_file)
