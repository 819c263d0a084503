"""DropCollection, Milvus's "Flush&Drop" plan.

    Created --begin_drop--> Dropping --(every vchannel released)--> Dropped (name freed)

`begin_drop` validates (exists; Dropped -> a report; Importing or the target of a running
copy job -> refused naming the job), flips Created -> Dropping in one guarded txn (the
name stays reserved) and appends a DropCollection message to each vchannel not yet
released, through the fenced WAL writer. The flusher (lifecycle/flush.py `on_drop`)
syncs every buffered segment of the vchannel (inserts and deletes before the drop's time
tick), then in one term-guarded txn marks the vchannel's segments Dropped (records kept,
`dropped_at` set), removes its checkpoint and adds it to the collection's
`released_vchannels`. `finish_drop` flips Dropping -> Dropped and deletes the name key in
one guarded txn once every vchannel is released. A collection that never saw a WAL
message (seeded or restored) has no flusher: its segments are marked Dropped and its
vchannels released directly by `begin_drop`.

Every step is idempotent: re-running on Dropping continues, on Dropped reports. Files
stay until GC reclaims Dropped segments after `drop_tolerance`; files a snapshot
references are kept by GC regardless.
"""

from __future__ import annotations

import time

from seglake.errors import NotFound, StateError
from seglake.meta.catalog import (CREATED, DEFAULT_DB, DROPPED as COLL_DROPPED, DROPPING, IMPORTING,
                                  Collection, pchannel_of)
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Delete, Put, retry_on_conflict, unchanged
from seglake.meta.segments import DROPPED
from seglake.names import validate_name
from seglake.wal.checkpoints import RELEASED

DROP_MODE = "drop_mode"             # "wal" (a flusher releases) or "direct" (never saw the WAL)
DROP_STARTED = "drop_started_at"
# a TSO timestamp issued when the drop began, before any DropCollection was appended (their
# ticks lie above it): the drop's instant in the clock the rows' ticks are on. The wall clock
# of DROP_STARTED is the dropper's; a writer's clock may run up to max_clock_skew ahead of it,
# and so may the ticks of writes acknowledged before the drop began.
DROP_STARTED_TS = "drop_started_ts"


def drop_began_ts(coll: Collection) -> int | None:
    """The instant (TSO) `coll`'s drop began: DROP_STARTED_TS, else (a drop begun before it
    was recorded) DROP_STARTED's wall clock; None when neither is recorded."""
    from seglake.meta.alloc import compose_ts

    ts = coll.properties.get(DROP_STARTED_TS)
    if isinstance(ts, int) and not isinstance(ts, bool) and ts > 0:
        return ts
    started = coll.properties.get(DROP_STARTED)
    if isinstance(started, (int, float)) and not isinstance(started, bool) and started == started:
        return compose_ts(int(float(started) * 1000))
    return None


def find(meta, name: str, db: str = DEFAULT_DB, collection_id: int | None = None) -> Collection | None:
    """The collection holding the name, else the newest Dropped one that had it. With
    `collection_id` (the one a drop began on): exactly that collection, or None when it
    is gone or never had this name; a later collection that took the name is never it."""
    validate_name("collection", name)
    validate_name("db", db)
    if collection_id is not None:
        try:
            coll = meta.catalog.get(collection_id)
        except NotFound:
            return None
        return coll if (coll.name, coll.db) == (name, db) else None
    try:
        return meta.catalog.get_by_name(name, db)
    except NotFound:
        pass
    gone = [c for c in meta.catalog.list(db=db, include_dropped=True) if c.name == name]
    return max(gone, key=lambda c: c.collection_id) if gone else None


def running_restore(meta, collection_id: int):
    """The copy job (Pending/Executing) whose target is the collection, else None."""
    from seglake.meta.copyjobs import JOB_EXECUTING, JOB_PENDING
    for job in meta.copyjobs.list():
        if job.target_collection_id == collection_id and job.state in (JOB_PENDING, JOB_EXECUTING):
            return job
    return None


def _held(coll: Collection) -> list[str]:
    released = set(coll.properties.get(RELEASED, ()))
    return [v for v in coll.vchannels if v not in released]


def _to_dropping(meta, coll: Collection, clock) -> Collection:
    """Created -> Dropping in one txn guarded on the record (and the name still ours)."""
    from seglake.wal.client import ANNOUNCED
    key = meta.keys.collection(coll.collection_id)

    def attempt() -> Collection:
        kv = meta.kv.get(key)
        if kv is None:
            raise NotFound(f"collection id {coll.collection_id} not found")
        cur = Collection.from_json(decode(kv.value, key))
        if cur.state != CREATED:
            return cur
        props = {**cur.properties, DROP_MODE: "wal" if cur.properties.get(ANNOUNCED) else "direct",
                 DROP_STARTED: clock(), DROP_STARTED_TS: meta.tso.reserve(1, linearizable=True)}
        new = Collection(**{**cur.__dict__, "state": DROPPING, "properties": props})
        meta.kv.txn([unchanged(kv)], [Put(key, encode(new.to_json()))])
        return new
    return retry_on_conflict(attempt, f"drop collection {coll.name!r}")


