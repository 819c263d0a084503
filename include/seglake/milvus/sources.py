"""Registered Milvus sources and their schedule (issue 29 Deliver 4): a Milvus's
collections captured on a schedule, pruned by a retention policy, verified.

    source = {"milvus_etcd": "etcd:2379", "milvus_root": "by-dev", "bucket": "milvus-bucket",
              "bucket_root": "files", "db": "default", "collections": ["docs", "images"],
              "conn_id": "seglake_milvus", "keep_last": 3, "keep_daily": 7, "verify": true}

- Stored in seglake's etcd at `{root}/milvus/sources/{name}` (set / get / clear / list).
  Every key is checked before anything is written: an unknown key is refused naming the
  closest valid one, the endpoints, roots, bucket, database and collection names as the
  capture checks them, the keep_* counts as `seglake retention set` checks them
  (seglake.lifecycle.retention.parse_policy: at least one positive). One source per
  database.collection: the schedule's bundles of a collection are named by time only, so
  a second source naming it is refused (and a run skips, as failed, a collection another
  record names).
- No secret is ever stored: the Milvus bucket's S3 credentials come from the Airflow
  connection `conn_id` (login, password, extra endpoint_url / region_name) in the
  snapshot_schedule DAG, from the milvus_s3_* config keys (environment) on the CLI.
- One schedule run of a source at time `now` (the snapshot_schedule DAG, after the
  seglake collections' policies; `seglake milvus source run`), for each of its collections
  (only the captures of the collection Milvus has under that name now count: one dropped
  and created again has a new id, its predecessor's captures are kept, never judged):
    due      the schedule's bundle is named `sched_YYYYMMDDTHHMMZ` after the run's time;
             one is taken unless one of the schedule's bundles of that collection falls
             in the current bucket of the finest unit the policy keeps (as
             retention.due); a run earlier than the newest schedule bundle takes none
    capture  the due collections in one incremental capture (seglake.milvus.capture,
             one etcd revision; a file an earlier bundle holds is not copied again),
             marked as the schedule's (`made_by`); when that fails, each one alone (one
             collection dropped in Milvus does not stop the others' captures)
    verify   the run's bundle (seglake.lifecycle.backup.verify: every data file's
             SHA-256, every binlog parsed against its key and entries), recorded
    prune    the schedule's bundles of that Milvus collection the policy no longer keeps
             (seglake.lifecycle.backup.prune with schedule_only: never the newest, never
             one an import or verify holds, never a pinned one, never a bundle made by
             hand or a seglake export of the same name)
  then one sweep of the target's unreferenced data files (older than min_age).
- Pins: `pin(meta, db, collection, bundle, ttl)` keeps a capture bundle from being pruned
  until it expires (`{root}/milvus/pins/...`). The prune asks right before each drop; a pin
  written while that very bundle is being dropped may lose (the bundle is then gone and
  the pin names nothing): pin before the schedule's next run prunes.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from typing import Any, Callable, Mapping

from seglake import limits
from seglake.contract import closest
from seglake.errors import NotFound, SeglakeError, ValidationError
from seglake.lifecycle import retention
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.meta import codec
from seglake.names import check_text, validate_name
from seglake.storage import layout

log = logging.getLogger("seglake.milvus")
DEFAULTS = {"milvus_root": "by-dev", "bucket_root": "files", "db": "default", "conn_id": "seglake_milvus",
            "verify": True, "max_mib_per_second": 0}
REQUIRED = ("milvus_etcd", "bucket", "collections")
KEYS = ("milvus_etcd", "milvus_root", "bucket", "bucket_root", "db", "collections", "conn_id", "verify",
        "max_mib_per_second", *retention.KEYS)
MAX_COLLECTIONS = 1024    # a source's collections (its etcd record stays well under etcd's request limit)
CONN_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,249}")


# -- the record --------------------------------------------------------------------------------
def parse_source(doc: Mapping[str, Any]) -> dict:
    """A checked source from a mapping of KEYS: one ValidationError naming every bad key,
    before any side effect."""
    from seglake.milvus.capture import check_request

    if not isinstance(doc, Mapping):
        raise ValidationError(f"a Milvus source is an object of {', '.join(KEYS)}; got {type(doc).__name__}")
    problems = [f"unknown key {k!r}{closest(str(k), list(KEYS))}" for k in doc if k not in KEYS]
    problems += [f"{k} is required" for k in REQUIRED if doc.get(k) in (None, "", [])]
    if problems:
        raise ValidationError("Milvus source refused: " + "; ".join(problems))
    out = {**DEFAULTS, **{k: v for k, v in doc.items() if v is not None}}
    try:
        policy = retention.parse_policy({k: out[k] for k in retention.KEYS if k in out})
    except ValidationError as e:
        problems.append(str(e))
        policy = None
    if not isinstance(out["verify"], bool):
        problems.append(f"verify: {out['verify']!r} is not allowed; use true or false")
    if not (isinstance(out["conn_id"], str) and CONN_ID_RE.fullmatch(out["conn_id"])):
        problems.append(f"conn_id {out['conn_id']!r}: an Airflow connection id (letters, digits, '_', '.', '-')")
    try:   # the capture's rate (MiB/s; 0: unlimited), under the store-wide limit
        limits.check("copy_max_bytes_per_second", "max_mib_per_second", out["max_mib_per_second"], scale=1 << 20)
    except ValidationError as e:
        problems.append(str(e))
    colls = out["collections"]
    if not (isinstance(colls, str) or (isinstance(colls, list) and all(isinstance(c, str) for c in colls))):
        problems.append(f"collections: {colls!r} is not a list of names nor a comma-separated text")
        colls = []
    elif len(colls.split(",") if isinstance(colls, str) else colls) > MAX_COLLECTIONS:
        problems.append(f"collections: {len(colls.split(',') if isinstance(colls, str) else colls)} names; at most "
                        f"{MAX_COLLECTIONS} per source (register several sources)")
        colls = []
    try:
        req = check_request(out["milvus_etcd"], out["milvus_root"], out["bucket"], out["bucket_root"], colls,
                            "check", db=out["db"])
    except ValidationError as e:
        problems.append(str(e))
        req = None
    if problems:
        raise ValidationError("Milvus source refused: " + "; ".join(problems))
    return {k: req[k] for k in ("milvus_etcd", "milvus_root", "bucket", "bucket_root", "db")} | {
        "collections": list(dict.fromkeys(req["collections"])), "conn_id": out["conn_id"], "verify": out["verify"],
        "max_mib_per_second": out["max_mib_per_second"],
        **{k: getattr(policy, k) for k in retention.KEYS}}


def set_source(meta, name: str, doc: Mapping[str, Any], *, now: float | None = None) -> dict:
    """Register (or replace) source `name`. Refused when another registered source names one
    of its collections in the same database: both would write the schedule's bundles of
    that collection to the same place in the target, and one's run would judge (prune,
    call "already captured") the other's captures. Guarded: the other records unchanged."""
    from seglake.meta.kv import Put, absent, unchanged

    validate_name("Milvus source", name)
    src = parse_source(doc)
    rec = {"name": name, **src, "updated_at": time.time() if now is None else now}
    key = meta.keys.milvus_source(name)
    others = [kv for kv in meta.kv.range(meta.keys.milvus_sources_prefix()) if kv.key != key]
    shared = _overlaps(src, [_record(kv) for kv in others])
    if shared:
        raise ValidationError(f"Milvus source {name!r} refused: " + "; ".join(shared))
    own = meta.kv.get(key)
    meta.kv.txn([*(unchanged(kv) for kv in others), unchanged(own) if own is not None else absent(key)],
                [Put(key, json.dumps(rec))])
    return rec


