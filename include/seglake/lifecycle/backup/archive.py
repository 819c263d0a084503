"""Continuous backup (issue 30 item 3): every committed WAL fragment of an archived
pchannel is shipped to the backup target as it is committed, so that the target alone
holds the log a point-in-time restore replays after the source store and etcd are lost.

What is archived: the pchannels of every collection whose retention policy says
`archive: true` (`seglake retention set NAME --archive`; kept for a dropped collection
until its policy is cleared). WAL pchannels are shared, so a pchannel's whole log is
shipped (other collections' messages too, as the log holds them).

In the target (storage/layout.py, "WAL archive"):

    archive/{site}/SITE.json                   the source (its etcd root), written once
    archive/{site}/{pchannel}/{n:020d}.frag    committed fragment n, byte for byte
    archive/{site}/{pchannel}/{n:020d}.json    its entry: the index record + SHA-256

`site` is this etcd root's site id (`{root}/site`, 32 random hex digits made once): two
stores archiving into one target never share a key, whatever their roots are called.

The protocol, per pchannel, in log order from the cursor:
    read fragment n from the store, checked against its index record (size + crc32c of
    the whole file; a format-1 fragment by its own footer and record crcs)
    -> put the .frag (atomic, durable), then the .json entry: the entry is the commit,
       an entry always names a complete fragment with its SHA-256
    -> every SHIP_BATCH fragments and at the end, the cursor `{root}/archive/{pchannel}`
       moves to n with ONE guarded put (compare on its revision; a lost race re-reads
       and keeps the higher cursor: two archivers never move it back).
A kill anywhere re-ships at most the fragments after the cursor: an entry already in the
target with the same SHA-256 is kept (idempotent); an entry with another SHA-256 is
refused loudly (the target holds someone else's fragment n), never overwritten.

One target at a time: a run into another target than the cursor's is refused before it
ships anything (alternating targets would leave holes in both); `move=True` (`seglake wal
archive --move`) moves the archive there for good, starting again from the log's first
retained fragment (the old target keeps what it has).

The WAL keeps what is not shipped: GC's truncation of an archived pchannel stops below
`cursor + 1` (lifecycle/gc/walview.py). A pchannel whose cursor is missing or unreadable
truncates nothing (fail closed). Turning `archive` on for a collection whose log was
already truncated starts the archive at the log's first retained fragment (said in the
report and in `status`).

The archive's recovery point is how far it runs behind: `status` gives, per pchannel, the
fragments not shipped and the age of the oldest one (its first tick on the TSO clock).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Callable, Iterator

from seglake.meta import codec
from seglake import faults
from seglake.errors import Conflict, NotFound, SeglakeError
from seglake.meta import keys as keymod
from seglake.meta.alloc import physical_ms
from seglake.meta.kv import Delete, Put, absent, unchanged
from seglake.storage import Store, layout
from seglake.wal.log import FragRecord, WalLog, checksum, decode_committed, decode_fragment

FORMAT = "seglake-wal-archive"
VERSION = 1
SHIP_BATCH = 16          # fragments shipped between two cursor moves (a kill re-ships at most this many)
POLL_S = 1.0             # a continuous run looks for new fragments this often


class ArchiveError(SeglakeError):
    """The archive cannot go on: the target holds another fragment under an entry's name,
    or an entry or fragment in it is damaged."""


# -- the site ---------------------------------------------------------------------------------
def site_id(meta) -> str:
    """This etcd root's site id, made once (a guarded create; a lost race reads the
    winner's) and bound to where it was made: the etcd cluster and the root. A copy of the
    root -- under another root, or into another cluster (a staging copy restored from an
    etcd backup) -- finds a site made elsewhere and takes a new one (guarded on the record
    it read): two stores never archive into, or restore from, one site's log."""
    import uuid

    key = keymod.site(meta.keys)
    here = {"root": meta.keys.root, "cluster": str(meta.kv.cluster_id())}
    for _ in range(8):
        kv = meta.kv.get(key)
        d = None
        if kv is not None:
            try:
                d = codec.loads(kv.value, kv.key)
            except ValueError:
                raise ArchiveError(f"etcd key {key} is damaged") from None
            site = d.get("site") if isinstance(d, dict) else None
            if not isinstance(site, str) or not layout.SITE_RE.fullmatch(site):
                raise ArchiveError(f"etcd key {key}: {site!r} is not a site id")
            if {k: d.get(k) for k in here} == here:
                return site
        if d is not None and "root" not in d:   # made before sites were bound: bound here, same id
            doc = json.dumps({**d, **here})
        else:
            doc = json.dumps({"site": uuid.uuid4().hex, **here, "created_at": time.time(),
                              **({"copied_from": d["site"]} if d else {})})
        try:
            meta.kv.txn([unchanged(kv) if kv is not None else absent(key)], [Put(key, doc)])
        except Conflict:
            continue
    raise ArchiveError(f"etcd key {key}: could not settle this root's site id (8 lost races)")