def _append_drops(meta, store, settings, coll: Collection) -> list[str]:
    """Append DropCollection on every vchannel still held (a duplicate is harmless:
    the flusher closes the vchannel on the first one)."""
    from seglake.wal import message as M
    from seglake.wal.client import WalClient
    held = _held(coll)
    by_p: dict[str, list] = {}
    for v in held:
        by_p.setdefault(pchannel_of(v), []).append(
            M.Message(M.DROP_COLLECTION, v, collection_id=coll.collection_id, props={"name": coll.name}))
    with WalClient(meta, store, settings) as c:
        for p, msgs in sorted(by_p.items()):
            c.writer(p).append(msgs)
    return held


def release_direct(meta, coll: Collection, clock=time.time) -> int:
    """For a collection no flusher serves: mark every segment Dropped (guarded batches,
    records kept) and release every vchannel. Returns how many segments changed."""
    refs = [s.ref for s in meta.segments.list(coll.collection_id) if s.state != DROPPED]
    n = meta.segments.transition(refs, DROPPED, now=clock())
    key = meta.keys.collection(coll.collection_id)

    def attempt() -> None:
        kv = meta.kv.get(key)
        cur = Collection.from_json(decode(kv.value, key))
        if cur.state != DROPPING or not _held(cur):
            return
        new = Collection(**{**cur.__dict__, "properties": {**cur.properties, RELEASED: list(cur.vchannels)}})
        ops = [Put(key, encode(new.to_json()))]
        ops += [Delete(meta.keys.channel_checkpoint(v)) for v in cur.vchannels]
        meta.kv.txn([unchanged(kv)], ops)
    retry_on_conflict(attempt, f"release the vchannels of {coll.name!r}")
    return n


def begin_drop(meta, store, settings, name: str, db: str = DEFAULT_DB, *, clock=time.time,
               collection_id: int | None = None) -> dict:
    """Validate, Created -> Dropping, DropCollection on every held vchannel (or, for a
    collection that never saw the WAL, drop its segments and release directly).
    Re-running on Dropping continues; on Dropped returns a report. `collection_id`: exactly
    that collection (a re-run of a drop that began on it), never a later one with the name."""
    coll = find(meta, name, db, collection_id)
    if coll is None:
        gone = purged(meta, name, db, collection_id)
        if gone is not None:
            return gone
        raise NotFound(f"collection {name!r} not found in db {db!r}"
                       + (f" (id {collection_id}, the one this drop began on)" if collection_id is not None else ""))
    if coll.state == COLL_DROPPED:
        return status(meta, coll, note="already Dropped")
    job = running_restore(meta, coll.collection_id)
    if job is not None:
        raise StateError(f"collection {name!r} is the target of running restore job {job.job_id} "
                         f"({job.state}); wait for it or roll it back before dropping")
    if coll.state == IMPORTING:
        raise StateError(f"collection {name!r} is Importing (a restore target, not usable yet); "
                         f"roll the restore back instead of dropping it")
    coll = _to_dropping(meta, coll, clock)
    if coll.state != DROPPING:
        raise StateError(f"collection {name!r} is {coll.state}, cannot drop")
    if coll.properties.get(DROP_MODE) == "direct":
        release_direct(meta, coll, clock)
    else:
        _append_drops(meta, store, settings, coll)
    return status(meta, meta.catalog.get(coll.collection_id))


