"""Restore a collection as it was at an instant, into a NEW collection:

    plan (planning.py: every refusal, read-only)
      -> the restore's set-up (seglake.lifecycle.restore.set_up): the Importing target
         and a copy job of the base snapshot (no snapshot: a job with nothing to copy),
         the plan kept on the target (restored_from.replay)
      -> the copy job (lifecycle/copyjob: plan, run, finalize; it leaves a point-in-time
         target Importing)
      -> the replay (replaying.py) -> the target Created.

The source is never written to. A re-run with the same source, instant and target (any
owner) resumes the same restore without planning again; the target name taken by
anything else is refused (restore's rules).
"""

from __future__ import annotations

from seglake.errors import Conflict, NotFound, StateError
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.copyjobs import CopyJob
from seglake.meta.kv import KeyValue, Put, absent, unchanged
from seglake.meta.codec import encode_struct
from seglake.lifecycle import restore as restores
from seglake.lifecycle.pitr.instants import parse_as_of
from seglake.lifecycle.pitr.planning import LogGap, OutsideWindow, Plan, plan as make_plan


def restore_as_of(meta, store, collection: str, target: str, as_of, *, db: str = DEFAULT_DB,
                  timeout: float = 3600.0, owner: str = "", engine: str = "auto", now: float | None = None,
                  max_bytes_per_second: float = 0, max_requests_per_second: float = 0,
                  origin: dict | None = None, planned: Plan | None = None) -> int:
    """Set up (or resume) the restore of `collection` as of `as_of` into `target`; returns
    the copy job id. Then: copyjob plan/run/finalize, pitr.replay. `planned`: the plan
    the caller already made of this very restore (planning.plan; one planning each)."""
    timeout, bps, rps = restores.check_request(target, db, timeout, owner, engine, max_bytes_per_second,
                                               max_requests_per_second, origin)
    ts = parse_as_of(as_of)
    p = _same_restore(meta, collection, db, target, ts)   # a re-run: the plan it began with
    if p is None and planned is not None:
        if (planned.collection, planned.db, planned.as_of) != (collection, db, ts):
            raise ValueError(f"the plan given is of {planned.db}.{planned.collection} as of {planned.as_of}, "
                             f"not of {db}.{collection} as of {ts}")
        p = planned
    if p is None:
        # every refusal first, the target name's included, then the exact judgement of the
        # instant (it issues a timestamp: a write to etcd)
        from seglake.lifecycle.pitr.planning import not_in_future

        p = make_plan(meta, store, collection, ts, db=db, now=now, exact=False)
        restores.check_target(meta, target, db, _identity(p))
        not_in_future(meta, ts)
    source = PitrSnapshotSource(meta, store, p) if p.snapshot is not None else LogSource(meta, p)
    return restores.set_up(meta, store, source, target, db=db, timeout=timeout, owner=owner, engine=engine,
                           now=now, max_bytes_per_second=bps, max_requests_per_second=rps, origin=origin)


def _same_restore(meta, collection: str, db: str, target: str, ts: int) -> Plan | None:
    """The plan of this same restore (same source collection and instant) if its target
    exists: a re-run resumes it (restore's set_up converges on its job) without planning
    again; None otherwise (set_up refuses a name taken by anything else, saying what)."""
    try:
        coll = meta.catalog.get_by_name(target, db)
    except NotFound:
        return None
    src = coll.properties.get("restored_from", {})
    if src.get("as_of") == ts and src.get("collection") == collection and isinstance(src.get("replay"), dict):
        return Plan(**src["replay"])
    return None


def undrop(meta, store, collection: str, target: str, *, db: str = DEFAULT_DB, timeout: float = 3600.0,
           owner: str = "", engine: str = "auto", now: float | None = None, origin: dict | None = None,
           backup=None, bundle: str | None = None, collection_id: int | None = None) -> int:
    """Set up (or resume) bringing a dropped collection back as `target`, as it was just
    before the drop: a restore to now whose replay ends at each vchannel's DropCollection
    (everything acknowledged before the drop is in the log before it). Needs the window
    to have been on and the drop inside it; refused for a collection that never wrote
    through the WAL. `backup` (a backup target's Store): when this store cannot give it
    (the collection's record, log or files gone), from the target alone -- its latest
    bundle and archived WAL up to the drop (from_target.undrop_from_target); refused,
    saying why for both, when neither can. Returns the copy job id; then copyjob and
    replay as for restore_as_of."""
    timeout, bps, rps = restores.check_request(target, db, timeout, owner, engine, 0, 0, origin)
    where, p = check_undrop(meta, store, collection, target, db=db, now=now, backup=backup, bundle=bundle,
                            collection_id=collection_id)
    if where == "target":
        from seglake.lifecycle.pitr import from_target

        return from_target.undrop_from_target(meta, store, backup, collection, target, db=db, timeout=timeout,
                                              owner=owner, engine=engine, origin=origin, planned=p)
    source = PitrSnapshotSource(meta, store, p) if p.snapshot is not None else LogSource(meta, p)
    source.identity = {**source.identity, "undrop": True}
    return restores.set_up(meta, store, source, target, db=db, timeout=timeout, owner=owner, engine=engine,
                           now=now, max_bytes_per_second=bps, max_requests_per_second=rps, origin=origin)


