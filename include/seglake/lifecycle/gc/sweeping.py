"""The sweep: delete a real mark's candidates part by part, each batch re-checked against
references refreshed from etcd right before deleting, each file only if it is still the
object the mark saw; then the records of the Dropped segments whose files are gone."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from seglake import runners
from seglake import faults
from seglake.errors import Conflict
from seglake.lifecycle.gc import walview
from seglake.lifecycle.gc.options import positive
from seglake.lifecycle.gc.refs import References, refresh_references
from seglake.lifecycle.gc.report import read_json, read_part, sweep_plan
from seglake.lifecycle.gc.verdicts import CANDIDATE_REASONS, DROPPED_SEGMENT, INTERNAL, SWEEP_BATCH, WAL_TRUNCATED
from seglake.meta import Meta
from seglake.meta.kv import Compare, Delete, exists
from seglake.storage import Store, layout
from seglake.storage.base import ObjectInfo


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
    mark_sweep_started(store, run_id)
    for part in parts:
        # what it deleted so far, after each batch: a sweep stopped part-way (run marked failed, worker
        # killed) is read as such, never as "not swept yet" (atk s20 F4)
        refs = sweep_part(meta, store, run_id, mark_rev, part, refs, out, batch,
                          on_batch=lambda: record_sweep(store, run_id, out, partial=True))
    record_sweep(store, run_id, out)
    return out


def mark_sweep_started(store: Store, run_id: str) -> None:
    """summary.json says a sweep started (before it deletes anything): until its record
    is written, the run's files may be partly deleted, which the page and the note say."""
    summary = read_json(store, run_id, "summary.json")
    summary.setdefault("sweep_started_at", time.time())
    store.put(layout.gc_run_file(run_id, "summary.json"), json.dumps(summary).encode())


def record_sweep(store: Store, run_id: str, out: SweepResult, partial: bool = False) -> None:
    """The sweep's counts in summary.json; `partial`: so far (the sweep goes on, or stopped)."""
    summary = read_json(store, run_id, "summary.json")
    summary["swept"] = {**out.summary(), "partial": True} if partial else out.summary()
    store.put(layout.gc_run_file(run_id, "summary.json"), json.dumps(summary).encode())


def sweep_part(meta: Meta, store: Store, run_id: str, mark_rev: int, part: list[int], refs: References,
               out: SweepResult, batch: int = SWEEP_BATCH, on_batch=None) -> References:
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
        for key in walview.not_truncatable(meta, [c["path"] for c in doomed.values() if c["reason"] == WAL_TRUNCATED],
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
        if on_batch is not None and res.deleted:
            on_batch()
    refs = refresh_references(meta, store, refs)
    _remove_dropped_records(meta, dropped, mark_rev, refs, unfinished, out)
    return refs


def sweep_parts_from_env(settings_env: dict, run_id: str, mark_rev: int, parts: Iterable[list[int]],
                         batch: int = SWEEP_BATCH) -> dict:
    """Spark executor side of the sweep: these parts, from the etcd changes since the
    mark's revision; returns the counts (JSON) for the driver to add up."""
    from seglake.storage import open_store

    settings = runners.worker_settings(settings_env)
    store = open_store(settings)
    out = SweepResult()
    with Meta.from_settings(settings) as meta:
        refs = References(revision=mark_rev)
        for part in parts:
            refs = sweep_part(meta, store, run_id, mark_rev, part, refs, out, batch)
    return out.to_json()


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
