"""Prometheus text exposition of the store's state, computed from etcd and the store at
scrape time (Milvus-style gauges by state). Pure over Meta/Store: the Airflow plugin only
serves `render()`.

Every state of every state machine is emitted, zero included, so a series never vanishes
between scrapes; label values are escaped; every value is finite. When a source cannot be
read, its gauges are left out and `seglake_scrape_error{source=...}` is 1.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Callable, Iterable

from seglake import console
from seglake.errors import SeglakeError
from seglake.meta import Meta
from seglake.storage import Store

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"metric value is not finite: {v}")
    return str(int(v)) if v.is_integer() and abs(v) < 2 ** 53 else repr(v)


class Exposition:
    """Collects metric families and renders them in the text format (version 0.0.4)."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def family(self, name: str, help_: str, samples: Iterable[tuple[dict, float]], kind: str = "gauge") -> None:
        self._lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        for labels, value in samples:
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            self._lines.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


def _by_state(counts: Counter, states: Iterable[str]) -> list[tuple[dict, float]]:
    """One sample per known state (zeros included), plus any unexpected state seen."""
    known = list(states)
    return [({"state": s}, counts.get(s, 0)) for s in known + sorted(set(counts) - set(known))]


def render(meta: Meta, store: Store, now: float | None = None) -> str:
    now = time.time() if now is None else now
    out = Exposition()
    errors: dict[str, int] = {}

    def read(source: str, fn: Callable[[], None]) -> None:
        try:
            fn()
            errors[source] = 0
        except (SeglakeError, OSError, ValueError, KeyError):
            errors[source] = 1

    def collections() -> None:
        rows = console.collections(meta)
        out.family("seglake_collections", "Collections by state.",
                   _by_state(Counter(r["state"] for r in rows), console.COLLECTION_STATES))
        segs: Counter = Counter()
        for r in rows:
            segs.update(r["segments_by_state"])
        out.family("seglake_segments", "Segment records by state.", _by_state(segs, console.SEGMENT_STATES))
        out.family("seglake_live_bytes", "Bytes referenced by live (not Dropped) segments.",
                   [({}, sum(r["bytes"] for r in rows))])
        live = [r for r in rows if r["state"] != "Dropped"]
        for key, help_ in (("rows", "Rows"), ("bytes", "Bytes"), ("segments", "Live segments")):
            out.family(f"seglake_collection_{key}", f"{help_} of each collection (not Dropped), from its segments.",
                       [({"collection": r["name"], "db": r["db"]}, r[key]) for r in live])

    def snapshots() -> None:
        rows = console.snapshots(meta, now)
        out.family("seglake_snapshots", "Snapshots by state.",
                   _by_state(Counter(r["state"] for r in rows), console.SNAPSHOT_STATES))
        out.family("seglake_snapshot_pins",
                   "What holds snapshots (copy jobs reading them, unexpired operator pins), summed over snapshots.",
                   [({}, sum(len(r["pins"]) for r in rows))])
        newest: dict[tuple[str, str], float] = {}
        # per LIVE collection, by id (as compaction below): a dropped collection's snapshots are never
        # reported under the name a new collection took since (it would hide that the new one has none)
        live = {c.collection_id: (c.db, c.name) for c in meta.catalog.list()}
        for r in rows:
            if r["state"] == "COMMITTED" and r.get("collection_id") in live:
                key = live[r["collection_id"]]
                newest[key] = min(newest.get(key, math.inf), r["age_s"])
        out.family("seglake_collection_last_snapshot_age_seconds",
                   "Age of the newest COMMITTED snapshot of each collection that has one.",
                   [({"collection": c, "db": db}, age) for (db, c), age in sorted(newest.items())])

    def jobs() -> None:
        job_counts, task_counts = Counter(j.state for j in meta.copyjobs.list()), console.task_states(meta)
        out.family("seglake_copy_jobs", "Copy-segment jobs by state.", _by_state(job_counts, console.JOB_STATES))
        out.family("seglake_copy_tasks", "Copy-segment tasks by state.", _by_state(task_counts, console.TASK_STATES))
        # every job still recorded (until copy_job_retention removes it): a series does not vanish the
        # moment its job ends, it shows the end (done = total, rate 0); the state is seglake_copy_job_finished
        recorded = console.copy_jobs(meta, now)
        running = [d for d in recorded if not d["terminal"]]
        label = [{"job_id": str(d["job_id"]), "collection": d["target_collection"], "db": d["db"]} for d in recorded]
        out.family("seglake_copy_job_done_bytes", "Bytes done of each recorded copy job.",
                   [(lb, d["progress"]["done_bytes"]) for lb, d in zip(label, recorded)])
        out.family("seglake_copy_job_total_bytes", "Bytes to copy of each recorded copy job.",
                   [(lb, d["progress"]["total_bytes"]) for lb, d in zip(label, recorded)])
        out.family("seglake_copy_job_finished", "1 once a recorded copy job is Completed or Failed.",
                   [(lb, int(d["terminal"])) for lb, d in zip(label, recorded)])
        label = [lb for lb, d in zip(label, recorded) if not d["terminal"]]
        out.family("seglake_copy_job_rate_bytes_per_second",
                   "Current copy rate of each unfinished copy job (its running tasks' last 10 s; 0: none "
                   "or stalled).",
                   [(lb, d["rate_bps"] or 0.0) for lb, d in zip(label, running)])
        out.family("seglake_copy_job_stalled_seconds",
                   "Seconds an unfinished copy job's done count has not moved, once stalled (>= 30); else 0.",
                   [(lb, d.get("stalled_s") or 0.0) for lb, d in zip(label, running)])
        per_coll: dict[tuple[str, str], list[float]] = {}
        for d in running:
            acc = per_coll.setdefault((d["db"], d["target_collection"]), [0.0, 0.0])
            acc[0] += d["progress"]["done_bytes"]
            acc[1] += d["progress"]["total_bytes"]
        out.family("seglake_collection_restore_fraction",
                   "Fraction of the bytes copied into each collection being restored (unfinished copy jobs).",
                   [({"collection": c, "db": db}, (a / b if b else 1.0)) for (db, c), (a, b) in sorted(per_coll.items())])

    def gc() -> None:
        g = console.gc_latest(store)
        ran = g is not None
        g = g or {}
        out.family("seglake_gc_last_run_timestamp_seconds", "Start of the latest GC run (0: none yet).",
                   [({}, g.get("started_at") or 0)])
        out.family("seglake_gc_last_run_dry_run", "1 when the latest GC run was a dry run.",
                   [({}, 1 if g.get("dry_run") else 0)])
        out.family("seglake_gc_candidate_files", "Orphan candidates of the latest GC run.",
                   [({}, g.get("candidates", 0))])
        out.family("seglake_gc_candidate_bytes", "Bytes of the orphan candidates of the latest GC run.",
                   [({}, g.get("candidate_bytes", 0))])
        out.family("seglake_gc_deleted_files", "Files the latest GC run deleted.", [({}, g.get("deleted", 0))])
        out.family("seglake_gc_deleted_bytes", "Bytes the latest GC run deleted.", [({}, g.get("deleted_bytes", 0))])
        out.family("seglake_gc_runs_recorded", "1 once a GC run has written a summary.", [({}, int(ran))])

    def gc_pause() -> None:
        p = console.gc_pause(meta)
        out.family("seglake_gc_paused", "1 when GC is paused for the scope.",
                   [({"scope": "all"}, int(p["all"]))]
                   + [({"scope": str(c)}, 1) for c in p["collections"]])

    def wal() -> None:
        rows = console.wal_channels(meta)
        out.family("seglake_wal_checkpoint_lag_seconds", "Checkpoint lag per virtual channel.",
                   [({"vchannel": r["vchannel"]}, r["lag_s"]) for r in rows
                    if isinstance(r.get("lag_s"), (int, float)) and math.isfinite(r["lag_s"])])

    def backups() -> None:
        from seglake.lifecycle.backup import export

        # per LIVE collection, by id (as the snapshot age): a dropped collection's exports are
        # never reported under the name a new collection took since (a record written before
        # exports carried the id is read by its name)
        live = {c.collection_id: (c.db, c.name) for c in meta.catalog.list()}
        newest: dict[tuple[str, str], float] = {}
        for e in export.list_exports(meta):
            at = e.get("finished_at") or e.get("started_at")
            if e.get("state") == "committed" and isinstance(at, (int, float)) and math.isfinite(at):
                key = live.get(e["collection_id"]) if "collection_id" in e else (str(e.get("db")), str(e.get("collection")))
                if key is not None:
                    newest[key] = min(newest.get(key, math.inf), max(0.0, now - at))
        out.family("seglake_collection_last_backup_age_seconds",
                   "Age of the newest committed export (backup bundle) of each collection that has one.",
                   [({"collection": c, "db": db}, age) for (db, c), age in sorted(newest.items())])

    def compaction() -> None:
        from seglake.lifecycle import compaction as comp

        # per LIVE collection, by id: a dropped collection's runs (until GC purges them
        # with it) are never reported under the name a new collection took since
        live = {c.collection_id: (c.db, c.name) for c in meta.catalog.list()}
        last: dict[tuple[str, str], dict] = {}
        for r in comp.history(meta, last=10**6):        # newest first: the first seen is the last run
            if r.get("collection_id") in live:
                last.setdefault(live[r["collection_id"]], r)
        items = [({"collection": c, "db": db}, r) for (db, c), r in sorted(last.items())]
        out.family("seglake_collection_last_compaction_age_seconds",
                   "Age of the last compaction run that compacted something, per collection.",
                   [(lab, max(0.0, now - r["recorded_at"])) for lab, r in items])
        for key, help_ in (("segments_before", "Flushed segments before"), ("segments_after", "Flushed segments after"),
                           ("rows_dropped", "Rows dropped (hidden by deletes)"),
                           ("bytes_reclaimed", "Bytes reclaimable after drop_tolerance (inputs minus outputs)"),
                           ("lost", "Units lost to a concurrent change"), ("seconds", "Seconds taken")):
            out.family(f"seglake_compaction_last_{key}", f"{help_}: the last compaction run of each collection.",
                       [(lab, float(r.get(key) or 0)) for lab, r in items])
        policies = [p for p in comp.list_policies(meta) if "error" not in p]
        out.family("seglake_compaction_policies", "Collections with a compaction policy, by scheduled or not.",
                   [({"scheduled": "true"}, sum(1 for p in policies if p["scheduled"])),
                    ({"scheduled": "false"}, sum(1 for p in policies if not p["scheduled"]))])

    def pitr() -> None:
        from seglake.lifecycle.backup import archive
        from seglake.lifecycle.pitr.window import cost

        c = cost(meta, now)
        out.family("seglake_pitr_window_log_bytes", "WAL bytes the point-in-time windows hold, per pchannel.",
                   [({"pchannel": p}, d["log_bytes"]) for p, d in sorted(c["pchannels"].items())])
        out.family("seglake_pitr_window_only_log_bytes",
                   "WAL bytes only the point-in-time windows keep (below every flusher checkpoint), per pchannel.",
                   [({"pchannel": p}, d["window_only_bytes"]) for p, d in sorted(c["pchannels"].items())])
        out.family("seglake_pitr_window_snapshot_bytes", "Bytes of the base snapshot each window holds.",
                   [({"collection": w["collection"], "db": w["db"]}, w["snapshot_bytes"]) for w in c["windows"]])
        from seglake.lifecycle.pitr.replaying import replays

        reps = [(({"collection": r["target"], "db": r["db"]}), r) for r in replays(meta, now)]
        out.family("seglake_replay_fraction", "Fraction of the planned log bytes each restore to a time (or undrop) "
                   "still replaying has read (its copy job's series end before the replay does).",
                   [(lb, (r["bytes"] / r["bytes_total"]) if r["bytes_total"] else 0.0) for lb, r in reps])
        out.family("seglake_replay_stalled_seconds", "Seconds a replay's vchannel has written no progress, once "
                   "stalled (>= 30: its driver died or its run was stopped); else 0.",
                   [(lb, r["stalled_s"] or 0.0) for lb, r in reps])
        st = archive.status(meta, now_ms=now * 1000)
        out.family("seglake_wal_archive_behind_fragments", "Committed WAL fragments not yet in the archive.",
                   [({"pchannel": a["pchannel"]}, a["behind"]) for a in st])
        out.family("seglake_wal_archive_lag_seconds",
                   "Age of the oldest WAL fragment not yet archived (the archive's recovery point); 0: up to date.",
                   [({"pchannel": a["pchannel"]}, a["lag_s"]) for a in st])

    for source, fn in (("collections", collections), ("snapshots", snapshots), ("copy_jobs", jobs),
                       ("gc", gc), ("gc_pause", gc_pause), ("wal", wal), ("backups", backups),
                       ("compaction", compaction), ("pitr", pitr)):
        read(source, fn)
    out.family("seglake_scrape_error", "1 when a source could not be read at this scrape.",
               [({"source": s}, v) for s, v in errors.items()])
    out.family("seglake_scrape_timestamp_seconds", "When this scrape was computed.", [({}, now)])
    return out.text()
