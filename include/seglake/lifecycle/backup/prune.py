"""Retention in a backup target (issue 19 item 5): prune a collection's bundles by a
retention policy (keep_last / hourly / daily / weekly / monthly, as for snapshots), then
sweep the data files no bundle references.

    prune: the bundles the policy does not keep (never the newest) lose their commit
           marker first -- from then on they do not exist -- then their bundle.json;
           never a bundle an import or verify holds (holds.held / drop_unless_held:
           the prune writes _locks/pruning/... before it looks for holds, a reader
           writes _locks/holds/... before it looks for a prune: one sees the other)
    sweep: fail closed, with a lock object other exports respect:
           write _locks/sweep/{token}.json (renewed every LOCK_TTL / 10 while the sweep runs),
           then _locks/sweep-started.json naming the sweep (kept: the last sweep to start)
           -> read EVERY bundle.json in the target (committed or not: an export writes
              its bundle.json before its marker); one unreadable -> nothing is deleted
           -> the data files no bundle lists and older than min_age (a running export's
              files are young) are candidates
           -> right before deleting, read the bundles again; delete only candidates still
              unlisted, each only if it is still the object listed (size, mtime)
           -> remove the lock

An export, after writing its bundle.json and before its marker, waits while a sweep lock
younger than LOCK_TTL exists, then checks that every data file it lists is present and
copies back any that is not (export.py). So a sweep either saw the export's bundle.json
(and kept its files), or finished before the export's check (which then sees what was
deleted), or started after that check (and sees the bundle.json). The check lists the data
files only when a sweep may have deleted one since the export listed them: when a sweep
ran then, or _locks/sweep-started.json changed since (sweep_mark: read before the
export's listing, again at the check); only a sweep deletes data files.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Callable, Mapping

from seglake import limits
from seglake.errors import NotFound
from seglake.lifecycle import retention
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.meta import codec
from seglake.meta.catalog import DEFAULT_DB
from seglake.progress import human_bytes
from seglake.storage import Store, layout
from seglake.storage.base import ObjectInfo

log = logging.getLogger("seglake.backup")
# A sweep lock older than this is a dead sweep's: ignored. A running sweep renews it every
# LOCK_TTL / 10 s (one small PUT a minute) and stops before its next delete once a renewal
# gap exceeded LOCK_TTL / 2; a SIGKILLed sweep holds the exports of its target back for at
# most LOCK_TTL (it was 1 h: an export waited up to an hour after a killed sweep).
LOCK_TTL = 600.0
MIN_AGE_FLOOR = limits.LIMITS["bundle_min_age"].minimum   # a data file younger than this is never swept


class SweepRefused(bundles.BundleError):
    """The sweep could not read every bundle: nothing was deleted."""


def prune(target: Store, collection: str, policy: Mapping | retention.Policy, *, db: str = DEFAULT_DB,
          dry_run: bool = False, sweep: bool = True, min_age: float = 86400.0, schedule_only: bool = False,
          planned: Mapping[str, float] | None = None, collection_id: int | None = None,
          milvus: Mapping[str, str] | None = None, pinned: Callable[[str], list[str]] | None = None,
          site: str | None = None, say=log.warning) -> dict:
    """Drop the collection's bundles `policy` does not keep (never the newest), then
    sweep unreferenced data files. Returns the report.

    schedule_only: judge only the retention schedule's bundles (a `sched_*` name, exported
    by the schedule -- `made_by` -- from its snapshot of that name), by the time in their name -- what the
    scheduled export (backup.scheduled) prunes; any other bundle is left alone.
    collection_id: with schedule_only, only the bundles exported from that collection id (a
    dropped collection's name may be reused by another with a schedule of its own).
    site: only the bundles exported by that site (archive.site_id: ids are local to one
    etcd root, and two sites backing up to one target allocate the same ids; with
    schedule_only a bundle that names no site is judged by its ids, by hand it is judged:
    it predates sites). A hand prune without it judges every site's bundles.
    planned: bundles a dry run would have exported first (name -> time), judged as if
    they were there.
    milvus: with schedule_only, judge the schedule's Milvus captures instead (kind "milvus",
    made by the schedule, of the Milvus whose {etcd_root, bucket, root_path} this is and of
    collection id `collection_id`); a seglake export is then never judged, nor is a Milvus
    capture without it.
    pinned(name) -> who pins it: asked before a bundle is judged and again once the prune's
    intent is written (holds.drop_unless_held: a pin racing the prune loses one way or the
    other, never both); a pinned bundle is kept (reported in `held`)."""
    bundles.check_names(db, collection, "x")
    policy = policy if isinstance(policy, retention.Policy) else retention.parse_policy(policy)
    min_age = _min_age(min_age)
    times: dict[str, float] = {}
    for d, c, b, committed in bundles.find(target, db, collection):
        if not committed:
            continue
        if schedule_only:
            if retention.sched_time(b) is None or not _schedules_bundle(target, d, c, b, collection_id, milvus,
                                                                        site):
                continue
            times[b] = retention.sched_time(b)
            continue
        if site is not None and not _sites_bundle(target, d, c, b, site):
            continue   # another site's (etcd root's) bundle sharing the target: its operator's to prune
        try:
            key = layout.bundle_commit(d, c, b)
            times[b] = codec.moment(codec.loads(target.get(key), key), "committed_at", key)
        except (NotFound, ValueError):
            continue   # unreadable marker: not ours to judge, left alone
    times.update(planned or {})
    kept = retention.keep_set(policy, times)
    newest = max(times, key=lambda n: (times[n], n), default=None)
    if newest is not None:
        kept.setdefault(newest, []).append("newest")
    report = {"db": db, "collection": collection, "dry_run": dry_run, "policy": policy.to_json(),
              "kept": {n: kept[n] for n in sorted(kept)}, "pruned": [], "held": {}}
    for name in sorted((n for n in times if n not in kept and n not in (planned or {})), key=lambda n: times[n]):
        if pinned is not None and (pins := pinned(name)):
            report["held"][name] = pins
            continue
        who = holds.holders(target, db, collection, name) if dry_run else \
            holds.drop_unless_held(target, db, collection, name,
                                   also=(lambda n=name: pinned(n)) if pinned is not None else None)
        if who:   # an import or verify reads it: kept this time, pruned by a later run
            report["held"][name] = who
            continue
        report["pruned"].append(name)
    say(f"prune {db}.{collection}: keep {len(kept)} bundles, {'would drop' if dry_run else 'dropped'} "
        f"{len(report['pruned'])}" + (f" ({', '.join(report['pruned'])})" if report["pruned"] else "")
        + "".join(f"; {n} held by {', '.join(w)}" for n, w in report["held"].items()))
    if sweep:
        report["sweep"] = sweep_data(target, dry_run=dry_run, min_age=min_age, say=say)
    return report


def held_in(meta, target: Store, db: str, collection: str) -> Callable[[str], list[str]]:
    """pinned(bundle) -> who, recorded in this seglake's etcd, holds a bundle of db.collection
    in `target`: a capture pin (`seglake milvus pin`) and the point-in-time window of a
    collection of that name -- live, or dropped inside its window -- whose restore from the
    target alone starts from it (backup.scheduled.window_bundle). What a prune by hand asks,
    as the schedules' prunes do; an etcd that cannot be read refuses the prune (fail closed)."""
    from seglake.lifecycle.backup.scheduled import window_bundle
    from seglake.milvus import sources

    held: dict[str, list[str]] = {}
    for coll in meta.catalog.list(db, include_dropped=True):
        if coll.name == collection:
            wb = window_bundle(meta, target, db, collection, coll.collection_id)
            if wb is not None:
                held.setdefault(wb[0], []).append(wb[1])
    return lambda bundle: held.get(bundle, []) + sources.pinned_by(meta, db, collection, bundle)


