"""Retention schedules: per collection, a grandfather-father-son policy that says which
snapshots to take and which to keep (issue 19 item 5).

    policy = {"keep_last": 3, "keep_hourly": 24, "keep_daily": 7, "keep_weekly": 4, "keep_monthly": 12,
              "export": true}

- `export` (default false): each run also exports the schedule's snapshots the policy
  keeps to the backup target (config key `backup_uri`) as bundles of the same name, and
  prunes the schedule's bundles there by the same policy (seglake.lifecycle.backup.scheduled).
- `archive` (default false): continuous backup. Every committed WAL fragment of the
  collection's pchannels is shipped to the backup target as it is committed
  (seglake.lifecycle.backup.archive), and the WAL keeps what is not shipped yet.

- Stored in etcd at `{root}/retention/{collection_id}` (set / get / clear / list); every
  key checked (a count 0..100000, an int: NaN, 1.5, "3", true refused; unknown keys refused
  naming the closest valid one; at least one count positive) before anything is written.
- The schedule's snapshots are named `sched_YYYYMMDDTHHMMZ` after the run's time (UTC,
  the minute) and OWNED by the schedule (record owner `retention:<name>`): a retried or
  concurrent run of the same time resumes or finds that snapshot instead of taking a
  second one. Their time for the policy is the one in the name. Any other snapshot --
  made by hand, even under a sched_ name -- is never pruned by a schedule, and counts as
  "the last one".
- A run's time may not be ahead of the wall clock (by more than MAX_AHEAD); a run at a
  time earlier than the newest schedule snapshot (late, backfilled) takes none (it would
  hold today's data under yesterday's name), and only prunes. Pins are judged by the
  wall clock, never by a run's time.
- Due: a run takes a snapshot unless one of the schedule's already falls in the current
  bucket of the finest unit the policy keeps (hour, day, ISO week, month); with only
  `keep_last`, every run takes one.
- Keep (as restic's `forget --keep-*`): the newest `keep_last`; and for each unit, going
  from the newest, the newest snapshot of each of the last `keep_<unit>` buckets that have
  one. A snapshot is kept when any rule keeps it.
- Prune everything else, except (reported as kept, with why): a snapshot held by a pin or
  a copy job (restore / export), one that is not COMMITTED, and never the collection's
  last COMMITTED snapshot. A lost race with a pin or a job is reported, not an error.
- A dry run answers the same plan and changes nothing.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from seglake import limits
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.meta import codec
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.snapshots import COMMITTED
from seglake.names import validate_name
from seglake.contract import closest

UNITS = ("hourly", "daily", "weekly", "monthly")           # finest first
KEYS = ("keep_last", *(f"keep_{u}" for u in UNITS))   # the counts
POLICY_KEYS = (*KEYS, "export", "archive")
FLAGS = ("export", "archive")
SCHED_RE = re.compile(r"sched_(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})Z")
OWNER = "retention:"   # + the snapshot's name: the owner of the schedule's snapshots
MAX_AHEAD = 300.0      # seconds a run's time may be ahead of the wall clock


@dataclass(frozen=True)
class Policy:
    keep_last: int = 0
    keep_hourly: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0
    keep_monthly: int = 0
    export: bool = False
    archive: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def parse_policy(doc: Mapping[str, Any]) -> Policy:
    """A checked Policy from a mapping of keep_* counts (missing keys: 0), `export` and
    `archive` (booleans, default false). One ValidationError naming every bad key, before any side
    effect."""
    if not isinstance(doc, Mapping):
        raise ValidationError(f"a retention policy is an object of {', '.join(POLICY_KEYS)}; "
                              f"got {type(doc).__name__}")
    problems, out = [], {}
    for k, v in doc.items():
        if k not in POLICY_KEYS:
            problems.append(f"unknown policy key {k!r}{closest(k, list(POLICY_KEYS))}")
            continue
        if k in FLAGS:
            if isinstance(v, bool):
                out[k] = v
            else:
                problems.append(f"{k}: {v!r} is not allowed; use true or false")
            continue
        try:
            out[k] = limits.check("retention_keep", k, v)
        except ValidationError as e:
            problems.append(str(e))
    if problems:
        raise ValidationError("retention policy refused: " + "; ".join(problems))
    policy = Policy(**out)
    if not any(getattr(policy, k) for k in KEYS):
        raise ValidationError(f"retention policy refused: every count is 0 (it would keep nothing); set at least "
                              f"one of {', '.join(KEYS)} above 0, or clear the policy")
    return policy


# -- names and buckets --------------------------------------------------------------------
def sched_name(t: float) -> str:
    """The schedule's snapshot name for a run at unix time `t` (UTC, to the minute)."""
    return time.strftime("sched_%Y%m%dT%H%MZ", time.gmtime(t))