def _record(kv) -> dict:
    try:
        d = codec.loads(kv.value, kv.key)
    except ValueError:
        d = None
    return d if isinstance(d, dict) else {"name": kv.key.rsplit("/", 1)[-1], "error": "unreadable record"}


def _overlaps(src: Mapping[str, Any], others: list[dict]) -> list[str]:
    """Why `src` cannot run beside the `others` (records): each other source naming one of
    its collections in the same database (an unreadable record: every collection, fail closed)."""
    out = []
    for o in others:
        if "error" in o:
            out.append(f"Milvus source {o.get('name')!r} has an unreadable record (clear it first)")
            continue
        both = [c for c in src["collections"] if o.get("db", DEFAULTS["db"]) == src["db"]
                and c in (o.get("collections") or [])]
        if both:
            out.append(f"Milvus source {o.get('name')!r} already captures {src['db']}.{', '.join(both)} "
                       f"(one source per collection: the schedule's bundles of a collection are named by "
                       f"time only)")
    return out


def get_source(meta, name: str) -> dict:
    validate_name("Milvus source", name)
    kv = meta.kv.get(meta.keys.milvus_source(name))
    if kv is None:
        known = [d.get("name") for d in list_sources(meta)]
        raise NotFound(f"no Milvus source {name!r}" + (f"; registered: {', '.join(map(str, known))}" if known
                                                         else "; register one with `seglake milvus source set`"))
    return codec.loads(kv.value, kv.key)


