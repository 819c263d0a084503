"""Restore to a time from a backup target alone (issue 30 items 2 and 3): the source store
and its etcd may be gone; the target holds bundles (exports of snapshots, each with the
log position of every vchannel and its source's site) and the WAL archive of that site
(lifecycle/backup/archive.py).

    as_of -> not in the future (this store's clock)
          -> the base: the latest COMMITTED bundle of the collection whose snapshot is at or
             before the instant and that recorded its positions and its site (or the one
             named)
          -> per vchannel: the replay starts at the bundle's position (as planning.py does
             for a snapshot of this store)
          -> the archive of the site holds every fragment from there, without a gap, and
             covers the instant (ArchivedLog.covered: else the instant is past the
             archive's recovery point, and that point is named)
    -> restore.set_up with the bundle as its source (bundle_restore.BundleSource: the copy
       job reads each file straight from the target) and the plan on the target
    -> copy job -> replay (replaying.py, reading the ArchivedLog) -> Created.

Partitions are the bundle's: a message of a partition created after the bundle is refused
by the replay (naming the partition id). Nothing is written before every check passed.
"""

from __future__ import annotations

from seglake.errors import Conflict, NotFound
from seglake.meta.catalog import DEFAULT_DB, pchannel_of
from seglake.names import validate_name
from seglake.lifecycle import restore as restores
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup.archive import ArchivedLog
from seglake.lifecycle.backup import bundle_restore
from seglake.lifecycle.backup.bundle_restore import BundleSource
from seglake.lifecycle.pitr.instants import describe, parse_as_of
from seglake.lifecycle.pitr.planning import LogGap, OutsideWindow, Plan, needed, not_in_future


class NotBornYet(OutsideWindow):
    """Every bundle of the name in the target is of a collection created after the instant
    (their `created_ts`): it was not in its database then (a whole database at that
    instant leaves it out)."""


class DroppedBefore(OutsideWindow):
    """The bundle's collection was dropped before the instant (per the archive): it was not
    in its database then (a whole database at that instant leaves it out)."""


def base_bundle(target, collection: str, ts: int, *, db: str = DEFAULT_DB, bundle: str | None = None) -> dict:
    """The bundle document a restore to `ts` starts from (module doc), or OutsideWindow."""
    names = [bundle] if bundle is not None else \
        [b["bundle"] for b in bundles.list_bundles(target, db, collection) if b.get("state") == "committed"]
    best, sites, born = None, {}, []
    for name in names:
        doc = bundles.read(target, db, collection, name)
        src = doc["source"]
        born.append(doc["snapshot"]["collection"].get("created_ts", 0))
        if not src.get("positions") or not src.get("site"):
            if bundle is not None:
                raise OutsideWindow(f"bundle {db}.{collection}/{bundle} recorded no log positions (exported before "
                                    f"point-in-time restore, or from a snapshot without them): it cannot start a "
                                    f"restore to a time")
            continue
        if not 0 < src["consistent_ts"] <= ts:
            if bundle is not None:
                raise OutsideWindow(f"bundle {db}.{collection}/{bundle} was taken at {describe(src['consistent_ts'])}, "
                                    f"after as_of {describe(ts)}")
            continue
        sites.setdefault(src["site"], []).append(name)
        if best is None or (src["consistent_ts"], doc["created_at"]) > (best["source"]["consistent_ts"],
                                                                         best["created_at"]):
            best = doc
    if len(sites) > 1:   # two seglakes backed up a collection of this name into one target
        raise OutsideWindow(f"bundles of {db}.{collection} in {target.uri} come from {len(sites)} sources (sites "
                            + "; ".join(f"{site[:12]}...: {', '.join(sorted(b)[:3])}" for site, b in sorted(sites.items()))
                            + "): ambiguous; name the bundle to start from (bundle / --bundle)")
    if best is None and born and min(born) > ts:   # (0: a bundle that did not record it)
        raise NotBornYet(f"{db}.{collection} was created at {describe(min(born))} (its first bundle in {target.uri} "
                         f"says so), after as_of {describe(ts)}: there is nothing of it to restore at that instant")
    if best is None:
        raise OutsideWindow(f"no bundle of {db}.{collection} in {target.uri} was taken at or before "
                            f"{describe(ts)} with its log positions: nothing to start a restore to that instant from")
    return best