def _schedules_bundle(target: Store, db: str, collection: str, bundle: str, collection_id: int | None = None,
                      milvus: Mapping[str, str] | None = None, site: str | None = None) -> bool:
    """The bundle was exported from the retention schedule's own snapshot of its name
    (of collection `collection_id`, when given); with `milvus`: the bundle is a schedule's
    capture of that Milvus's collection `collection_id`."""
    from seglake.lifecycle.backup.export import MADE_BY_SCHEDULE

    try:
        doc = bundles.read(target, db, collection, bundle)
        src = doc["source"]
    except (bundles.BundleError, NotFound, KeyError, TypeError):
        return False   # unreadable: not ours to judge, left alone
    if doc.get("made_by") != MADE_BY_SCHEDULE:
        return False   # exported by hand (even of a schedule's snapshot): the operator's
    if (doc.get("kind") == "milvus") != (milvus is not None):
        return False   # a Milvus schedule judges only its captures, a seglake one only its exports
    if milvus is not None:
        return (collection_id is not None and src.get("collection_id") == collection_id
                and all(src.get(k) == milvus.get(k) for k in ("etcd_root", "bucket", "root_path")))
    return (src.get("snapshot") == bundle and src.get("owner") == retention.OWNER + bundle
            and (collection_id is None or src.get("collection_id") == collection_id)
            and (site is None or src.get("site") in (None, site)))


def _sites_bundle(target: Store, db: str, collection: str, bundle: str, site: str) -> bool:
    """The bundle was exported by `site`, or names no site (a Milvus capture, a bundle from
    before sites); an unreadable one is not judged (left alone)."""
    try:
        src = bundles.read(target, db, collection, bundle)["source"]
    except (bundles.BundleError, NotFound, KeyError, TypeError):
        return False
    return not isinstance(src, dict) or src.get("site") in (None, site)


def _min_age(value: float) -> float:
    from seglake.errors import ValidationError

    try:
        return float(limits.check("bundle_min_age", "min_age (seconds)", value))
    except ValidationError as e:   # the floor's reason said with the bound
        raise ValidationError(f"{e} (a running export's data files must not be swept)") from None