def clear_source(meta, name: str) -> bool:
    validate_name("Milvus source", name)
    key = meta.keys.milvus_source(name)
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


def list_sources(meta) -> list[dict]:
    return sorted((_record(kv) for kv in meta.kv.range(meta.keys.milvus_sources_prefix())),
                  key=lambda d: str(d.get("name")))


# -- pins of capture bundles ------------------------------------------------------------------------
def pin(meta, target, db: str, collection: str, bundle: str, ttl: float, *, by: str = "",
        now: float | None = None) -> dict:
    """Keep the committed capture bundle `bundle` of backup target `target` from being
    pruned for `ttl` seconds (checked: limits pin_ttl). Against a prune running at the same
    time (the protocol of backup.holds): the pin is written in etcd first, then a prune of
    the bundle is waited for, then the bundle is looked for -- a prune that wrote its intent
    before sees this pin and keeps the bundle; one that dropped it before is found here, the
    pin removed and the call refused (NotFound). Never both: a pin answered is a bundle kept."""
    bundles.check_names(db, collection, bundle)
    ttl = float(limits.check("pin_ttl", "ttl (seconds)", ttl))
    check_text("by", by, 256)
    if not target.exists(layout.bundle_commit(db, collection, bundle)):
        raise NotFound(f"no committed bundle {db}.{collection}/{bundle} in {target.uri}: nothing to pin")
    now = time.time() if now is None else now
    doc = {"db": db, "collection": collection, "bundle": bundle, "pinned_at": now, "expires_at": now + ttl,
           "by": by}
    key = meta.keys.milvus_pin(db, collection, bundle)
    meta.kv.put(key, json.dumps(doc), lease=meta.kv.grant_lease(int(math.ceil(ttl))))   # etcd times it too
    holds.wait_for_prune(target, db, collection, bundle)
    if not target.exists(layout.bundle_commit(db, collection, bundle)):
        meta.kv.delete(key)
        raise NotFound(f"bundle {db}.{collection}/{bundle} was pruned while it was being pinned: nothing pinned")
    return doc


def unpin(meta, db: str, collection: str, bundle: str) -> bool:
    bundles.check_names(db, collection, bundle)
    key = meta.keys.milvus_pin(db, collection, bundle)
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


def pinned_by(meta, db: str, collection: str, bundle: str, now: float | None = None) -> list[str]:
    """Who pins the bundle now (an expired or unreadable pin holds nothing... an unreadable
    one holds, fail closed)."""
    kv = meta.kv.get(meta.keys.milvus_pin(db, collection, bundle))
    if kv is None:
        return []
    try:
        doc = codec.loads(kv.value, kv.key)
        if not _live(kv, doc, time.time() if now is None else now):
            return []
        by = "".join(ch if ch.isprintable() else " " for ch in str(doc.get("by") or "an operator")[:256])
        return [f"pin by {by} until {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime(doc['expires_at']))}"]
    except (ValueError, KeyError, TypeError, ArithmeticError):   # a time beyond time_t: OverflowError
        return [f"an unreadable pin record {kv.key} (kept)"]


def _live(kv, doc: dict, now: float) -> bool:
    """A pin is live while its expiry is ahead of `now` or, for a pin on an etcd lease of its
    TTL, while its key exists: etcd's server times the lease, so a judging host whose clock
    jumped ahead never ends a pin early (a pin written without a lease: the clock alone)."""
    expires = codec.moment(doc, "expires_at", kv.key)   # NaN, "-1", true, -1: unreadable, never 'expired'
    return expires > now or kv.lease != 0