# -- what is archived -------------------------------------------------------------------------
def wanted_pchannels(meta) -> dict[str, list[str]]:
    """{pchannel: [db.collection, ...]} for every collection whose retention policy says
    archive: true (also a dropped one, until its policy goes). A policy record that cannot
    be read raises (GC then truncates no WAL at all: the record might have said archive)."""
    from seglake.meta.catalog import pchannel_of

    out: dict[str, list[str]] = {}
    for kv in meta.kv.range(meta.keys.retention_prefix()):
        try:
            d = codec.loads(kv.value, kv.key)
            ok = isinstance(d, dict) and isinstance(d.get("archive", False), bool) and \
                isinstance(d.get("collection_id"), int) and not isinstance(d.get("collection_id"), bool)
        except ValueError:
            ok = False
        if not ok:
            raise ArchiveError(f"retention policy {kv.key} is unreadable: whether it archives is unknown, so "
                               f"no WAL is truncated until it is repaired or cleared")
        if d.get("archive") is not True:
            continue
        try:
            coll = meta.catalog.get(d["collection_id"])
        except NotFound:
            continue   # the collection's records are gone (its pchannels stay archived by their cursors)
        for v in coll.vchannels:
            out.setdefault(pchannel_of(v), []).append(f"{coll.db}.{coll.name}")
    return {p: sorted(set(names)) for p, names in sorted(out.items())}


def cursor_pchannels(meta) -> list[str]:
    """The pchannels with an archive cursor: archived until the archiver lets go of them."""
    pre = keymod.archive_prefix(meta.keys)
    return sorted(kv.key[len(pre):] for kv in meta.kv.range(pre, keys_only=True))


def archived_pchannels(meta) -> dict[str, list[str]]:
    """{pchannel: [db.collection, ...]}: every pchannel a policy wants archived, and every
    pchannel with a cursor (a collection turned off, dropped or gone: what it wrote before
    is shipped, then `run` lets go of the pchannel -- never before). Raises on any read
    error (GC then truncates no WAL at all)."""
    out = wanted_pchannels(meta)
    for p in cursor_pchannels(meta):
        out.setdefault(p, [])
    return dict(sorted(out.items()))


def begin(meta, coll) -> list[str]:
    """The archive of `coll`'s pchannels begins now (retention.set_policy with archive):
    each pchannel without a cursor gets one at the log's first retained fragment (a guarded
    create), so from this moment GC keeps everything not shipped, whatever happens to the
    policy or the collection before the first archive run. Returns the pchannels begun."""
    from seglake.meta.catalog import pchannel_of

    out = []
    for p in sorted({pchannel_of(v) for v in coll.vchannels}):
        key = keymod.archive_cursor(meta.keys, p)
        if meta.kv.get(key) is not None:
            continue
        first = WalLog(meta, None, p).state().first
        try:
            meta.kv.txn([absent(key)], [Put(key, _cursor_doc(first - 1, "", first))])
            out.append(p)
        except Conflict:
            pass
    return out


def _let_go(meta, pchannel: str, cur: "Cursor", last: int) -> bool:
    """No policy wants `pchannel` any more and everything up to `last` is shipped: its
    cursor goes (guarded on it), so GC truncates it as any other pchannel again."""
    if cur.kv is None or cur.shipped < last:
        return False
    try:
        meta.kv.txn([unchanged(cur.kv)], [Delete(keymod.archive_cursor(meta.keys, pchannel))])
    except Conflict:
        return False
    return True


@dataclass(frozen=True)
class Cursor:
    shipped: int = 0           # fragments up to this number are in the target (0: none yet)
    target: str = ""
    began: int = 0             # the first fragment this archive shipped (the log's first then)
    kv: object = None


