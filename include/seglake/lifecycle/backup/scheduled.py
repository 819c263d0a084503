"""Scheduled backups (issue 19 item 5): a retention policy with `export: true` keeps its
collection's schedule snapshots in the backup target too.

One schedule run (the snapshot_schedule DAG, `seglake retention run`):

    retention.run_all       take the snapshot the policy calls for, prune in this store
    -> for each collection whose policy exports (and whose store side succeeded):
       export   every COMMITTED schedule snapshot the policy keeps that has no bundle of
                its name in the target yet (incremental: unchanged files are not copied)
       prune    the schedule's bundles the policy no longer keeps (by the time in their
                name, never the newest, never a bundle made by hand)
    -> sweep the target once: the data files no bundle needs (older than `min_age`)

Every step is idempotent: a retried run finds its bundles committed and prunes nothing
twice. A dry run lists what would be exported and pruned and changes nothing. One
collection's failure is reported in its entry (`error`) and does not stop the others; nor
does one snapshot's failed export stop the newer ones' (`export.failed`), and a kept
snapshot whose name the target holds as a damaged bundle, or a bundle of another snapshot,
counts as not backed up (`export.unusable`): both fail the run.
"""

from __future__ import annotations

import logging
from typing import Callable

from seglake.errors import NotFound, SeglakeError
from seglake.lifecycle import retention
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import prune as prunes
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.snapshots import COMMITTED
from seglake.storage import Store

log = logging.getLogger("seglake.backup")


def run(meta, store: Store, open_target: Callable[[], Store], *, now: float, dry_run: bool = False,
        collection: str | None = None, db: str = DEFAULT_DB, threads: int = 8, min_age: float = 86400.0,
        max_bytes_per_second: float = 0, max_requests_per_second: float = 0, by: str = "",
        say=log.warning) -> list[dict]:
    """One schedule run: retention.run_all, then the exports its policies ask for. Each
    report of an exporting policy gains `export` (what was exported and pruned in the
    target) or `error`."""
    reports = retention.run_all(meta, store, now=now, dry_run=dry_run, collection=collection, db=db)
    target: Store | None = None
    for r in reports:
        if "error" in r or not r.get("policy", {}).get("export"):
            continue
        try:
            if target is None:
                target = open_target()
            r["export"] = export_collection(
                meta, store, target, r, dry_run=dry_run, threads=threads, min_age=min_age,
                max_bytes_per_second=max_bytes_per_second, max_requests_per_second=max_requests_per_second,
                by=by, say=say)
            problems = []
            if r["export"]["failed"]:
                problems.append("export failed: " + "; ".join(r["export"]["failed"].values()))
            if r["export"]["unusable"]:
                problems.append("kept snapshots are not backed up, the backup target's bundles of their names are "
                                "damaged or hold another snapshot: " + "; ".join(r["export"]["unusable"].values())
                                + " -- remove or rename those bundles (the next run exports the snapshots again)")
            if problems:
                r["error"] = "export: " + " | ".join(problems)
        except SeglakeError as e:
            r["error"] = f"export: {type(e).__name__}: {e}"
    exported = [r for r in reports if "export" in r]
    if exported:   # one sweep of the target per run (it reads every bundle.json), not one per collection
        try:
            swept = prunes.sweep_data(target, dry_run=dry_run, min_age=min_age, say=say)
        except SeglakeError as e:
            for r in exported:
                r["error"] = (r["error"] + " | " if "error" in r else "") + f"sweep: {type(e).__name__}: {e}"
        else:
            for r in exported:
                r["export"]["sweep"] = swept
    return reports