def list_pins(meta, now: float | None = None) -> list[dict]:
    now = time.time() if now is None else now
    out = []
    for kv in meta.kv.range(meta.keys.milvus_pins_prefix()):
        try:
            d = codec.loads(kv.value, kv.key)
            if _live(kv, d, now):
                out.append(d)
        except ValueError as e:   # held by pinned_by (fail closed); named here
            log.warning("%s (the pin holds its bundle)", e)
    return out


# -- one schedule run ----------------------------------------------------------------------------
def identity(src: Mapping[str, Any]) -> dict:
    """What a capture bundle records of the Milvus it came from (bundle source keys)."""
    return {"etcd_root": src["milvus_root"], "bucket": src["bucket"], "root_path": src["bucket_root"]}


def schedule_bundles(target, src: Mapping[str, Any], collection: str) -> dict[str, dict]:
    """{bundle: its source} of the committed schedule captures of this source's collection."""
    from seglake.lifecycle.backup.export import MADE_BY_SCHEDULE

    ident = identity(src)
    out = {}
    for d, c, b, committed in bundles.find(target, src["db"], collection):
        if not committed or retention.sched_time(b) is None:
            continue
        try:
            doc = bundles.read(target, d, c, b)
        except (bundles.BundleError, NotFound):
            continue   # unreadable: not the schedule's to judge
        s = doc.get("source") or {}
        if doc.get("kind") == "milvus" and doc.get("made_by") == MADE_BY_SCHEDULE and all(
                s.get(k) == v for k, v in ident.items()):
            out[b] = s
    return out


