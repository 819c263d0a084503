"""Garbage collection: fail-closed, mark then sweep; never a referenced file, never a
file that is not seglake's own.

    check tolerances (finite; floor unless force) -> load references (ALL or nothing)
      -> mark:  list the store (cutoff fixed when listing STARTS), judge every key:
                only keys `layout.parse_key` parses (and round-trips) are ever candidates:
                orphans older than the cutoff, and the files of segments Dropped longer
                than drop_tolerance; everything else is counted as unrecognised (files,
                bytes, a sample) and never touched -> candidate report
                (_gc/{run}/candidates.parquet, dropped.json, summary.json)
      -> sweep: only a report whose parts are byte for byte what its mark wrote (sha256 in
                summary.json), never a dry run's; per batch of 1,000: refresh references with
                everything changed in etcd since they were loaded (read from etcd's history,
                or from the current state once that history is compacted), drop candidates
                now referenced, delete the rest
                only if still the object the mark saw (size, mtime), never through a
                symlink; then remove the records of Dropped segments whose files are all
                gone (guarded: the record is unchanged since the mark)
      -> records: stale PENDING and unfinished DELETING snapshots, expired TTL snapshots,
                finished copy jobs past retention, empty Dropped collections

References: every file of every live segment record, every file of every snapshot
(RefIndex) and the snapshot records' own manifests and metadata; files of Dropped
segment records until their drop tolerance passes. A collection with a PENDING snapshot,
or paused, is skipped and reported. Internal prefixes (_gc/, _reports/) are never
collected. WAL fragments (wal/{pchannel}/*.frag) are candidates ("wal_truncated") only
when `wal.checkpoints.truncatable_fragments` says every live vchannel of the pchannel has a
checkpoint above them, or no committed fragment of the log names them (a producer's
write that never committed: producers never commit a file older than a minute), and
they are older than missing_tolerance; the sets are computed
once per pchannel in the mark (any error: no WAL key is a candidate, the error is
reported) and again right before each sweep batch, which records the truncation in etcd
before deleting. Counts are true: `deleted` is what this run
unlinked, a file another run removed first is `already_gone`. A dry run is the mark
alone and reports the same candidates (and totals) the real run deletes.
"""

from __future__ import annotations

import bisect
import hashlib
import io
import json
import math
import re
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from seglake import faults
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, ValidationError
from seglake import limits
from seglake.lifecycle import copyjob, snapshot
from seglake.meta import Meta
from seglake.meta.alloc import FIRST_ID
from seglake.meta.codec import decode_struct
from seglake.meta.kv import Compare, Delete, exists, unchanged
from seglake.meta.segments import DROPPED, Segment
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING
from seglake.storage import Store, layout
from seglake.storage.base import SYMLINK, ObjectInfo

GC_PREFIX = layout.GC_RUNS
INTERNAL = tuple(root + "/" for root in layout.INTERNAL_ROOTS)
SWEEP_BATCH = 1000
SAMPLE = 20
ORPHAN, DROPPED_SEGMENT, WAL_TRUNCATED = "orphan", "dropped_segment", "wal_truncated"
CANDIDATE_REASONS = (ORPHAN, DROPPED_SEGMENT, WAL_TRUNCATED)
WAL_RETAINED, WAL_SKIPPED = "wal_retained", "wal_skipped_error"  # kept: needed by a consumer / not judged
REFERENCED, INTERNAL_FILE, UNRECOGNISED = "referenced", "internal", "unrecognised"
UNKNOWN_SEGMENT, OUT_OF_SCOPE, DROPPED_RECENT = "unknown_segment", "out_of_scope", "dropped_within_tolerance"
UNREADABLE_DIR = "unreadable_directory"  # listed with report_unreadable: its content was not judged
BLOCKED, PAUSED, YOUNG = "skipped_pending_snapshot", "skipped_paused", "kept_young"


class GCError(SeglakeError):
    """GC refused to delete (fail closed); the message says why."""


@dataclass
class GCOptions:
    missing_tolerance: float = 86400.0
    drop_tolerance: float = 10800.0
    snapshot_pending_timeout: float = 600.0
    copy_job_retention: float = 10800.0
    floor: float = 3600.0
    force: bool = False
    dry_run: bool = False
    collection_id: int | None = None   # scope: one collection, or all

    @classmethod
    def from_settings(cls, s, **overrides) -> "GCOptions":
        base = cls(missing_tolerance=s.missing_tolerance, drop_tolerance=s.drop_tolerance,
                   snapshot_pending_timeout=s.snapshot_pending_timeout,
                   copy_job_retention=s.copy_job_retention, floor=s.tolerance_floor)
        for k, v in overrides.items():
            if v is not None:
                setattr(base, k, v)
        return base

    def check(self) -> "GCOptions":
        """Refuse non-finite or negative durations, and tolerances below the floor unless
        forced -- before any listing."""
        for name in ("floor", "missing_tolerance", "drop_tolerance", "snapshot_pending_timeout",
                     "copy_job_retention"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValidationError(f"gc {name} must be a finite, non-negative number of seconds, got {v!r}")
        if not self.force:  # the floor has a floor of its own: only force goes below it
            limits.check("tolerance_floor", "gc floor (seconds)", self.floor)
        for name in ("missing_tolerance", "drop_tolerance"):
            v = limits.check(name, f"gc {name} (seconds)", getattr(self, name))  # finite, in range
            if v < self.floor and not self.force:
                raise ValidationError(f"gc {name} of {v:g}s ({v / 3600:g} h) is below the {self.floor:g}s floor "
                                      f"({self.floor / 3600:g} h); allowed: at least the floor, or force (CLI "
                                      "--force, DAG conf force: true) to go below it")
        c = self.collection_id
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or not FIRST_ID <= c <= layout.MAX_ID):
            raise ValidationError(f"gc collection_id must be a collection id ({FIRST_ID}..{layout.MAX_ID}) or None "
                                  f"(the whole store), got {c!r}")
        return self