def sched_time(name: str) -> float | None:
    """The time a schedule's snapshot name stands for, None for any other name."""
    m = SCHED_RE.fullmatch(name)
    if m is None:
        return None
    y, mo, d, h, mi = map(int, m.groups())
    try:
        return float(calendar.timegm(datetime(y, mo, d, h, mi, tzinfo=timezone.utc).timetuple()))
    except ValueError:
        return None


def bucket(t: float, unit: str) -> tuple:
    d = datetime.fromtimestamp(t, tz=timezone.utc)
    if unit == "hourly":
        return d.year, d.month, d.day, d.hour
    if unit == "daily":
        return d.year, d.month, d.day
    if unit == "weekly":
        iso = d.isocalendar()
        return iso[0], iso[1]
    return d.year, d.month


# -- the pure plan --------------------------------------------------------------------------
def keep_set(policy: Policy, times: Mapping[str, float]) -> dict[str, list[str]]:
    """{name: [rules that keep it]} for the snapshots `times` (name -> time) the policy
    keeps; the others are not in it."""
    order = sorted(times, key=lambda n: (times[n], n), reverse=True)   # newest first
    kept: dict[str, list[str]] = {}
    for n in order[:policy.keep_last]:
        kept.setdefault(n, []).append("last")
    for unit in UNITS:
        want = getattr(policy, f"keep_{unit}")
        last, count = None, 0
        for n in order:
            if count >= want:
                break
            b = bucket(times[n], unit)
            if b != last:
                kept.setdefault(n, []).append(unit)
                last, count = b, count + 1
    return kept


def due(policy: Policy, times: Mapping[str, float], now: float) -> bool:
    """Whether a run at `now` takes a snapshot (module doc)."""
    finest = next((u for u in UNITS if getattr(policy, f"keep_{u}")), None)
    if finest is None:   # keep_last only
        return True
    cur = bucket(now, finest)
    return not any(bucket(t, finest) == cur for t in times.values())


# -- the policy record ---------------------------------------------------------------------
def _collection(meta, collection: str, db: str):
    validate_name("collection", collection)
    validate_name("db", db)
    return meta.catalog.get_by_name(collection, db)


def _policy_key(meta, collection: str, db: str) -> str | None:
    """The policy key of the collection named so: the live collection's, else (the
    collection was dropped, its name freed) the one policy recorded under that name."""
    from seglake.errors import NotFound as _NF
    try:
        return meta.keys.retention(_collection(meta, collection, db).collection_id)
    except _NF:
        found = [d for d in list_policies(meta) if (d.get("collection"), d.get("db")) == (collection, db)]
        if len(found) == 1 and isinstance(found[0].get("collection_id"), int):
            return meta.keys.retention(found[0]["collection_id"])
        raise


def set_policy(meta, collection: str, policy: Mapping[str, Any] | Policy, *, db: str = DEFAULT_DB,
               now: float | None = None) -> dict:
    pol = policy if isinstance(policy, Policy) else parse_policy(policy)
    coll = _collection(meta, collection, db)
    doc = {"collection_id": coll.collection_id, "collection": coll.name, "db": coll.db, **pol.to_json(),
           "updated_at": time.time() if now is None else now}
    if pol.archive:   # the archive begins now: GC keeps what is not shipped from here on
        from seglake.lifecycle.backup import archive
        archive.begin(meta, coll)
    meta.kv.put(meta.keys.retention(coll.collection_id), json.dumps(doc))
    return doc


def get_policy(meta, collection: str, *, db: str = DEFAULT_DB) -> dict | None:
    kv = meta.kv.get(_policy_key(meta, collection, db))
    return None if kv is None else codec.loads(kv.value, kv.key)