def _possible(meta, pchannel: str, cur: "Cursor", last: int) -> None:
    """ArchiveError when the cursor (read before the log's `last`) claims more than the
    log holds: an impossible cursor is never believed (GC would truncate what was never
    shipped, the archive would never ship again)."""
    if cur.shipped > last:
        raise ArchiveError(f"the WAL archive's cursor of {pchannel} says fragment {cur.shipped} is shipped, but "
                           f"the log ends at {last}: impossible, refused (nothing truncated or shipped)")


def read_cursor(meta, pchannel: str) -> Cursor:
    """The cursor; ArchiveError when it is damaged."""
    key = keymod.archive_cursor(meta.keys, pchannel)
    kv = meta.kv.get(key)
    if kv is None:
        return Cursor()
    try:
        d = codec.loads(kv.value, kv.key)
        cur = Cursor(d["shipped"], d.get("target", ""), d.get("began", 0), kv)
        ok = all(type(x) is int and x >= 0 for x in (cur.shipped, cur.began)) and isinstance(cur.target, str)
    except (ValueError, KeyError, TypeError, AttributeError):
        ok = False
    if not ok:
        raise ArchiveError(f"the WAL archive's cursor {key} is damaged: no WAL of {pchannel} is truncated and "
                           f"nothing shipped until it is repaired")
    return cur


def truncation_floor(meta, pchannel: str, wanted: dict | None = None) -> int | None:
    """The lowest fragment number of `pchannel` GC must keep for the archive (cursor + 1),
    None when the pchannel is not archived (no cursor, no policy wants it). `wanted`:
    wanted_pchannels, when the caller read it once for several pchannels. Raises on any
    read error (fail closed)."""
    cur = read_cursor(meta, pchannel)   # first: the log only grows after it
    if cur.kv is None and pchannel not in (wanted_pchannels(meta) if wanted is None else wanted):
        return None
    _possible(meta, pchannel, cur, WalLog(meta, None, pchannel).state().last)
    return cur.shipped + 1


def _cursor_doc(shipped: int, target_uri: str, began: int) -> str:
    return json.dumps({"shipped": shipped, "target": target_uri, "began": began, "at": time.time()})


def _move_cursor(meta, pchannel: str, cur: Cursor, shipped: int, target_uri: str, began: int) -> Cursor:
    key = keymod.archive_cursor(meta.keys, pchannel)
    while True:
        if cur.shipped >= shipped and cur.kv is not None:
            return cur   # another archiver got as far (never moved back)
        doc = _cursor_doc(shipped, target_uri, cur.began or began)
        try:
            meta.kv.txn([unchanged(cur.kv) if cur.kv is not None else absent(key)], [Put(key, doc)])
            return read_cursor(meta, pchannel)
        except Conflict:
            cur = read_cursor(meta, pchannel)


def _restart_cursor(meta, pchannel: str, cur: Cursor, target_uri: str, first: int) -> Cursor:
    """The archive moves to another target: it starts again there from the log's first
    retained fragment (one guarded put; a lost race reads the winner's cursor)."""
    key = keymod.archive_cursor(meta.keys, pchannel)
    try:
        meta.kv.txn([unchanged(cur.kv)], [Put(key, _cursor_doc(first - 1, target_uri, first))])
    except Conflict:
        pass
    return read_cursor(meta, pchannel)


# -- shipping -----------------------------------------------------------------------------------
def _checked_bytes(store: Store, rec: FragRecord) -> bytes:
    """The committed fragment's bytes, checked against its index record."""
    from seglake.wal.log import CorruptFragment, _read_whole

    try:
        data = bytes(_read_whole(store, rec.key))
    except NotFound:
        raise CorruptFragment(f"WAL fragment {rec.key} (#{rec.n}): committed in etcd but missing from "
                              f"{store.uri}") from None
    if rec.fmt == 1:
        decode_fragment(rec.key, data, rec.n)     # its own footer and record crcs
    elif len(data) != rec.size or checksum(data) != rec.crc:
        raise CorruptFragment(f"WAL fragment {rec.key} (#{rec.n}): {len(data)} bytes / crc32c "
                              f"{checksum(data):08x} do not match the index ({rec.size} bytes / {rec.crc:08x})")
    return data


def _entry_of(rec: FragRecord, data: bytes, sha: str, site: str, pchannel: str, prev: str) -> dict:
    return {"format": FORMAT, "version": VERSION, "site": site, "pchannel": pchannel, "n": rec.n,
            "sha256": sha, "size": len(data), "crc": checksum(data), "fmt": rec.fmt, "tt0": rec.tt0,
            "span": rec.span, "records": rec.records, "term": rec.term, "producer": rec.producer,
            "calls": [list(c) for c in rec.calls], "source_key": rec.key, "prev": prev}


