"""The mark, inline: list the store, judge every key, write the candidate report. What
a mark saw is kept as counts (MarkCounts), built row by row and merged across Spark
partitions alike."""

from __future__ import annotations

import bisect
import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

from seglake.lifecycle.gc.judgement import classify, reclaimable, scan_prefixes
from seglake.lifecycle.gc.listing import list_objects
from seglake.errors import ClockSkewError
from seglake.lifecycle.gc.options import GCError, GCOptions
from seglake.lifecycle.gc.refs import References, load_references
from seglake.lifecycle.gc.report import CANDIDATES, check_run_id, write_part
from seglake.lifecycle.gc.verdicts import (CANDIDATE_REASONS, DROPPED_SEGMENT, INTERNAL_FILE, REFERENCED, SAMPLE,
                                           UNKNOWN_SEGMENT, UNREADABLE_DIR, UNRECOGNISED)
from seglake.lifecycle.gc.walview import load_wal_view
from seglake.meta import Meta
from seglake.storage import Store, layout
from seglake.storage.clock import store_clock


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


def judging_time(meta: Meta, now=time.time, store: Store | None = None) -> float:
    """The time a mark judges every tolerance by (drop_tolerance, missing_tolerance): this
    host's clock, once the store's clock vouched for it (TSO.vouch: read, never moved) --
    a clock more than max_clock_skew (+10 s) fast while the store is in use is refused
    (ClockSkewError, nothing judged or deleted), as a writer on it would be. Unchecked, a
    GC host 2 h fast reclaimed compaction inputs Dropped a moment ago under a 1 h
    drop_tolerance (attack s23); snapshot TTLs and pins are on etcd leases for that host.
    An idle store leaves the TSO nothing to vouch with: then `store`'s own clock (a probe's
    mtime; an S3 server's LastModified) caps it -- the earlier of the two judges."""
    try:
        meta.tso.vouch()
    except ClockSkewError:
        raise
    except Exception as e:
        raise GCError(f"the store's clock (TSO) could not be read, nothing judged: {type(e).__name__}: {e}") from e
    if store is None:
        return now()
    try:   # an idle store leaves the TSO nothing to vouch with: the object store's own clock caps it
        return min(now(), store_clock(store))
    except Exception as e:
        raise GCError(f"the object store's clock could not be read (a probe under _locks/clock/), nothing "
                      f"judged: {type(e).__name__}: {e}") from e


def mark(meta: Meta, store: Store, opts: GCOptions, run_id: str | None = None,
         refs: References | None = None, now=time.time) -> MarkResult:
    """The mark phase, inline (a dry run is this alone): every candidate the sweep may
    delete, with the size and mtime it had, in a one-part report. The Spark engine
    (spark/jobs/gc_scan.py) judges with the same `decide` and writes the same report."""
    opts.check()
    run_id = check_run_id(new_run_id(now) if run_id is None else run_id)
    started = judging_time(meta, now, store)
    cutoff = started - opts.missing_tolerance  # fixed when listing STARTS
    refs = refs or load_references(meta, store)
    reclaim = reclaimable(refs, opts, started)
    wal = load_wal_view(meta, store, opts.collection_id)
    # cut into units as the Spark mark cuts it, listed by `list_threads` threads
    levels = 1 if opts.collection_id is None else 0   # insert_log/, index_files/, ... or one collection's
    objects = list_objects(store, scan_prefixes(opts.collection_id), levels, opts.list_threads)
    counts = MarkCounts(dropped_segments=len(reclaim.segments), dropped_kept=reclaim.kept)
    candidates = []
    for row in classify(objects, refs, cutoff, opts.collection_id, reclaim, wal):
        counts.add(row)
        if row["reason"] in CANDIDATE_REASONS:
            candidates.append(row)
    candidates.sort(key=lambda c: c["path"])   # the same report whatever order the units came in
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