def run(meta, target, settings, name: str, *, now: float, dry_run: bool = False, min_age: float = 86400.0,
        sweep: bool = True, say=log.warning) -> list[dict]:
    """One schedule run of the source `name` at `now` (module doc): one report per
    collection ({source, collection, bundle, captured, verify, pruned, kept, held, note}
    or `error`). `settings`: the milvus_s3_* credentials (the source's connection), the
    copy threads, etcd timeout."""
    src = get_source(meta, name)
    try:   # a stored source has every retention count (parse_source): one missing is damage, not 0
        missing = [k for k in retention.KEYS if not isinstance(src, dict) or k not in src]
        if missing:
            raise ValidationError(f"{', '.join(missing)} missing")
        src = {"name": name, **parse_source({k: src[k] for k in KEYS if k in src})}
    except (ValidationError, KeyError) as e:
        raise ValidationError(f"the record of Milvus source {name!r} is malformed: {e}") from None
    wall = time.time()
    if isinstance(now, bool) or not isinstance(now, (int, float)) or not (0 < now < 2**33):
        raise ValidationError(f"schedule time must be a unix time in seconds, got {now!r}")
    if now > wall + retention.MAX_AHEAD:
        raise ValidationError(f"schedule time {retention.sched_name(now)} is ahead of the clock")
    policy = retention.parse_policy({k: src[k] for k in retention.KEYS})
    bundle = retention.sched_name(now)
    reports: dict[str, dict] = {}
    due: list[str] = []
    others = [d for d in list_sources(meta) if d.get("name") != name]
    ids = _current_ids(src, settings)
    for coll in src["collections"]:
        shared = _overlaps({**src, "collections": [coll]}, others)
        if shared:   # a record written beside set_source's check: neither source judges the other's bundles
            reports[coll] = {"source": name, "db": src["db"], "collection": coll, "bundle": None, "at": now,
                             "dry_run": dry_run, "policy": policy.to_json(), "captured": None, "verify": None,
                             "pruned": [], "kept": {},
                             "held": {}, "_have": {}, "error": "; ".join(shared) + ": nothing captured or pruned"}
            continue
        have = schedule_bundles(target, src, coll)
        earlier = {}
        if coll in ids:   # only the captures of the collection Milvus has under that name now
            earlier = {b: s for b, s in have.items() if s.get("collection_id") != ids[coll]}
            have = {b: s for b, s in have.items() if b not in earlier}
        times = {b: retention.sched_time(b) for b in have}
        r = {"source": name, "db": src["db"], "collection": coll, "bundle": None, "at": now, "dry_run": dry_run,
             "policy": policy.to_json(), "captured": None, "verify": None, "pruned": [], "kept": {}, "held": {},
             "_have": have}
        reports[coll] = r
        if earlier:
            r["earlier"] = sorted(earlier)
            say(f"milvus {name} {src['db']}.{coll}: {len(earlier)} schedule captures of an earlier collection of "
                f"that name (id {', '.join(sorted({str(s.get('collection_id')) for s in earlier.values()}))}; now "
                f"{ids[coll]}) are kept: the schedule judges only the current collection's")
        newest = max(times.values(), default=None)
        if bundle in have:
            r["bundle"], r["note"] = bundle, f"{bundle} already captured"
        elif _exists(target, src["db"], coll, bundle):
            r["note"] = f"a bundle named {bundle!r} exists and is not this schedule's: none taken this run"
        elif newest is not None and retention.sched_time(bundle) < newest:
            r["note"] = f"the schedule already has a newer bundle ({retention.sched_name(newest)}): none taken"
        elif retention.due(policy, times, now):
            r["bundle"] = bundle
            due.append(coll)
        else:
            r["note"] = "not due: the current period already has a capture"
    if due and not dry_run:
        from seglake.milvus import capture

        def take(names: list[str]) -> None:
            req = capture.check_request(src["milvus_etcd"], src["milvus_root"], src["bucket"], src["bucket_root"],
                                        names, bundle, db=src["db"])
            for c in capture.run_request(req, settings, target, meta=meta, schedule=True, say=say,
                                         max_bytes_per_second=src["max_mib_per_second"] * (1 << 20)):
                reports[c["collection"]]["captured"] = {k: c.get(k) for k in (
                    "uid", "rows", "bytes", "files", "copied_files", "copied_bytes", "reused_files", "already",
                    "etcd_revision", "collection_id", "seconds", "throttle")}

        try:
            take(due)   # every due collection at one etcd revision
        except SeglakeError as e:
            if len(due) == 1:
                reports[due[0]]["error"] = f"capture: {type(e).__name__}: {e}"
            else:   # one collection's failure (dropped in Milvus, say) does not stop the others: one by one
                say(f"milvus {name}: the capture of {len(due)} collections failed ({type(e).__name__}: {e}); "
                    f"capturing them one by one")
                for coll in due:
                    try:
                        take([coll])
                    except SeglakeError as e1:
                        reports[coll]["error"] = f"capture: {type(e1).__name__}: {e1}"
    for coll, r in reports.items():
        have = r.pop("_have")
        if "error" in r:
            continue
        if r["bundle"] is not None and not dry_run:
            try:
                src_doc = bundles.read(target, src["db"], coll, r["bundle"])["source"]
                have[r["bundle"]] = src_doc
            except (bundles.BundleError, NotFound) as e:
                r["error"] = f"the run's bundle cannot be read back: {e}"
                continue
            if src["verify"] and (r["captured"] is not None or _unverified(meta, src["db"], coll, r["bundle"])):
                from seglake.lifecycle.backup import verify as verifies

                rep = verifies.verify(target, coll, r["bundle"], db=src["db"], threads=settings.copy_threads,
                                      meta=meta, say=say)
                r["verify"] = {"ok": rep["ok"], "problem_count": rep["problem_count"],
                               "problems": rep["problems"][:5], "data_files": rep.get("data_files", 0)}
                if not rep["ok"]:
                    r["error"] = (f"verify: {rep['problem_count']} bad files in {src['db']}.{coll}/{r['bundle']} "
                                  f"(e.g. {rep['problems'][0]['file']}: {rep['problems'][0]['problem']})")
        planned_first = dry_run and r["bundle"] is not None and r["bundle"] not in have
        if not have and not planned_first:
            continue   # (a dry run's first capture is judged below as the real run would keep it)
        cid = have[max(have, key=lambda b: (retention.sched_time(b), b))].get("collection_id") if have \
            else ids.get(coll)
        from seglake.lifecycle.backup import prune as prunes

        try:
            p = prunes.prune(target, coll, policy, db=src["db"], dry_run=dry_run, min_age=min_age, schedule_only=True,
                             collection_id=cid, milvus=identity(src), sweep=False, say=say,
                             pinned=lambda b, c=coll: pinned_by(meta, src["db"], c, b),
                             planned={r["bundle"]: retention.sched_time(r["bundle"])} if planned_first else None)
        except SeglakeError as e:
            r["error"] = (r.get("error", "") + " | " if r.get("error") else "") + f"prune: {type(e).__name__}: {e}"
            continue
        r["pruned"], r["kept"], r["held"] = p["pruned"], p["kept"], p["held"]
        if not dry_run:
            for b in p["pruned"]:   # the page lists captures that exist
                meta.kv.delete(meta.keys.milvus_capture(src["db"], coll, b))
    out = list(reports.values())
    if sweep and any(r["pruned"] for r in out):
        from seglake.lifecycle.backup import prune as prunes

        swept = prunes.sweep_data(target, dry_run=dry_run, min_age=min_age, say=say)
        for r in out:
            r["sweep"] = swept
    return out


