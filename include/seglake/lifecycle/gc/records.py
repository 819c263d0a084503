"""The records GC cleans after a sweep: stale PENDING, unfinished DELETING and expired
snapshots, copy jobs past retention, empty Dropped collections."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

from seglake.errors import Conflict, StateError
from seglake.lifecycle import copyjob, snapshot
from seglake.lifecycle.gc.options import GCOptions
from seglake.meta import Meta
from seglake.meta.kv import Delete, unchanged
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING
from seglake.storage import Store

log = logging.getLogger(__name__)


# -- dropped segments and records ----------------------------------------------------------------
def clean_records(meta: Meta, store: Store, opts: GCOptions, now: float | None = None) -> dict:
    """Stale PENDING / unfinished DELETING / expired snapshots, expired copy jobs and
    compaction unit records, and Dropped collections with nothing left."""
    now = time.time() if now is None else now
    out = defaultdict(int)
    out["expired_pins_removed"] = meta.snapshots.remove_expired_holds(now)
    from seglake.lifecycle.pitr.window import held_snapshots
    windows = held_snapshots(meta)   # the base snapshots of point-in-time windows (their own clock)
    for rec in list(meta.snapshots.list(opts.collection_id)):
        if rec.state == PENDING:  # reclaimed only when its writers stopped beating, claim first
            if snapshot.reclaim_abandoned(meta, store, rec, opts.snapshot_pending_timeout, now=now):
                out["stale_pending_snapshots"] += 1
        elif rec.state == DELETING:
            snapshot.remove_files_and_record(meta, store, rec)
            out["deleting_snapshots_finished"] += 1
        elif rec.state != COMMITTED or not meta.snapshots.expired(rec, now):
            continue
        elif (rec.collection_id, rec.snapshot_id) in windows:
            out["expired_snapshots_held_by_window"] += 1
        elif not meta.snapshots.pinned_by(rec, min(now, time.time())):
            try:
                snapshot.drop_by_id(meta, store, rec.collection_id, rec.name, now=now)
            except (Conflict, StateError):   # pinned (or changed) since the listing: the pin wins
                out["expired_snapshots_held"] += 1
                continue
            out["expired_snapshots"] += 1
    out["copy_jobs_removed"] = len(copyjob.cleanup_expired(meta, opts.copy_job_retention, now=now))
    from seglake import throttle    # rate-limit clocks of runs that were killed (a finished run deletes its own)
    out["stale_throttle_clocks_removed"] = throttle.remove_stale_clocks(meta, now=now)
    from seglake.lifecycle import compaction     # compaction unit records: the same retention
    out.update(compaction.expire_unit_records(meta, store, opts.copy_job_retention, now, opts.collection_id))

    from seglake.lifecycle.pitr.window import undroppable
    for coll in list(meta.catalog.list(include_dropped=True)):
        if coll.state != "Dropped" or (opts.collection_id is not None and coll.collection_id != opts.collection_id):
            continue
        if undroppable(meta, coll):   # its drop inside its window: an undrop needs the record (schema, vchannels)
            out["dropped_collections_held_by_window"] += 1
            continue
        if meta.kv.count(meta.keys.segments_prefix(coll.collection_id)) or \
                meta.kv.count(meta.keys.snapshots_prefix(coll.collection_id)):
            continue
        kv = meta.kv.get(meta.keys.collection(coll.collection_id))
        if kv is not None:   # with its retention and compaction policies, its compaction runs and history,
            # point-in-time window and the replay markers of a restore to a time into it (they keep a
            # replay exactly-once while it exists); what a database at an instant needs of it is kept
            meta.kv.txn([unchanged(kv)], [*_gone(meta, coll, now), Delete(kv.key),
                                          Delete(meta.keys.retention(coll.collection_id)),
                                          Delete(meta.keys.pitr_window(coll.collection_id)),
                                          Delete(meta.keys.compaction_policy(coll.collection_id)),
                                          Delete(meta.keys.compaction_run(coll.collection_id)),
                                          Delete(meta.keys.compaction_history_prefix(coll.collection_id),
                                                 prefix=True),
                                          Delete(meta.keys.pitr_replays_prefix(coll.collection_id), prefix=True)])
            out["dropped_collections_removed"] += 1
    out["gone_records_removed"] = _expire_gone(meta, now)
    return dict(out)


GONE_KEEP_S = 366 * 86400.0   # longer than the longest point-in-time window (limits: 365 days)


def _gone(meta: Meta, coll, now: float) -> list:
    """The tombstone of a purged Dropped collection: a whole database restored to an instant
    it lived in (pitr.database) refuses the set naming it, instead of leaving it out. None
    for one whose drop never began (a restore target rolled back: never usable; as
    planning.at_instant, which skips it)."""
    import json

    from seglake.lifecycle.drop import drop_began_ts
    from seglake.meta.kv import Put

    began = drop_began_ts(coll)
    if began is None:
        return []
    return [Put(meta.keys.pitr_gone(coll.collection_id), json.dumps(
        {"collection_id": coll.collection_id, "collection": coll.name, "db": coll.db,
         "created_ts": coll.created_ts, "drop_began_ts": began, "purged_at": now}))]


def _expire_gone(meta: Meta, now: float) -> int:
    from seglake.meta import codec

    n = 0
    for kv in meta.kv.range(meta.keys.pitr_gone_prefix()):
        try:
            old = now - codec.moment(codec.loads(kv.value, kv.key), "purged_at", kv.key) > GONE_KEEP_S
        except ValueError as e:   # damaged: its age is unknown, kept (a restore of the db refuses, naming it)
            log.warning("%s (kept)", e)
            old = False
        if old:
            meta.kv.delete(kv.key)
            n += 1
    return n