def check_undrop(meta, store, collection: str, target: str, *, db: str = DEFAULT_DB, now: float | None = None,
                 backup=None, bundle: str | None = None, collection_id: int | None = None):
    """Where an undrop of `collection` into `target` comes from and its plan: ("store",
    Plan) or, when this store cannot give it and `backup` is given, ("target", (Plan,
    bundle document)) -- a re-run of an undrop from the target resumes with its own plan.
    The refusal otherwise, saying why for both; `target` taken by anything but this same
    undrop: Conflict. `bundle`: from the target, start from that bundle (default: the
    latest one with log positions) -- this store is not tried then: the bundle names the
    incarnation of a reused name, this store would give its newest. Read-only."""
    if bundle is not None and backup is None:
        from seglake.errors import ValidationError
        raise ValidationError("bundle goes with an undrop from the backup target (from_target / --from-target)")
    try:
        t = meta.catalog.get_by_name(target, db)
        src = t.properties.get("restored_from", {})
        if not (src.get("undrop") and src.get("collection") == collection):
            raise Conflict(f"collection {target!r} already exists in db {db!r}; choose another target")
    except NotFound:
        pass
    here = f"bundle {bundle} named"   # a named bundle is the incarnation asked for: never this store's newest
    if bundle is None:
        try:
            return "store", plan_undrop(meta, store, collection, target, db=db, now=now, collection_id=collection_id)
        except (NotFound, OutsideWindow, LogGap, StateError) as e:
            if backup is None:
                raise
            here = e
    from seglake.lifecycle.pitr import from_target

    try:
        p, doc = from_target._same_undrop(backup, collection, db, meta, target, bundle)
        return "target", ((p, doc) if p is not None else
                          from_target.plan_undrop_from_target(meta, backup, collection, db=db, bundle=bundle))
    except (NotFound, OutsideWindow, LogGap) as there:
        raise type(there)(f"{db}.{collection} cannot be undropped: not from this store ({here}); not from "
                          f"the backup target ({there})") from None


def plan_undrop(meta, store, collection: str, target: str, *, db: str = DEFAULT_DB, now: float | None = None,
                collection_id: int | None = None) -> Plan:
    """The plan of undropping `collection` into `target` from this store (that same
    undrop's plan when `target` exists and is it), or the refusal. Read-only.
    `collection_id`: the dropped collection a run began on (a clear of that run re-runs it):
    refused when the name's newest collection is another one (a later namesake), never
    undropped in its place."""
    from seglake.lifecycle.drop import DROP_MODE, drop_began_ts, find
    from seglake.lifecycle.pitr.planning import purged_note
    from seglake.meta.catalog import DROPPED, DROPPING

    coll = find(meta, collection, db)
    if coll is None:
        raise NotFound(f"collection {collection!r} not found in db {db!r}{purged_note(meta, db, collection)}")
    if collection_id is not None and coll.collection_id != collection_id:
        raise StateError(f"collection {collection!r}: this run undropped collection id {collection_id}; the name's "
                         f"newest collection is now id {coll.collection_id} ({coll.state}), a later one: not undropped "
                         f"by a re-run of this run (trigger a new collection_undrop for it; bring id {collection_id} "
                         f"back from the backup target, naming its bundle)")
    if coll.state not in (DROPPING, DROPPED):
        earlier = [c.collection_id for c in meta.catalog.list(db=db, include_dropped=True)
                   if c.name == collection and c.state in (DROPPING, DROPPED)]
        also = (f"; an earlier collection of that name (id {max(earlier)}) was dropped, but this store undrops "
                f"the name's newest collection only: bring the earlier one back from the backup target, naming "
                f"its bundle (--from-target --bundle)") if earlier else ""
        raise StateError(f"collection {collection!r} is {coll.state}, not dropped: restore it to a time instead{also}")
    if coll.properties.get(DROP_MODE) != "wal":
        raise StateError(f"collection {collection!r} never wrote through the WAL: there is no log to bring it back "
                         "from; restore one of its snapshots instead")
    p = _same_undrop(meta, coll, db, target)
    if p is None:
        # every refusal first, read-only (issuing a timestamp writes to etcd): planned as of the global
        # mark (it bounds every timestamp issued so far), without the exact judgement of the instant
        _drop_in_window(meta, coll, collection, now)
        from seglake.meta.alloc import decode_mark
        seen = meta.kv.get(meta.tso.key)
        bound = decode_mark(seen.value, meta.tso.key) - 1 if seen is not None else 0
        make_plan(meta, store, collection, max(bound, coll.created_ts), db=db, now=now, dropped=coll,
                  window_instant=drop_began_ts(coll), exact=False)
        # its instant: above every timestamp any process issued before (a batched now() may lag
        # another process's last writes by up to BATCH_MAX_AGE: the replay would end below them)
        p = make_plan(meta, store, collection, meta.tso.reserve(1, linearizable=True), db=db, now=now, dropped=coll,
                      window_instant=drop_began_ts(coll))
    return p