def _current_ids(src: Mapping[str, Any], settings) -> dict[str, int]:
    """{collection: id} of the source's collections Milvus has now (read-only, one etcd
    revision); {} when Milvus's etcd cannot be read (a due capture then reports it)."""
    from seglake.meta.kv import KV
    from seglake.milvus import catalog
    from seglake.milvus.etcdmeta import MilvusMeta

    try:
        with KV(src["milvus_etcd"], timeout=settings.etcd_timeout) as kv:
            m = MilvusMeta(kv, src["milvus_root"], kv.revision())
            dbs, infos = catalog.databases(m), catalog.collection_infos(m)
            held = {n: catalog.holder(infos, dbs, src["db"], n) for n in src["collections"]}   # as catalog.read
            return {n: c["id"] for n, c in held.items() if c is not None}
    except SeglakeError:
        return {}


def _exists(target, db: str, collection: str, bundle: str) -> bool:
    try:
        return bundles.existing(target, db, collection, bundle) is not None
    except bundles.BundleError:
        return True   # there, damaged: not the schedule's to overwrite


def _unverified(meta, db: str, collection: str, bundle: str) -> bool:
    from seglake.lifecycle.backup import verify as verifies

    rec = verifies.recorded(meta, db, collection, bundle)
    return rec is None or not rec.get("ok")


def run_all(meta, open_target: Callable[[], Any], settings_for: Callable[[str], Any], *, now: float,
            dry_run: bool = False, source: str | None = None, min_age: float = 86400.0,
            say=log.warning) -> list[dict]:
    """run() of every registered source (or the one named), each on its own: one source's
    failure is reported in its entries and does not stop the others. `settings_for(conn_id)`:
    the settings with that connection's Milvus bucket credentials."""
    names = [source] if source is not None else [d.get("name") for d in list_sources(meta)]
    if source is not None:
        get_source(meta, source)   # NotFound before anything
    out: list[dict] = []
    target = None
    for name in names:
        try:
            src = get_source(meta, name)
            if target is None:
                target = open_target()
            out.extend(run(meta, target, settings_for(src.get("conn_id") or DEFAULTS["conn_id"]), name, now=now,
                           dry_run=dry_run, min_age=min_age, say=say))
        except Exception as e:  # noqa: BLE001 - one source's failure, whatever it is, stops no other
            out.append({"source": name, "collection": None, "error": f"{type(e).__name__}: {e}"})
    return out


def report_line(r: dict) -> str:
    where = f"milvus {r['source']}" + (f" {r['db']}.{r['collection']}" if r.get("collection") else "")
    if "error" in r and r.get("collection") is None:
        return f"{where}: FAILED {r['error']}"
    verb = "would " if r.get("dry_run") else ""
    cap = r.get("captured")
    line = (f"{where}: {verb}capture " + (f"{r['bundle']} ({cap['copied_files']} files, {cap['copied_bytes']} bytes "
                                           f"copied, {cap['reused_files']} reused)" if cap else
                                           (r["bundle"] or "nothing") if verb else "nothing")
            + (f"; verify {'OK' if r['verify']['ok'] else 'BAD'}" if r.get("verify") else "")
            + f"; {verb}prune {', '.join(r['pruned']) or 'nothing'}; keep {len(r['kept'])}"
            + "".join(f"; {n} held ({', '.join(w)})" for n, w in r["held"].items())
            + (f"; {r['note']}" if r.get("note") else ""))
    return line + (f"; FAILED {r['error']}" if "error" in r else "")