def finish_drop(meta, name: str, db: str = DEFAULT_DB, *, clock=time.time,
                collection_id: int | None = None) -> dict:
    """Dropping -> Dropped and the name freed, in one txn guarded on the record and the
    name key, once every vchannel is released. Raises StateError naming the vchannels
    still held; on Dropped reports. `collection_id`: the collection the drop began on."""
    coll = find(meta, name, db, collection_id)
    if coll is None:
        gone = purged(meta, name, db, collection_id)
        if gone is not None:
            return gone
        raise NotFound(f"collection {name!r} not found in db {db!r}")
    if coll.state == COLL_DROPPED:
        return status(meta, coll, note="already Dropped")
    if coll.state != DROPPING:
        raise StateError(f"collection {name!r} is {coll.state}; begin the drop first")
    key = meta.keys.collection(coll.collection_id)
    won = []

    def attempt() -> Collection:
        kv = meta.kv.get(key)
        if kv is None:   # finished by another and purged by GC meanwhile
            return coll
        cur = Collection.from_json(decode(kv.value, key))
        if cur.state == COLL_DROPPED:
            return cur
        held = _held(cur)
        if held:
            raise StateError(f"collection {name!r}: vchannels still held by a flusher: {', '.join(held)}")
        left = [s.ref for s in meta.segments.list(cur.collection_id) if s.state != DROPPED]
        if left:   # e.g. a Growing record a killed flusher left: no files, rows were synced
            meta.segments.transition(left, DROPPED, now=clock())
        name_key = meta.keys.collection_name(cur.db, cur.name)
        name_kv = meta.kv.get(name_key)
        compares, ops = [unchanged(kv)], []
        if name_kv is not None and name_kv.value == str(cur.collection_id).encode():
            compares.append(unchanged(name_kv))
            ops.append(Delete(name_key))
        new = Collection(**{**cur.__dict__, "state": COLL_DROPPED,
                            "properties": {**cur.properties, "dropped_at": clock()}})
        meta.kv.txn(compares, [Put(key, encode(new.to_json())), *ops])
        won.append(True)
        return new
    coll = retry_on_conflict(attempt, f"finish dropping {name!r}")
    return status(meta, coll, note="" if won else "already Dropped")


def finish_released(meta, pchannel: str, *, clock=time.time, collection_ids=None) -> list[str]:
    """Finish the drop of every Dropping collection with a vchannel on `pchannel` whose
    vchannels are all released: what a flush of `pchannel` leaves when it released the last
    one (or a flusher killed between its release and this finish left). So a drop begun
    without waiting (`seglake collections drop` without --wait, the DAG with
    wait_for_flush false) ends by itself once wal_flush has flushed it, as the state
    diagram says, instead of keeping its name until someone drops it again. Each finish is
    finish_drop's guarded txn (another finisher winning is fine). Returns the names this
    call finished (of two flushes both seeing the last release, one names it).

    `collection_ids`: the candidates the flusher gathered (Flusher.finish_candidates: the
    ones its own catalog read at open found released but not finished, and the ones it
    released or saw released since): only their records are read, so a flush does not pay a
    second read of every collection record (2,000 records: ~28 ms per flush of each
    pchannel, atk-s25-drop F1). None: every record is read. A record that cannot be read
    (damaged, a newer seglake's) is skipped and logged: the flush's work stands."""
    import logging

    log = logging.getLogger("seglake.drop")
    if collection_ids is None:
        kvs = list(meta.kv.range(meta.keys.collections_prefix()))
    else:
        kvs = [kv for kv in (meta.kv.get(meta.keys.collection(int(c))) for c in sorted(set(collection_ids)))
               if kv is not None]
    out = []
    for kv in kvs:
        try:
            coll = Collection.from_json(decode(kv.value, kv.key))
            if coll.state != DROPPING or _held(coll) or all(pchannel_of(v) != pchannel for v in coll.vchannels):
                continue
        except Exception as e:  # noqa: BLE001 - a damaged record is no drop to finish; the flush stands
            log.warning("%s: collection record unreadable (%s); not finishing a drop there", kv.key, e)
            continue
        try:
            rep = finish_drop(meta, coll.name, coll.db, clock=clock, collection_id=coll.collection_id)
            if rep["state"] == COLL_DROPPED and not rep["note"]:   # finished here, not by another finisher
                out.append(coll.name)
        except Exception as e:  # noqa: BLE001 - the flush's work stands; the drop DAG or CLI finishes
            log.warning("collection %r: its vchannels are released but the drop's finish failed (%s); "
                        "`seglake collections drop %s --yes` finishes it", coll.name, e, coll.name)
    return out


def purged(meta, name: str, db: str, collection_id: int | None) -> dict | None:
    """The report of a drop that ended and whose records GC purged since (its tombstone,
    pitr/gone/{id}, names this collection): the drop's own wait and finish, polling while
    wal_flush finished it and GC (drop_tolerance 0) purged it, report it Dropped instead of
    NotFound. None without `collection_id` (a name alone may be anyone's) or a tombstone."""
    if collection_id is None:
        return None
    from seglake.meta import codec

    kv = meta.kv.get(meta.keys.pitr_gone(collection_id))
    if kv is None:
        return None
    try:
        doc = codec.loads(kv.value, kv.key)
        if not isinstance(doc, dict) or (doc.get("collection"), doc.get("db")) != (name, db):
            return None
    except ValueError:
        return None
    return {"collection": name, "db": db, "collection_id": collection_id, "state": COLL_DROPPED,
            "note": "already Dropped; its records were purged by GC", "mode": None, "vchannels": [],
            "held": [], "segments": 0, "segments_dropped": 0, "rows_dropped": 0, "bytes_awaiting_gc": 0,
            "latest_dropped_at": None}


