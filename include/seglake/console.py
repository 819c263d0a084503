"""The operator's view of the store, read-only: what the seglake page in Airflow and the
`/metrics` endpoint show. Everything is computed from etcd and the store at call time;
nothing here writes.

`overview()` returns plain JSON-able dicts (collections, snapshots, copy jobs with rate
and ETA, the latest GC summary, GC pause state, WAL channels). Each section is read on
its own: a section that cannot be read carries an `error` string instead of hiding the
others, so a page always renders what it can.

WAL channels are read from `seglake.wal.client.wal_status` (one row per vchannel).
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from typing import Callable

from seglake.meta import codec
from seglake.errors import NotFound, SeglakeError
from seglake.meta import Meta
from seglake.meta.catalog import COLLECTION_TRANSITIONS
from seglake.meta.copyjobs import JOB_EXECUTING, JOB_PENDING, JOB_TERMINAL, JOB_TRANSITIONS, TASK_TRANSITIONS
from seglake.meta.segments import DROPPED, SEGMENT_TRANSITIONS
from seglake.meta.snapshots import SNAPSHOT_TRANSITIONS
from seglake.storage import Store, layout

COLLECTION_STATES = tuple(COLLECTION_TRANSITIONS)
SEGMENT_STATES = tuple(SEGMENT_TRANSITIONS)
SNAPSHOT_STATES = tuple(SNAPSHOT_TRANSITIONS)
JOB_STATES = tuple(JOB_TRANSITIONS)
TASK_STATES = tuple(TASK_TRANSITIONS)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _section(fn: Callable[[], object]) -> dict:
    """Run one read; a failure becomes {"error": ...} for that section only."""
    try:
        return {"rows": fn(), "error": None}
    except (SeglakeError, OSError, ValueError, KeyError) as e:
        return {"rows": [], "error": f"{type(e).__name__}: {e}"}


# -- collections ----------------------------------------------------------------------------
def collections(meta: Meta) -> list[dict]:
    """Every collection (dropped ones too) with its live segments, rows, bytes, files."""
    stats: dict[int, dict] = defaultdict(lambda: {"segments": 0, "rows": 0, "bytes": 0, "files": 0,
                                                  "by_state": Counter()})
    for seg in meta.segments.list():
        s = stats[seg.collection_id]
        s["by_state"][seg.state] += 1
        if seg.state != DROPPED:
            s["segments"] += 1
            s["rows"] += seg.num_rows
            s["bytes"] += seg.total_size()
            s["files"] += seg.file_count()
    out = []
    for c in meta.catalog.list(include_dropped=True):
        s = stats[c.collection_id]
        out.append({"collection_id": c.collection_id, "name": c.name, "db": c.db, "state": c.state,
                    "segments": s["segments"], "rows": s["rows"], "bytes": s["bytes"], "files": s["files"],
                    "segments_by_state": dict(s["by_state"]), "partitions": len(c.partitions),
                    "shards": c.shards, "channels": list(c.vchannels)})
    return sorted(out, key=lambda r: (r["db"], r["name"], r["collection_id"]))


# -- snapshots ------------------------------------------------------------------------------
SNAPSHOT_STALL_AFTER_S = 60.0   # a PENDING snapshot's writers beat every 10 s (snapshot HEARTBEAT_INTERVAL)


def snapshots(meta: Meta, now: float) -> list[dict]:
    out = []
    for r in meta.snapshots.list():
        ttl_left = _finite(r.expires_at - now) if r.expires_at is not None else None
        stalled = None   # a PENDING create nobody writes (its run stopped): said, not shown as running
        if r.state == "PENDING":
            idle = now - meta.snapshots.last_beat(r)[0]
            stalled = _finite(round(idle, 1)) if idle >= SNAPSHOT_STALL_AFTER_S else None
        out.append({"collection": r.collection_name, "collection_id": r.collection_id, "db": r.db,
                    "name": r.name, "state": r.state, "description": r.description,
                    "created_at": r.created_at, "age_s": max(0.0, now - r.created_at),
                    "expires_at": r.expires_at, "ttl_left_s": ttl_left, "pins": meta.snapshots.pinned_by(r, now),
                    "segments": r.segments, "rows": r.rows, "bytes": r.bytes, "files": r.files,
                    "error": r.error, "stalled_s": stalled, "gave_up": bool(r.failed)})
    return sorted(out, key=lambda r: (r["db"], r["collection"], r["name"]))


# -- copy jobs ------------------------------------------------------------------------------
STALL_AFTER_S = 30.0   # an Executing job whose done count has not moved for this long is "stalled"
RATE_WINDOW_S = 10.0   # the copy runners' window (copyjob.copying.RATE_WINDOW_S): a rate older than it is gone


def job_rate_eta(job: dict, now: float) -> tuple[float | None, float | None]:
    """(bytes per second, seconds left) of a copy job; None when unknown. While the job
    runs: the CURRENT rate (each running task's rate over its last RATE_WINDOW_S, 0 once
    its count has not moved for that long) and the ETA at that rate (None at 0: no
    promise while nothing moves). A finished job: its average from the first file copy
    to the end."""
    p = job["progress"]
    if job["state"] == JOB_EXECUTING:
        rate = sum(bps for at, bps in p.get("live") or () if at and now - at <= RATE_WINDOW_S
                   and math.isfinite(bps) and bps > 0)
        if rate <= 0:
            return (0.0 if p.get("live") else None), None
        return _finite(rate), _finite(max(0.0, (p["total_bytes"] - p["done_bytes"]) / rate))
    started = p.get("first_copy_at") or job.get("started_at")
    if not started:
        return None, None
    elapsed = (job.get("finished_at") or now) - started
    if elapsed <= 0 or p["copied_bytes"] <= 0:
        return None, None
    return _finite(p["copied_bytes"] / elapsed), None


def stalled_for(job: dict, now: float, after: float = STALL_AFTER_S,
                paced_until: float | None = None) -> float | None:
    """Seconds an Executing job's done count has not moved (since its last file, or the
    last attempt taking a task, or its start), once that is at least `after`; else None.
    `paced_until`: the job's own rate limit's clock (seglake.throttle, in etcd): a runner
    took budget up to then and waits its turn, as the limit says -- not a stall until
    that time has passed (a slow limit with big files waited minutes per file, shown as
    "stalled" with a *resume* button while its runner was alive). A Pending job (never
    planned: its run stopped between creating it and planning it) counts from its creation
    (it was "running" for ever, with no *resume*)."""
    if job["state"] not in (JOB_EXECUTING, JOB_PENDING):
        return None
    since = job["progress"].get("progress_at") or job.get("started_at") or job.get("created_at")
    if paced_until is not None and math.isfinite(paced_until):
        since = max(since or 0.0, paced_until)
    if not since:
        return None
    idle = now - since
    return _finite(round(idle, 1)) if idle >= after else None


def copy_jobs(meta: Meta, now: float) -> list[dict]:
    from seglake.lifecycle import copyjob

    out = []
    for job in meta.copyjobs.list():
        try:
            d = copyjob.describe_job(meta, job.job_id, now=now)
        except NotFound:  # removed between the list and the read (retention cleanup)
            continue
        p = d["progress"]
        rate, eta = job_rate_eta(d, now)

        def frac(done: int, total: int) -> float:
            return min(1.0, done / total) if total > 0 else 1.0

        paced = _paced_until(meta, job.job_id)
        stall = stalled_for(d, now, paced_until=paced)
        d["paced_until"] = paced if paced is not None and paced > now else None   # waiting its turn (rate limit)
        d.update(rate_bps=rate, eta_s=eta, terminal=d["state"] in JOB_TERMINAL, stalled_s=stall,
                 health=("finished" if d["state"] in JOB_TERMINAL else "stalled" if stall is not None
                         else "running"),
                 fractions={"segments": frac(p["copied_segments"], p["total_segments"]),
                            "files": frac(p["done_files"], p["total_files"]),
                            "bytes": frac(p["done_bytes"], p["total_bytes"])})
        out.append(d)
    return sorted(out, key=lambda d: -d["job_id"])


def _paced_until(meta: Meta, job_id: int) -> float | None:
    """The job's rate-limit clock (seglake.throttle: the time its budget is taken up to),
    or None (no limit, or unreadable)."""
    try:
        kv = meta.kv.get(meta.keys.copy_throttle(job_id))
        return None if kv is None else float(kv.value)
    except (SeglakeError, ValueError, TypeError):
        return None


def task_states(meta: Meta) -> Counter:
    """Copy tasks of every job, by state."""
    n: Counter = Counter()
    for job in meta.copyjobs.list():
        for t in meta.copyjobs.tasks(job.job_id):
            n[t.state] += 1
    return n


# -- gc -------------------------------------------------------------------------------------
def gc_latest(store: Store) -> dict | None:
    """The latest GC run's summary, flattened for display: totals, per (collection, reason)
    rows, what was swept. None when no run was recorded yet."""
    from seglake.lifecycle import gc

    try:
        s = gc.latest_summary(store)
    except NotFound:
        return None
    rows = []
    for key, v in sorted((s.get("by_collection_reason") or {}).items()):
        coll, _, reason = key.partition("/")
        rows.append({"collection_id": int(coll) if re.fullmatch(r"-?[0-9]+", coll, re.ASCII) else None,
                     "reason": reason or "?", "files": int(v.get("files", 0)), "bytes": int(v.get("bytes", 0))})
    swept = s.get("swept")
    origin = None   # the Airflow run that made it (gc DAG's prepare writes it; a CLI run has none)
    try:
        origin = codec.loads(store.get(layout.gc_run_file(str(s.get("run_id")), "airflow.json")))
    except (NotFound, ValueError):
        pass
    return {"run_id": s.get("run_id"), "started_at": s.get("started_at"), "dry_run": bool(s.get("dry_run")),
            "dag_id": (origin or {}).get("dag_id"), "dag_run_id": (origin or {}).get("run_id"),
            "listed": s.get("listed", 0), "candidates": s.get("candidates", 0),
            "candidate_bytes": s.get("candidate_bytes", 0), "kept": s.get("kept") or {},
            "rows": rows, "swept": swept if swept and not swept.get("partial") else None,
            # a sweep that started and did not record its end: files may be (partly) deleted
            "sweep_stopped": bool(s.get("sweep_started_at")) and (not swept or bool(swept.get("partial"))),
            "sweep_started_at": s.get("sweep_started_at"),
            **{k: (swept or {}).get(k, 0) for k in ("deleted", "deleted_bytes", "error_count")}}   # so far


def gc_pause(meta: Meta) -> dict:
    from seglake.lifecycle import gc

    glob, colls = gc.paused_scopes(meta)
    # and what a scheduled run would do (None: scheduled runs are refused)
    return {"all": glob, "collections": sorted(colls), "schedule": gc.get_schedule(meta)}


# -- WAL channels -------------------------------------------------------------------------------
def wal_channels(meta: Meta) -> list[dict]:
    """One row per vchannel: its pchannel's term, writer, last time tick (unix seconds),
    the vchannel's checkpoint tick and its lag behind the log (seconds; None before the
    flusher's first checkpoint), paused, and the transactions the last flusher run saw
    open on it."""
    from seglake.meta.alloc import physical_ms
    from seglake.wal.checkpoints import read_checkpoint
    from seglake.wal.client import wal_status

    rows = []
    for p in wal_status(meta):
        last_s = physical_ms(p["last_time_tick"]) / 1000 if p["last_time_tick"] else None
        for c in p["consumers"]:
            cp, _ = read_checkpoint(meta, c["vchannel"])
            rows.append({"vchannel": c["vchannel"], "pchannel": p["pchannel"], "term": p["term"],
                         "writer": p["writer"], "last_tick_ts": last_s,
                         "checkpoint_ts": None if cp is None else physical_ms(cp.time_tick) / 1000,
                         "lag_s": None if c["lag_ms"] is None else c["lag_ms"] / 1000, "paused": p["paused"],
                         # as the last flusher run saw them (txn ids open on this vchannel)
                         "open_txns": [t["txn_id"] for t in p.get("open_txns", ()) if t["vchannel"] == c["vchannel"]]})
    return rows


def compaction_runs(meta: Meta) -> list[dict]:
    """The last compaction run of each collection (newest first): segments before/after,
    rows dropped, bytes before/after, units committed and lost, engine, time."""
    from seglake.meta.codec import decode

    rows = []
    for kv in meta.kv.range(meta.keys.compaction_runs_prefix()):
        d = decode(kv.value, kv.key)
        c, plan = d.get("counts") or {}, d.get("plan") or {}
        rows.append({"collection_id": plan.get("collection_id"), "collection": plan.get("collection"),
                     "recorded_at": d.get("recorded_at"), "engine": d.get("engine"), "seconds": d.get("seconds"),
                     "units": len(plan.get("units") or ()), "committed": c.get("committed", 0),
                     "lost": c.get("lost", 0), "segments_in": c.get("segments_in", 0),
                     "segments_out": c.get("segments_out", 0), "rows_dropped": c.get("rows_dropped", 0),
                     "bytes_in": c.get("bytes_in", 0), "bytes_out": c.get("bytes_out", 0),
                     "skipped": plan.get("skipped")})
    return sorted(rows, key=lambda r: -(r["recorded_at"] or 0))


HISTORY_ON_PAGE = 20     # compaction runs the page lists


def compaction_history(meta: Meta, last: int = HISTORY_ON_PAGE) -> dict:
    """The last `last` compaction runs over every collection (newest first): segments
    before/after, rows dropped, bytes reclaimed, time, trigger; and the policies."""
    from seglake.lifecycle import compaction

    return {"runs": compaction.history(meta, last=last),
            "policies": [p for p in compaction.list_policies(meta) if "error" not in p]}


# -- backup: exports, the last verification of each bundle, pins, retention policies ------------
def export_health(e: dict, live_pins: set) -> dict:
    """A "running" export is alive while its pin is (the export renews it every lease / 4;
    a killed export renews nothing and its record stays "running" for ever): health
    running | stopped (with a note saying what to do) | finished."""
    if e.get("state") != "running":
        return {"health": "finished", "stopped_note": None}
    if e.get("pin_id") in live_pins:
        return {"health": "running", "stopped_note": None}
    return {"health": "stopped",
            "stopped_note": "no export is running: its worker stopped renewing its pin (killed or lost); "
                            "run snapshot_export again (files already in the target are not copied again)"}


def backup(meta: Meta, now: float) -> dict:
    from seglake.lifecycle import retention, snapshot
    from seglake.lifecycle.backup import export, verify

    checked = {(v["db"], v["collection"], v["bundle"]): v for v in verify.list_verifications(meta)}
    pins = snapshot.list_pins(meta, now=now)
    live = {p["pin_id"] for p in pins}
    exports = []
    for e in sorted(export.list_exports(meta), key=lambda e: -(e.get("finished_at") or e.get("started_at") or 0)):
        v = checked.get((e["db"], e["collection"], e["bundle"]))
        exports.append({**e, **export_health(e, live), "verified_ok": None if v is None else v["ok"],
                        "verified_at": None if v is None else v["checked_at"]})
    from seglake.lifecycle.backup import archive
    return {"exports": exports, "pins": pins,
            "policies": retention.list_policies(meta), "archive": archive.status(meta, now_ms=now * 1000),
            "pitr": _pitr_cost(meta, now), "replays": _replays(meta)}


def _replays(meta: Meta) -> list[dict]:
    from seglake.lifecycle.pitr.replaying import replays
    return replays(meta)


# -- Milvus: registered sources, their captures (with the last verification), restores into Milvus --
RESTORE_FIELDS = ("state", "bundle", "bundle_uid", "name", "created_at", "verified_at", "collection_id")


def milvus(meta: Meta, now: float) -> dict:
    """{sources, captures, pins, restores}: what seglake's etcd records of Milvus (no secret is
    ever recorded there: a source names its Airflow connection, a restore its address)."""
    from seglake.lifecycle.backup import verify
    from seglake.milvus import capture, sources

    checked = {(v["db"], v["collection"], v["bundle"]): v for v in verify.list_verifications(meta)}
    pins = {(p["db"], p["collection"], p["bundle"]): p for p in sources.list_pins(meta, now)}
    srcs = sources.list_sources(meta)
    by_ident = {(d.get("milvus_root"), d.get("bucket"), d.get("bucket_root"), d.get("db"), c): d.get("name")
                for d in srcs if "error" not in d for c in d.get("collections") or []}
    caps = []
    for c in capture.list_captures(meta):
        key = (c.get("db"), c.get("collection"), c.get("bundle"))
        v, pin = checked.get(key), pins.get(key)
        caps.append({"db": c.get("db"), "collection": c.get("collection"), "bundle": c.get("bundle"),
                     "source": by_ident.get((c.get("etcd_root"), c.get("bucket"), c.get("root_path"), c.get("db"),
                                             c.get("collection"))),
                     "scheduled": str(c.get("bundle", "")).startswith("sched_"),
                     "created_at": _finite(_num(c.get("created_at"))),
                     "finished_at": _finite(_num(c.get("finished_at"))),
                     "rows": _int(c.get("rows")), "bytes": _int(c.get("bytes")), "files": _int(c.get("files")),
                     "segments": _int(c.get("segments")), "copied_bytes": _int(c.get("copied_bytes")),
                     "copied_files": _int(c.get("copied_files")), "milvus_version": str(c.get("milvus_version") or ""),
                     "etcd_revision": _int(c.get("etcd_revision")), "target": str(c.get("target") or ""),
                     "verified_ok": None if v is None else bool(v.get("ok")),
                     "verified_at": None if v is None else _finite(_num(v.get("checked_at"))),
                     "pinned_until": None if pin is None else _finite(_num(pin.get("expires_at")))})
    restores = []
    for kv in meta.kv.range(meta.keys.milvus_restores_prefix()):
        try:
            rec = codec.loads(kv.value, kv.key)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        rep = rec.get("report") if isinstance(rec.get("report"), dict) else {}
        tgt = rec.get("target") if isinstance(rec.get("target"), dict) else {}
        rid = kv.key.rsplit("/", 1)[-1]
        # a restore not verified that no run holds (its claim is leased for RUN_LEASE_S and kept alive
        # while a run lasts): its run stopped -- it was shown "importing" for ever
        held = meta.kv.get(meta.keys.milvus_restore_run(rid)) is not None
        restores.append({"restore_id": rid, **{k: rec.get(k) for k in RESTORE_FIELDS},
                         "running": held, "stopped": rec.get("state") != "verified" and not held,
                         "address": str(tgt.get("address") or ""), "count": _int(rep.get("count")),
                         "visible_rows": _int(rep.get("visible_rows")), "ok": rep.get("ok") if rep else None,
                         **_restore_segments(meta, rid)})
    restores.sort(key=lambda r: -(_num(r.get("created_at")) or 0))
    return {"sources": [{k: v for k, v in d.items()} for d in srcs], "captures": caps, "restores": restores}


def _restore_segments(meta: Meta, rid: str) -> dict:
    """How far a restore into Milvus is: the segments of its import units (a unit's record
    says how many it imports; one where it does not) counted by the unit's state (staged,
    importing, imported, failed). An unreadable record counts one, in the total only."""
    states: Counter = Counter()
    try:
        items = list(meta.kv.range(meta.keys.milvus_restore_segments_prefix(rid)))
    except ValueError:   # a restore id the key layout refuses: no segment records to count
        items = []
    for item in items:
        try:
            rec = codec.loads(item.value, item.key)
        except ValueError:
            rec = None
        n = rec.get("segments") if isinstance(rec, dict) else None
        n = n if type(n) is int and 1 <= n <= 1_000_000 else 1
        states[rec.get("state") if isinstance(rec, dict) else None] += n
    return {"segments_total": sum(states.values()), "segments_imported": states["imported"],
            "segments_failed": states["failed"]}


def _num(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _pitr_cost(meta: Meta, now: float) -> dict:
    from seglake.lifecycle.pitr.window import cost
    return cost(meta, now)


# -- everything ---------------------------------------------------------------------------------
def overview(meta: Meta, store: Store, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    out = {"now": now,
           "collections": _section(lambda: collections(meta)),
           "snapshots": _section(lambda: snapshots(meta, now)),
           "jobs": _section(lambda: copy_jobs(meta, now)),
           "gc": _section(lambda: gc_latest(store)),
           "gc_pause": _section(lambda: gc_pause(meta)),
           "channels": _section(lambda: wal_channels(meta)),
           "compaction": _section(lambda: compaction_runs(meta)),
           "compaction_history": _section(lambda: compaction_history(meta)),
           "backup": _section(lambda: backup(meta, now)),
           "milvus": _section(lambda: milvus(meta, now))}
    names = {c["collection_id"]: c["name"] for c in out["collections"]["rows"]}
    for r in (out["gc"]["rows"] or {}).get("rows", []):
        r["collection"] = names.get(r["collection_id"])
    return out