def referenced(target: Store) -> set[str]:
    """Every SHA-256 any bundle.json in the target lists (committed or not). Raises
    SweepRefused when one cannot be read: a sweep never runs on a partial view."""
    from seglake.storage.base import SYMLINK, UNREADABLE

    out: set[str] = set()
    for o in target.list(layout.bundles_prefix(), report_unreadable=True):
        if o.size in (UNREADABLE, SYMLINK):   # a bundle the sweep cannot read is a partial view
            raise SweepRefused(f"{o.key} is " + ("a symlink" if o.size == SYMLINK else "unreadable")
                               + ": the bundles cannot all be read, nothing swept")
        parsed = layout.parse_bundle_key(o.key)
        if parsed is None:
            if o.key.endswith("/" + layout.BUNDLE_DOC):
                raise SweepRefused(f"{o.key} is not a bundle of this layout: nothing swept")
            continue
        if parsed[3] != layout.BUNDLE_DOC:
            continue
        try:
            doc = codec.loads(target.get(o.key), o.key)
            files = doc["files"]
            out.update(f["sha256"] for f in files.values())
        except NotFound:
            continue   # pruned meanwhile: it references nothing any more
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SweepRefused(f"{o.key} is unreadable: nothing swept") from None
    return out


def sweep_data(target: Store, *, dry_run: bool = False, min_age: float = 86400.0, now: float | None = None,
               say=log.warning) -> dict:
    """Delete the data files no bundle references, older than min_age (module doc)."""
    min_age = _min_age(min_age)
    token = uuid.uuid4().hex[:16]
    lock = layout.sweep_lock(token)
    beat = None
    if not dry_run:
        target.put(lock, json.dumps({"at": time.time()}).encode())
        beat = _Heartbeat(target, lock)   # the lock stays younger than LOCK_TTL however long the sweep takes
        # after the lock, before anything is read: an export that saw no lock at its listing
        # and the same mark at its check knows no sweep deleted anything in between
        target.put(layout.sweep_started(), json.dumps({"token": token, "at": time.time()}).encode())
    try:
        refs = referenced(target)
        # a data file's age is its mtime (the target's clock) against the target's clock, or
        # ours when that is behind: a sweep host whose clock jumped ahead takes no file for old
        if now is None:
            now = time.time() if dry_run else min(time.time(), holds.store_clock(target))
        candidates: list[ObjectInfo] = []
        kept_young = 0
        for o in target.list(layout.BUNDLE_DATA):
            sha = layout.parse_bundle_blob(o.key)
            if sha is None or sha in refs:
                continue
            if o.mtime > now - min_age:
                kept_young += 1
                continue
            candidates.append(o)
        deleted, gone = [], []
        if candidates and not dry_run:
            refs = referenced(target)   # again, right before deleting
            beat.check()
            # and the lock again right before each delete: a sweep paused past LOCK_TTL
            # after this check (an export took its lock for dead and reused a candidate
            # meanwhile) stops when it wakes (attack s22)
            outcome = target.delete_checked([o for o in candidates if layout.parse_bundle_blob(o.key) not in refs],
                                            guard=beat.check)
            deleted, gone = outcome.deleted, outcome.missing
        report = {"dry_run": dry_run, "referenced": len(refs), "candidates": len(candidates),
                  "candidate_bytes": sum(o.size for o in candidates), "kept_young": kept_young,
                  "deleted": len(deleted), "already_gone": len(gone)}
        say(f"sweep: {len(candidates)} unreferenced data files ({human_bytes(report['candidate_bytes'])}) older than "
            f"{min_age / 3600:g} h; {'none deleted (dry run)' if dry_run else f'{len(deleted)} deleted'}; "
            f"{kept_young} younger kept")
        return report
    finally:
        if beat is not None:
            beat.stop()
        if not dry_run:
            target.delete_many([lock])


class _Heartbeat(holds.KeepAlive):
    """The sweep's lock, rewritten every LOCK_TTL / 10 s until stopped. check() refuses
    the delete when a rewrite failed for long enough that exports may take the lock for
    dead."""

    def __init__(self, target: Store, lock: str):
        super().__init__(target, lock, LOCK_TTL)

    def check(self) -> None:
        if not self.held(LOCK_TTL / 2):
            raise SweepRefused(f"the sweep's lock {self.key} went unrenewed for more than {LOCK_TTL / 2:g} s (the "
                               f"sweep paused, or its target unwritable): it stopped before its next delete; an "
                               f"export may have taken the lock for dead and reused a candidate")


def sweep_mark(target: Store) -> bytes:
    """_locks/sweep-started.json as it is now (b"" when no sweep ever started): it names
    the last sweep to start, so it changes whenever one starts."""
    try:
        return target.get(layout.sweep_started())
    except NotFound:
        return b""


def sweep_running(target: Store, now: float | None = None) -> bool:
    """A sweep lock younger than LOCK_TTL exists."""
    return bool(holds.live_records(target, layout.sweep_locks_prefix(), LOCK_TTL, now))

