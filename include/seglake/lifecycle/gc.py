"""Garbage collection: fail-closed, mark then sweep; never a referenced file.

    check tolerances (floor unless force) -> load references (ALL or nothing)
      -> mark:  list the store (cutoff fixed when listing STARTS), anti-join with the
                references, classify -> candidate report (_gc/{run}/candidates.parquet)
      -> sweep: per batch of 1,000: refresh references with everything changed in etcd
                since they were loaded, drop candidates now referenced, delete the rest
      -> dropped segments: files of segments Dropped longer than drop_tolerance (not
                referenced by any snapshot), then their records
      -> records: stale PENDING and unfinished DELETING snapshots, expired TTL snapshots,
                finished copy jobs past retention, empty Dropped collections

References: every file of every segment record (any state: Dropped ones until their own
reclaim step), every file of every snapshot (RefIndex), and the snapshot records' own
manifests and metadata. A collection with a PENDING snapshot, or paused, is skipped and
reported. Keys on both sides are canonical (storage.layout.normalize_key). Internal
prefixes (_gc/, _reports/) are never collected.
"""

from __future__ import annotations

import io
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from seglake.errors import Conflict, NotFound, SeglakeError, ValidationError
from seglake import limits
from seglake.lifecycle import copyjob, snapshot
from seglake.meta import Meta
from seglake.meta.codec import decode_struct
from seglake.meta.kv import Delete, unchanged
from seglake.meta.segments import DROPPED, Segment
from seglake.meta.snapshots import COMMITTED, DELETING, PENDING
from seglake.storage import Store, layout
from seglake.storage.base import ObjectInfo

GC_PREFIX = "_gc"
INTERNAL = ("_gc/", "_reports/")
SWEEP_BATCH = 1000
ORPHAN, DROPPED_SEGMENT = "orphan", "dropped_segment"


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
        """Refuse tolerances below the floor unless forced -- before any listing."""
        for name in ("missing_tolerance", "drop_tolerance"):
            v = limits.check(name, f"gc {name} (seconds)", getattr(self, name))  # finite, in range
            if v < self.floor and not self.force:
                raise ValidationError(f"gc {name} of {v:g}s is below the {self.floor:g}s floor; "
                                      "pass force=true to run with it anyway")
        return self


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


# -- references -------------------------------------------------------------------------------
@dataclass
class References:
    files: set[str] = field(default_factory=set)
    segment_collection: dict[int, int] = field(default_factory=dict)  # segment id -> collection id
    snapshot_segments: set[tuple[int, int]] = field(default_factory=set)
    snapshot_files: set[str] = field(default_factory=set)
    blocked: set[int] = field(default_factory=set)      # collections with a PENDING snapshot
    paused: set[int] = field(default_factory=set)
    paused_all: bool = False
    revision: int = 0
    segments: list[Segment] = field(default_factory=list)

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def add_segment(self, seg: Segment) -> None:
        self.segment_collection[seg.segment_id] = seg.collection_id
        self.files.update(f.key for f in layout.segment_files(seg))

    def add_snapshots(self, idx: "snapshot.RefIndex") -> None:
        self.files |= idx.files | idx.own_files
        self.snapshot_files |= idx.files
        self.snapshot_segments |= idx.segments
        self.blocked |= idx.blocked_collections


def load_references(meta: Meta, store: Store) -> References:
    """Everything referenced, read at one etcd revision. Any failure raises GCError:
    nothing may be deleted on a partial view."""
    try:
        refs = References(revision=meta.kv.revision())
        for seg in meta.segments.list(revision=refs.revision):
            refs.segments.append(seg)
            refs.add_segment(seg)
        refs.add_snapshots(snapshot.RefIndex.load(meta, store))
        refs.paused_all, refs.paused = paused_scopes(meta)
    except Exception as e:
        raise GCError(f"references could not be read completely, nothing deleted: {type(e).__name__}: {e}") from e
    return refs