def positive(name: str, value) -> int:
    """`value` if it is an int in 1..10**9 (a batch size, a part or task count), else
    ValidationError naming `name`: a zero or negative batch would sweep nothing and still
    remove the Dropped records whose files it never deleted."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
        raise ValidationError(f"{name} must be an integer from 1 to 1000000000, got {value!r}")
    return value


# -- pause / resume -------------------------------------------------------------------------
def pause(meta: Meta, collection_id: int | None = None, ttl: float = 3600, reason: str = "") -> dict:
    """Pause GC globally or for one collection until `ttl` seconds pass (an etcd lease)."""
    ttl = limits.check("gc_pause_ttl", "gc pause ttl", ttl)
    key = _pause_key(meta, collection_id)
    lease = meta.kv.grant_lease(int(max(1, ttl)))
    until = time.time() + ttl
    meta.kv.put(key, json.dumps({"until": until, "reason": reason}), lease=lease)
    return {"scope": "all" if collection_id is None else collection_id, "until": until}


def resume(meta: Meta, collection_id: int | None = None) -> None:
    meta.kv.delete(_pause_key(meta, collection_id))


def _pause_key(meta: Meta, collection_id: int | None) -> str:
    return meta.keys.gc("pause", "all" if collection_id is None else str(collection_id))


def paused_scopes(meta: Meta) -> tuple[bool, set[int]]:
    """(globally paused, paused collection ids)."""
    glob, colls = False, set()
    for kv in meta.kv.range(meta.keys.gc("pause") + "/"):
        scope = kv.key.rsplit("/", 1)[1]
        if scope == "all":
            glob = True
        else:
            colls.add(int(scope))
    return glob, colls


# -- the settings of scheduled runs ------------------------------------------------------------
# A scheduled gc run never uses the form's defaults: it runs with the conf an operator
# recorded on purpose (`seglake gc schedule set`), and is refused until there is one.
def set_schedule(meta: Meta, conf: dict, floor: float, by: str = "") -> dict:
    """Record the conf of scheduled gc runs, checked first like a triggered conf (the
    DAG's contract, the tolerance floor); returns the record. Fail-fast, one put."""
    from seglake.params import check_conf, check_gc_floor

    checked = check_conf("gc", conf)
    check_gc_floor(checked, floor)
    if checked["collection"] is not None:
        meta.catalog.get_by_name(checked["collection"], checked["db"])   # NotFound names it
    record = {"conf": checked, "set_at": time.time(), "set_by": by}
    meta.kv.put(meta.keys.gc("schedule"), json.dumps(record))
    return record


def get_schedule(meta: Meta) -> dict | None:
    """The record `set_schedule` wrote, or None."""
    kv = meta.kv.get(meta.keys.gc("schedule"))
    return None if kv is None else json.loads(kv.value)


def clear_schedule(meta: Meta) -> bool:
    """Remove the record (scheduled runs are refused again); True if there was one."""
    key = meta.keys.gc("schedule")
    if meta.kv.get(key) is None:
        return False
    meta.kv.delete(key)
    return True


# -- references -------------------------------------------------------------------------------
@dataclass
class References:
    files: set[str] = field(default_factory=set)        # live: never deleted
    dropped: dict[str, tuple[int, int]] = field(default_factory=dict)  # file of a Dropped record -> (coll, seg)
    segment_collection: dict[int, int] = field(default_factory=dict)  # segment id -> collection id
    snapshot_segments: set[tuple[int, int]] = field(default_factory=set)
    snapshot_files: set[str] = field(default_factory=set)
    snapshot_ids: set[tuple[int, int]] = field(default_factory=set)   # (collection, snapshot id) with a record
    blocked: set[int] = field(default_factory=set)      # collections with a PENDING snapshot
    paused: set[int] = field(default_factory=set)
    paused_all: bool = False
    revision: int = 0
    segments: list[Segment] = field(default_factory=list)
    changed_segments: set[tuple[int, int]] = field(default_factory=set)  # records written after `revision` was first read

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def add_segment(self, seg: Segment) -> None:
        self.segment_collection[seg.segment_id] = seg.collection_id
        keys = [f.key for f in layout.segment_files(seg)]
        if seg.state == DROPPED:
            self.dropped.update((k, (seg.collection_id, seg.segment_id)) for k in keys)
        else:
            self.files.update(keys)

    def add_snapshots(self, idx: "snapshot.RefIndex") -> None:
        self.files |= idx.files | idx.own_files
        self.snapshot_files |= idx.files
        self.snapshot_segments |= idx.segments
        self.blocked |= idx.blocked_collections
        self.snapshot_ids |= {(r.collection_id, r.snapshot_id) for r in idx.snapshots}
        for c, s in sorted(idx.segments):  # a segment no record names: its smallest collection id
            self.segment_collection.setdefault(s, c)

    def skipped(self, coll: int | None) -> str | None:
        """Why a collection's files must be left alone right now, if they must."""
        if coll is not None and coll in self.blocked:
            return BLOCKED
        if self.paused_all or (coll is not None and coll in self.paused):
            return PAUSED
        return None


def load_references(meta: Meta, store: Store) -> References:
    """Everything referenced, read at one etcd revision. Any failure raises GCError:
    nothing may be deleted on a partial view."""
    try:
        refs = References(revision=meta.kv.revision())
        for seg in meta.segments.list(revision=refs.revision):
            refs.segments.append(seg)
            refs.add_segment(seg)
        refs.add_snapshots(snapshot.RefIndex.of(store, snapshot_records(meta, refs.revision)))
        refs.paused_all, refs.paused = paused_scopes(meta)
    except Exception as e:
        raise GCError(f"references could not be read completely, nothing deleted: {type(e).__name__}: {e}") from e
    return refs


def snapshot_records(meta: Meta, revision: int) -> list:
    """The snapshot records at `revision`."""
    from seglake.meta.snapshots import SnapshotRecord
    return [decode_struct(kv.value, SnapshotRecord, kv.key)
            for kv in meta.kv.range(meta.keys.snapshots_prefix(), revision=revision)]


def refresh_references(meta: Meta, store: Store, refs: References) -> References:
    """Add what changed in etcd since `refs` was read: new or updated segment records
    (remembered in `changed_segments`), and what the snapshot records written since
    reference (an unchanged record references what it did at the mark). Never removes a
    reference. Reads only the changes (`changed_records`), not every record. Raises GCError."""
    try:
        if meta.kv.revision() == refs.revision:
            return refs  # nothing at all was written to etcd since: the references stand
        segments, snapshots, upto = changed_records(meta, refs.revision)
        for seg in segments:
            refs.add_segment(seg)
            refs.changed_segments.add((seg.collection_id, seg.segment_id))
        if snapshots:
            refs.add_snapshots(snapshot.RefIndex.of(store, snapshots))
        refs.paused_all, refs.paused = paused_scopes(meta)
        refs.revision = upto
    except Exception as e:
        raise GCError(f"references could not be refreshed, stopping before this batch: "
                      f"{type(e).__name__}: {e}") from e
    return refs


def changed_records(meta: Meta, revision: int) -> tuple[list[Segment], list, int]:
    """(segment records, snapshot records) written after `revision` and still present,
    as they are now, in key order, and the revision that view is complete up to. Read
    from etcd's history since `revision` (one watch over gc/..snapshots/, cost: the
    changes); when that history is compacted, from the current state instead: every
    record whose mod_revision is above `revision` (one scan of both prefixes: a record
    changed since keeps a mod_revision above it whatever was compacted, so nothing is
    missed either way; 'no change seen' is never assumed)."""
    from seglake.meta.kv import Compacted
    from seglake.meta.snapshots import SnapshotRecord

    seg_prefix, snap_prefix = meta.keys.segments_prefix(), meta.keys.snapshots_prefix()
    lo, hi = meta.keys.gc() + "/", snap_prefix[:-1] + "0"  # {root}/gc/ .. segments/ .. snapshots/ (end)
    try:
        changed, upto = meta.kv.changes(lo, hi, revision + 1, meta.keys.gc("fence", uuid.uuid4().hex))
        kvs = [kv for _, kv in sorted(changed.items()) if kv is not None]
    except Compacted:
        upto = meta.kv.revision()
        kvs = [kv for p in (seg_prefix, snap_prefix)
               for kv in meta.kv.range(p, revision=upto, min_mod_revision=revision + 1)]
    segments = [decode_struct(kv.value, Segment, kv.key) for kv in kvs if kv.key.startswith(seg_prefix)]
    snapshots = [decode_struct(kv.value, SnapshotRecord, kv.key) for kv in kvs if kv.key.startswith(snap_prefix)]
    return segments, snapshots, upto


# -- classification ---------------------------------------------------------------------------
@dataclass
class Reclaim:
    """Dropped segments whose files this run may delete (past drop_tolerance, in scope,
    not referenced by a snapshot, collection neither blocked nor paused)."""
    segments: dict[tuple[int, int], Segment] = field(default_factory=dict)
    kept: int = 0   # past the tolerance but referenced by a snapshot, blocked or paused


def reclaimable(refs: References, opts: GCOptions, now: float) -> Reclaim:
    out = Reclaim()
    for seg in refs.segments:
        if seg.state != DROPPED or seg.dropped_at is None or not math.isfinite(seg.dropped_at) \
                or seg.dropped_at + opts.drop_tolerance > now:
            continue
        c = seg.collection_id
        if opts.collection_id is not None and c != opts.collection_id:
            continue
        if (c, seg.segment_id) in refs.snapshot_segments or refs.skipped(c) \
                or any(layout.parse_key(f.key) is None for f in layout.segment_files(seg)):
            out.kept += 1  # (a file GC cannot recognise would outlive its record: keep both)
        else:
            out.segments[(c, seg.segment_id)] = seg
    return out


@dataclass
class WalView:
    """The WAL fragments this run may delete, per pchannel seen under wal/, read once:
    those below every checkpoint (`truncatable`) and files no committed fragment of the
    log names (not in `referenced`: a producer's write that never committed, a format-1
    hole, a truncated fragment). `error` set: nothing under wal/ is judged (fail closed
    for the WAL only)."""
    truncatable: dict[str, set[str]] = field(default_factory=dict)
    referenced: dict[str, set[str]] = field(default_factory=dict)
    error: str | None = None

    def verdict(self, key: str) -> str | None:
        """WAL_TRUNCATED (before its age is looked at), why a fragment is kept, or None
        for a key that is not a WAL fragment."""
        p = layout.parse_wal_fragment(key)
        if p is None or not _is_pchannel(p[0]):
            return None  # not a fragment of one of seglake's pchannels: unrecognised
        if self.error is not None or p[0] not in self.referenced:
            return WAL_SKIPPED
        if key in self.truncatable.get(p[0], ()) or key not in self.referenced[p[0]]:
            return WAL_TRUNCATED
        return WAL_RETAINED

    def summary(self) -> dict:
        return {"pchannels": len(self.truncatable), "truncatable": sum(map(len, self.truncatable.values())),
                "error": self.error}


def _is_pchannel(name: str) -> bool:
    from seglake.wal.log import validate_pchannel
    try:
        validate_pchannel(name)
    except ValidationError:
        return False
    return True


def wal_truncatable(meta: Meta, pchannel: str) -> set[str]:
    from seglake.wal.checkpoints import truncatable_fragments
    return set(truncatable_fragments(meta, pchannel))


def wal_referenced(meta: Meta, pchannel: str) -> set[str]:
    from seglake.wal.checkpoints import referenced_fragments
    return referenced_fragments(meta, pchannel)


def load_wal_view(meta: Meta, store: Store, collection_id: int | None) -> WalView:
    """Truncatable fragments of every pchannel with a directory under wal/. A scoped run
    (one collection) never judges the WAL. Never raises: an error is kept in the view."""
    view = WalView()
    if collection_id is not None:
        return view
    try:
        faults.point("gc.mark.wal")
        dirs, _ = store.list_level(f"{layout.WAL}/")
        for d in dirs:
            name = d[len(layout.WAL) + 1:].rstrip("/")
            if _is_pchannel(name):  # (any other directory's keys stay unrecognised)
                view.truncatable[name] = wal_truncatable(meta, name)
                view.referenced[name] = wal_referenced(meta, name)
    except Exception as e:
        view.truncatable, view.referenced, view.error = {}, {}, f"{type(e).__name__}: {e}"
    return view


def judge(key: str, refs: References, reclaim: Reclaim, collection_id: int | None = None,
          wal: WalView | None = None) -> tuple[str, int | None, int | None]:
    """(verdict, collection id, segment id) of one listed key, before its age is looked
    at, from the references held in memory (the inline engine)."""
    owner = refs.dropped.get(key)
    return decide(key, key in refs.files, owner, owner in reclaim.segments, refs.segment_collection.get,
                  refs, collection_id, wal)


def decide(key: str, referenced: bool, owner: tuple[int, int] | None, owner_reclaimable: bool,
           segment_collection: Callable[[int], int | None], scope: References, collection_id: int | None = None,
           wal: WalView | None = None) -> tuple[str, int | None, int | None]:
    """THE judgement of one listed key, for both engines, from what the references say
    about it: `referenced` (a live record or a snapshot names it), `owner` (the Dropped
    record naming it, and whether that segment is reclaimable this run),
    `segment_collection(seg)` (the collection of a segment, for keys that carry no
    collection id) and the small `scope` (blocked and paused collections, snapshot ids).
    A candidate reason (ORPHAN, DROPPED_SEGMENT) or why the key is kept. Only a key that
    `layout.parse_key` parses can ever be a candidate."""
    if key.startswith(INTERNAL):
        return INTERNAL_FILE, None, None
    if key.endswith("/"):
        return UNREADABLE_DIR, None, None
    if referenced:
        return REFERENCED, None, None
    w = (wal or WalView(error="not loaded")).verdict(key)
    if w is not None:
        return (scope.skipped(None) or w), None, None
    p = layout.parse_key(key)
    if p is None:
        return UNRECOGNISED, None, None
    if p.snapshot_id is not None:
        if (p.collection_id, p.snapshot_id) not in scope.snapshot_ids:
            return UNRECOGNISED, p.collection_id, None  # no record ever named this id: not ours to judge
        coll, seg = p.collection_id, None
    else:
        seg = p.segment_id
        coll = p.collection_id if p.collection_id is not None or seg is None else segment_collection(seg)
    if collection_id is not None and coll != collection_id:
        return (UNKNOWN_SEGMENT if coll is None else OUT_OF_SCOPE), coll, seg
    skipped = scope.skipped(coll)
    if skipped:
        return skipped, coll, seg
    if owner is not None:
        return (DROPPED_SEGMENT if owner_reclaimable else DROPPED_RECENT), owner[0], owner[1]
    return ORPHAN, coll, seg


def lookup_segment(key: str) -> int | None:
    """The segment id whose collection `decide` must look up for this key (a key of the
    layout that names a segment but no collection: index files), else None."""
    p = layout.parse_key(key)
    return p.segment_id if p is not None and p.snapshot_id is None and p.collection_id is None else None


def refuse_symlink(key: str) -> None:
    """Fail closed: a referenced file may live behind a symlink under another key."""
    raise GCError(f"symlink {layout.display_key(key)!r} inside the store: files may be reachable "
                  "under two keys, so an unreferenced-looking file could be referenced; remove the "
                  "symlink (move the data instead). Nothing deleted")


def report_row(o: ObjectInfo, verdict: str, coll: int | None, seg: int | None, cutoff: float) -> dict:
    """One judged object as a report row; the age cutoff applies here (both engines)."""
    if verdict in (ORPHAN, WAL_TRUNCATED) and o.mtime >= cutoff:
        verdict = YOUNG
    return {"path": o.key, "size": o.size, "mtime": o.mtime, "reason": verdict,
            "collection_id": -1 if coll is None else coll, "segment_id": -1 if seg is None else seg}


def classify(objects: Iterable[ObjectInfo], refs: References, cutoff: float,
             collection_id: int | None = None, reclaim: Reclaim | None = None,
             wal: WalView | None = None) -> Iterator[dict]:
    """Every listed object with its verdict: a candidate (orphan or truncatable WAL
    fragment older than the cutoff, file of a reclaimable Dropped segment) or why it is kept."""
    reclaim = reclaim or Reclaim()
    for o in objects:
        if o.size == SYMLINK:
            refuse_symlink(o.key)
        yield report_row(o, *judge(o.key, refs, reclaim, collection_id, wal), cutoff)


def scan_prefixes(collection_id: int | None) -> list[str]:
    """What mark lists: the whole store, or one collection's prefixes (+ index files)."""
    if collection_id is None:
        return [""]
    return layout.collection_prefixes(collection_id) + [layout.snapshots_prefix(collection_id),
                                                        f"{layout.INDEX_FILES}/"]


# -- mark -------------------------------------------------------------------------------------
@dataclass
class Tally:
    files: int = 0
    bytes: int = 0
    sample: list[str] = field(default_factory=list)  # the SAMPLE smallest keys (same for any split)

    def add(self, key: str, size: int) -> None:
        self.files += 1
        self.bytes += size
        k = layout.display_key(key)
        if len(self.sample) < SAMPLE or k < self.sample[-1]:
            bisect.insort(self.sample, k)
            del self.sample[SAMPLE:]

    def merge(self, other: "Tally") -> None:
        self.files += other.files
        self.bytes += other.bytes
        self.sample = sorted(set(self.sample) | set(other.sample))[:SAMPLE]

    def to_json(self) -> dict:
        return {"files": self.files, "bytes": self.bytes, "sample": sorted(self.sample)}

    @classmethod
    def from_json(cls, d: dict) -> "Tally":
        return cls(d["files"], d["bytes"], sorted(d["sample"]))


@dataclass
class MarkCounts:
    """What a mark saw, as counts only: built row by row (inline, or per partition on
    Spark executors) and merged. No per-object data beyond the bounded samples."""
    listed: int = 0
    referenced: int = 0
    internal: int = 0
    candidates: int = 0
    candidate_bytes: int = 0
    kept: dict = field(default_factory=lambda: defaultdict(int))
    by_collection_reason: dict = field(default_factory=dict)
    unrecognised: Tally = field(default_factory=Tally)
    unknown_segment: Tally = field(default_factory=Tally)
    unreadable: Tally = field(default_factory=Tally)   # directories that could not be listed
    dropped_segments: int = 0   # Dropped segments this run reclaims
    dropped_kept: int = 0       # past the tolerance but referenced by a snapshot, blocked or paused
    dropped_files: int = 0
    dropped_bytes: int = 0

    def add(self, row: dict) -> None:
        self.listed += 1
        reason = row["reason"]
        if reason in CANDIDATE_REASONS:
            self.candidates += 1
            self.candidate_bytes += row["size"]
            b = self.by_collection_reason.setdefault(f"{row['collection_id']}/{reason}", {"files": 0, "bytes": 0})
            b["files"] += 1
            b["bytes"] += row["size"]
            if reason == DROPPED_SEGMENT:
                self.dropped_files += 1
                self.dropped_bytes += row["size"]
        elif reason == REFERENCED:
            self.referenced += 1
        elif reason == INTERNAL_FILE:
            self.internal += 1
        elif reason == UNRECOGNISED:
            self.unrecognised.add(row["path"], row["size"])
        elif reason == UNREADABLE_DIR:
            self.unreadable.add(row["path"], 0)
        else:
            self.kept[reason] += 1
            if reason == UNKNOWN_SEGMENT:
                self.unknown_segment.add(row["path"], row["size"])

    _PLAIN = ("listed", "referenced", "internal", "candidates", "candidate_bytes", "dropped_segments",
              "dropped_kept", "dropped_files", "dropped_bytes")
    _TALLIES = ("unrecognised", "unknown_segment", "unreadable")

    def merge(self, o: "MarkCounts") -> "MarkCounts":
        for n in self._PLAIN:
            setattr(self, n, getattr(self, n) + getattr(o, n))
        for k, v in o.kept.items():
            self.kept[k] += v
        for k, v in o.by_collection_reason.items():
            b = self.by_collection_reason.setdefault(k, {"files": 0, "bytes": 0})
            b["files"] += v["files"]
            b["bytes"] += v["bytes"]
        for n in self._TALLIES:
            getattr(self, n).merge(getattr(o, n))
        return self

    def to_json(self) -> dict:
        return {**{n: getattr(self, n) for n in self._PLAIN}, "kept": dict(self.kept),
                "by_collection_reason": self.by_collection_reason,
                **{n: getattr(self, n).to_json() for n in self._TALLIES}}

    @classmethod
    def from_json(cls, d: dict) -> "MarkCounts":
        c = cls(**{n: d[n] for n in cls._PLAIN}, by_collection_reason=d["by_collection_reason"],
                **{n: Tally.from_json(d[n]) for n in cls._TALLIES})
        c.kept.update(d["kept"])
        return c


@dataclass
class MarkResult:
    run_id: str
    started_at: float
    cutoff: float
    counts: MarkCounts
    report_parts: list[list]           # [index, candidates, dropped segments, sha256 x 2] of every part written
    candidates: list[dict] = field(default_factory=list)  # inline engine only (the Spark driver holds none)
    refs_revision: int = 0
    dry_run: bool = False
    wal: dict = field(default_factory=dict)
    engine: str = "inline"

    @property
    def report_key(self) -> str:
        return layout.gc_parts_prefix(self.run_id, CANDIDATES)

    def summary(self) -> dict:
        c = self.counts
        return {"run_id": self.run_id, "started_at": self.started_at, "cutoff": self.cutoff,
                "listed": c.listed, "referenced": c.referenced, "internal": c.internal,
                "candidates": c.candidates, "candidate_bytes": c.candidate_bytes,
                "kept": dict(sorted(c.kept.items())), "unrecognised": c.unrecognised.to_json(),
                "unknown_segment": c.unknown_segment.to_json(),
                "unreadable_directories": c.unreadable.to_json(),
                "dropped": {"segments": c.dropped_segments, "files": c.dropped_files, "bytes": c.dropped_bytes,
                            "kept_referenced_or_skipped": c.dropped_kept},
                "by_collection_reason": dict(sorted(c.by_collection_reason.items())), "report": self.report_key,
                "report_parts": sorted(self.report_parts), "refs_revision": self.refs_revision,
                "dry_run": self.dry_run, "wal": self.wal, "engine": self.engine}


def new_run_id(now=time.time) -> str:
    return f"gc-{int(now() * 1000)}-{uuid.uuid4().hex[:6]}"  # two runs at once never share one


def mark(meta: Meta, store: Store, opts: GCOptions, run_id: str | None = None,
         refs: References | None = None, now=time.time) -> MarkResult:
    """The mark phase, inline (a dry run is this alone): every candidate the sweep may
    delete, with the size and mtime it had, in a one-part report. The Spark engine
    (spark/jobs/gc_scan.py) judges with the same `decide` and writes the same report."""
    opts.check()
    run_id = check_run_id(new_run_id(now) if run_id is None else run_id)
    started = now()
    cutoff = started - opts.missing_tolerance  # fixed when listing STARTS
    refs = refs or load_references(meta, store)
    reclaim = reclaimable(refs, opts, started)
    wal = load_wal_view(meta, store, opts.collection_id)
    objects = (o for p in scan_prefixes(opts.collection_id) for o in store.list(p, report_unreadable=True))
    counts = MarkCounts(dropped_segments=len(reclaim.segments), dropped_kept=reclaim.kept)
    candidates = []
    for row in classify(objects, refs, cutoff, opts.collection_id, reclaim, wal):
        counts.add(row)
        if row["reason"] in CANDIDATE_REASONS:
            candidates.append(row)
    dropped = sorted(seg.ref for seg in reclaim.segments.values())
    part = write_part(store, run_id, 0, candidates, dropped)
    m = MarkResult(run_id, started, cutoff, counts, [part] if part else [], candidates, refs.revision,
                   opts.dry_run, wal.summary())
    finish_mark(store, m.summary())
    return m


def finish_mark(store: Store, summary: dict) -> None:
    """Make a mark visible: its summary (written last: a report without one does not
    exist for the sweep), then the pointer to the latest run."""
    store.put(layout.gc_run_file(summary["run_id"], "summary.json"), json.dumps({**summary, "swept": None}).encode())
    store.put(layout.GC_LATEST, json.dumps({"run_id": summary["run_id"]}).encode())


# -- the candidate report: _gc/{run}/candidates/part-N.parquet (+ dropped/part-N.parquet) --------
# Every file of one Dropped segment, and the segment itself, are in the same part: a sweep of
# that part alone knows when the segment's record may go. summary.json lists the parts
# written ([index, candidates, dropped segments, sha256 of the candidates file, sha256 of the
# dropped file]): the sweep reads only those parts and only with those exact bytes, so a part
# another mark of the same run id wrote (a retried or zombie task, a reused id), a copied,
# truncated or edited part is refused before anything in it is deleted. Reports of earlier
# versions ([index, candidates, dropped] without digests; candidates.parquet + dropped.json
# without a part list) are read with their counts checked only.
CANDIDATES, DROPPED_PARTS, LEGACY_PART = "candidates", "dropped", -1
_RUN_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}", re.ASCII)


