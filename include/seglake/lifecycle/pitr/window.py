"""A collection's point-in-time window (`pitr_window`, off by default) and what it holds.

    {root}/pitr/windows/{collection_id} = {"collection_id", "collection", "db", "window": "3d",
                                           "window_s": 259200.0, "updated_at"}

- set / get / clear / list like the retention policies; the duration ("3d", "12h", "90m",
  or seconds) is checked (limits "pitr_window": a minute .. a year, finite) and the
  collection must exist and be live, before anything is written.
- What a window on collection C holds at `now` (`holds`): let lo = now - window. A
  restore to any instant t in [lo, now] starts from base(t), the latest COMMITTED snapshot
  of C with recorded positions at or before t (planning.base_snapshot), and replays C's
  vchannels from its positions; base(lo) is the oldest of them all. So the window holds
  base(lo) (GC does not expire it, retention does not prune it, a drop is refused) and,
  on each pchannel of C, every log fragment from base(lo)'s position on (GC does not
  truncate them, even below the flushers' checkpoints). Without base(lo) (C born inside
  the window, or no snapshot yet) a restore replays from C's creation: the log is held
  from the fragment that reaches C's created_ts (less a second of clock slack).
- A dropped collection's window holds on while the drop lies inside it: an undrop
  (restoring.undrop) brings it back as it was just before the drop.
- Turning a window off or shortening it releases what it held at the next GC: nothing is
  recorded but the policy, the holds are recomputed by every GC mark and sweep.
- `cost`: the bytes held (log from the hold on, what the window alone keeps below the
  checkpoints, the base snapshot), shown by `seglake wal status` and the page.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from seglake import limits
from seglake.config import parse_duration
from seglake.errors import CorruptRecord, NotFound, StateError, ValidationError
from seglake.meta import codec
from seglake.meta.alloc import compose_ts, physical_ms
from seglake.meta.catalog import CREATED, DEFAULT_DB, pchannel_of
from seglake.names import validate_name

CLOCK_SLACK_MS = 1000   # a collection's first message may carry a tick this far below its created_ts
clock = time.time       # the wall clock the holds are judged by (tests move it)


def parse_window(value) -> tuple[str, float]:
    """("3d", seconds) from '3d' / '12h' / '90m' / '600' / a number of seconds."""
    try:
        seconds = parse_duration("window", value, limits.LIMITS["pitr_window"])
    except ValidationError as e:
        why = str(e).replace("config key ", "")
        if "out of range" in why:   # the rule in the units the window is written in
            why = f"window {value!r} is out of range: 1 minute (60, 1m) to 365 days (365d)"
        raise ValidationError(why) from None
    return (value if isinstance(value, str) else f"{seconds:g}s"), float(seconds)


def _live(meta, collection: str, db: str):
    validate_name("collection", collection)
    validate_name("db", db)
    try:
        coll = meta.catalog.get_by_name(collection, db)
    except NotFound:
        from seglake.lifecycle.drop import find

        coll = find(meta, collection, db)   # its newest dropped one (pitr show names it)
        if coll is None:
            raise
    if coll.state != CREATED:
        raise StateError(f"collection {collection!r} is {coll.state}; a point-in-time window needs a live collection"
                         + (f" (bring it back as a new one: `seglake collections undrop {collection} --as NEW`)"
                            if coll.state != "Importing" else ""))
    return coll


def set_window(meta, collection: str, window, *, db: str = DEFAULT_DB, now: float | None = None) -> dict:
    text, seconds = parse_window(window)   # checked before anything is read or written
    coll = _live(meta, collection, db)
    doc = {"collection_id": coll.collection_id, "collection": coll.name, "db": coll.db, "window": text,
           "window_s": seconds, "updated_at": time.time() if now is None else now}
    meta.kv.put(meta.keys.pitr_window(coll.collection_id), json.dumps(doc))
    return doc


def get_window(meta, collection: str, *, db: str = DEFAULT_DB) -> dict | None:
    """The window of the collection holding the name, else of its newest dropped one (whose
    window may still hold its drop: what an undrop reads; `state` says which)."""
    from seglake.lifecycle.drop import find

    validate_name("collection", collection)
    validate_name("db", db)
    coll = find(meta, collection, db)
    if coll is None:
        raise NotFound(f"collection {collection!r} not found in db {db!r}")
    doc = window_of(meta, coll.collection_id)
    return None if doc is None else {**doc, "state": coll.state}


def window_of(meta, collection_id: int) -> dict | None:
    kv = meta.kv.get(meta.keys.pitr_window(collection_id))
    return None if kv is None else _window_doc(kv)


def _window_doc(kv) -> dict:
    """A window record as set_window wrote it, else CorruptRecord naming it: a window_s of
    NaN, "3600", 0 or -1 would hold less than the window (GC truncates what it holds)."""
    d = codec.loads(kv.value, kv.key)
    # at least 1 s: 0 or less is damage (it holds nothing); the settable floor (1 min) is
    # set_window's input rule, not a record's, so a shorter window written by hand holds as long
    codec.number(d, "window_s", kv.key, lo=1.0, hi=limits.YEAR)
    codec.number(d, "collection_id", kv.key, hi=limits.ID_MAX, whole=True)
    if not all(isinstance(d.get(f), str) for f in ("collection", "db", "window")):
        raise CorruptRecord(f"corrupt record at {kv.key!r}: collection, db or window is not text")
    return d


def clear_window(meta, collection: str, *, db: str = DEFAULT_DB) -> bool:
    """Turn the window off; False when it was off. What it held goes at the next GC. A
    name no live collection holds: the window of its newest dropped collection (GC keeps
    a dropped collection's record while its window holds the drop; this releases it)."""
    from seglake.lifecycle.drop import find

    validate_name("collection", collection)
    validate_name("db", db)
    coll = find(meta, collection, db)
    if coll is None:
        raise NotFound(f"collection {collection!r} not found in db {db!r}")
    key = meta.keys.pitr_window(coll.collection_id)
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


def list_windows(meta) -> list[dict]:
    out = [_window_doc(kv) for kv in meta.kv.range(meta.keys.pitr_windows_prefix())]   # one damaged: raises
    return sorted(out, key=lambda d: (d["db"], d["collection"]))


# -- what the windows hold ----------------------------------------------------------------------
@dataclass
class Hold:
    collection_id: int
    collection: str
    db: str
    window: str
    lo_ts: int                               # the oldest instant of the window (TSO)
    snapshot: object | None                  # base(lo): a SnapshotRecord, or None (from creation)
    fragments: dict[str, int] = field(default_factory=dict)   # pchannel -> first fragment held
    restore: str | None = None               # a restore to a time in flight (its target), not a window
    # the oldest instant a restore accepts now: the window's, or later when the collection was
    # created after it or (its rows not all in its log) has no snapshot before it; None: none yet
    restorable_ts: int | None = None

    def to_json(self) -> dict:
        s = self.snapshot
        return {"collection_id": self.collection_id, "collection": self.collection, "db": self.db,
                "window": self.window, "oldest_instant_ts": self.lo_ts, "restorable_from_ts": self.restorable_ts,
                "restore": self.restore,
                "snapshot": None if s is None else s.name, "snapshot_id": None if s is None else s.snapshot_id,
                "snapshot_bytes": 0 if s is None else s.bytes, "fragments_from": dict(sorted(self.fragments.items()))}


def holds(meta, now: float | None = None) -> list[Hold]:
    """What every window on a live collection holds at `now` (module doc). Raises on any
    read error: GC then keeps the whole WAL (fail closed)."""
    from seglake.lifecycle.pitr.planning import base_snapshot, fragment_at

    now = clock() if now is None else now
    out = []
    for w in list_windows(meta):
        try:
            coll = meta.catalog.get(w["collection_id"])
        except NotFound:
            continue
        lo = compose_ts(int((now - float(w["window_s"])) * 1000))
        if coll.state != CREATED and not _undroppable(coll, lo):
            continue
        base = base_snapshot(meta, coll.collection_id, lo)
        restorable = max(lo, coll.created_ts)
        if base is None and not_all_in_log(coll):
            base = first_snapshot(meta, coll.collection_id)   # restores start from it or a later one
            restorable = None if base is None else max(restorable, base.consistent_ts)
        h = Hold(coll.collection_id, coll.name, coll.db, w["window"], lo, base, restorable_ts=restorable)
        for v in coll.vchannels:
            p = pchannel_of(v)
            cp = None if base is None else base.positions.get(v, {}).get("checkpoint")
            n = cp[1] if cp else fragment_at(meta, p, coll.created_ts - compose_ts(CLOCK_SLACK_MS))
            h.fragments[p] = min(n, h.fragments.get(p, n))
        out.append(h)
    return out + replay_holds(meta)


def replay_holds(meta) -> list[Hold]:
    """What the restores to a time still in flight hold: a target Importing with a replay
    plan of this store's log (not a WAL archive's) holds each source pchannel's log from
    its replay's start until it is Created, whatever became of the source's window since
    the plan (turned off, shortened, the source dropped). Without it GC could truncate
    the fragments the plan named before the replay read them."""
    from seglake.meta.catalog import IMPORTING

    out = []
    for c in meta.catalog.list():
        plan = c.properties.get("restored_from", {}).get("replay") if c.state == IMPORTING else None
        if not isinstance(plan, dict) or plan.get("archive"):
            continue
        h = Hold(int(plan["collection_id"]), plan["collection"], plan["db"],
                 f"restore to a time into {c.name!r} in flight", int(plan["as_of"]), None, restore=c.name)
        for v, st in plan["starts"].items():
            p, n = pchannel_of(v), int(st["start"][1])
            h.fragments[p] = min(n, h.fragments.get(p, n))
        out.append(h)
    return out


def not_all_in_log(coll) -> bool:
    """The collection holds rows its own log does not (a restore's target, segments from
    before its first WAL use, or a collection never written through the WAL): a restore to a time of it must start from one of its
    snapshots (planning.not_from_log)."""
    from seglake.wal.client import ANNOUNCED, ROWS_BEFORE_LOG

    # never written through the WAL (`demo seed`, made without the WAL client): whatever rows
    # it has are not in its log (ROWS_BEFORE_LOG is only set by its first WAL write)
    return bool(coll.properties.get("restored_from") or coll.properties.get(ROWS_BEFORE_LOG)
                or not coll.properties.get(ANNOUNCED))


def first_snapshot(meta, collection_id: int):
    """The oldest COMMITTED snapshot with log positions: what a window holds of a collection
    not all in its log when no snapshot is at or before the window's oldest instant (every
    restore inside the window starts from it or a later one); None if there is none."""
    from seglake.meta.snapshots import COMMITTED

    found = [r for r in meta.snapshots.list(collection_id)
             if r.state == COMMITTED and r.positions is not None and r.consistent_ts > 0]
    return min(found, key=lambda r: (r.consistent_ts, r.snapshot_id), default=None)


def _undroppable(coll, lo: int) -> bool:
    """A Dropping/Dropped collection whose drop lies inside its window: an undrop may
    still bring it back (seglake.lifecycle.pitr.restoring.undrop), so its window holds on."""
    from seglake.lifecycle.drop import DROP_MODE, drop_began_ts
    from seglake.meta.catalog import DROPPED, DROPPING

    began = drop_began_ts(coll)
    return (coll.state in (DROPPING, DROPPED) and coll.properties.get(DROP_MODE) == "wal"
            and began is not None and began >= lo)


def undroppable(meta, coll, now: float | None = None) -> bool:
    """`coll` (Dropping/Dropped) has a window whose oldest instant is at or before its drop:
    an undrop may still bring it back, so GC keeps its record (and the window with it) even
    when nothing is left under it (born inside the window, no snapshot: the undrop replays
    its log from its creation, the log the window holds). Fail closed: an unreadable window
    holds."""
    kv = meta.kv.get(meta.keys.pitr_window(coll.collection_id))
    if kv is None:
        return False
    try:
        w = _window_doc(kv)
        lo = oldest_instant(w, clock() if now is None else now)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
        return True
    return _undroppable(coll, lo)


def held_fragment(hold_list: list[Hold], pchannel: str) -> int | None:
    """The first fragment of `pchannel` any window holds (None: none held)."""
    ns = [h.fragments[pchannel] for h in hold_list if pchannel in h.fragments]
    return min(ns) if ns else None


def held_positions(meta, pchannel: str, now: float | None = None) -> list:
    """The windows' holds on `pchannel` as consumer positions for
    seglake.wal.checkpoints.truncatable_fragments (nothing at or above them is truncated)."""
    from seglake.wal.message import MessageId

    n = held_fragment(holds(meta, now), pchannel)
    return [] if n is None else [MessageId(0, n, 0)]


def held_snapshots(meta, now: float | None = None) -> dict[tuple[int, int], str]:
    """(collection id, snapshot id) -> why: the base snapshot of each window."""
    return {(h.collection_id, h.snapshot.snapshot_id): f"the point-in-time window of {h.collection!r} ({h.window})"
            for h in holds(meta, now) if h.snapshot is not None}


def cost(meta, now: float | None = None) -> dict:
    """What the windows hold, in bytes: per window its base snapshot and first fragments;
    per pchannel the log held (fragments from the hold on) and the part of it only the
    windows keep (below every flusher checkpoint); `restores`: the restores to a time in
    flight, which hold their log too (replay_holds)."""
    from seglake.wal.checkpoints import live_vchannels, read_checkpoint
    from seglake.wal.log import WalLog

    hs = holds(meta, now)
    per_p = {}
    for p in sorted({p for h in hs for p in h.fragments}):
        n = held_fragment(hs, p)
        bounds = []
        for v in live_vchannels(meta, p):
            cp, _ = read_checkpoint(meta, v)
            bounds.append(None if cp is None else cp.message_id.fragment)
        below = n if not bounds or None in bounds else min(bounds)
        held = only = 0
        for rec in WalLog(meta, None, p).fragments(max(n, 1)):
            held += rec.size or 0
            if rec.n < below:
                only += rec.size or 0
        per_p[p] = {"held_from_fragment": n, "log_bytes": held, "window_only_bytes": only}
    return {"windows": [h.to_json() for h in hs if h.restore is None], "pchannels": per_p,
            "restores": [h.to_json() for h in hs if h.restore is not None],
            "log_bytes": sum(x["log_bytes"] for x in per_p.values()),
            "window_only_bytes": sum(x["window_only_bytes"] for x in per_p.values()),
            "snapshot_bytes": sum(h.snapshot.bytes for h in hs if h.snapshot is not None)}


def oldest_instant(window: dict, now: float) -> int:
    return compose_ts(int((now - float(window["window_s"])) * 1000))


def seconds_ago(ts: int, now: float) -> float:
    return now - physical_ms(ts) / 1000.0