def refresh_references(meta: Meta, store: Store, refs: References) -> References:
    """Add what changed in etcd since `refs` was read: new or updated segment records,
    and (if any snapshot record changed) a fresh snapshot index. Raises GCError."""
    try:
        now_rev = meta.kv.revision()
        if now_rev == refs.revision:
            return refs  # nothing at all was written to etcd since: the references stand
        for kv in meta.kv.range(meta.keys.segments_prefix(), revision=now_rev, min_mod_revision=refs.revision + 1):
            refs.add_segment(decode_struct(kv.value, Segment, kv.key))
        changed = any(True for _ in meta.kv.range(meta.keys.snapshots_prefix(), revision=now_rev,
                                                 min_mod_revision=refs.revision + 1, keys_only=True))
        if changed:
            refs.add_snapshots(snapshot.RefIndex.load(meta, store))
        refs.paused_all, refs.paused = paused_scopes(meta)
        refs.revision = now_rev
    except Exception as e:
        raise GCError(f"references could not be refreshed, stopping before this batch: "
                      f"{type(e).__name__}: {e}") from e
    return refs


# -- classification ---------------------------------------------------------------------------
def collection_of(key: str, refs: References) -> int | None:
    """The collection a key belongs to, from its path (index files: via segment id)."""
    parts = key.split("/")
    try:
        if parts[0] in (layout.INSERT_LOG, layout.DELTA_LOG, layout.STATS_LOG, layout.SNAPSHOTS):
            return int(parts[1])
        if parts[0] == layout.INDEX_FILES and len(parts) >= 6:
            return refs.segment_collection.get(int(parts[4]))
    except ValueError:
        return None
    return None


def classify(objects: Iterable[ObjectInfo], refs: References, cutoff: float,
             collection_id: int | None = None) -> Iterator[dict]:
    """Every unreferenced object with its verdict: candidate (orphan, older than the
    cutoff) or kept (young, blocked, paused). Referenced objects yield nothing."""
    for o in objects:
        key = layout.normalize_key(o.key)
        if key.startswith(INTERNAL) or key in refs.files:
            continue
        coll = collection_of(key, refs)
        if collection_id is not None and coll != collection_id:
            continue
        if coll is not None and coll in refs.blocked:
            verdict = "skipped_pending_snapshot"
        elif refs.paused_all or (coll is not None and coll in refs.paused):
            verdict = "skipped_paused"
        elif o.mtime >= cutoff:
            verdict = "kept_young"
        else:
            verdict = ORPHAN
        yield {"path": key, "size": o.size, "mtime": o.mtime, "reason": verdict,
               "collection_id": -1 if coll is None else coll}


def scan_prefixes(refs: References, collection_id: int | None) -> list[str]:
    """What mark lists: the whole store, or one collection's prefixes (+ index files)."""
    if collection_id is None:
        return [""]
    return layout.collection_prefixes(collection_id) + [f"{layout.SNAPSHOTS}/{collection_id}/",
                                                        f"{layout.INDEX_FILES}/"]


def split_prefixes(store: Store, prefixes: list[str]) -> tuple[list[str], list[ObjectInfo]]:
    """Work units for a distributed listing: each top-level directory is split one level
    further (insert_log/ -> insert_log/{collection}/ ...). Returns (prefixes to list,
    objects found on the way)."""
    units, loose = [], []
    for p in prefixes:
        dirs, files = store.list_level(p)
        loose += files
        for d in dirs:
            sub, sub_files = store.list_level(d)
            loose += sub_files
            units += sub
    return units, loose


def list_units_from_env(prefixes: Iterable[str], settings_env: dict) -> Iterator[tuple[str, int, float]]:
    """Spark executor side: open the store from the settings the driver handed over and
    list the given prefixes as (path, size, mtime) rows."""
    from seglake.config import Settings
    from seglake.storage import open_store

    store = open_store(Settings.load(env=settings_env))
    for p in prefixes:
        for o in store.list(p):
            yield (o.key, o.size, o.mtime)