def held_vchannels(meta, coll: Collection) -> list[dict]:
    """Every vchannel not yet released, with its checkpoint lag behind the log (ms)."""
    from seglake.wal.checkpoints import read_checkpoint
    from seglake.meta.alloc import physical_ms
    from seglake.wal.log import WalLog
    out = []
    for v in _held(coll):
        cp, _ = read_checkpoint(meta, v)
        last = WalLog(meta, None, pchannel_of(v)).state().last_tt
        lag = None if cp is None or not last else max(0, physical_ms(last) - physical_ms(cp.time_tick))
        out.append({"vchannel": v, "checkpoint_tt": None if cp is None else cp.time_tick, "lag_ms": lag})
    return out


def status(meta, coll: Collection, note: str = "") -> dict:
    """A JSON-able report: state, held vchannels, segments/rows/bytes Dropped and when
    GC may reclaim them (dropped_at + drop_tolerance is applied by GC)."""
    try:
        coll = meta.catalog.get(coll.collection_id)
    except NotFound:   # finished and purged by GC since it was read
        gone = purged(meta, coll.name, coll.db, coll.collection_id)
        if gone is None:
            raise
        return gone
    segs = list(meta.segments.list(coll.collection_id))
    dropped = [s for s in segs if s.state == DROPPED]
    return {"collection": coll.name, "db": coll.db, "collection_id": coll.collection_id,
            "state": coll.state, "note": note, "mode": coll.properties.get(DROP_MODE),
            "vchannels": list(coll.vchannels), "held": held_vchannels(meta, coll) if coll.state == DROPPING else [],
            "segments": len(segs), "segments_dropped": len(dropped),
            "rows_dropped": sum(s.num_rows for s in dropped),
            "bytes_awaiting_gc": sum(s.total_size() for s in dropped),
            "latest_dropped_at": max((s.dropped_at or 0 for s in dropped), default=None)}


def wait_released(meta, name: str, db: str = DEFAULT_DB, *, timeout: float = 3600.0,
                  poll: float = 2.0, collection_id: int | None = None) -> dict:
    """Poll until no vchannel is held (a flusher does the work; this triggers nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        coll = find(meta, name, db, collection_id)
        if coll is None:
            return purged(meta, name, db, collection_id) or {}
        if coll.state != DROPPING or not _held(coll):
            return status(meta, coll)
        if time.monotonic() >= deadline:
            held = held_vchannels(meta, coll)
            raise TimeoutError(f"collection {name!r}: vchannels still held after {timeout:.0f} s: "
                               + ", ".join(f"{h['vchannel']} (lag {h['lag_ms']} ms)" for h in held))
        time.sleep(poll)


def drop_collection(meta, store, settings, name: str, db: str = DEFAULT_DB, *, wait: bool = False,
                    timeout: float = 3600.0, poll: float = 2.0, clock=time.time) -> dict:
    """begin_drop, then (wait=True: after the flushers released every vchannel) finish.
    Without wait, finishes only if nothing is held (a direct drop); else reports Dropping."""
    rep = begin_drop(meta, store, settings, name, db, clock=clock)
    if rep["state"] == COLL_DROPPED:
        return rep
    cid = rep["collection_id"]
    if wait:
        wait_released(meta, name, db, timeout=timeout, poll=poll, collection_id=cid)
    elif rep["held"]:
        return rep
    return finish_drop(meta, name, db, clock=clock, collection_id=cid)


def format_status(rep: dict, drop_tolerance: float | None = None) -> str:
    """The report for people: times as UTC, sizes human (the JSON keeps the raw numbers)."""
    from seglake.progress import human_bytes, human_seconds, tick_time, utc_time

    lines = [f"collection {rep['collection']!r} (db {rep['db']}, id {rep['collection_id']}): {rep['state']}"
             + (f" ({rep['note']})" if rep.get("note") else "")]
    for h in rep.get("held", ()):
        where = ("no checkpoint yet" if h["checkpoint_tt"] is None else
                 f"checkpoint at {tick_time(h['checkpoint_tt'])}"
                 + ("" if h["lag_ms"] is None else f", {h['lag_ms'] / 1000:g} s behind the log"))
        lines.append(f"  held: {h['vchannel']} ({where})")
    latest = rep.get("latest_dropped_at")
    when = ("" if not latest else f"; latest dropped at {utc_time(latest)}" + (
        f", reclaimable by GC from {utc_time(latest + drop_tolerance)} (drop_tolerance "
        f"{human_seconds(drop_tolerance)})" if drop_tolerance is not None else ""))
    lines.append(f"  segments Dropped {rep['segments_dropped']}/{rep['segments']}, rows {rep['rows_dropped']}, "
                 f"{human_bytes(rep['bytes_awaiting_gc'])} awaiting GC{when or ' (reclaimed after drop_tolerance)'}")
    return "\n".join(lines)