def entry_digest(raw: bytes) -> str:
    """The SHA-256 of an entry as stored: the next entry's `prev`, COVERED.json's `head`."""
    return hashlib.sha256(raw).hexdigest()


def _raw_entry(target: Store, site: str, pchannel: str, n: int) -> bytes | None:
    try:
        return target.get(layout.archive_entry(site, pchannel, n))
    except NotFound:
        return None


def read_entry(target: Store, site: str, pchannel: str, n: int, raw: bytes | None = None) -> dict | None:
    key = layout.archive_entry(site, pchannel, n)
    if raw is None:
        raw = _raw_entry(target, site, pchannel, n)
        if raw is None:
            return None
    try:
        d = codec.loads(raw, key)
        ok = isinstance(d, dict) and d.get("format") == FORMAT and d.get("n") == n and \
            d.get("site") == site and d.get("pchannel") == pchannel and layout.SHA256_RE.fullmatch(str(d.get("sha256")))
    except ValueError:
        ok = False
    if not ok:
        raise ArchiveError(f"archive entry {key} in {target.uri} is not a {FORMAT} entry of fragment {n}: damaged")
    if d.get("version", 0) > VERSION:
        raise ArchiveError(f"archive entry {key} is version {d['version']}; this seglake reads up to {VERSION}")
    return d


def ship_fragment(store: Store, target: Store, site: str, pchannel: str, rec: FragRecord,
                  acquire: Callable[[int, int], object] | None = None) -> int:
    """Fragment `rec` into the target (module doc); bytes written (0: it was there). Its
    entry names the previous entry's digest (`prev`; "" when there is none): the entries
    form a chain, so an edited entry breaks the next one's link (ArchivedLog checks it)."""
    data = _checked_bytes(store, rec)
    sha = hashlib.sha256(data).hexdigest()
    have = read_entry(target, site, pchannel, rec.n)
    before = _raw_entry(target, site, pchannel, rec.n - 1) if rec.n > 1 else None
    prev = "" if before is None else entry_digest(before)
    if have is not None:
        if have["sha256"] != sha or have["size"] != len(data):
            raise ArchiveError(f"the archive in {target.uri} holds another fragment {rec.n} of {pchannel} "
                               f"(SHA-256 {have['sha256'][:16]}..., this log's is {sha[:16]}...): refused, "
                               f"nothing overwritten")
        return 0
    if acquire is not None:
        acquire(len(data), 2)
    target.put(layout.archive_fragment(site, pchannel, rec.n), data)
    faults.point("archive.after_fragment")
    target.put(layout.archive_entry(site, pchannel, rec.n),
               json.dumps(_entry_of(rec, data, sha, site, pchannel, prev), sort_keys=True).encode())
    faults.point("archive.after_entry")
    return len(data)


def _seal(meta, log: WalLog, st, probe: int) -> int:
    """Everything of the log up to fragment st.last is shipped: seal the log at `probe` (a
    TSO taken before st was read) with ONE txn guarded on the log record being st -- from
    then on no commit carries a tick at or below it (the writer reserves above the seal,
    and a commit that read the record before the seal fails its compare and reserves
    again). So the archive holds the whole log up to `probe`. Returns the tick the archive
    covers: probe, or st.last_tt when a commit came first (sealed next time)."""
    from dataclasses import replace

    if probe <= st.floor_tt or st.kv is None:
        return st.last_tt
    try:
        meta.kv.txn([unchanged(st.kv)], [Put(log.log_key, replace(st, sealed_tt=probe, kv=None).encoded())])
    except Conflict:
        return st.last_tt
    return probe


def write_coverage(target: Store, site: str, pchannel: str, n: int, last_tt: int, probe: int) -> None:
    """`archive/{site}/{pchannel}/COVERED.json`: the archive holds the whole log up to
    fragment n, read at a moment when the log's TSO had passed `probe`. A restore from the
    target alone may replay to an instant the archive covers (ArchivedLog.covered). Never
    moved back by a slower archiver (read, compare, write: a lost race only ever leaves a
    smaller coverage, which is safe)."""
    key = layout.archive_coverage(site, pchannel)
    try:
        old = codec.loads(target.get(key), key)
        if int(old.get("n", 0)) > n or int(old.get("checked_ts", 0)) >= probe:
            return
    except (NotFound, ValueError, TypeError, AttributeError):
        pass
    raw = _raw_entry(target, site, pchannel, n) if n else None
    doc = {"format": FORMAT, "version": VERSION, "site": site, "pchannel": pchannel, "n": n, "last_tt": last_tt,
           "checked_ts": probe, "head": "" if raw is None else entry_digest(raw)}
    doc["digest"] = _doc_digest(doc)
    target.put(key, json.dumps(doc, sort_keys=True).encode())