def clear_policy(meta, collection: str, *, db: str = DEFAULT_DB) -> bool:
    """Remove the policy (also of a dropped collection, by its name); False when there
    was none."""
    key = _policy_key(meta, collection, db)
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


def list_policies(meta) -> list[dict]:
    out = []
    for kv in meta.kv.range(meta.keys.retention_prefix()):
        try:
            d = codec.loads(kv.value, kv.key)
        except ValueError:
            d = None
        out.append(d if isinstance(d, dict) else {"key": kv.key, "collection": "?", "db": "?"})
    return sorted(out, key=lambda d: (str(d.get("db")), str(d.get("collection"))))


# -- one run ------------------------------------------------------------------------------------
def run(meta, store, collection: str, *, now: float, db: str = DEFAULT_DB, dry_run: bool = False,
        create: Callable[[str], Any] | None = None, drop: Callable[[str], Any] | None = None) -> dict:
    """One schedule run for `collection` at `now` (the run's time): take the snapshot the
    policy calls for (unless one of this bucket exists; never for a collection that is no
    longer Created), then prune what it no longer keeps. `create(name)` / `drop(name)`
    default to the inline snapshot create / drop. Returns the report: created, pruned,
    kept (name -> the rules that keep it), held (name -> what holds it)."""
    doc = get_policy(meta, collection, db=db)
    if doc is None:
        raise NotFound(f"collection {collection!r} has no retention policy; set one with "
                       f"`seglake retention set {collection} --keep-daily 7`")
    return _run(meta, store, doc, now=now, dry_run=dry_run, create=create, drop=drop)


def is_schedules(rec) -> bool:
    """A snapshot the schedule took (and so may prune): its name and its owner say so."""
    return sched_time(rec.name) is not None and rec.owner == OWNER + rec.name


def _run(meta, store, doc: dict, *, now: float, dry_run: bool, create=None, drop=None) -> dict:
    from seglake.lifecycle import snapshot
    from seglake.meta.catalog import CREATED

    wall = time.time()
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not (0 < now < 2**33):
        raise ValidationError(f"schedule time must be a unix time in seconds, got {now!r}")
    if now > wall + MAX_AHEAD:
        raise ValidationError(f"schedule time {sched_name(now)} is ahead of the clock ({sched_name(wall)}): "
                              f"a run cannot snapshot the future")
    try:   # a stored policy has every count (Policy.to_json): one missing is damage, not 0 (keep less)
        if not isinstance(doc, dict) or any(k not in doc for k in KEYS):
            raise ValidationError(f"a count is missing (the record has {sorted(doc) if isinstance(doc, dict) else doc!r})")
        policy = parse_policy({k: doc[k] for k in POLICY_KEYS if k in doc})
    except ValidationError as e:
        raise ValidationError(f"the policy record of {dict(doc).get('collection') if isinstance(doc, dict) else '?'!r} "
                              f"is malformed: {e}") from None
    coll = meta.catalog.get(doc["collection_id"])
    create = create or (lambda name: snapshot.create(meta, store, coll.name, name, "retention schedule",
                                                     db=coll.db, owner=OWNER + name))
    drop = drop or (lambda name: snapshot.drop_by_id(meta, store, coll.collection_id, name))

    recs = {r.name: r for r in meta.snapshots.list(coll.collection_id)}
    times = {n: sched_time(n) for n, r in recs.items() if r.state == COMMITTED and is_schedules(r)}
    report: dict[str, Any] = {"collection": coll.name, "db": coll.db, "collection_id": coll.collection_id, "at": now, "dry_run": dry_run,
                              "policy": policy.to_json(), "created": None, "pruned": [], "kept": {}, "held": {}}
    name = sched_name(now)
    mine = recs.get(name) if recs.get(name) is not None and is_schedules(recs[name]) else None
    newest = max(times.values(), default=None)
    if coll.state != CREATED:
        report["note"] = f"collection is {coll.state}: no new snapshot, the existing ones are pruned by the policy"
    elif name in recs and mine is None:
        report["note"] = f"a snapshot named {name!r} exists and is not the schedule's: none taken this run"
    elif mine is None and newest is not None and sched_time(name) < newest:
        report["note"] = (f"the schedule already has a newer snapshot ({sched_name(newest)}): a run at "
                          f"{name} takes none")
    elif (mine is not None and mine.state != COMMITTED) or (mine is None and due(policy, times, now)):
        if not dry_run:
            try:
                create(name)
            except (Conflict, snapshot.SnapshotLost) as e:   # a concurrent run of the same time took it
                cur = meta.snapshots.find(coll.collection_id, name)
                if cur is None or not is_schedules(cur):
                    raise
                report["note"] = f"{name} was being taken by another run of the same time ({type(e).__name__})"
                if cur.state != COMMITTED:
                    name = None
        if name is not None:
            report["created"] = name
            times[name] = sched_time(name)
    kept = keep_set(policy, times)
    from seglake.lifecycle.pitr.window import held_snapshots
    windows = held_snapshots(meta)   # the base snapshot of a point-in-time window is never pruned
    left = {n for n, r in recs.items() if r.state == COMMITTED} | ({name} if report["created"] else set())
    for n in sorted(times, key=lambda x: times[x]):
        if n in kept:
            report["kept"][n] = kept[n]
            continue
        rec = recs.get(n)
        by = meta.snapshots.pinned_by(rec, time.time()) if rec is not None else []
        if rec is not None and (why := windows.get((rec.collection_id, rec.snapshot_id))):
            by = [*by, why]
        if by:
            report["held"][n] = by
            continue
        if len(left) <= 1:
            report["held"][n] = ["the collection's last snapshot"]
            continue
        if not dry_run:
            try:
                drop(n)
            except (Conflict, StateError, NotFound) as e:   # pinned or changed meanwhile: theirs wins
                report["held"][n] = [f"not dropped: {e}"]
                continue
        report["pruned"].append(n)
        left.discard(n)
    return report


