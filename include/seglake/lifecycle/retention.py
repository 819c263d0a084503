"""Retention schedules: per collection, a grandfather-father-son policy that says which
snapshots to take and which to keep (issue 19 item 5).

    policy = {"keep_last": 3, "keep_hourly": 24, "keep_daily": 7, "keep_weekly": 4, "keep_monthly": 12}

- Stored in etcd at `{root}/retention/{collection_id}` (set / get / clear / list); every
  key checked (a count 0..100000, an int: NaN, 1.5, "3", true refused; unknown keys refused
  naming the closest valid one; at least one count positive) before anything is written.
- The schedule's snapshots are named `sched_YYYYMMDDTHHMMZ` after the run's time (UTC,
  the minute): a retried run of the same time finds its snapshot instead of taking a
  second one. Their time for the policy is the one in the name. Snapshots made by hand
  (any other name) are never pruned by a schedule, and they count as "the last one".
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
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.snapshots import COMMITTED
from seglake.names import validate_name
from seglake.params import closest

UNITS = ("hourly", "daily", "weekly", "monthly")           # finest first
KEYS = ("keep_last", *(f"keep_{u}" for u in UNITS))
SCHED_RE = re.compile(r"sched_(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})Z")


@dataclass(frozen=True)
class Policy:
    keep_last: int = 0
    keep_hourly: int = 0
    keep_daily: int = 0
    keep_weekly: int = 0
    keep_monthly: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def parse_policy(doc: Mapping[str, Any]) -> Policy:
    """A checked Policy from a mapping of keep_* counts (missing keys: 0). One
    ValidationError naming every bad key, before any side effect."""
    if not isinstance(doc, Mapping):
        raise ValidationError(f"a retention policy is an object of {', '.join(KEYS)}; got {type(doc).__name__}")
    problems, out = [], {}
    for k, v in doc.items():
        if k not in KEYS:
            problems.append(f"unknown policy key {k!r}{closest(k, list(KEYS))}")
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


def set_policy(meta, collection: str, policy: Mapping[str, Any] | Policy, *, db: str = DEFAULT_DB,
               now: float | None = None) -> dict:
    pol = policy if isinstance(policy, Policy) else parse_policy(policy)
    coll = _collection(meta, collection, db)
    doc = {"collection_id": coll.collection_id, "collection": coll.name, "db": coll.db, **pol.to_json(),
           "updated_at": time.time() if now is None else now}
    meta.kv.put(meta.keys.retention(coll.collection_id), json.dumps(doc))
    return doc


def get_policy(meta, collection: str, *, db: str = DEFAULT_DB) -> dict | None:
    coll = _collection(meta, collection, db)
    kv = meta.kv.get(meta.keys.retention(coll.collection_id))
    return None if kv is None else json.loads(kv.value)


def clear_policy(meta, collection: str, *, db: str = DEFAULT_DB) -> bool:
    """Remove the policy; False when there was none."""
    coll = _collection(meta, collection, db)
    key = meta.keys.retention(coll.collection_id)
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


def list_policies(meta) -> list[dict]:
    return sorted((json.loads(kv.value) for kv in meta.kv.range(meta.keys.retention_prefix())),
                  key=lambda d: (d["db"], d["collection"]))


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


def _run(meta, store, doc: dict, *, now: float, dry_run: bool, create=None, drop=None) -> dict:
    from seglake.lifecycle import snapshot
    from seglake.meta.catalog import CREATED

    if isinstance(now, bool) or not isinstance(now, (int, float)) or not (0 < now < 2**33):
        raise ValidationError(f"schedule time must be a unix time in seconds, got {now!r}")
    policy = parse_policy({k: doc[k] for k in KEYS})
    coll = meta.catalog.get(doc["collection_id"])
    create = create or (lambda name: snapshot.create(meta, store, coll.name, name, "retention schedule", db=coll.db))
    drop = drop or (lambda name: snapshot.drop_by_id(meta, store, coll.collection_id, name, now=now))

    recs = {r.name: r for r in meta.snapshots.list(coll.collection_id)}
    times = {n: t for n, r in recs.items() if (t := sched_time(n)) is not None and r.state == COMMITTED}
    report: dict[str, Any] = {"collection": coll.name, "db": coll.db, "at": now, "dry_run": dry_run,
                              "policy": policy.to_json(), "created": None, "pruned": [], "kept": {}, "held": {}}
    name = sched_name(now)
    if coll.state != CREATED:
        report["note"] = f"collection is {coll.state}: no new snapshot, the existing ones are pruned by the policy"
    elif due(policy, times, now) or name in recs:
        rec = recs.get(name)
        if rec is None or rec.state != COMMITTED:   # absent, or a PENDING create this run resumes
            if not dry_run:
                create(name)
            report["created"] = name
        times[name] = sched_time(name)
    kept = keep_set(policy, times)
    left = {n for n, r in recs.items() if r.state == COMMITTED} | ({name} if report["created"] else set())
    for n in sorted(times, key=lambda x: times[x]):
        if n in kept:
            report["kept"][n] = kept[n]
            continue
        rec = recs.get(n)
        by = rec.pinned_by(now) if rec is not None else []
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
        if collection is not None and (doc["collection"], doc["db"]) != (collection, db):
            continue
        try:
            out.append(_run(meta, store, doc, now=now, dry_run=dry_run))
        except SeglakeError as e:
            out.append({"collection": doc["collection"], "db": doc["db"], "error": f"{type(e).__name__}: {e}"})
    if collection is not None and not out:
        raise NotFound(f"collection {collection!r} has no retention policy")
    return out