def plan_from_target(meta, target, collection: str, as_of, *, db: str = DEFAULT_DB,
                     bundle: str | None = None, exact: bool = True) -> tuple[Plan, dict]:
    """(the plan, the base bundle's document) of restoring `collection` as of `as_of` from
    the target alone, or the refusal (module doc). Read-only. `exact=False`: without the
    exact judgement of the instant (it issues a timestamp: a write), which a caller
    planning several collections makes once after every refusal (database.plan_database)."""
    validate_name("collection", collection)
    validate_name("db", db)
    if bundle is not None:
        validate_name("bundle", bundle)
    ts = not_in_future(meta, parse_as_of(as_of), read_only=True)   # the exact judgement last (it writes to etcd)
    doc = base_bundle(target, collection, ts, db=db, bundle=bundle)
    p = _bundle_plan(doc, collection, db, ts, target)
    _check_archive(target, doc["source"]["site"], p)
    gone = drops_in_archive(target, doc["source"]["site"], p, until=ts)
    if gone:   # at as_of the bundle's collection was no more (the name free, or another collection's)
        e = DroppedBefore(f"{db}.{collection} of bundle {doc['bundle']} was dropped at "
                          f"{describe(min(gone.values()))}, before as_of {describe(ts)}: there is nothing of it to "
                          f"restore at that instant; undrop it (collections undrop --from-target) or restore to an "
                          f"instant before its drop")
        e.dropped_at = min(gone.values())
        raise e
    if exact:
        not_in_future(meta, ts)
    return p, doc


def _bundle_plan(doc: dict, collection: str, db: str, ts: int, target) -> Plan:
    """The plan of a replay from bundle `doc`'s log positions up to `ts` (not yet checked
    against the archive)."""
    src, coll = doc["source"], doc["snapshot"]["collection"]
    vchannels = list(coll["vchannels"])
    # (collection_id 0: the source's ids belong to its own etcd root and never cross a copy)
    p = Plan(0, collection, db, ts, doc["bundle"], None, vchannels,
             {str(x["partition_id"]): x["name"] for x in coll["partitions"]},
             archive={"uri": target.uri, "site": src["site"]})
    born = int(coll.get("created_ts") or 0)
    for v in vchannels:
        pos = src["positions"].get(v)
        if pos is None:
            raise LogGap(f"bundle {db}.{collection}/{doc['bundle']} recorded no position of vchannel {v}")
        cp = pos["checkpoint"]
        start = cp[:3] if cp else [0, _archived_fragment_at(target, src["site"], pchannel_of(v), born), 0]
        p.starts[v] = {"start": start, "floor": cp[3] if cp else 0,
                       "part_hw": dict(pos["part_hw"]), "del_hw": pos["del_hw"]}
    return p


def _archived_fragment_at(target, site: str, pchannel: str, created_ts: int) -> int:
    """Where the replay of a vchannel the bundle recorded no checkpoint of (nothing of it
    flushed when its snapshot was taken) starts in the archive: its log from the
    collection's creation (less the clock slack), as planning.fragment_at does on this
    store -- not fragment 1, which an archive begun after the pchannel's log was truncated
    never holds. 1 when the creation is unknown or the archive begins above it (the
    archive check then names the gap)."""
    from seglake.lifecycle.pitr.window import CLOCK_SLACK_MS
    from seglake.meta.alloc import compose_ts

    if created_ts <= 0:
        return 1
    born = created_ts - compose_ts(CLOCK_SLACK_MS)
    log = ArchivedLog(target, site, pchannel)
    ns = log.numbers()
    if not ns:
        return 1
    try:
        for i, rec in enumerate(log.fragments(ns[0])):
            if i == 0 and ns[0] > 1 and (rec.fmt == 1 or rec.tt0 > born):
                return 1   # what was before the archive's first fragment may have held such ticks
            if rec.fmt == 1 or rec.tt0 + max(rec.span, 1) - 1 >= born:
                return rec.n
    except Exception:   # (a damaged or holed archive: the archive check names it from fragment 1)
        return 1
    return ns[-1]   # none reaches it: the last one (nothing of the vchannel in it; the archive check needs one)


def _check_archive(target, site: str, p: Plan) -> None:
    """LogGap naming what the archive lacks: fragments from each replay's start, without a
    gap, and coverage of the instant (the archive's recovery point)."""
    problems = []
    for pch in sorted({pchannel_of(v) for v in p.vchannels}):
        first = min(s["start"][1] for v, s in p.starts.items() if pchannel_of(v) == pch)
        log = ArchivedLog(target, site, pch)
        ns = [n for n in log.numbers() if n >= first]
        if not ns or ns[0] != first:
            problems.append(f"{pch}: fragment {first} is not in the archive"
                            + (f" (it holds {ns[0]}..{ns[-1]})" if ns else " (nothing from there on)"))
            continue
        holes = [(a + 1, b - 1) for a, b in zip(ns, ns[1:]) if b > a + 1]
        if holes:
            problems.append(f"{pch}: fragments {', '.join(f'{a}..{b}' for a, b in holes[:5])} are missing")
            continue
        covered = log.covered()
        if covered < p.as_of:
            problems.append(f"{pch}: the archive holds the log up to {describe(covered) if covered else 'no recorded point'}"
                            f", before as_of (its recovery point)")
            continue
        needed(p, pch, log.fragments(first))
    if problems:
        raise LogGap(f"the archive of {p.db}.{p.collection} in {target.uri} cannot give the log up to "
                     f"{describe(p.as_of)}: {'; '.join(problems)}")


