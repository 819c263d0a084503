"""A whole database at one instant (issue 30 item 4): every collection of a database (or a
named set) restored as of the SAME timestamp into new collections `{name}{suffix}`.

One TSO orders every write of every collection, so "as of ts" is one cut across all of
them: a row acknowledged before ts is in its collection's restore, one after is in none.
Milvus and milvus-backup back up collection by collection, one after another; their
copies of two collections are of two different moments.

    the collections the database held at the instant (at_instant: not one created later;
    one dropped since, inside its window, is restored from its Dropped record; from a
    backup target: by its bundles and archive, from_target.NotBornYet / DroppedBefore) or
    a named set
    -> plan every collection first (planning.plan / from_target.plan_from_target): any
    refusal -- outside a window, a gap, a target name taken -- refuses the whole set
    before anything is created
    -> set up each restore with that same instant and the plan made above (one planning
       per collection: restoring.restore_as_of / from_target.restore_as_of_from_target,
       `planned`); each is resumable on its own (a re-run of the set resumes every one).
"""

from __future__ import annotations

from seglake.errors import NotFound, ValidationError
from seglake.meta.catalog import CREATED
from seglake.names import validate_name
from seglake.lifecycle.pitr.instants import describe, parse_as_of
from seglake.lifecycle.pitr.planning import at_instant


def members(meta, db: str, collections: list[str] | None, target=None, ts: int | None = None) -> list[str]:
    """The collections to restore: the named ones, else every collection `db` held at the
    instant `ts` (at_instant: created at or before it, and live or dropped after it; from
    a backup target: every collection of `db` with a committed bundle there, less those the
    archive says were dropped before the instant and those whose bundles say they were
    created after it -- restore_database_as_of; refused when those bundles come from more
    than one site: a database is one source's, and "as of ts" is one site's clock)."""
    validate_name("db", db)
    if collections:
        for c in collections:
            validate_name("collection", c)
        if len(set(collections)) != len(collections):
            raise ValidationError(f"collections: {collections} names one twice")
        return list(collections)
    if target is not None:
        from seglake.lifecycle.backup import bundle as bundles
        done = [b for b in bundles.list_bundles(target, db) if b.get("state") == "committed"]
        names = sorted({b["collection"] for b in done})
        sites: dict[str, set[str]] = {}
        for b in done:
            if b.get("site"):
                sites.setdefault(b["site"], set()).add(b["collection"])
        if len(sites) > 1:   # two seglakes back up into this target: their clocks and ids are their own
            raise ValidationError(
                f"database {db!r} in {target.uri} holds bundles of {len(sites)} sources (sites "
                + "; ".join(f"{s[:12]}...: {', '.join(sorted(c)[:5])}" for s, c in sorted(sites.items()))
                + "): name the collections to restore (collections / --collections); a whole database is "
                  "one source's")
    elif ts is not None:
        names = sorted(at_instant(meta, db, ts))
    else:
        names = sorted(c.name for c in meta.catalog.list(db) if c.state == CREATED)
    if not names:
        raise NotFound(f"database {db!r} has no collection to restore" + (f" in {target.uri}" if target else
                                                                            "" if ts is None else
                                                                            f" at {describe(ts)}"))
    return names


def restore_database_as_of(meta, store, db: str, as_of, *, suffix: str, collections: list[str] | None = None,
                           target=None, owner: str = "", engine: str = "auto", timeout: float = 3600.0) -> list[dict]:
    """Set up (or resume) the restore of each collection as of `as_of` into
    `{name}{suffix}` (module doc); `target`: from that backup target alone. Returns
    [{collection, target, job_id}]; then copyjob + pitr.replay for each."""
    from seglake.lifecycle.pitr import from_target, restoring

    ts, to, plans = plan_database(meta, store, db, as_of, suffix=suffix, collections=collections, target=target)
    out = []
    for n in plans:   # each set up with the plan made above (a resumed one: the plan it began with)
        if target is None:
            job = restoring.restore_as_of(meta, store, n, to[n], ts, db=db, owner=owner, engine=engine,
                                          timeout=timeout, planned=plans[n])
        else:
            job = from_target.restore_as_of_from_target(meta, store, target, n, to[n], ts, db=db, owner=owner,
                                                        engine=engine, timeout=timeout, planned=plans[n])
        out.append({"collection": n, "target": to[n], "job_id": job})
    return out