# -- mark -------------------------------------------------------------------------------------
@dataclass
class MarkResult:
    run_id: str
    started_at: float
    cutoff: float
    listed: int
    candidates: list[dict]
    kept: dict[str, int]
    report_key: str
    refs_revision: int = 0

    def summary(self) -> dict:
        by = defaultdict(lambda: {"files": 0, "bytes": 0})
        for c in self.candidates:
            b = by[f"{c['collection_id']}/{c['reason']}"]
            b["files"] += 1
            b["bytes"] += c["size"]
        return {"run_id": self.run_id, "started_at": self.started_at, "cutoff": self.cutoff,
                "listed": self.listed, "candidates": len(self.candidates),
                "candidate_bytes": sum(c["size"] for c in self.candidates),
                "kept": self.kept, "by_collection_reason": dict(by), "report": self.report_key,
                "refs_revision": self.refs_revision}


def mark(meta: Meta, store: Store, opts: GCOptions, run_id: str | None = None,
         refs: References | None = None, now=time.time, listing=None) -> MarkResult:
    """The mark phase (a dry run is this alone). `listing(prefixes)` may replace the
    store listing (the Spark engine lists in executors)."""
    opts.check()
    run_id = run_id or f"gc-{int(now() * 1000)}"
    started = now()
    cutoff = started - opts.missing_tolerance  # fixed when listing STARTS
    refs = refs or load_references(meta, store)
    prefixes = scan_prefixes(refs, opts.collection_id)
    objects = listing(prefixes) if listing else (o for p in prefixes for o in store.list(p))
    candidates, kept, listed = [], defaultdict(int), 0

    def counted(it):
        nonlocal listed
        for o in it:
            listed += 1
            yield o

    for row in classify(counted(objects), refs, cutoff, opts.collection_id):
        if row["reason"] == ORPHAN:
            candidates.append(row)
        else:
            kept[row["reason"]] += 1
    report_key = write_report(store, run_id, candidates)
    result = MarkResult(run_id, started, cutoff, listed, candidates, dict(kept), report_key, refs.revision)
    store.put(f"{GC_PREFIX}/{run_id}/summary.json", json.dumps({**result.summary(), "dry_run": opts.dry_run,
                                                                  "swept": None}).encode())
    store.put(f"{GC_PREFIX}/latest.json", json.dumps({"run_id": run_id}).encode())
    return result


