"""Distributed GC mark: what Spark executors run for spark/jobs/gc_scan.py (no pyspark
here: plain functions over rows, testable without Spark).

    driver     tolerances checked; the mark's etcd revision R fixed; small state read at R:
               snapshot records, paused scopes, the WAL view; the segment key space cut
               into key ranges by counts at R (`segment_ranges`)
    executors  one key range of segment records at R per task -> reference rows
               (`segment_rows`); one snapshot's metadata per task, then ONE MANIFEST PER
               TASK -> reference rows (`snapshot_rows`, `manifest_rows`); the listing:
               the top level in one task (`walk_top`), then per top prefix (or per
               collection prefix of a scoped run) a probe and, when large, a delimiter walk
               that cuts it into units by child name: a level with few children (the
               collections under insert_log/) is walked one deeper, so every collection
               prefix gets units of its own (`plan_units`); units spread over the tasks
               (`list_unit_rows`)
    Spark      joins: path -> referenced / Dropped owner, owner -> reclaimable,
               segment -> collection; rows co-partitioned by segment
    executors  `decide` per row (the inline engine's judgement), one report part
               written per partition, counts returned (`judge_partition`)
    driver     counts merged into summary.json; it never holds a per-object row

Fail closed: every executor function raises on anything it cannot read completely
(etcd error, compacted revision, unreadable COMMITTED manifest, symlink in the store),
which fails the Spark job before any summary exists (the sweep needs one).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from seglake import runners
from seglake import faults
from seglake.lifecycle import snapshot
from seglake.lifecycle.gc.listing import (SPLIT_AT, UNITS_PER_PREFIX, WALK_DEPTH, cut_prefix, list_by_units,
                                          list_unit, walk_levels)
from seglake.lifecycle.gc.judgement import decide, refuse_symlink, report_row
from seglake.lifecycle.gc.marking import MarkCounts
from seglake.lifecycle.gc.refs import References
from seglake.lifecycle.gc.report import write_part
from seglake.lifecycle.gc.verdicts import CANDIDATE_REASONS
from seglake.lifecycle.gc.walview import WalView
from seglake.meta.codec import decode_struct
from seglake.meta.segments import DROPPED, Segment
from seglake.storage import layout
from seglake.storage.base import SYMLINK, ObjectInfo

SEGMENT_RANGE_KEYS = 20_000   # segment records per reference task

# reference row: (tag, path, collection, partition, segment, etcd key, flag)
REF_SCHEMA = "tag string, path string, c long, p long, s long, key string, flag boolean"
LIVE, DROP, SEGCOLL, DSEG, SNAPFILE, SNAPSEG = "live", "drop", "segcoll", "dseg", "snapfile", "snapseg"
# listed object row: (path, size, mtime, collection of the key, segment of the key, segment to look up)
LIST_SCHEMA = "path string, size long, mtime double, p_coll long, p_seg long, lookup_seg long"


@dataclass
class MarkPlan:
    """What every mark task needs, small enough for a task closure."""
    run_id: str
    started: float
    cutoff: float
    revision: int
    collection_id: int | None
    drop_tolerance: float
    scope: References                 # blocked / paused collections, snapshot ids (no files)
    wal: WalView
    settings_env: dict = field(default_factory=dict)

    def settings(self):
        return runners.worker_settings(self.settings_env)

    def store(self):
        """One store per worker process and settings (an S3 client is costly to build)."""
        from seglake.storage import open_store
        key = json.dumps(self.settings_env, sort_keys=True)
        if key not in _STORES:
            _STORES[key] = open_store(self.settings())
        return _STORES[key]


_STORES: dict = {}


def _prefix_end(prefix: str) -> str:
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def segment_ranges(meta, revision: int, target: int = SEGMENT_RANGE_KEYS, depth: int = 24) -> list[tuple[str, str]]:
    """Contiguous key ranges [lo, hi) that together cover the whole segment-record prefix
    exactly once, each holding at most ~`target` records at `revision` (empty ones left
    out: at a fixed revision they stay empty). A range is cut at the next character
    ('/', '0'..'9', the rest), so one huge collection is cut by partition and segment id."""
    prefix = meta.keys.segments_prefix()
    out: list[tuple[str, str]] = []

    def cut(lo: str, hi: str, p: str | None, d: int) -> None:
        n = meta.kv.count(lo, end=hi, revision=revision)
        if n == 0:
            return
        if n <= target or p is None or d == 0:
            out.append((lo, hi))
            return
        pieces = [(p, p + "/", None), (p + "/", p + "0", p + "/")]
        pieces += [(p + c, p + chr(ord(c) + 1), p + c) for c in "0123456789"]
        pieces.append((p + ":", hi, None))
        for a, b, q in pieces:
            cut(a, b, q, d - 1)

    cut(prefix, _prefix_end(prefix), prefix, depth)
    return out


def segment_rows(plan: MarkPlan, lo: str, hi: str) -> Iterator[tuple]:
    """Reference rows of the segment records in [lo, hi) at the mark's revision: each
    file of a live record (LIVE) or of a Dropped one (DROP, with the record's key: the
    greatest key owns a file, as in the inline engine), each segment's collection
    (SEGCOLL) and each Dropped segment past drop_tolerance in scope (DSEG, flag: not
    skipped and every file parses; a snapshot reference is joined in later)."""
    from seglake.meta import Meta

    faults.point("gc.mark.segments")
    with Meta.from_settings(plan.settings()) as meta:
        for kv in meta.kv.range(lo, end=hi, revision=plan.revision):
            seg = decode_struct(kv.value, Segment, kv.key)
            c, p, s = seg.collection_id, seg.partition_id, seg.segment_id
            yield (SEGCOLL, None, c, p, s, kv.key, None)
            files = [f.key for f in layout.segment_files(seg)]
            tag = DROP if seg.state == DROPPED else LIVE
            for k in files:
                yield (tag, k, c, p, s, kv.key, None)
            if seg.state != DROPPED or seg.dropped_at is None or not math.isfinite(seg.dropped_at) \
                    or seg.dropped_at + plan.drop_tolerance > plan.started:
                continue
            if plan.collection_id is not None and c != plan.collection_id:
                continue
            ok = not plan.scope.skipped(c) and all(layout.parse_key(k) is not None for k in files)
            yield (DSEG, None, c, p, s, kv.key, ok)


def _record(raw: tuple[str, bytes]):
    from seglake.meta.snapshots import SnapshotRecord
    return decode_struct(raw[1], SnapshotRecord, raw[0])


def snapshot_rows(plan: MarkPlan, raw: tuple[str, bytes]) -> Iterator[tuple]:
    """One snapshot record (key, value at the mark's revision): its own files as
    SNAPFILE rows and ("manifest", (raw record, manifest entry)) work items."""
    faults.point("gc.mark.snapshot")
    rec = _record(raw)
    own, manifests = snapshot.own_refs(plan.store(), rec)
    for k in own:
        yield ("ref", (SNAPFILE, k, None, None, None, None, None))
    for m in manifests:
        yield ("manifest", (raw, m))


def manifest_rows(plan: MarkPlan, item: tuple) -> Iterator[tuple]:
    """One manifest: every file it references (SNAPFILE) and segment (SNAPSEG)."""
    faults.point("gc.mark.manifest")
    raw, m = item
    files, segs = snapshot.manifest_refs(plan.store(), _record(raw), m)
    for k in files:
        yield (SNAPFILE, k, None, None, None, None, None)
    for c, s in segs:
        yield (SNAPSEG, None, c, None, s, None, None)


# -- listing ------------------------------------------------------------------------------------
def object_row(o: ObjectInfo) -> tuple:
    """A listed object as a row. A key that is not valid UTF-8 travels in its display
    form (which never parses, so it stays unrecognised)."""
    key = layout.display_key(o.key)
    p = layout.parse_key(key)
    lookup = p.segment_id if p is not None and p.snapshot_id is None and p.collection_id is None else None
    return (key, o.size, o.mtime, None if p is None else p.collection_id,
            None if p is None or p.snapshot_id is not None else p.segment_id, lookup)


def _as_rows(items: Iterable[tuple]) -> Iterator[tuple]:
    for kind, x in items:
        yield (kind, object_row(x) if kind == "obj" else x)


def walk_top(plan: MarkPlan, prefixes: list[str], levels: int) -> Iterator[tuple]:
    """walk_levels on an executor (one task), objects as rows."""
    return _as_rows(walk_levels(plan.store(), prefixes, levels))


def plan_units(plan: MarkPlan, prefix: str, split_at: int = SPLIT_AT, want: int = UNITS_PER_PREFIX,
               depth: int = WALK_DEPTH) -> Iterator[tuple]:
    """cut_prefix on an executor, objects as rows."""
    return _as_rows(cut_prefix(plan.store(), prefix, split_at, want, depth))


def list_unit_rows(plan: MarkPlan, unit: tuple[str, str | None]) -> Iterator[tuple]:
    for o in list_unit(plan.store(), unit):
        yield object_row(o)


def listing_rows(plan: MarkPlan, prefixes: list[str], levels: int, split_at: int = SPLIT_AT,
                 want: int = UNITS_PER_PREFIX) -> Iterator[tuple]:
    """The listing the Spark mark distributes, in the same units, run in one process
    (listing.list_by_units): every object row once. For tests and tools that must see
    exactly what the executors list."""
    for o in list_by_units(plan.store(), prefixes, levels, 1, split_at, want):
        yield object_row(o)


# -- judging ------------------------------------------------------------------------------------
def judge_partition(plan: MarkPlan, index: int, rows: Iterable) -> Iterator[str]:
    """Judge one partition of joined rows with `decide`, write its report part, and
    return its counts (one JSON string). Rows: kind 'o' (a listed object with what the
    references say about it) or 'd' (a reclaimable Dropped segment of this partition)."""
    store = plan.store()
    counts = MarkCounts()
    candidates, dropped = [], []
    for r in rows:
        if r["kind"] == "d":
            dropped.append((r["own_c"], r["d_p"], r["own_s"]))
            continue
        if r["size"] == SYMLINK:
            refuse_symlink(r["path"])
        owner = (r["own_c"], r["own_s"]) if r["own_c"] is not None else None
        seg_coll = r["seg_coll"]
        verdict = decide(r["path"], bool(r["referenced"]), owner, bool(r["own_reclaimable"]),
                            lambda _s: seg_coll, plan.scope, plan.collection_id, plan.wal)
        row = report_row(ObjectInfo(r["path"], r["size"], r["mtime"]), *verdict, plan.cutoff)
        counts.add(row)
        if row["reason"] in CANDIDATE_REASONS:
            candidates.append(row)
    dropped = sorted(set(dropped))
    counts.dropped_segments = len(dropped)
    part = write_part(store, plan.run_id, index, sorted(candidates, key=lambda c: c["path"]), dropped)
    yield json.dumps({"counts": counts.to_json(), "part": part})
