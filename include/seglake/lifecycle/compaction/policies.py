"""Per-collection compaction policies (issue 28 item 1) and the scheduled run over them.

A policy is stored in etcd at `{root}/compaction/policies/{collection_id}` (schema v1):

    {"collection_id": 7, "collection": "demo", "db": "default", "scheduled": true,
     "policy": {"min_segment_rows": 5000, "target_bytes": 268435456, ...},
     "updated_at": 1790000000.0, "by": "alice"}

`policy` holds only the keys the operator set; every other key comes from config
(compaction_<key>), and a run's own overrides (CLI flags, a DAG form) come last:
config < stored policy < the run's overrides. Every value is checked (a finite number
in its config key's range; NaN, 1.5 rows, "3", true refused; an unknown key refused
naming the closest) and the resulting Policy built BEFORE anything is written.
`scheduled: true` puts the collection in the scheduled compaction run
(`run_scheduled`; a scheduled run of the compaction DAG, which leaves `collection` empty); a collection without a policy, or with
scheduled false, is only compacted when asked.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Mapping

from seglake import limits
from seglake.errors import Conflict, NotFound, SeglakeError, ValidationError
from seglake.meta.catalog import DEFAULT_DB, DROPPED, DROPPING
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Put, exists
from seglake.names import check_text, validate_name
from seglake.lifecycle.compaction.policy import POLICY_KEYS, Policy, closest_key, duplicate_keys, policy_key

RECORD_KEYS = ("policy", "scheduled")


def parse_overrides(values: Mapping[str, Any] | None) -> dict:
    """{key: value} checked: keys of POLICY_KEYS (a `compaction_` prefix allowed), values
    in their config key's range; None values dropped. One ValidationError naming every
    bad key, before any side effect."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise ValidationError(f"a compaction policy is an object of {', '.join(POLICY_KEYS)}; "
                              f"got {type(values).__name__}")
    problems, out = duplicate_keys(values, POLICY_KEYS), {}
    for k, v in values.items():
        name = policy_key(k, POLICY_KEYS)
        if name is None:
            problems.append(f"unknown compaction policy key {k!r}{closest_key(k, POLICY_KEYS)}")
            continue
        if v is None:
            continue
        try:
            out[name] = limits.check(f"compaction_{name}", name, v)
        except ValidationError as e:
            problems.append(str(e))
    if problems:
        raise ValidationError("compaction policy refused: " + "; ".join(problems))
    return out


def effective(settings, stored: Mapping[str, Any] | None = None, overrides: Mapping[str, Any] | None = None
              ) -> Policy:
    """config < stored policy < the run's overrides, each layer checked."""
    return Policy.from_settings(settings, {**parse_overrides(stored), **parse_overrides(overrides)})


def _collection(meta, collection: str, db: str):
    validate_name("collection", collection)
    validate_name("db", db)
    return meta.catalog.get_by_name(collection, db)


def set_policy(meta, settings, collection: str, values: Mapping[str, Any], *, db: str = DEFAULT_DB,
               scheduled: bool | None = None, by: str = "", now: float | None = None) -> dict:
    """Record the collection's policy (replacing the previous one; `scheduled` None keeps
    the recorded flag, False when there was none). Checked first: the keys and values,
    the policy they make with config, the flag."""
    over = parse_overrides(values)
    effective(settings, over)                       # the whole policy must hold (ranges with config)
    if scheduled is not None and not isinstance(scheduled, bool):
        raise ValidationError(f"compaction policy refused: scheduled: {scheduled!r} is not allowed; use true or false")
    check_text("compaction policy refused: 'by'", by, 256)
    coll = _collection(meta, collection, db)
    unscheduled = scheduled is False   # asked for: `--no-scheduled`, "scheduled": false
    if scheduled is None:
        old = get_policy(meta, collection, db=db)
        scheduled = bool(old and old.get("scheduled"))
    if not over and not scheduled:
        if unscheduled:   # (it did set something: the flag, to what no policy means anyway)
            raise ValidationError(f"compaction policy refused: it sets nothing but scheduled=false, which is no "
                                  f"policy at all (config's values, not scheduled): to stop scheduling "
                                  f"{coll.name!r}, clear its policy (`seglake compaction policy clear {coll.name}`, "
                                  f"DELETE /compaction/policies/{coll.name}), or set a key with it")
        raise ValidationError(f"compaction policy refused: it sets nothing; set at least one of "
                              f"{', '.join(POLICY_KEYS)} or scheduled, or clear the policy")
    doc = {"collection_id": coll.collection_id, "collection": coll.name, "db": coll.db, "scheduled": scheduled,
           "policy": over, "updated_at": time.time() if now is None else now, "by": by}
    try:    # only while the collection's record exists: GC's purge removes the policy with it, in one txn
        meta.kv.txn([exists(meta.keys.collection(coll.collection_id))],
                    [Put(meta.keys.compaction_policy(coll.collection_id), encode(doc))],
                    f"set the compaction policy of {coll.name!r}")
    except Conflict:
        raise NotFound(f"collection {coll.name!r} (id {coll.collection_id}) was removed while its compaction "
                       f"policy was being set; nothing recorded") from None
    return doc