def plan_database(meta, store, db: str, as_of, *, suffix: str, collections: list[str] | None = None,
                  target=None) -> tuple[int, dict, dict]:
    """(ts, {collection: target name}, {collection: plan}) of restore_database_as_of, read
    only: every refusal of the set (a window, a gap, a target name taken, no collection at
    the instant) before anything is created -- and before a run is (lifecycle/preflight)."""
    from seglake.lifecycle.pitr import from_target, planning

    ts = parse_as_of(as_of)
    names = members(meta, db, collections, target, ts)
    if not collections and target is None:
        _none_purged(meta, db, ts)
    held = at_instant(meta, db, ts, only=set(names)) if target is None else {}
    to = {n: f"{n}{suffix}" for n in names}
    for n, t in to.items():
        validate_name("target collection", t)
    clash = sorted(set(to.values()) & set(names))
    if clash:
        raise ValidationError(f"suffix {suffix!r}: target {clash[0]!r} is one of the collections restored")
    plans = {}
    for n in names:   # every plan first: one refusal refuses the set, nothing created
        if not _resuming(meta, db, n, to[n], ts, from_target=target is not None):
            try:
                meta.catalog.get_by_name(to[n], db)
                raise ValidationError(f"target collection {db}.{to[n]} exists already; choose another suffix")
            except NotFound:
                pass
        if target is None:   # a collection dropped after the instant: planned from its Dropped record
            c = held.get(n)
            gone = c if c is not None and c.state != CREATED else None
            try:
                plans[n] = planning.plan(meta, store, n, ts, db=db, dropped=gone, exact=False)
            except (planning.OutsideWindow, planning.LogGap) as e:
                if gone is None:
                    raise
                raise type(e)(f"{e} (collection {n!r} was in the database at that instant and was dropped since; "
                              f"name the collections to restore to leave it out)") from None
        else:
            try:
                plans[n] = from_target.plan_from_target(meta, target, n, ts, db=db, exact=False)
            except from_target.DroppedBefore as e:
                if collections or _bundled_since(target, db, n, e.dropped_at, ts):
                    raise   # asked for by name; or the name's later collection (bundled since) may have lived then
            except from_target.NotBornYet:
                if collections:
                    raise   # asked for by name
    plans = {n: plans[n] for n in names if n in plans}   # (from the target: not one dropped before the instant)
    if not plans:
        raise NotFound(f"database {db!r} had no collection at {describe(ts)} in {target.uri}")
    if target is not None and not collections:
        _none_unbundled(target, db, ts, plans)
    # the exact judgement of the instant once, after every collection's refusals (it writes)
    planning.not_in_future(meta, ts)
    return ts, to, plans


def _none_purged(meta, db: str, ts: int) -> None:
    """OutsideWindow when a collection of `db` lived at `ts` whose Dropped record GC has
    purged since (gc.records keeps its name and lifetime): the set would silently lack it."""
    from seglake.errors import CorruptRecord
    from seglake.lifecycle.pitr.planning import OutsideWindow
    from seglake.meta import codec
    from seglake.meta.alloc import compose_ts
    from seglake.lifecycle.pitr.window import CLOCK_SLACK_MS

    for kv in meta.kv.range(meta.keys.pitr_gone_prefix()):
        try:   # GC writes each with its name and lifetime (gc.records.gone_record)
            d = codec.loads(kv.value, kv.key)
            born, began = (codec.number(d, f, kv.key, whole=True) for f in ("created_ts", "drop_began_ts"))
            if not isinstance(d.get("db"), str):
                raise CorruptRecord(f"corrupt record at {kv.key!r}: no database name")
        except ValueError as e:   # damaged: it may be a member of `db` at `ts`: refused, not skipped
            raise OutsideWindow(f"{e}: whether a collection of {db!r} was purged since {describe(ts)} is unknown; "
                                f"repair or delete the record") from None
        if d["db"] != db or born > ts:
            continue
        if ts < began + compose_ts(CLOCK_SLACK_MS):
            raise OutsideWindow(
                f"collection {d.get('collection')!r} (id {d.get('collection_id')}) was in database {db!r} at "
                f"{describe(ts)} and was dropped since (at {describe(int(began))})"
                + "; GC has purged it, so it cannot be restored: name the collections to restore to leave it out")