def run_all(meta, store, *, now: float, dry_run: bool = False, collection: str | None = None,
            db: str = DEFAULT_DB) -> list[dict]:
    """run() for every collection with a policy (or the one named), each on its own: one
    collection's failure is reported in its entry and does not stop the others."""
    from seglake.errors import SeglakeError

    out = []
    for doc in list_policies(meta):
        if collection is not None and (doc.get("collection"), doc.get("db")) != (collection, db):
            continue
        try:
            out.append(_run(meta, store, doc, now=now, dry_run=dry_run))
        except NotFound as e:
            if "collection id" not in str(e) or not isinstance(doc.get("collection_id"), int):
                out.append({"collection": doc.get("collection"), "db": doc.get("db"),
                            "error": f"{type(e).__name__}: {e}"})
                continue
            # the collection is gone for good (GC purged it): so is its policy (not by a dry run)
            if not dry_run:
                meta.kv.delete(meta.keys.retention(doc["collection_id"]))
            out.append({"collection": doc.get("collection"), "db": doc.get("db"), "created": None, "pruned": [],
                        "kept": {}, "held": {}, "dry_run": dry_run,
                        "note": "the collection no longer exists: its policy "
                                + ("would be removed" if dry_run else "was removed")})
        except SeglakeError as e:
            out.append({"collection": doc.get("collection"), "db": doc.get("db"), "error": f"{type(e).__name__}: {e}"})
        except (KeyError, TypeError, ValueError) as e:   # a malformed record: reported, the others go on
            out.append({"collection": doc.get("collection"), "db": doc.get("db"),
                        "error": f"malformed policy record ({type(e).__name__}: {e})"})
    if collection is not None and not out:
        raise NotFound(f"collection {collection!r} has no retention policy")
    return out


def report_line(r: dict) -> str:
    """One line per collection of a run's report (CLI, DAG log)."""
    if "error" in r:
        return f"{r['collection']}: FAILED {r['error']}"
    verb = "would " if r["dry_run"] else ""
    return (f"{r['collection']}: {verb}create {r['created'] or 'nothing'}; {verb}prune "
            f"{', '.join(r['pruned']) or 'nothing'}; keep {len(r['kept'])}"
            + "".join(f"; {n} held ({', '.join(w)})" for n, w in r["held"].items()))