def _read(kv) -> dict:
    doc = decode(kv.value, kv.key)
    if not isinstance(doc.get("collection_id"), int) or not isinstance(doc.get("scheduled"), bool):
        raise SeglakeError(f"corrupt compaction policy at {kv.key!r}")
    parse_overrides(doc.get("policy"))             # a hand-edited record is refused, never half-used
    return doc


def get_policy(meta, collection: str, *, db: str = DEFAULT_DB) -> dict | None:
    coll = _collection(meta, collection, db)
    kv = meta.kv.get(meta.keys.compaction_policy(coll.collection_id))
    return None if kv is None else _read(kv)


def stored_overrides(meta, collection_id: int) -> dict:
    """The stored policy's keys for a collection id ({} without one)."""
    kv = meta.kv.get(meta.keys.compaction_policy(collection_id))
    return {} if kv is None else dict(_read(kv)["policy"])


def clear_policy(meta, collection: str, *, db: str = DEFAULT_DB) -> bool:
    """Remove the collection's policy (config applies again); True if there was one."""
    coll = _collection(meta, collection, db)
    key = meta.keys.compaction_policy(coll.collection_id)
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


def list_policies(meta) -> list[dict]:
    out = []
    for kv in meta.kv.range(meta.keys.compaction_policies_prefix()):
        try:
            out.append(_read(kv))
        except SeglakeError as e:
            out.append({"key": kv.key, "error": str(e)})
    return out


def policy_for(meta, settings, collection: str, *, db: str = DEFAULT_DB,
               overrides: Mapping[str, Any] | None = None) -> Policy:
    """The Policy a run of `collection` uses: config < its stored policy < `overrides`."""
    over = parse_overrides(overrides)               # a bad run override is refused before any read
    coll = _collection(meta, collection, db)
    return effective(settings, stored_overrides(meta, coll.collection_id), over)


def scheduled_targets(meta, settings, overrides: Mapping[str, Any] | None = None) -> list[dict]:
    """The collections a scheduled run compacts: [{collection, db, collection_id, policy}]
    (config < stored policy < `overrides`), or [{collection, db, error}] for a policy
    that cannot be used (corrupt, its collection gone), or [{collection, db, collection_id,
    skipped}] for a Dropping / Dropped collection's (GC removes it with the collection);
    by collection id."""
    over = parse_overrides(overrides)
    out = []
    for doc in list_policies(meta):
        if "error" in doc:
            out.append({"collection": None, "db": None, "error": doc["error"]})
            continue
        if not doc["scheduled"]:
            continue
        try:
            coll = meta.catalog.get(doc["collection_id"])
            if coll.state in (DROPPING, DROPPED):   # nothing to compact, not a failure; GC removes the
                out.append({"collection": coll.name, "db": coll.db, "collection_id": coll.collection_id,  # policy
                            "skipped": f"collection is {coll.state} (GC removes its policy with it)"})
                continue
            out.append({"collection": coll.name, "db": coll.db, "collection_id": coll.collection_id,
                        "policy": effective(settings, doc["policy"], over)})
        except SeglakeError as e:
            out.append({"collection": doc["collection"], "db": doc["db"], "error": f"{type(e).__name__}: {e}"})
    return sorted(out, key=lambda t: t.get("collection_id") or 0)


def target_gone(meta, collection_id: int) -> str | None:
    """Why a chosen target's collection is no longer one to compact (dropped, purged), or
    None while it is: a run that finds its target gone skips it (never a failure, never a
    namesake compacted instead)."""
    kv = meta.kv.get(meta.keys.collection(collection_id))
    if kv is None:
        return f"collection id {collection_id} was dropped and purged since it was chosen"
    state = decode(kv.value, kv.key).get("state")
    return f"collection id {collection_id} is {state} since it was chosen" if state in (DROPPING, DROPPED) else None


MAX_TARGETS = 1000          # collections one run (one Spark job's argv) compacts
TRIGGERS = ("manual", "scheduled")