def write_report(store: Store, run_id: str, candidates: list[dict]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({
        "path": pa.array([c["path"] for c in candidates], pa.string()),
        "size": pa.array([c["size"] for c in candidates], pa.int64()),
        "mtime": pa.array([c["mtime"] for c in candidates], pa.float64()),
        "reason": pa.array([c["reason"] for c in candidates], pa.string()),
        "collection_id": pa.array([c["collection_id"] for c in candidates], pa.int64()),
    })
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    key = f"{GC_PREFIX}/{run_id}/candidates.parquet"
    store.put(key, sink.getvalue().to_pybytes())
    return key


def read_report(store: Store, run_id: str) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        raw = store.get(f"{GC_PREFIX}/{run_id}/candidates.parquet")
    except NotFound:
        raise NotFound(f"no gc report for run {run_id!r}") from None
    return pq.read_table(io.BytesIO(raw)).to_pylist()


def latest_summary(store: Store) -> dict:
    try:
        run_id = json.loads(store.get(f"{GC_PREFIX}/latest.json"))["run_id"]
    except NotFound:
        raise NotFound("no gc run has been recorded yet") from None
    return json.loads(store.get(f"{GC_PREFIX}/{run_id}/summary.json"))


# -- sweep ------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    deleted: int = 0
    deleted_bytes: int = 0
    rechecked_kept: int = 0
    errors: list[tuple[str, str]] = field(default_factory=list)
    by_collection: dict = field(default_factory=lambda: defaultdict(lambda: {"files": 0, "bytes": 0}))


def sweep(meta: Meta, store: Store, run_id: str, refs: References | None = None,
          batch: int = SWEEP_BATCH) -> SweepResult:
    """Delete the report's candidates in batches, each re-checked right before deleting
    against references refreshed from etcd. Idempotent: already-gone files are fine.

    The candidates were unreferenced at the etcd revision the mark read its references
    at, so without `refs` the sweep starts from that revision and only applies what
    changed since (new or updated segment records, any snapshot change), batch by batch."""
    candidates = read_report(store, run_id)
    if refs is None:
        summary = json.loads(store.get(f"{GC_PREFIX}/{run_id}/summary.json"))
        rev = summary.get("refs_revision")
        refs = References(revision=rev) if rev else load_references(meta, store)
    out = SweepResult()
    for i in range(0, len(candidates), batch):
        chunk = candidates[i:i + batch]
        refs = refresh_references(meta, store, refs)
        doomed = []
        for c in chunk:
            coll = c["collection_id"]
            if (c["path"] in refs.files or refs.paused_all or coll in refs.paused or coll in refs.blocked):
                out.rechecked_kept += 1
            else:
                doomed.append(c)
        errors = {e.key: e.error for e in store.delete_many([c["path"] for c in doomed])}
        for c in doomed:
            if c["path"] in errors:
                out.errors.append((c["path"], errors[c["path"]]))
                continue
            out.deleted += 1
            out.deleted_bytes += c["size"]
            b = out.by_collection[c["collection_id"]]
            b["files"] += 1
            b["bytes"] += c["size"]
    try:
        summary = json.loads(store.get(f"{GC_PREFIX}/{run_id}/summary.json"))
        summary["swept"] = {"deleted": out.deleted, "deleted_bytes": out.deleted_bytes,
                            "rechecked_kept": out.rechecked_kept, "errors": out.errors[:100],
                            "by_collection": {str(k): v for k, v in out.by_collection.items()}}
        store.put(f"{GC_PREFIX}/{run_id}/summary.json", json.dumps(summary).encode())
    except NotFound:
        pass
    return out


# -- dropped segments and records ----------------------------------------------------------------
def reclaim_dropped(meta: Meta, store: Store, opts: GCOptions, now: float | None = None,
                    refs: References | None = None) -> dict:
    """Files of segments Dropped longer than drop_tolerance, then their records; never
    a segment (or file) a snapshot references, never a blocked or paused collection."""
    opts.check()
    now = time.time() if now is None else now
    refs = refs or load_references(meta, store)
    reclaimed, files, nbytes, kept = 0, 0, 0, 0
    for seg in refs.segments:
        if seg.state != DROPPED or seg.dropped_at is None or seg.dropped_at + opts.drop_tolerance > now:
            continue
        c = seg.collection_id
        if opts.collection_id is not None and c != opts.collection_id:
            continue
        if (c, seg.segment_id) in refs.snapshot_segments or c in refs.blocked or refs.paused_all or c in refs.paused:
            kept += 1
            continue
        if opts.dry_run:
            reclaimed += 1
            continue
        seg_files = list(layout.segment_files(seg))
        keys = [f.key for f in seg_files if f.key not in refs.snapshot_files]
        errors = store.delete_many(keys)
        if errors:
            raise GCError(f"could not delete files of dropped segment {seg.segment_id}: {errors[0].key}: "
                          f"{errors[0].error}")
        kv = meta.kv.get(meta.segments.key(seg))
        if kv is not None:
            try:
                meta.kv.txn([unchanged(kv)], [Delete(kv.key)])
            except Conflict:
                continue  # changed since: judged again next run
        reclaimed += 1
        files += len(keys)
        nbytes += sum(f.size for f in seg_files if f.key not in refs.snapshot_files)
    return {"segments": reclaimed, "files": files, "bytes": nbytes, "kept_referenced_or_skipped": kept}


def clean_records(meta: Meta, store: Store, opts: GCOptions, now: float | None = None) -> dict:
    """Stale PENDING / unfinished DELETING / expired snapshots, expired copy jobs, and
    Dropped collections with nothing left."""
    now = time.time() if now is None else now
    out = defaultdict(int)
    for rec in list(meta.snapshots.list(opts.collection_id)):
        if rec.state == PENDING and rec.created_at + opts.snapshot_pending_timeout < now:
            snapshot.remove_files_and_record(meta, store, rec)
            out["stale_pending_snapshots"] += 1
        elif rec.state == DELETING:
            snapshot.remove_files_and_record(meta, store, rec)
            out["deleting_snapshots_finished"] += 1
        elif rec.state == COMMITTED and rec.expires_at is not None and rec.expires_at < now and not rec.pins:
            snapshot.drop_by_id(meta, store, rec.collection_id, rec.name)
            out["expired_snapshots"] += 1
    out["copy_jobs_removed"] = len(copyjob.cleanup_expired(meta, opts.copy_job_retention, now=now))
    for coll in list(meta.catalog.list(include_dropped=True)):
        if coll.state != "Dropped" or (opts.collection_id is not None and coll.collection_id != opts.collection_id):
            continue
        if meta.kv.count(meta.keys.segments_prefix(coll.collection_id)) or \
                meta.kv.count(meta.keys.snapshots_prefix(coll.collection_id)):
            continue
        kv = meta.kv.get(meta.keys.collection(coll.collection_id))
        if kv is not None:
            meta.kv.txn([unchanged(kv)], [Delete(kv.key)])
            out["dropped_collections_removed"] += 1
    return dict(out)


def run(meta: Meta, store: Store, opts: GCOptions, run_id: str | None = None) -> dict:
    """The whole GC, inline: mark, then (unless dry run) sweep, dropped segments, records."""
    opts.check()
    refs = load_references(meta, store)
    m = mark(meta, store, opts, run_id=run_id, refs=refs)
    result = {"mark": m.summary(), "dry_run": opts.dry_run}
    if opts.dry_run:
        result["dropped"] = reclaim_dropped(meta, store, opts, refs=refs)
        return result
    s = sweep(meta, store, m.run_id, refs=refs)
    result["sweep"] = {"deleted": s.deleted, "deleted_bytes": s.deleted_bytes,
                       "rechecked_kept": s.rechecked_kept, "errors": s.errors[:20]}
    result["dropped"] = reclaim_dropped(meta, store, opts, refs=load_references(meta, store))
    result["records"] = clean_records(meta, store, opts)
    return result


def format_summary(result: dict) -> str:
    m = result["mark"]
    lines = [f"gc run {m['run_id']}{' (dry run)' if result.get('dry_run') else ''}: listed {m['listed']} objects, "
             f"{m['candidates']} orphan candidates ({m['candidate_bytes']} bytes), kept {m['kept']}"]
    for k, v in sorted(m["by_collection_reason"].items()):
        coll, reason = k.split("/")
        lines.append(f"  collection {coll if coll != '-1' else '?'}: {reason}: {v['files']} files, {v['bytes']} bytes")
    if "sweep" in result:
        s = result["sweep"]
        lines.append(f"swept: {s['deleted']} files, {s['deleted_bytes']} bytes deleted; "
                     f"{s['rechecked_kept']} kept by the re-check; {len(s['errors'])} errors")
    d = result.get("dropped")
    if d:
        lines.append(f"dropped segments: {d['segments']} {'would be ' if result.get('dry_run') else ''}reclaimed "
                     f"({d['files']} files, {d['bytes']} bytes), {d['kept_referenced_or_skipped']} kept")
    if result.get("records"):
        lines.append("records: " + ", ".join(f"{k} {v}" for k, v in sorted(result["records"].items())))
    return "\n".join(lines)