def _none_unbundled(target, db: str, ts: int, plans: dict) -> None:
    """OutsideWindow when the WAL archive of the set's site says a collection of `db` lived
    at `ts` (its CreateCollection at or before it, no DropCollection of it at or before it)
    that is not in the set: the target has no bundle of it to start from at or before `ts`
    (created after the last export, or never exported), and the set would silently lack
    it. Only what the archive holds is known: a collection created before the archive
    began is not seen here. A damaged archive refuses (whether one lived is unknown)."""
    from seglake.lifecycle.backup.archive import ArchivedLog
    from seglake.lifecycle.pitr.planning import OutsideWindow
    from seglake.storage import layout
    from seglake.wal import message as M

    sites = {p.archive["site"] for p in (x[0] if isinstance(x, tuple) else x for x in plans.values()) if p.archive}
    lived: dict[int, str] = {}      # collection id -> name (created at or before ts, in db)
    gone: set[int] = set()          # dropped at or before ts (any of its vchannels)
    for site in sorted(sites):
        pchannels = set()
        for o in target.list(layout.archive_site(site).rsplit("/", 1)[0] + "/"):
            parsed = layout.parse_archive_key(o.key)
            if parsed is not None and parsed[0] == site:
                pchannels.add(parsed[1])
        for pch in sorted(pchannels):
            log = ArchivedLog(target, site, pch)
            ns = log.numbers()
            if not ns:
                continue
            holes = [b for a, b in zip(ns, ns[1:]) if b > a + 1]
            try:   # (from the last hole on: a restore never replays across one)
                for rec in log.fragments(holes[-1] if holes else ns[0]):
                    if rec.fmt != 1 and rec.tt0 > ts:
                        break
                    for m in log.read_fragment(rec):
                        if m.time_tick > ts:
                            continue
                        if m.type == M.CREATE_COLLECTION and m.props.get("db") == db:
                            lived[m.collection_id] = m.props.get("name")
                        elif m.type == M.DROP_COLLECTION:
                            gone.add(m.collection_id)
            except Exception as e:   # noqa: BLE001 (damaged: unknown, refused)
                raise OutsideWindow(f"the WAL archive of {pch} in {target.uri} cannot be read ({e}): whether a "
                                    f"collection of {db!r} without a bundle lived at {describe(ts)} is unknown; "
                                    f"name the collections to restore") from None
    missing = sorted({(n, cid) for cid, n in lived.items() if cid not in gone and n not in plans})
    if missing:
        n, cid = missing[0]
        raise OutsideWindow(
            f"collection {n!r} (id {cid} at the source) was in database {db!r} at {describe(ts)} (the WAL archive in "
            f"{target.uri} holds its creation), but the target has no bundle of it taken at or before that instant"
            + (f" ({len(missing) - 1} more: {', '.join(repr(x) for x, _ in missing[1:6])})" if len(missing) > 1 else "")
            + ": it cannot be restored from the target alone, and the set would silently lack it; export it "
              "(while the source lives) or name the collections to restore to leave it out")


def _bundled_since(target, db: str, collection: str, ts: int, instant: int) -> bool:
    """A committed bundle of the name was taken after `ts` (the drop of the collection the
    instant's base bundle is of: so of a later collection of the name) whose collection may
    have lived at `instant`: created at or before it, or when is unknown. A later collection
    its bundles say was created after the instant was not in the database then (the set
    leaves the name out, as for NotBornYet)."""
    from seglake.lifecycle.backup import bundle as bundles

    for b in bundles.list_bundles(target, db, collection):
        if b.get("state") != "committed":
            continue
        doc = bundles.read(target, db, collection, b["bundle"])
        if doc["source"].get("consistent_ts", 0) > ts:
            born = doc.get("snapshot", {}).get("collection", {}).get("created_ts") or 0
            if not isinstance(born, int) or isinstance(born, bool) or born <= 0 or born <= instant:
                return True
    return False


def _resuming(meta, db: str, collection: str, target: str, ts: int, *, from_target: bool) -> bool:
    """`target` exists and is this very restore (the same collection, instant and kind:
    from the backup target or from this store), the one its set-up resumes; a target of
    anything else (even a restore of another collection at the same instant) is not."""
    try:
        coll = meta.catalog.get_by_name(target, db)
    except NotFound:
        return False
    src = coll.properties.get("restored_from", {})
    rp = src.get("replay")
    return (src.get("as_of") == ts and src.get("collection") == collection and isinstance(rp, dict)
            and bool(rp.get("archive")) == from_target)


def drive(meta, store, settings, jobs: list[dict], db: str) -> list[dict]:
    """Each restore set up by restore_database_as_of, to its end: its copy job (inline,
    resumable), the replay up to the instant, verify. Returns one row per collection:
    {collection, target, job_id, state, rows (visible at the instant), snapshot,
    rows_replayed, as_of_utc} -- state "Created" only when verified."""
    from seglake.lifecycle import copyjob, verify
    from seglake.lifecycle.pitr import replaying
    from seglake.meta.copyjobs import JOB_COMPLETED
    from seglake.visibility import visible_count

    rows = []
    for j in jobs:
        copyjob.plan(meta, j["job_id"], settings.max_segments_per_task)
        copyjob.run_inline(meta, store, j["job_id"], threads=settings.copy_threads, settings=settings)
        job = copyjob.finalize(meta, j["job_id"], settings=settings)
        if job.state != JOB_COMPLETED:
            rows.append({**j, "state": job.state, "rows": None, "reason": job.reason})
            continue
        out = replaying.replay(meta, store, settings, job.target_collection_id)
        report = verify.verify_collection(meta, store, j["target"], db, threads=settings.copy_threads)
        rows.append({**j, "state": "Created" if report["ok"] else "verify failed", "as_of_utc": out["as_of_utc"],
                     "rows": visible_count(meta, store, job.target_collection_id), "snapshot": out["snapshot"],
                     "rows_replayed": out["rows_replayed"]})
    return rows