def check_run_id(run_id) -> str:
    """A run id names one directory under _gc/: letters, digits, '_', '.', '-' (not
    starting with '.' or '-'), at most 200 characters, full match. ValidationError
    before any side effect otherwise."""
    if not isinstance(run_id, str) or _RUN_ID.fullmatch(run_id) is None:
        raise ValidationError(f"gc run id {run_id!r} must be 1-200 letters, digits, '_', '.' or '-', "
                              "starting with a letter, digit or '_'")
    return run_id
_REPORT_COLUMNS = (("path", "string"), ("size", "int64"), ("mtime", "float64"), ("reason", "string"),
                   ("collection_id", "int64"), ("segment_id", "int64"))
_DROPPED_COLUMNS = (("collection_id", "int64"), ("partition_id", "int64"), ("segment_id", "int64"))


def part_key(run_id: str, kind: str, index: int) -> str:
    return layout.gc_part(run_id, kind, index)


def _put_parquet(store: Store, key: str, columns, rows: list) -> str:
    """Write rows as one Parquet object; returns the sha256 of the bytes written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({name: pa.array([r[i] if isinstance(r, (tuple, list)) else r[name] for r in rows],
                                     getattr(pa, typ)()) for i, (name, typ) in enumerate(columns)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data = sink.getvalue().to_pybytes()
    store.put(key, data)
    return hashlib.sha256(data).hexdigest()


def _get_parquet(store: Store, key: str, sha256: str | None = None) -> list[dict]:
    """The rows of one Parquet object; with `sha256`, only if its bytes have that digest
    (GCError otherwise)."""
    import pyarrow.parquet as pq
    data = store.get(key)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise GCError(f"{key} is not the file its mark wrote (sha256 differs): damaged or replaced, "
                      "nothing in it deleted")
    return pq.read_table(io.BytesIO(data)).to_pylist()


def write_part(store: Store, run_id: str, index: int, candidates: list[dict],
               dropped: list[tuple[int, int, int]]) -> list | None:
    """Write one part of the report (nothing when it has neither candidates nor dropped
    segments); returns its entry for summary.json, which binds the part to these exact
    bytes. Re-writing a part is harmless: only the entry in the summary counts."""
    if not candidates and not dropped:
        return None
    c = _put_parquet(store, part_key(run_id, CANDIDATES, index), _REPORT_COLUMNS, candidates)
    d = _put_parquet(store, part_key(run_id, DROPPED_PARTS, index), _DROPPED_COLUMNS, list(dropped))
    return [index, len(candidates), len(dropped), c, d]


def report_parts(summary: dict) -> list[list]:
    """The parts summary.json lists, each index once (GCError otherwise)."""
    if "report_parts" not in summary:
        return [[LEGACY_PART, summary.get("candidates", 0), -1]]
    parts = [list(p) for p in summary["report_parts"]]
    indexes = [p[0] if p else None for p in parts]
    if any(len(p) not in (3, 5) for p in parts) or len(set(indexes)) != len(indexes):
        raise GCError(f"gc run {summary.get('run_id')!r}: its summary lists report parts twice or malformed: "
                      "damaged, nothing deleted")
    return parts


def read_part(store: Store, run_id: str, part: list) -> tuple[list[dict], list[tuple[int, int, int]]]:
    """(candidates, dropped segments (c, p, s)) of one part, exactly the bytes summary.json
    names for it (its sha256) and with its counts. GCError for a damaged or replaced part."""
    index, n, k = part[:3]
    want_c, want_d = part[3:5] if len(part) == 5 else (None, None)
    try:
        if index == LEGACY_PART:
            candidates = _get_parquet(store, layout.gc_run_file(run_id, "candidates.parquet"))
            try:
                dropped = [tuple(x) for x in _read_json(store, run_id, "dropped.json")["segments"]]
            except NotFound:
                dropped = []  # written before dropped segments were marked: nothing to remove
            return candidates, dropped
        candidates = _get_parquet(store, part_key(run_id, CANDIDATES, index), want_c)
        dropped = [(d["collection_id"], d["partition_id"], d["segment_id"])
                   for d in _get_parquet(store, part_key(run_id, DROPPED_PARTS, index), want_d)]
    except NotFound:
        raise NotFound(f"gc run {run_id!r}: report part {index} is missing") from None
    if len(candidates) != n or len(dropped) != k:
        raise GCError(f"gc run {run_id!r}: report part {index} holds {len(candidates)} candidates and "
                      f"{len(dropped)} dropped segments, its summary says {n} and {k}: damaged, nothing deleted")
    return candidates, dropped


def sweep_plan(store: Store, run_id: str) -> tuple[int, list[list]]:
    """(the mark's reference revision, its report parts) for a sweep of `run_id`, both
    engines. Refused (GCError) for a dry run's mark: a dry run promises no delete, now or
    later; a real run marks again."""
    summary = _read_json(store, check_run_id(run_id), "summary.json")
    if summary.get("dry_run"):
        raise GCError(f"gc run {run_id!r} was a dry run: its report is never swept (run GC without dry_run); "
                      "nothing deleted")
    return summary["refs_revision"], report_parts(summary)


def read_report(store: Store, run_id: str) -> list[dict]:
    """Every candidate of a run's report (tests, the CLI, small reports only)."""
    try:
        summary = _read_json(store, run_id, "summary.json")
    except NotFound:
        raise NotFound(f"no gc report for run {run_id!r}") from None
    return [c for p in report_parts(summary) for c in read_part(store, run_id, p)[0]]


def _read_json(store: Store, run_id: str, name: str) -> dict:
    try:
        return json.loads(store.get(layout.gc_run_file(run_id, name)))
    except NotFound:
        raise NotFound(f"gc run {run_id!r} has no {name}; run its mark first") from None


def latest_summary(store: Store) -> dict:
    try:
        run_id = json.loads(store.get(layout.GC_LATEST))["run_id"]
    except NotFound:
        raise NotFound("no gc run has been recorded yet") from None
    return json.loads(store.get(layout.gc_run_file(run_id, "summary.json")))


# -- sweep ------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    deleted: int = 0          # unlinked by this run
    deleted_bytes: int = 0
    rechecked_kept: int = 0   # referenced, blocked or paused by the time of the delete
    changed_kept: int = 0     # no longer the object the mark saw (size/mtime, a symlink on the path)
    already_gone: int = 0     # removed by someone else (another run) first
    errors: list[tuple[str, str]] = field(default_factory=list)   # the first MAX_ERRORS
    error_count: int = 0
    by_collection: dict = field(default_factory=lambda: defaultdict(lambda: {"files": 0, "bytes": 0}))
    by_reason: dict = field(default_factory=lambda: defaultdict(lambda: {"files": 0, "bytes": 0}))
    dropped_records_removed: int = 0
    dropped_records_kept: int = 0

    MAX_ERRORS = 100
    _PLAIN = ("deleted", "deleted_bytes", "rechecked_kept", "changed_kept", "already_gone", "error_count",
              "dropped_records_removed", "dropped_records_kept")

    def error(self, key: str, why: str) -> None:
        self.error_count += 1
        if len(self.errors) < self.MAX_ERRORS:
            self.errors.append((key, why))

    def count_deleted(self, c: dict) -> None:
        self.deleted += 1
        self.deleted_bytes += c["size"]
        for b in (self.by_collection[str(c["collection_id"])], self.by_reason[c["reason"]]):
            b["files"] += 1
            b["bytes"] += c["size"]

    def merge(self, o: "SweepResult") -> "SweepResult":
        for n in self._PLAIN:
            setattr(self, n, getattr(self, n) + getattr(o, n))
        self.errors = (self.errors + o.errors)[:self.MAX_ERRORS]
        for mine, theirs in ((self.by_collection, o.by_collection), (self.by_reason, o.by_reason)):
            for k, v in theirs.items():
                mine[k]["files"] += v["files"]
                mine[k]["bytes"] += v["bytes"]
        return self

    def to_json(self) -> dict:
        return {**{n: getattr(self, n) for n in self._PLAIN}, "errors": [list(e) for e in self.errors],
                "by_collection": dict(self.by_collection), "by_reason": dict(self.by_reason)}

    @classmethod
    def from_json(cls, d: dict) -> "SweepResult":
        out = cls(**{n: d[n] for n in cls._PLAIN}, errors=[tuple(e) for e in d["errors"]])
        out.by_collection.update(d["by_collection"])
        out.by_reason.update(d["by_reason"])
        return out

    def summary(self) -> dict:
        d = self.by_reason.get(DROPPED_SEGMENT, {"files": 0, "bytes": 0})
        return {"deleted": self.deleted, "deleted_bytes": self.deleted_bytes, "rechecked_kept": self.rechecked_kept,
                "changed_kept": self.changed_kept, "already_gone": self.already_gone,
                "errors": [list(e) for e in self.errors], "error_count": self.error_count,
                "by_collection": dict(sorted(self.by_collection.items())),
                "by_reason": dict(sorted(self.by_reason.items())),
                "dropped": {"segments": self.dropped_records_removed, "files": d["files"], "bytes": d["bytes"],
                            "records_kept": self.dropped_records_kept}}


def still_collectable(c: dict, refs: References) -> bool:
    """The sweep's re-check of one candidate against the refreshed references. A report
    row that does not parse as seglake's own key is never collectable, whatever it says."""
    key, coll, reason = c["path"], c["collection_id"], c["reason"]
    if reason == WAL_TRUNCATED:  # (the sweep also re-reads the pchannel's truncatable set)
        return layout.parse_wal_fragment(key) is not None and not refs.skipped(None)
    if reason not in CANDIDATE_REASONS or key.startswith(INTERNAL) or layout.parse_key(key) is None:
        return False
    if key in refs.files or refs.skipped(None if coll < 0 else coll):
        return False
    if reason == DROPPED_SEGMENT:
        owner = (coll, c.get("segment_id", -1))
        return owner not in refs.changed_segments and refs.dropped.get(key) == owner
    return key not in refs.dropped  # an orphan a (Dropped) record now references waits for that record


def sweep(meta: Meta, store: Store, run_id: str, refs: References | None = None,
          batch: int = SWEEP_BATCH) -> SweepResult:
    """Delete the report's candidates, part by part (`sweep_part`), then record what was
    done in summary.json. Idempotent and resumable: re-running a killed sweep deletes
    what is left and counts only that.

    The candidates were unreferenced at the etcd revision the mark read its references
    at, so without `refs` the sweep starts from that revision and only applies what
    changed since (new or updated segment records, snapshot records written since)."""
    mark_rev, parts = sweep_plan(store, run_id)
    positive("gc sweep batch", batch)
    refs = References(revision=mark_rev) if refs is None else refs
    out = SweepResult()
    for part in parts:
        refs = sweep_part(meta, store, run_id, mark_rev, part, refs, out, batch)
    record_sweep(store, run_id, out)
    return out


def record_sweep(store: Store, run_id: str, out: SweepResult) -> None:
    summary = _read_json(store, run_id, "summary.json")
    summary["swept"] = out.summary()
    store.put(layout.gc_run_file(run_id, "summary.json"), json.dumps(summary).encode())


def sweep_part(meta: Meta, store: Store, run_id: str, mark_rev: int, part: list[int], refs: References,
               out: SweepResult, batch: int = SWEEP_BATCH) -> References:
    """Sweep one part of the report: batches of `batch`, each re-checked right before
    deleting against references refreshed from etcd (everything changed since `refs`),
    each file deleted only if it is still the object the mark saw; then the records of
    the part's Dropped segments whose files are all gone. Adds to `out`; returns the
    refreshed references. The same code runs inline and in Spark executors (one part per task)."""
    batch = positive("gc sweep batch", batch)
    candidates, dropped = read_part(store, run_id, part)
    for c in candidates:  # the Dropped records the mark judged, as it saw them (a newer view wins)
        if c["reason"] == DROPPED_SEGMENT:
            refs.dropped.setdefault(c["path"], (c["collection_id"], c.get("segment_id", -1)))
    unfinished: set[tuple[int, int]] = set()  # dropped segments with a file left behind
    for i in range(0, len(candidates), batch):
        chunk = candidates[i:i + batch]
        faults.point("gc.sweep.batch")
        refs = refresh_references(meta, store, refs)
        doomed = {}
        for c in chunk:
            if still_collectable(c, refs):
                doomed[c["path"]] = c
            else:
                out.rechecked_kept += 1
                unfinished.add((c["collection_id"], c.get("segment_id", -1)))
        for key in _wal_not_truncatable(meta, [c["path"] for c in doomed.values() if c["reason"] == WAL_TRUNCATED],
                                        out):
            del doomed[key]
            out.rechecked_kept += 1
        res = store.delete_checked([ObjectInfo(c["path"], c["size"], c["mtime"]) for c in doomed.values()])
        for key in res.deleted:
            out.count_deleted(doomed[key])
        out.already_gone += len(res.missing)
        out.changed_kept += len(res.changed)
        for e in res.errors:
            out.error(e.key, e.error)
        for key in res.changed + [e.key for e in res.errors]:
            unfinished.add((doomed[key]["collection_id"], doomed[key].get("segment_id", -1)))
    refs = refresh_references(meta, store, refs)
    _remove_dropped_records(meta, dropped, mark_rev, refs, unfinished, out)
    return refs


def sweep_parts_from_env(settings_env: dict, run_id: str, mark_rev: int, parts: Iterable[list[int]],
                         batch: int = SWEEP_BATCH) -> dict:
    """Spark executor side of the sweep: these parts, from the etcd changes since the
    mark's revision; returns the counts (JSON) for the driver to add up."""
    from seglake.config import Settings
    from seglake.storage import open_store

    settings = Settings.load(env=settings_env)
    store = open_store(settings)
    out = SweepResult()
    with Meta.from_settings(settings) as meta:
        refs = References(revision=mark_rev)
        for part in parts:
            refs = sweep_part(meta, store, run_id, mark_rev, part, refs, out, batch)
    return out.to_json()


def _wal_not_truncatable(meta: Meta, keys: list[str], out: SweepResult) -> list[str]:
    """Re-read, right before deleting, which of these WAL fragments are still below
    every checkpoint, and record the truncation of those in etcd (before any delete).
    Returns the keys that must be kept; a pchannel that fails is kept whole (error)."""
    by_pchannel: dict[str, list[str]] = defaultdict(list)
    for k in keys:
        by_pchannel[layout.parse_wal_fragment(k)[0]].append(k)
    keep = []
    for pch, ks in sorted(by_pchannel.items()):
        try:
            ok = wal_truncatable(meta, pch)
            ref = wal_referenced(meta, pch)
            faults.point("gc.sweep.wal_truncate")
            below = [k for k in ks if k in ok]
            if below:
                from seglake.wal.checkpoints import record_truncation
                record_truncation(meta, pch, below)
            keep += [k for k in ks if k not in ok and k in ref]
        except Exception as e:
            out.error(layout.wal_prefix(pch), f"wal truncation not recorded, kept: {type(e).__name__}: {e}")
            keep += ks
    return keep


def _remove_dropped_records(meta: Meta, segments: list[tuple[int, int, int]], mark_rev: int, refs: References,
                            unfinished: set[tuple[int, int]], out: SweepResult) -> None:
    """Remove the record of each reclaimable Dropped segment whose files are all gone,
    in one guarded txn per record: it must be unchanged since the mark's revision."""
    for c, p, s in segments:
        if (c, s) in unfinished or (c, s) in refs.changed_segments or (c, s) in refs.snapshot_segments \
                or refs.skipped(c):
            out.dropped_records_kept += 1
            continue
        key = meta.keys.segment(c, p, s)
        try:
            meta.kv.txn([exists(key), Compare(key, "mod", "<", mark_rev + 1)], [Delete(key)])
            out.dropped_records_removed += 1
        except Conflict:
            if meta.kv.get(key) is not None:
                out.dropped_records_kept += 1  # changed since the mark: judged again next run
            # else another run removed it first: not counted here


# -- dropped segments and records ----------------------------------------------------------------
def clean_records(meta: Meta, store: Store, opts: GCOptions, now: float | None = None) -> dict:
    """Stale PENDING / unfinished DELETING / expired snapshots, expired copy jobs, and
    Dropped collections with nothing left."""
    now = time.time() if now is None else now
    out = defaultdict(int)
    out["expired_pins_removed"] = meta.snapshots.remove_expired_holds(now)
    for rec in list(meta.snapshots.list(opts.collection_id)):
        if rec.state == PENDING:  # reclaimed only when its writers stopped beating, claim first
            if snapshot.reclaim_abandoned(meta, store, rec, opts.snapshot_pending_timeout, now=now):
                out["stale_pending_snapshots"] += 1
        elif rec.state == DELETING:
            snapshot.remove_files_and_record(meta, store, rec)
            out["deleting_snapshots_finished"] += 1
        elif rec.state == COMMITTED and rec.expires_at is not None and rec.expires_at < now \
                and not rec.pinned_by(min(now, time.time())):
            try:
                snapshot.drop_by_id(meta, store, rec.collection_id, rec.name, now=now)
            except (Conflict, StateError):   # pinned (or changed) since the listing: the pin wins
                out["expired_snapshots_held"] += 1
                continue
            out["expired_snapshots"] += 1
    out["copy_jobs_removed"] = len(copyjob.cleanup_expired(meta, opts.copy_job_retention, now=now))

    for coll in list(meta.catalog.list(include_dropped=True)):
        if coll.state != "Dropped" or (opts.collection_id is not None and coll.collection_id != opts.collection_id):
            continue
        if meta.kv.count(meta.keys.segments_prefix(coll.collection_id)) or \
                meta.kv.count(meta.keys.snapshots_prefix(coll.collection_id)):
            continue
        kv = meta.kv.get(meta.keys.collection(coll.collection_id))
        if kv is not None:   # with its retention policy, if it had one
            meta.kv.txn([unchanged(kv)], [Delete(kv.key), Delete(meta.keys.retention(coll.collection_id))])
            out["dropped_collections_removed"] += 1
    return dict(out)


def run(meta: Meta, store: Store, opts: GCOptions, run_id: str | None = None) -> dict:
    """The whole GC, inline: mark, then (unless dry run) sweep and records. The dry
    run's `mark` (candidates, dropped) is what the real run's sweep deletes."""
    opts.check()
    run_id = check_run_id(new_run_id() if run_id is None else run_id)
    refs = load_references(meta, store)
    m = mark(meta, store, opts, run_id=run_id, refs=refs)
    result = {"mark": m.summary(), "dry_run": opts.dry_run}
    result["dropped"] = dict(result["mark"]["dropped"])
    if opts.dry_run:
        return result
    s = sweep(meta, store, m.run_id, refs=refs).summary()
    result["sweep"] = s
    result["dropped"] = {**s["dropped"], "kept_referenced_or_skipped": m.counts.dropped_kept}
    result["records"] = clean_records(meta, store, opts)
    return result


def format_summary(result: dict) -> str:
    m = result["mark"]
    dry = result.get("dry_run")
    u = m.get("unrecognised") or {"files": 0, "bytes": 0, "sample": []}
    lines = [f"gc run {m['run_id']}{' (dry run)' if dry else ''}: listed {m['listed']} objects "
             f"({m.get('referenced', 0)} referenced), {m['candidates']} candidates ({m['candidate_bytes']} bytes)"
             f"{' that a real run deletes' if dry else ''}, kept {m['kept']}",
             f"unrecognised (never deleted): {u['files']} files, {u['bytes']} bytes"
             + (f", e.g. {', '.join(u['sample'][:5])}" if u["sample"] else "")]
    ud = m.get("unreadable_directories") or {}
    if ud.get("files"):
        lines.append(f"directories that could not be read (their content not judged): {ud['files']}, "
                     f"e.g. {', '.join(ud['sample'][:5])}")
    us = m.get("unknown_segment") or {}
    if us.get("files"):
        lines.append(f"index files of unknown segments (not judged by a scoped run): {us['files']} files, "
                     f"{us['bytes']} bytes, e.g. {', '.join(us['sample'][:5])}")
    for k, v in sorted(m["by_collection_reason"].items()):
        coll, reason = k.split("/")
        lines.append(f"  collection {coll if coll != '-1' else '?'}: {reason}: {v['files']} files, {v['bytes']} bytes")
    d = result.get("dropped") or (result.get("sweep") or {}).get("dropped") or m.get("dropped")
    if d:
        kept = d.get("kept_referenced_or_skipped", (m.get("dropped") or {}).get("kept_referenced_or_skipped", 0))
        lines.append(f"dropped segments: {d['segments']} {'would be ' if dry else ''}reclaimed "
                     f"({d['files']} files, {d['bytes']} bytes), {kept} kept")
    if "sweep" in result:
        s = result["sweep"]
        lines.append(f"swept: {s['deleted']} files, {s['deleted_bytes']} bytes deleted by this run; "
                     f"{s['already_gone']} already gone; {s['rechecked_kept']} kept by the re-check; "
                     f"{s['changed_kept']} changed since the mark (kept); {s['error_count']} errors; "
                     f"{s['dropped']['segments']} dropped segment records removed")
    w = m.get("wal") or {}
    if w.get("error"):
        lines.append(f"wal: not judged (nothing under wal/ deleted): {w['error']}")
    elif w.get("pchannels"):
        lines.append(f"wal: {w['truncatable']} fragments below every checkpoint in {w['pchannels']} pchannels "
                     "(deleted once older than missing_tolerance)")
    if result.get("records"):
        lines.append("records: " + ", ".join(f"{k} {v}" for k, v in sorted(result["records"].items())))
    return "\n".join(lines)