def targets_json(targets: list[dict]) -> str:
    """The targets a Spark job compacts, as its argv takes them (names, ids and policy
    numbers: no secret): [{"collection", "db", "collection_id", "policy"}]. The id: a
    collection dropped and made again under its name before the job runs is not it."""
    return json.dumps([{"collection": t["collection"], "db": t["db"], "collection_id": t["collection_id"],
                        "policy": t["policy"].to_json()} for t in targets], separators=(",", ":"))


def parse_targets(text: str) -> list[dict]:
    """`targets_json`'s output back, every name and number checked before any side effect."""
    try:
        doc = json.loads(text)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"--targets: not JSON ({e})") from None
    if not isinstance(doc, list) or len(doc) > MAX_TARGETS:
        raise ValidationError(f"--targets: a list of at most {MAX_TARGETS} {{collection, db, policy}} objects")
    out = []
    for t in doc:
        if not isinstance(t, dict) or set(t) != {"collection", "db", "collection_id", "policy"}:
            raise ValidationError("--targets: each entry is an object of exactly collection, db, collection_id, "
                                  "policy")
        validate_name("collection", t["collection"])
        validate_name("db", t["db"])
        limits.check("id", "--targets: collection_id", t["collection_id"])
        if not isinstance(t["policy"], dict):
            raise ValidationError("--targets: a policy is an object")
        out.append({"collection": t["collection"], "db": t["db"], "collection_id": t["collection_id"],
                    "policy": Policy.from_json(t["policy"])})
    return out


def run_scheduled(meta, store, settings, *, dry_run: bool = False, now: float | None = None,
                  compact: Callable | None = None, say: Callable[[str], None] = lambda _: None,
                  overrides: Mapping[str, Any] | None = None) -> list[dict]:
    """Compact every collection whose policy says `scheduled` (inline), each on its own:
    one collection's failure is reported in its entry and does not stop the others.
    Nothing scheduled, or nothing to compact: an empty / all-quiet report."""
    from seglake.lifecycle.compaction.compacting import compact as compact_one

    compact = compact or compact_one
    out = []
    for t in scheduled_targets(meta, settings, overrides):
        if "error" in t or "skipped" in t:
            say(report_line(t))
            out.append(t)
            continue
        entry = {"collection": t["collection"], "db": t["db"], "collection_id": t["collection_id"]}
        try:
            s = compact(meta, store, t["collection"], t["policy"], db=t["db"], dry_run=dry_run, now=now,
                        trigger="scheduled", collection_id=t["collection_id"])
            entry.update(skipped=s.plan.skipped, units=len(s.plan.units), dry_run=dry_run,
                         counts=s.counts() if not dry_run else {}, gain=s.plan.gain())
        except SeglakeError as e:
            entry["error"] = f"{type(e).__name__}: {e}"
        say(report_line(entry))
        out.append(entry)
    return out


def compact_targets(meta, store, targets: list[dict], *, dry_run: bool = False, trigger: str = "manual",
                    compact: Callable | None = None, say: Callable[[str], None] = lambda _: None
                    ) -> tuple[list[dict], list[dict]]:
    """Compact each chosen target ({collection, db, collection_id, policy}) inline, each on
    its own: one target's failure (a refused unit record, the store unreachable for it) is
    reported and the next is still compacted. (done entries, failed entries)."""
    from seglake.lifecycle.compaction.compacting import compact as compact_one

    compact = compact or compact_one
    done, failed = [], []
    for t in targets:
        entry = {"collection": t["collection"], "db": t["db"], "collection_id": t["collection_id"]}
        try:
            s = compact(meta, store, t["collection"], t["policy"], db=t["db"], dry_run=dry_run, trigger=trigger,
                        collection_id=t["collection_id"])
        except SeglakeError as e:
            failed.append({**entry, "error": f"{type(e).__name__}: {e}"})
            say(report_line(failed[-1]))
            continue
        done.append({**entry, "skipped": s.plan.skipped, "units": len(s.plan.units), "dry_run": dry_run,
                     "counts": s.counts() if not dry_run else {}, "gain": s.plan.gain()})
        say(report_line(done[-1]))
    return done, failed


def report_line(r: dict) -> str:
    if "error" in r:
        return f"{r.get('collection')}: FAILED {r['error']}"
    if r.get("skipped"):
        return f"{r['collection']}: not compacted: {r['skipped']}"
    if not r["units"]:
        return f"{r['collection']}: nothing to compact"
    if r["dry_run"]:
        g = r["gain"]
        return f"{r['collection']}: would compact {g['segments_in']} segments -> {g['segments_out']} ({r['units']} units)"
    c = r["counts"]
    return (f"{r['collection']}: {c['committed']} units committed, {c['already_committed']} already, {c['lost']} lost; "
            f"{c['segments_in']} segments -> {c['segments_out']}, {c['rows_dropped']} rows dropped")