def _drop_in_window(meta, coll, collection: str, now: float | None) -> None:
    """The window refusals planning.plan makes of an undrop, read-only (before its instant is issued)."""
    from seglake.lifecycle.drop import drop_began_ts
    from seglake.lifecycle.pitr import window

    w = window.window_of(meta, coll.collection_id)
    began = drop_began_ts(coll)
    if w is None or began is None:
        return   # (planning.plan says why)
    lo = window.oldest_instant(w, window.clock() if now is None else now)
    if began < lo:
        from seglake.lifecycle.pitr.instants import describe
        raise OutsideWindow(f"the drop at {describe(began)} is outside the point-in-time window of {collection!r} "
                            f"({w['window']}: the oldest instant is {describe(lo)})")


def _same_undrop(meta, coll, db: str, target: str) -> Plan | None:
    try:
        t = meta.catalog.get_by_name(target, db)
    except NotFound:
        return None
    src = t.properties.get("restored_from", {})
    if src.get("undrop") and src.get("collection_id") == coll.collection_id and isinstance(src.get("replay"), dict):
        return Plan(**src["replay"])
    return None


def _identity(p: Plan) -> dict:
    return {"collection": p.collection, "collection_id": p.collection_id, "snapshot": p.snapshot,
            "snapshot_id": p.snapshot_id, "as_of": p.as_of, "replay": p.to_json()}


def _with_all_partitions(doc: dict, p: Plan) -> dict:
    """The target gets the snapshot's partitions and any the source made since (by name)."""
    have = {x["name"] for x in doc["collection"]["partitions"]}
    extra = [{"partition_id": int(i), "name": n} for i, n in sorted(p.partitions.items(), key=lambda x: int(x[0]))
             if n not in have]
    return {**doc, "collection": {**doc["collection"], "partitions": [*doc["collection"]["partitions"], *extra]}}


class PitrSnapshotSource(restores.SnapshotSource):
    """The base snapshot, restored as any snapshot, with the instant and the plan in the
    target's identity."""

    def __init__(self, meta, store, p: Plan):
        rec, _ = meta.snapshots.get(p.collection_id, p.snapshot)
        super().__init__(meta, store, rec, p.collection, p.snapshot)
        self.plan = p
        self.identity = _identity(p)
        self.what = f"{p.collection!r} as of {p.as_of} (from snapshot {p.snapshot!r})"

    def read(self):
        doc, segs, held = super().read()
        return _with_all_partitions(doc, self.plan), segs, held


class LogSource(restores.RestoreSource):
    """No snapshot before the instant (the collection was born inside the window): an empty
    target of the source's schema, a copy job with nothing to copy, everything replayed."""

    def __init__(self, meta, p: Plan):
        self.meta, self.plan = meta, p
        self.identity = _identity(p)
        self.job_fields = {"source_collection_id": p.collection_id, "source_collection": p.collection,
                           "snapshot": "", "snapshot_id": 0}
        self.what = f"{p.collection!r} as of {p.as_of} (from its creation)"

    def read(self):
        coll = self.meta.catalog.get(self.plan.collection_id)
        doc = {"collection": {"schema": coll.schema.to_json(), "shards": coll.shards,
                              "partitions": [{"partition_id": x.partition_id, "name": x.name}
                                             for x in coll.partitions]}}
        return _with_all_partitions(doc, self.plan), [], {}

    def create_job(self, meta, job: CopyJob, claim: KeyValue) -> int:
        key = meta.keys.copy_job(job.job_id)
        meta.kv.txn([absent(key), unchanged(claim)], [Put(key, encode_struct(job))],
                    reason=f"restore job {job.job_id} could not be created")
        return job.job_id