class ArchiveBundleSource(BundleSource):
    """The base bundle, restored as any bundle, with the instant and the plan in the
    target's identity (so the copy job leaves it Importing for the replay)."""

    def __init__(self, target, doc: dict, p: Plan):
        super().__init__(target, doc, p.db, p.collection, doc["bundle"])
        self.identity = {**self.identity, "as_of": p.as_of, "replay": p.to_json()}
        self.what = f"{p.db}.{p.collection} as of {describe(p.as_of)} (bundle {doc['bundle']} + the WAL archive)"


def restore_as_of_from_target(meta, store, target, collection: str, restore_to: str, as_of, *,
                              db: str = DEFAULT_DB, bundle: str | None = None, timeout: float = 3600.0,
                              owner: str = "", engine: str = "auto", max_bytes_per_second: float = 0,
                              max_requests_per_second: float = 0, origin: dict | None = None,
                              planned: tuple[Plan, dict] | None = None) -> int:
    """Set up (or resume) the restore of `collection` as of `as_of` from the backup target
    alone into the new collection `restore_to`; returns the copy job id. Then: copyjob
    plan/run/finalize, pitr.replay (which reads the archive). `planned`: (plan, bundle
    document) the caller already made of this very restore (plan_from_target)."""
    timeout, bps, rps = restores.check_request(restore_to, db, timeout, owner, engine, max_bytes_per_second,
                                               max_requests_per_second, origin)
    ts = parse_as_of(as_of)
    p, doc = _same_restore(meta, target, collection, db, restore_to, ts)
    if p is None and planned is not None:
        if (planned[0].collection, planned[0].db, planned[0].as_of) != (collection, db, ts):
            raise ValueError(f"the plan given is of {planned[0].db}.{planned[0].collection} as of "
                             f"{planned[0].as_of}, not of {db}.{collection} as of {ts}")
        p, doc = planned
    if p is None:   # every refusal first, the target name's included; then the exact instant (it writes)
        p, doc = plan_from_target(meta, target, collection, ts, db=db, bundle=bundle, exact=False)
        restores.check_target(meta, restore_to, db, ArchiveBundleSource(target, doc, p).identity)
        not_in_future(meta, ts)
    where = f"bundle {db}.{collection}/{doc['bundle']}"
    with holds.held(target, db, collection, doc["bundle"], by=f"restore as of {ts} into {db}.{restore_to}"):
        return bundle_restore.set_up(meta, store, target, doc, ArchiveBundleSource(target, doc, p), restore_to, where,
                                     db=db, timeout=timeout, owner=owner, engine=engine, max_bytes_per_second=bps,
                                     max_requests_per_second=rps, origin=origin)


def _same_restore(meta, target, collection: str, db: str, restore_to: str, ts: int):
    """A re-run of this same restore (same bundle collection and instant) whose target
    exists resumes with the plan it began with."""
    try:
        coll = meta.catalog.get_by_name(restore_to, db)
    except NotFound:
        return None, None
    src = coll.properties.get("restored_from", {})
    rp = src.get("replay")
    if src.get("as_of") == ts and src.get("collection") == collection and isinstance(rp, dict) and rp.get("archive"):
        return Plan(**rp), bundles.read(target, db, collection, rp["snapshot"])
    return None, None


# -- undrop from the archive (issue 30 item 5: "its archive is in a target") -----------------------
def drops_in_archive(target, site: str, p: Plan, *, until: int | None = None) -> dict[str, int]:
    """vchannel -> the tick of its first DropCollection in the archive of `site`, read from
    the replay's start of each vchannel (a vchannel whose drop the archive does not hold
    is absent). Stops reading a pchannel once each of its vchannels has its drop, or
    (`until`) at its first time tick past that instant, as the replay does: only the drops
    at or before it."""
    from seglake.wal import message as M
    from seglake.wal.message import MessageId

    out: dict[str, int] = {}
    for pch in sorted({pchannel_of(v) for v in p.vchannels}):
        mine = {v for v in p.vchannels if pchannel_of(v) == pch}
        first = min(MessageId(*p.starts[v]["start"]) for v in mine)
        log = ArchivedLog(target, site, pch)
        if not log.numbers():
            continue
        for m in log.messages(first):
            if until is not None and m.time_tick > until:
                if m.type == M.TIME_TICK:
                    break   # the replay's own end: no later message is at or before `until`
                continue
            if m.type == M.DROP_COLLECTION and m.vchannel in mine and m.vchannel not in out \
                    and not m.id < MessageId(*p.starts[m.vchannel]["start"]):
                out[m.vchannel] = m.time_tick
                if mine <= out.keys():
                    break
    return out