def _doc_digest(doc: dict) -> str:
    body = {k: v for k, v in doc.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _write_site(meta, target: Store, site: str) -> None:
    key = layout.archive_site(site)
    try:
        target.head(key)
        return
    except NotFound:
        pass
    target.put(key, json.dumps({"format": FORMAT, "version": VERSION, "site": site, "etcd_root": meta.keys.root,
                                "first_at": time.time()}, sort_keys=True).encode())


def _elsewhere(pchannel: str, current: str, asked: str) -> str:
    return (f"the WAL archive of {pchannel} goes to {current}; a run into {asked} is refused (alternating targets "
            f"leave holes in both). To move the archive there for good: `seglake wal archive --target {asked} "
            f"--move` (it starts again from the log's first retained fragment)")


def ship_pchannel(meta, store: Store, target: Store, site: str, pchannel: str, *,
                  acquire=None, deadline: float | None = None, move: bool = False) -> dict:
    """Ship `pchannel`'s committed fragments after its cursor (module doc). Returns
    {pchannel, shipped: fragments, bytes, cursor, last, began, gap}."""
    log = WalLog(meta, store, pchannel)
    probe = meta.tso.now()          # before the log is read: see write_coverage
    cur = read_cursor(meta, pchannel)   # before the log: it only grows after
    st = log.state()
    _possible(meta, pchannel, cur, st.last)
    if cur.kv is not None and cur.target and cur.target != target.uri:
        if not move:
            raise ArchiveError(_elsewhere(pchannel, cur.target, target.uri))
        cur = _restart_cursor(meta, pchannel, cur, target.uri, st.first)
    start = max(cur.shipped + 1, st.first)
    gap = [cur.shipped + 1, st.first - 1] if cur.kv is not None and cur.shipped + 1 < st.first else None
    began = cur.began or start
    n_done, nbytes, shipped_to = 0, 0, cur.shipped
    for rec in log.fragments(start, state=st):
        if deadline is not None and time.monotonic() > deadline:
            break
        nbytes += ship_fragment(store, target, site, pchannel, rec, acquire)
        n_done += 1
        shipped_to = rec.n
        if n_done % SHIP_BATCH == 0:
            cur = _move_cursor(meta, pchannel, cur, shipped_to, target.uri, began)
    if shipped_to > cur.shipped:
        cur = _move_cursor(meta, pchannel, cur, shipped_to, target.uri, began)
    if max(cur.shipped, shipped_to) >= st.last:
        write_coverage(target, site, pchannel, st.last, st.last_tt, _seal(meta, log, st, probe))
    return {"pchannel": pchannel, "shipped": n_done, "bytes": nbytes, "cursor": max(cur.shipped, shipped_to),
            "last": st.last, "began": began, "gap": gap}


def run(meta, store: Store, target: Store, *, seconds: float = 0.0, poll: float = POLL_S,
        max_bytes_per_second: float = 0.0, move: bool = False, say: Callable[[str], None] | None = None) -> dict:
    """Ship every archived pchannel once (seconds=0), or again every `poll` seconds for
    `seconds` (a continuous run: the wal_archive DAG), at most `max_bytes_per_second`
    (0: unlimited) and under the store's shared copy limit. Returns the report: per
    pchannel what was shipped, the cursor and the log's last fragment."""
    from seglake import limits, throttle
    from seglake.lifecycle.backup.bundle import overlaps

    seconds = float(limits.check("archive_seconds", "seconds", seconds))
    poll = float(limits.check("poll_interval", "poll", poll))
    if target.uri == store.uri or overlaps(store.uri, target.uri):
        raise ArchiveError(f"the archive target {target.uri} is the store itself; it must be another store")
    if not move:   # one target at a time, refused before anything is shipped
        for p in archived_pchannels(meta):
            cur = read_cursor(meta, p)
            if cur.target and cur.target != target.uri:
                raise ArchiveError(_elsewhere(p, cur.target, target.uri))
    th = throttle.for_run(meta, meta.keys.backup_throttle("wal-archive"), max_bytes_per_second)
    acquire = th.acquire if th.bounded else None
    site = site_id(meta)
    _write_site(meta, target, site)
    end = time.monotonic() + seconds
    report: dict[str, dict] = {}
    while True:
        wanted = wanted_pchannels(meta)
        for p, names in archived_pchannels(meta).items():
            r = ship_pchannel(meta, store, target, site, p, acquire=acquire, deadline=end if seconds else None,
                              move=move)
            prev = report.get(p, {"shipped": 0, "bytes": 0})
            r.update(shipped=prev["shipped"] + r["shipped"], bytes=prev["bytes"] + r["bytes"], collections=names)
            if p not in wanted and _let_go(meta, p, read_cursor(meta, p), r["last"]):
                r["released"] = True
                if say is not None:
                    say(f"{p}: no collection archives it any more; everything it held is shipped: released")
            report[p] = r
            if say is not None and r["gap"]:
                say(f"{p}: fragments {r['gap'][0]}..{r['gap'][1]} were truncated before they were archived; "
                    f"a restore from the archive cannot replay them")
        if not seconds or time.monotonic() + poll > end:
            break
        time.sleep(poll)
    out = {"site": site, "target": target.uri, "pchannels": report,
           "fragments": sum(r["shipped"] for r in report.values()), "bytes": sum(r["bytes"] for r in report.values())}
    if say is not None:
        say(f"archived {out['fragments']} fragment(s), {out['bytes']} bytes, of {len(report)} pchannel(s) to "
            f"{target.uri}")
    return out


# -- status: how far behind -------------------------------------------------------------------
def status(meta, now_ms: float | None = None) -> list[dict]:
    """Per archived pchannel: the log's last fragment, the cursor, fragments behind, and
    `lag_s`: the age of the oldest fragment not shipped (0 when none is behind) -- the
    archive's recovery point right now."""
    out = []
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    for p, names in archived_pchannels(meta).items():
        log = WalLog(meta, None, p)
        st = log.state()
        cur = read_cursor(meta, p)
        behind = max(0, st.last - max(cur.shipped, st.first - 1))
        lag = 0.0
        if behind:
            first = next(log.fragments(max(cur.shipped + 1, st.first), state=st), None)
            if first is not None and first.tt0:
                lag = max(0.0, (now_ms - physical_ms(first.tt0)) / 1000)
        out.append({"pchannel": p, "collections": names, "last": st.last, "shipped": cur.shipped,
                    "behind": behind, "lag_s": round(lag, 3), "began": cur.began, "target": cur.target})
    return out


# -- reading the archive --------------------------------------------------------------------
class ArchivedLog:
    """One pchannel's log as the archive holds it, read like WalLog (fragments in order,
    each checked against its entry: size, crc32c, SHA-256). Needs nothing but the target."""

    def __init__(self, target: Store, site: str, pchannel: str):
        self.target, self.site, self.pchannel = target, site, pchannel
        self._sha: dict[int, str] = {}   # n -> SHA-256 of the entries fragments() checked

    def numbers(self) -> list[int]:
        """The fragment numbers with an entry, ascending."""
        out = []
        for o in self.target.list(layout.archive_prefix(self.site, self.pchannel)):
            parsed = layout.parse_archive_key(o.key)
            if parsed is not None and parsed[3] == "json" and parsed[:2] == (self.site, self.pchannel):
                out.append(parsed[2])
        return sorted(out)

    def covered(self) -> int:
        """The latest instant (a TSO) this archive holds the whole log of the pchannel up
        to: the last archived tick, or -- when the archiver shipped everything and sealed
        the log (_seal) -- the seal. 0 without a coverage record, or when its fragment is
        not archived."""
        key = layout.archive_coverage(self.site, self.pchannel)
        try:
            d = codec.loads(self.target.get(key), key)
            n, last_tt, checked = int(d["n"]), int(d["last_tt"]), int(d["checked_ts"])
        except NotFound:
            return 0
        except (ValueError, KeyError, TypeError):
            raise ArchiveError(f"{key} in {self.target.uri} is damaged") from None
        if d.get("digest") != _doc_digest(d) or d.get("site") != self.site or d.get("pchannel") != self.pchannel:
            raise ArchiveError(f"{key} in {self.target.uri} is damaged (its digest does not match its content)")
        if n not in self.numbers():   # (a hole below it is the plan's concern: _check_archive)
            return 0
        raw = _raw_entry(self.target, self.site, self.pchannel, n)
        if raw is None or entry_digest(raw) != d.get("head"):
            raise ArchiveError(f"{key} in {self.target.uri} names entry {n} with another digest: damaged")
        e = read_entry(self.target, self.site, self.pchannel, n, raw)
        if last_tt != e["tt0"] + max(e["span"], 1) - 1 and e.get("fmt", 2) != 1:
            raise ArchiveError(f"{key} in {self.target.uri}: its last tick is not entry {n}'s: damaged")
        return max(last_tt, checked)

    def gaps(self) -> list[tuple[int, int]]:
        """Ranges (first, last) of fragment numbers missing between the first and the last entry."""
        ns = self.numbers()
        return [(a + 1, b - 1) for a, b in zip(ns, ns[1:]) if b > a + 1]

    def state(self):
        """The archived log as a LogState (first..last archived), for wal.scanner.Scanner."""
        from seglake.wal.log import LogState

        ns = self.numbers()
        return LogState(first=ns[0], last=ns[-1]) if ns else LogState(first=1, last=0)

    def fragments(self, start: int | None = None, state=None) -> Iterator[FragRecord]:
        """The archived fragments from `start` (None: from the first one archived) up to
        `state.last` (a LogState from `state()`; None: all), in order; a missing one --
        `start` itself included -- raises (a restore must never replay across a hole)."""
        from seglake.wal.log import CorruptFragment

        expect, prev_raw, prev_end = start, None, None
        numbers = self.numbers()
        if start is not None and start - 1 in numbers:   # the link into the first one read
            prev_raw = _raw_entry(self.target, self.site, self.pchannel, start - 1)
        for n in numbers:
            if start is not None and n < start:
                continue
            if state is not None and n > state.last:
                break
            if expect is not None and n != expect:
                raise CorruptFragment(f"WAL archive {self.pchannel} in {self.target.uri}: fragments {expect}..{n - 1} "
                                      f"are missing")
            raw = _raw_entry(self.target, self.site, self.pchannel, n)
            if raw is None:
                raise CorruptFragment(f"WAL archive {self.pchannel} in {self.target.uri}: entry {n} vanished")
            d = read_entry(self.target, self.site, self.pchannel, n, raw)
            if prev_raw is not None and d.get("prev") != entry_digest(prev_raw):
                raise CorruptFragment(f"WAL archive {self.pchannel} in {self.target.uri}: entry {n} does not link to "
                                      f"entry {n - 1} (one of them was edited or replaced): damaged")
            if prev_end is not None and d.get("fmt", 2) != 1 and d["tt0"] <= prev_end:
                raise CorruptFragment(f"WAL archive {self.pchannel} in {self.target.uri}: entry {n}'s ticks do not "
                                      f"follow entry {n - 1}'s: damaged")
            prev_raw, prev_end = raw, (d["tt0"] + max(d["span"], 1) - 1 if d.get("fmt", 2) != 1 else None)
            self._sha[n] = d["sha256"]
            yield FragRecord(n, layout.archive_fragment(self.site, self.pchannel, n), d["size"], d["crc"],
                             d["tt0"], d["span"], d["records"], d["term"], d.get("producer", ""), d.get("fmt", 2),
                             tuple(tuple(c) for c in d.get("calls", ())))
            expect = n + 1

    def read_fragment(self, rec: FragRecord):
        """The fragment's messages (wal.log.read_committed's checks), after its SHA-256."""
        from seglake.wal.log import CorruptFragment

        sha = self._sha.get(rec.n) or read_entry(self.target, self.site, self.pchannel, rec.n)["sha256"]
        try:
            data = self.target.get(rec.key)
        except NotFound:
            raise CorruptFragment(f"archived fragment {rec.key} (#{rec.n}): its entry is in {self.target.uri}, "
                                  f"the fragment is not") from None
        if hashlib.sha256(data).hexdigest() != sha:
            raise CorruptFragment(f"archived fragment {rec.key} in {self.target.uri}: its SHA-256 is not its "
                                  f"entry's: damaged")
        return decode_committed(rec, data)

    def messages(self, start=None):
        for rec in self.fragments(start.fragment if start else None):
            for m in self.read_fragment(rec):
                if start is None or not m.id < start:
                    yield m
