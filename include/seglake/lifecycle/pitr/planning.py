"""Plan a restore to an instant: every refusal, before anything is created.

    as_of -> TSO (instants.py) -> the source collection: the live one, or the one that
             held the name at the instant and was dropped since (at_instant)
          -> not in the future
          -> not before the collection existed -> its window on and the instant in it
          -> base: the latest COMMITTED snapshot with positions at or before the instant
             (none: replay from the collection's creation)
          -> per vchannel: where the replay starts and what it skips (the snapshot's
             positions: checkpoint, row and delete high-water marks)
          -> the log from there is whole: nothing truncated (else: which fragments are
             gone), every committed fragment up to the instant present in the store
             (else: which are missing)

The plan is a small JSON document (`Plan.to_json`); the restore keeps it on the target
(restored_from.replay), so the replay needs neither the snapshot nor a second plan.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from seglake.errors import NotFound, StateError, ValidationError
from seglake.meta.alloc import LOGICAL_MASK, compose_ts, decode_mark
from seglake.meta.catalog import CREATED, DEFAULT_DB, pchannel_of
from seglake.meta.snapshots import COMMITTED
from seglake.names import validate_name
from seglake.lifecycle.pitr.instants import describe, parse_as_of
from seglake.lifecycle.pitr import window
from seglake.lifecycle.pitr.window import CLOCK_SLACK_MS, oldest_instant, window_of


class OutsideWindow(ValidationError):
    """The instant cannot be restored: outside the window, before the collection, in the future."""


class LogGap(StateError):
    """The log a restore to the instant needs is not whole (fragments truncated or missing)."""


def base_snapshot(meta, collection_id: int, ts: int):
    """The latest COMMITTED snapshot of the collection whose capture is at or before `ts`
    and that recorded its log positions; None if there is none."""
    best = None
    for rec in meta.snapshots.list(collection_id):
        if rec.state == COMMITTED and rec.positions is not None and 0 < rec.consistent_ts <= ts:
            if best is None or (rec.consistent_ts, rec.snapshot_id) > (best.consistent_ts, best.snapshot_id):
                best = rec
    return best


def fragment_at(meta, pchannel: str, ts: int) -> int:
    """The first fragment of `pchannel` that may hold a tick >= ts (a format-1 fragment,
    whose ticks the index does not know, counts as holding one); log.last + 1 if none.
    When the log is truncated and its first remaining fragment starts above ts, the
    truncated ones may have held such ticks: 1 (the caller sees them as a gap)."""
    from seglake.wal.log import WalLog

    log = WalLog(meta, None, pchannel)
    st = log.state()
    for i, rec in enumerate(log.fragments(state=st)):
        if i == 0 and st.first > 1 and (rec.fmt == 1 or rec.tt0 > ts):
            return 1
        if rec.fmt == 1 or rec.tt0 + max(rec.span, 1) - 1 >= ts:
            return rec.n
    return st.last + 1


@dataclass
class Plan:
    collection_id: int
    collection: str
    db: str
    as_of: int
    snapshot: str | None
    snapshot_id: int | None
    vchannels: list[str]
    partitions: dict[str, str]              # source partition id -> name
    starts: dict[str, dict] = field(default_factory=dict)   # vchannel -> start, floor, part_hw, del_hw
    fragments: dict[str, list[int]] = field(default_factory=dict)   # pchannel -> [first, last] to read
    log_bytes: int = 0
    archive: dict | None = None    # {uri, site}: the log is read from a WAL archive in a backup target (from_target.py)
    vchannel_bytes: dict[str, int] = field(default_factory=dict)   # vchannel -> log bytes its replay reads

    def to_json(self) -> dict:
        return dict(self.__dict__)


def not_in_future(meta, ts: int, *, read_only: bool = False) -> int:
    """`ts` if it is not in the future; refused (OutsideWindow) otherwise. An instant above
    both the wall clock and the global mark in etcd (the mark bounds every timestamp issued
    so far) is refused on that read alone: issuing a timestamp writes to etcd, and a
    refusal writes nothing. Only an instant within that bound needs a timestamp issued now
    (the exact judgement)."""
    seen = meta.kv.get(meta.tso.key)
    bound = max(compose_ts(int(time.time() * 1000), LOGICAL_MASK),
                decode_mark(seen.value, meta.tso.key) if seen is not None else 0)
    if ts > bound:
        raise OutsideWindow(f"as_of {describe(ts)} is in the future (now: {describe(bound)})")
    if read_only:   # (the caller issues the exact judgement's timestamp after its other read-only refusals)
        return ts
    tso_now = meta.tso.reserve(1, linearizable=True)   # (a batched now() may lag another process's)
    if ts > tso_now:
        raise OutsideWindow(f"as_of {describe(ts)} is in the future (now: {describe(tso_now)})")
    return ts


def not_from_log(coll, ts: int) -> None:
    """A restore to `ts` without a base snapshot replays the collection's log from its
    creation; refused (OutsideWindow) when the collection's rows did not all come through
    its log, which would give only what was written through it (the rest silently
    missing): a restore's target (of a snapshot, a bundle, a time, an undrop) was filled by
    copies and replays its own log never held; a collection that had segments before it
    was first written through the WAL (`demo seed`, a store from before the WAL) holds
    rows no log message carries."""
    from seglake.lifecycle.pitr.window import not_all_in_log

    if not not_all_in_log(coll):
        return
    src = coll.properties.get("restored_from")
    from seglake.wal.client import ROWS_BEFORE_LOG

    why = (f"is a restore of {src.get('collection') or 'another collection'!r}: its restored rows" if src else
           "had segments before it was first written through the WAL: those rows"
           if coll.properties.get(ROWS_BEFORE_LOG) else
           "was never written through the WAL (seeded, or made without the WAL client): its rows")
    raise OutsideWindow(f"as_of {describe(ts)}: collection {coll.name!r} {why} are not in its own log, and it has "
                        f"no COMMITTED snapshot at or before that instant to start from; take one (`seglake "
                        f"snapshots create {coll.name} NAME`): instants from then on can be restored")


def at_instant(meta, db: str, ts: int, only=None) -> dict:
    """name -> the Collection that held the name in `db` at the instant `ts`: created at or
    before it, and live now or dropped after it (a collection created later was not in the
    database then; one dropped after it was -- its window holds its log and snapshot, as for
    an undrop, and its restore to `ts` reads it up to the instant). When the drop began is
    the TSO its drop took before any DropCollection (drop.drop_began_ts; the dropper's wall
    clock may lie up to max_clock_skew below the rows' ticks). An instant within a second
    after it (writes in flight, the DropCollections on their way) is refused: whether it
    was still live then is not known to the ms; name the set.
    `only`: just these names."""
    from seglake.lifecycle.drop import drop_began_ts
    from seglake.meta.catalog import DROPPED, DROPPING

    found = [c for c in meta.catalog.list(db=db, include_dropped=True)
             if c.created_ts <= ts and c.state in (CREATED, DROPPING, DROPPED) and (only is None or c.name in only)]
    out = {}
    for c in found:
        if c.state != CREATED:
            began = drop_began_ts(c)   # (the TSO when it began: rows' ticks are on that clock, not the dropper's)
            if began is None:
                continue   # (no record of when: the drop of a store before the drop's mode)
            if ts >= began + compose_ts(CLOCK_SLACK_MS):
                continue   # dropped before the instant
            if ts >= began:
                if any(d.name == c.name and began < d.created_ts for d in found):
                    continue   # the name was another collection's by the instant: this one was gone
                raise OutsideWindow(
                    f"collection {c.name!r} was being dropped at {describe(ts)} (its drop began {describe(began)}): "
                    f"whether it was still live then is not known to the millisecond: restore an instant before its "
                    f"drop began, undrop it for its state at the drop, or (a whole database) name the collections")
        if c.name in out and out[c.name].state == CREATED:
            continue
        out[c.name] = c
    return out


def purged_note(meta, db: str, collection: str) -> str:
    """What GC's tombstones (pitr/gone, kept GONE_KEEP_S) say of a name no record holds any
    more: when it was dropped and purged, and where it may still come from; "" if none."""
    from seglake.meta import codec
    from seglake.progress import utc_time

    gone = []
    for kv in meta.kv.range(meta.keys.pitr_gone_prefix()):
        try:
            d = codec.loads(kv.value, kv.key)
            if d["collection"] == collection and d["db"] == db:
                gone.append((codec.number(d, "drop_began_ts", kv.key, whole=True),
                             codec.moment(d, "purged_at", kv.key)))
        except (ValueError, KeyError, TypeError):
            continue
    if not gone:
        return ""
    began, purged = max(gone)
    return (f": it was dropped at {describe(began)} and GC purged its records on {utc_time(purged)}, so this store "
            f"cannot bring it back; from a backup target it can when its WAL was archived and a bundle exported "
            f"(--from-target)")


def plan(meta, store, collection: str, as_of, *, db: str = DEFAULT_DB, now: float | None = None,
         dropped=None, window_instant: int | None = None, exact: bool = True) -> Plan:
    """The restore of `collection` as of `as_of`, or the refusal (module doc). Read-only.
    `dropped`: the Dropping/Dropped Collection an undrop restores (its replay ends at each
    vchannel's DropCollection); `window_instant`: the instant that must lie in the window
    (an undrop's: the drop's), default as_of."""
    validate_name("collection", collection)
    validate_name("db", db)
    ts = parse_as_of(as_of)
    if dropped is None:   # the collection that held the name at the instant (dropped since, inside its window)
        coll, missing = None, None
        try:
            coll = meta.catalog.get_by_name(collection, db)
        except NotFound as e:
            missing = e
        if coll is None or coll.created_ts > ts or coll.state != CREATED:   # (Dropping: the name still held)
            then = at_instant(meta, db, ts, only={collection}).get(collection)
            if then is not None and then.state != CREATED:
                dropped = then
            elif missing is not None:
                raise NotFound(f"{missing}{purged_note(meta, db, collection)}") from None
    coll = dropped if dropped is not None else coll
    if dropped is None and coll.state != CREATED:
        raise StateError(f"collection {collection!r} is {coll.state}; a restore to a time needs a live collection")
    if ts < coll.created_ts:   # (first: it needs no timestamp, and issuing one writes to etcd)
        raise OutsideWindow(f"as_of {describe(ts)} is before collection {collection!r} existed "
                            f"(created {describe(coll.created_ts)})")
    w = window_of(meta, coll.collection_id)
    if w is None:
        if coll.state != CREATED:   # a window cannot be set on it now: say what is left
            raise OutsideWindow(f"collection {collection!r} is {coll.state} and has no point-in-time window (off "
                                f"when it was dropped, or cleared since), so this store cannot bring it back; from "
                                f"the backup target it can when its WAL was archived and a bundle exported "
                                f"(--from-target), else restore one of its snapshots, if it has any "
                                f"(`seglake snapshots list --collection {collection}`)")
        raise OutsideWindow(f"collection {collection!r} has no point-in-time window (pitr_window is off): "
                            f"set one (`seglake pitr set {collection} 3d`) to restore to a time")
    lo = oldest_instant(w, window.clock() if now is None else now)
    if (ts if window_instant is None else window_instant) < lo:
        what = "as_of" if window_instant is None else "the drop at"
        raise OutsideWindow(f"{what} {describe(ts if window_instant is None else window_instant)} is outside the "
                            f"point-in-time window of {collection!r} ({w['window']}: the oldest instant is "
                            f"{describe(lo)})")
    not_in_future(meta, ts, read_only=True)   # the exact judgement (issuing a timestamp writes to etcd): last
    base = base_snapshot(meta, coll.collection_id, ts)
    if base is None:
        not_from_log(coll, ts)
    p = Plan(coll.collection_id, coll.name, coll.db, ts, None if base is None else base.name,
             None if base is None else base.snapshot_id, list(coll.vchannels),
             {str(x.partition_id): x.name for x in coll.partitions})
    born = coll.created_ts - compose_ts(CLOCK_SLACK_MS)
    for v in coll.vchannels:
        pos = None if base is None else base.positions.get(v)
        if base is not None and pos is None:
            raise StateError(f"snapshot {base.name!r} recorded no position of vchannel {v}: it cannot be replayed")
        cp = None if pos is None else pos["checkpoint"]
        start = cp[:3] if cp else [0, fragment_at(meta, pchannel_of(v), born), 0]
        p.starts[v] = {"start": start, "floor": cp[3] if cp else 0,
                       "part_hw": dict(pos["part_hw"]) if pos else {}, "del_hw": pos["del_hw"] if pos else 0}
    _check_log(meta, store, p)
    if exact:   # (exact=False: a dry run of every refusal that needs no timestamp -- an undrop's, before its instant)
        not_in_future(meta, ts)   # after every refusal that needs no timestamp (issuing one writes to etcd)
    return p


def needed(p: Plan, pchannel: str, fragments) -> list:
    """The fragments (FragRecords, in log order, from the replay's start) a replay up to
    p.as_of reads: up to the first one whose ticks all lie above the instant. Recorded in
    the plan (p.fragments, p.log_bytes); returned."""
    need = []
    for rec in fragments:
        need.append(rec)
        if rec.fmt != 1 and rec.tt0 > p.as_of:
            break   # every later fragment's ticks are above the instant
    if need:
        p.fragments[pchannel] = [need[0].n, need[-1].n]
        p.log_bytes += sum(r.size or 0 for r in need)
    for v, s in p.starts.items():   # each vchannel's replay reads its pchannel's log from its own start
        if pchannel_of(v) == pchannel:
            p.vchannel_bytes[v] = sum(r.size or 0 for r in need if r.n >= s["start"][1])
    return need


def _check_log(meta, store, p: Plan) -> None:
    """LogGap naming the fragments a replay of `p` needs that are truncated or missing."""
    from seglake.storage import layout
    from seglake.wal.log import WalLog

    gaps = []
    for pch in sorted({pchannel_of(v) for v in p.vchannels}):
        first = min(s["start"][1] for v, s in p.starts.items() if pchannel_of(v) == pch)
        log = WalLog(meta, None, pch)
        st = log.state()
        if first < st.first:
            gaps.append(f"{pch}: fragments {first}..{st.first - 1} were truncated")
            continue
        present = {o.key for o in store.list(layout.wal_prefix(pch))}
        need = needed(p, pch, log.fragments(first, st))
        missing = [f"#{rec.n} ({rec.key})" for rec in need if rec.key not in present]
        if missing:
            gaps.append(f"{pch}: committed fragment(s) missing from the store: {', '.join(missing[:20])}"
                        + (f" and {len(missing) - 20} more" if len(missing) > 20 else ""))
    if gaps:
        raise LogGap(f"the log of {p.collection!r} up to {describe(p.as_of)} is not whole, so no restore to "
                     f"that instant is possible: {'; '.join(gaps)}")