def plan_undrop_from_target(meta, target, collection: str, *, db: str = DEFAULT_DB,
                            bundle: str | None = None) -> tuple[Plan, dict]:
    """(the plan, the base bundle) of bringing the dropped `collection` back from the
    target alone, as it was just before its drop: the latest bundle of it with log
    positions (or the one named), then its archived log from the bundle's positions up to
    each vchannel's DropCollection -- the drop's instant is read from the archive itself
    (the latest of the vchannels' DropCollection ticks: each vchannel's replay ends at its
    own). Refused, naming what is missing, when the target has no such bundle, when the
    archive holds no drop of some vchannel (not dropped, or the drop not archived yet) or
    the log up to it is not whole. Read-only."""
    validate_name("collection", collection)
    validate_name("db", db)
    if bundle is not None:
        validate_name("bundle", bundle)
    from seglake.meta.alloc import decode_mark
    seen = meta.kv.get(meta.tso.key)   # the global mark bounds every timestamp issued: a read, no write (now() may
    bound = decode_mark(seen.value, meta.tso.key) - 1 if seen is not None else meta.tso.now()   # reserve a batch)
    doc = base_bundle(target, collection, bound, db=db, bundle=bundle)
    site = doc["source"]["site"]
    p = _bundle_plan(doc, collection, db, doc["source"]["consistent_ts"], target)
    _check_archive(target, site, p)   # the archive whole from the bundle's positions, before reading it
    p.fragments, p.log_bytes = {}, 0
    drops = drops_in_archive(target, site, p)
    missing = [v for v in p.vchannels if v not in drops]
    if missing:
        raise LogGap(f"the archive of {db}.{collection} in {target.uri} holds no drop of it after bundle "
                     f"{doc['bundle']} (vchannel(s) {', '.join(missing)} have no DropCollection up to the archive's "
                     f"end): it was not dropped, or its drop is not archived yet; restore it to a time instead")
    p.as_of = max(drops.values())
    _check_archive(target, site, p)
    return p, doc


def undrop_from_target(meta, store, target, collection: str, restore_to: str, *, db: str = DEFAULT_DB,
                       bundle: str | None = None, timeout: float = 3600.0, owner: str = "", engine: str = "auto",
                       origin: dict | None = None, planned: tuple[Plan, dict] | None = None) -> int:
    """Set up (or resume) the undrop of `collection` from the backup target alone into the
    new collection `restore_to` (plan_undrop_from_target); returns the copy job id. Then:
    copyjob plan/run/finalize, pitr.replay (which reads the archive and ends each vchannel
    at its DropCollection). `planned`: the plan already made (one planning per undrop)."""
    timeout, bps, rps = restores.check_request(restore_to, db, timeout, owner, engine, 0, 0, origin)
    p, doc = _same_undrop(target, collection, db, meta, restore_to, bundle)
    if p is None:
        p, doc = planned if planned is not None else plan_undrop_from_target(meta, target, collection, db=db,
                                                                            bundle=bundle)
    where = f"bundle {db}.{collection}/{doc['bundle']}"
    source = ArchiveBundleSource(target, doc, p)
    source.identity = {**source.identity, "undrop": True}
    source.what = f"{db}.{collection} as it was just before its drop (bundle {doc['bundle']} + the WAL archive)"
    with holds.held(target, db, collection, doc["bundle"], by=f"undrop into {db}.{restore_to}"):
        return bundle_restore.set_up(meta, store, target, doc, source, restore_to, where, db=db, timeout=timeout,
                                     owner=owner, engine=engine, max_bytes_per_second=bps,
                                     max_requests_per_second=rps, origin=origin)


def _same_undrop(target, collection: str, db: str, meta, restore_to: str, bundle: str | None = None):
    """A re-run of this same undrop from a target whose target collection exists resumes
    with the plan it began with; `bundle` named and not the one it began from: another
    undrop (of another incarnation of the name, perhaps), refused (Conflict)."""
    try:
        coll = meta.catalog.get_by_name(restore_to, db)
    except NotFound:
        return None, None
    src = coll.properties.get("restored_from", {})
    rp = src.get("replay")
    if src.get("undrop") and src.get("collection") == collection and isinstance(rp, dict) and rp.get("archive"):
        if bundle is not None and rp["snapshot"] != bundle:
            raise Conflict(f"collection {restore_to!r} in db {db!r} is the undrop of {db}.{collection} from bundle "
                           f"{rp['snapshot']}, not {bundle}; choose another target")
        return Plan(**rp), bundles.read(target, db, collection, rp["snapshot"])
    return None, None