def export_collection(meta, store: Store, target: Store, report: dict, *, dry_run: bool, threads: int,
                      min_age: float, max_bytes_per_second: float, max_requests_per_second: float, by: str,
                      say) -> dict:
    """Export the kept schedule snapshots of the report's collection that the target
    lacks, then prune the target by the same policy."""
    db, name = report["db"], report["collection"]
    policy = retention.parse_policy(report["policy"])
    coll = meta.catalog.get(report["collection_id"])   # by id: the policy's collection, even dropped (name freed
                                                      # or reused by another collection)
    recs = [r for r in meta.snapshots.list(coll.collection_id)
            if r.state == COMMITTED and retention.is_schedules(r)]
    times = {r.name: retention.sched_time(r.name) for r in recs}
    if dry_run and report.get("created"):
        times[report["created"]] = retention.sched_time(report["created"])   # what the run would have taken
    kept = retention.keep_set(policy, times)
    committed = {b for _, _, b, done in bundles.find(target, db, name) if done}
    ids = {r.name: r.snapshot_id for r in recs}
    have, unusable = set(), {}
    site = None
    for n in kept:   # a kept snapshot is backed up only by a bundle of it that reads back whole
        if n in committed:
            try:
                doc = bundles.read(target, db, name, n)
            except bundles.BundleError as e:
                unusable[n] = str(e)
                continue
            except NotFound:
                continue   # pruned meanwhile: exported again
            if site is None:   # this root's (ids are local to it: another site's bundle may carry the same)
                from seglake.lifecycle.backup.archive import site_id
                site = site_id(meta)
            if n in ids and bundles.same_snapshot(doc, ids[n], coll.collection_id, site):
                have.add(n)
            else:
                unusable[n] = (f"bundle {db}.{name}/{n} holds snapshot {doc['source'].get('snapshot')!r} "
                               f"(id {doc['source'].get('snapshot_id')}), not the schedule's {n}")
    want = sorted((n for n in kept if n not in have and n not in unusable), key=lambda n: times[n])
    out = {"target": target.uri, "exported": [], "already": sorted(have), "unusable": unusable,
           "copied_bytes": 0, "dry_run": dry_run}
    out["failed"] = {}
    for n in want:
        if not dry_run:
            try:
                rep = exports.export(meta, store, target, name, n, db=db, threads=threads, by=by or "schedule",
                                     collection_id=coll.collection_id, schedule=True,
                                     max_bytes_per_second=max_bytes_per_second,
                                     max_requests_per_second=max_requests_per_second, say=say)
            except SeglakeError as e:   # this snapshot's: the newer ones are still exported, the run fails
                out["failed"][n] = f"{n}: {type(e).__name__}: {e}"
                continue
            out["copied_bytes"] += rep.get("copied_bytes", 0)
        out["exported"].append(n)
    held = window_bundle(meta, target, db, name, coll.collection_id)
    from seglake.lifecycle.backup.archive import site_id
    pruned = prunes.prune(target, name, policy, db=db, dry_run=dry_run, min_age=min_age, schedule_only=True,
                          collection_id=coll.collection_id, site=site_id(meta), sweep=False, say=say,
                          planned={n: times[n] for n in want} if dry_run else None,
                          pinned=lambda n: [held[1]] if held is not None and n == held[0] else [])
    out["pruned"] = pruned["pruned"]
    out["held"] = pruned.get("held", {})   # kept this run: an import or verify reads them
    out["sweep"] = None   # run() sweeps the target once, after every collection
    return out


def window_bundle(meta, target: Store, db: str, name: str, collection_id: int) -> tuple[str, str] | None:
    """(bundle, why) the point-in-time window of collection `collection_id` needs in the
    target, or None: a restore from the target alone to any instant of the window starts
    from the latest bundle at or before it, so the window keeps base(lo) -- the latest
    committed bundle of this collection (and site) with log positions taken at or before
    the window's oldest instant -- or, when none is that old, the oldest one (every later
    instant starts from it or a newer one). The prune never drops it (like the window's
    base snapshot in this store)."""
    from seglake.lifecycle.backup.archive import site_id
    from seglake.lifecycle.pitr import window

    w = window.window_of(meta, collection_id)
    if w is None:
        return None
    lo = window.oldest_instant(w, window.clock())
    site, found = None, []
    for _, _, b, done in bundles.find(target, db, name):
        if not done:
            continue
        try:
            src = bundles.read(target, db, name, b)["source"]
        except (bundles.BundleError, NotFound, KeyError, TypeError):
            continue
        if src.get("collection_id") != collection_id or not src.get("positions") \
                or not isinstance(src.get("consistent_ts"), int) or src["consistent_ts"] <= 0:
            continue
        site = site or site_id(meta)   # (read only when a bundle of the collection is there: its export made it)
        if src.get("site") == site:
            found.append((src["consistent_ts"], b))
    if not found:
        return None
    older = [f for f in found if f[0] <= lo]
    base = max(older) if older else min(found)
    return base[1], f"the point-in-time window of {db}.{name} ({w['window']})"


def report_line(r: dict) -> str:
    """retention.report_line plus what the export did."""
    line = retention.report_line(r)
    e = r.get("export")
    if e:
        verb = "would " if e["dry_run"] else ""
        line += (f"; {verb}export {', '.join(e['exported']) or 'nothing'} to {e['target']}; "
                 f"{verb}prune there {', '.join(e['pruned']) or 'nothing'}")
    return line
