"""Drop (COMMITTED -> DELETING -> files -> record, resumable; refused while pinned) and
GC's reclaim of an abandoned PENDING create (claim first, then remove)."""

from __future__ import annotations

import math
import time


from seglake import faults
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.kv import retry_on_conflict
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING, SnapshotRecord
from seglake.storage import Store, layout
from seglake.lifecycle.snapshot.common import MIN_PENDING_TIMEOUT
from seglake.lifecycle.snapshot.read import resolve


# -- drop / reclaim ---------------------------------------------------------------------------


def snapshot_files(store: Store, rec: SnapshotRecord) -> list[str]:
    """Every object of the snapshot: every attempt's manifests and metadata (and the
    pre-attempt layout's), whoever won. Only keys that rebuild exactly from the layout's
    builders for this snapshot id count; anything else under its prefixes is left alone."""
    c, sid = rec.collection_id, rec.snapshot_id
    keys = {o.key for prefix in (layout.snapshot_manifests_prefix(c, sid), layout.snapshot_metadata_prefix(c, sid))
            for o in store.list(prefix) if layout.is_snapshot_file(c, sid, o.key)}
    legacy = layout.snapshot_metadata(c, sid)
    keys.update(k for k in (legacy, rec.location) if k and layout.is_snapshot_file(c, sid, k) and store.exists(k))
    return sorted(keys)


def remove_files_and_record(meta: Meta, store: Store, rec: SnapshotRecord) -> int:
    """Delete a DELETING snapshot's files, then its record. Resumable. Refuses any other
    state: a PENDING create is reclaimed only through reclaim_abandoned's claim."""
    try:
        cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
    except NotFound:
        return 0
    if cur.snapshot_id != rec.snapshot_id:
        return 0
    if cur.state != DELETING:
        raise StateError(f"snapshot {rec.name!r} is {cur.state}; only a DELETING snapshot's files are removed")
    keys = snapshot_files(store, cur)
    errors = store.delete_many(keys)
    if errors:
        raise SeglakeError(f"could not delete {len(errors)} snapshot files, first: {errors[0].key}: {errors[0].error}")
    try:
        meta.snapshots.remove(kv, cur)
    except Conflict:
        now_rec = meta.snapshots.find(rec.collection_id, rec.name)
        if now_rec is not None and now_rec.snapshot_id == rec.snapshot_id:
            raise
        # a concurrent remover (a second GC, a resumed drop) finished first
    return len(keys)


def reclaim_abandoned(meta: Meta, store: Store, rec: SnapshotRecord, timeout: float,
                      now: float | None = None) -> bool:
    """GC's stale-PENDING cleanup: claim PENDING -> DELETING if no writer has beaten for
    `timeout` seconds (at least MIN_PENDING_TIMEOUT), and only then delete the files and
    the record. False, touching nothing, when the create is alive, committed or gone."""
    now = time.time() if now is None else now
    for what, v in (("snapshot_pending_timeout", timeout), ("now", now)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValidationError(f"{what} must be a finite non-negative number of seconds, got {v!r}")
    claimed = meta.snapshots.claim_abandoned(rec, max(float(timeout), MIN_PENDING_TIMEOUT), now)
    if claimed is None:
        return False
    faults.point("snapshot.reclaim_after_claim")
    remove_files_and_record(meta, store, claimed)
    return True


def purge(meta: Meta, store: Store, rec: SnapshotRecord) -> int:
    """Demo reset / test cleanup only: whatever its state, DELETING (guarded), then files
    and record. A writer still at work loses its commit (SnapshotLost)."""
    def to_deleting() -> SnapshotRecord | None:
        try:
            cur, kv = meta.snapshots.get(rec.collection_id, rec.name)
        except NotFound:
            return None
        if cur.snapshot_id != rec.snapshot_id or cur.state == DELETING:
            return cur
        return meta.snapshots.update(kv, cur.replace(state=DELETING))
    cur = retry_on_conflict(to_deleting, f"purge snapshot {rec.name!r}")
    return 0 if cur is None or cur.snapshot_id != rec.snapshot_id else remove_files_and_record(meta, store, cur)


def drop(meta: Meta, store: Store, collection: str, name: str, *, db: str = DEFAULT_DB,
         collection_id: int | None = None) -> dict:
    rec, _ = resolve(meta, collection, name, db=db, collection_id=collection_id)
    return drop_by_id(meta, store, rec.collection_id, name)


def drop_by_id(meta: Meta, store: Store, collection_id: int, name: str, *, now: float | None = None) -> dict:
    rec, kv = meta.snapshots.get(collection_id, name)
    if rec.state == PENDING:
        raise StateError(f"snapshot {name!r} is PENDING (being created); it cannot be dropped. Wait for it "
                         "to commit, or for GC to reclaim it once its writer stopped (snapshot_pending_timeout)")
    if rec.state == COMMITTED:
        if by := meta.snapshots.pinned_by(rec, time.time() if now is None else min(now, time.time())):   # and leases
            until = (["the copy jobs finish"] if any(b.startswith("copy job") for b in by) else []) + \
                (["the pins are removed (`seglake snapshots unpin ID`) or expire"]
                 if any(b.startswith("pin ") for b in by) else [])
            raise Conflict(f"snapshot {name!r} is pinned ({', '.join(by)}): drop it after {' and '.join(until)}")
        from seglake.lifecycle.pitr.window import held_snapshots
        if why := held_snapshots(meta).get((rec.collection_id, rec.snapshot_id)):
            raise Conflict(f"snapshot {name!r} is held by {why}: every restore to an instant of the window "
                           f"starts from it; shorten or clear the window (`seglake pitr`) to drop it")
        rec = meta.snapshots.update(kv, rec.replace(state=DELETING),
                                    reason=f"snapshot {name!r} changed while dropping; retry")
    faults.point("snapshot.drop_after_deleting")
    removed = remove_files_and_record(meta, store, rec)
    faults.point("snapshot.drop_after_record")   # gone, not yet reported: a retry must not turn red
    return {"snapshot": name, "collection_id": collection_id, "files_removed": removed}
