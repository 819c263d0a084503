"""THE judgement of one listed key (both engines): referenced, a candidate (orphan,
Dropped segment, truncatable WAL fragment) or why it is kept; only keys of seglake's own
layout can be candidates."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

from seglake.lifecycle.gc.options import GCError, GCOptions
from seglake.lifecycle.gc.refs import References
from seglake.lifecycle.gc.verdicts import (DROPPED_RECENT, DROPPED_SEGMENT, INTERNAL, INTERNAL_FILE, ORPHAN,
                                           OUT_OF_SCOPE, REFERENCED, UNKNOWN_SEGMENT, UNREADABLE_DIR,
                                           UNRECOGNISED, WAL_TRUNCATED, YOUNG)
from seglake.lifecycle.gc.walview import WalView
from seglake.meta.segments import DROPPED, Segment
from seglake.storage import layout
from seglake.storage.base import SYMLINK, ObjectInfo


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
