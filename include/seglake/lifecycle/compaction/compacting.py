"""A whole compaction of one collection: plan -> run every unit (inline here, or on
Spark executors through `run_partition`) -> a summary, recorded in etcd
(`{root}/compaction/runs/{collection}`: the last run, for the CLI, the page and a DAG)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from seglake import runners
from seglake.errors import Conflict, NotFound
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.codec import decode, encode
from seglake.meta.kv import Put, absent, exists
from seglake.lifecycle.compaction.planning import Plan, plan
from seglake.lifecycle.compaction.policy import Policy, Unit
from seglake.lifecycle.compaction.running import ALREADY, COMMITTED, LOST, UnitResult, run_unit


@dataclass
class Summary:
    plan: Plan
    results: list[UnitResult] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0
    engine: str = "inline"

    def counts(self) -> dict:
        by = {s: sum(1 for r in self.results if r.status == s) for s in (COMMITTED, ALREADY, LOST)}
        done = [r for r in self.results if r.status in (COMMITTED, ALREADY)]
        return {**by, "segments_in": sum(r.inputs for r in done), "segments_out": sum(r.outputs for r in done),
                "rows_dropped": sum(r.rows_dropped for r in done), "bytes_in": sum(r.bytes_in for r in done),
                "bytes_out": sum(r.bytes_out for r in done)}

    def to_json(self) -> dict:
        return {"plan": self.plan.to_json(), "gain": self.plan.gain(), "dry_run": self.dry_run,
                "engine": self.engine, "results": [r.to_json() for r in self.results], "counts": self.counts(),
                "seconds": round(self.seconds, 3)}


def run_units(meta, store, units: list[Unit], *, workers: int = 1, now: float | None = None,
              sources_revision: int | None = None) -> list[UnitResult]:
    """Run units (they never share an input) through THE inline pool, results in unit order;
    their delete sources at one revision (the plan's, else now), read once."""
    rev = meta.kv.revision() if sources_revision is None else sources_revision
    cache: dict = {}
    return list(runners.run_inline(lambda u: run_unit(meta, store, u, now=now, sources_revision=rev, cache=cache),
                                   units, workers=workers))


def run_partition(units: Iterable[dict], settings_env: dict, sources_revision: int | None = None) -> Iterator[dict]:
    """Executor side of the Spark engine: the units (as JSON) of one partition, each run
    to its end (run_unit: its own guarded commit), results as JSON; delete sources at
    `sources_revision` (the driver's plan revision), read once per partition. Settings
    come from the environment dict the driver handed over, never argv."""
    from seglake.meta import Meta
    from seglake.storage import open_store

    settings = runners.worker_settings(settings_env)
    meta, store = Meta.from_settings(settings), open_store(settings)
    try:
        cache: dict = {}
        for u in units:
            yield run_unit(meta, store, Unit.from_json(u), sources_revision=sources_revision, cache=cache).to_json()
    finally:
        meta.close()


def compact(meta, store, collection: str, policy: Policy, *, db: str = DEFAULT_DB, dry_run: bool = False,
            workers: int = 1, now: float | None = None, trigger: str = "manual",
            collection_id: int | None = None) -> Summary:
    """Plan the collection's compaction and (unless dry_run) run every unit inline.
    `collection_id`: the collection a target was chosen for (planning.plan)."""
    started = time.monotonic()
    p = plan(meta, store, collection, policy, db=db, now=now, collection_id=collection_id)
    out = Summary(p, dry_run=dry_run)
    if not dry_run and p.units:
        out.results = run_units(meta, store, p.units, workers=workers, now=now, sources_revision=p.revision)
    out.seconds = time.monotonic() - started
    if not dry_run:
        record(meta, out, trigger)
    return out


def record(meta, summary: Summary, trigger: str = "manual") -> None:
    """The run's summary as the collection's last compaction run (unit results capped),
    and a line of its history (`{root}/compaction/history/{collection}/{ms}`: the newest
    HISTORY_KEEP runs that changed or tried something are kept)."""
    doc = summary.to_json()
    doc["results"] = doc["results"][:200]
    doc["plan"]["units"] = doc["plan"]["units"][:200]
    doc["recorded_at"] = time.time()
    doc["trigger"] = trigger
    cid = summary.plan.collection_id
    ops = [Put(meta.keys.compaction_run(cid), encode(doc))]
    line = None
    if summary.plan.units:
        c = summary.counts()
        try:
            db = meta.catalog.get(cid).db
        except NotFound:
            return          # purged while it ran: nothing would ever remove its records
        line = {"collection_id": cid, "collection": summary.plan.collection, "db": db,
                "recorded_at": doc["recorded_at"],
                "seconds": doc["seconds"], "engine": summary.engine, "trigger": trigger,
                "segments_before": summary.plan.segments,
                "segments_after": summary.plan.segments - c["segments_in"] + c["segments_out"],
                "units": len(summary.plan.units), "committed": c["committed"] + c["already_committed"],
                "lost": c["lost"], "rows_dropped": c["rows_dropped"], "bytes_in": c["bytes_in"],
                "bytes_out": c["bytes_out"], "bytes_reclaimed": max(0, c["bytes_in"] - c["bytes_out"])}
    for _ in range(HISTORY_ATTEMPTS):
        compares, extra = [exists(meta.keys.collection(cid))], []
        if line is not None:
            # the line's key: after every line already there (a clock stepped back would
            # else sort the new line first, and the prune below removed it at once) and
            # never another run's (two runs in one millisecond overwrote each other)
            key = meta.keys.compaction_history(cid, _history_millis(meta, cid, doc["recorded_at"]))
            compares.append(absent(key))
            extra = [Put(key, encode(line))]
        try:    # only while the collection's record exists: GC's purge removes these with it, in one txn
            meta.kv.txn(compares, ops + extra, f"record the compaction run of collection {cid}")
            break
        except Conflict:
            if line is None or not exists_now(meta, meta.keys.collection(cid)):
                return      # purged meanwhile: a record written now would outlive it for ever
    else:
        return
    if summary.plan.units:
        old = list(meta.kv.range(meta.keys.compaction_history_prefix(cid), keys_only=True))
        for kv in old[:max(0, len(old) - HISTORY_KEEP)]:
            meta.kv.delete(kv.key)


HISTORY_KEEP = 100          # history lines kept per collection
HISTORY_ATTEMPTS = 5        # a history line's key taken meanwhile by another run: the next one


def _history_millis(meta, collection_id: int, recorded_at: float) -> int:
    """The key of a new history line: its time in ms, or past the newest line's key."""
    newest = 0
    for kv in meta.kv.range(meta.keys.compaction_history_prefix(collection_id), keys_only=True):
        newest = max(newest, _key_millis(kv.key))
    return max(int(recorded_at * 1000), newest + 1)


def _key_millis(key: str) -> int:
    try:
        return int(key.rsplit("/", 1)[-1])
    except ValueError:
        return 0


def exists_now(meta, key: str) -> bool:
    return meta.kv.get(key) is not None
HISTORY_COLUMNS = ("time", "collection", "engine", "trigger", "segments", "rows_dropped", "bytes_reclaimed",
                   "units", "lost", "seconds")


def history(meta, collection_id: int | None = None, last: int = 20) -> list[dict]:
    """The last `last` runs (newest first), of one collection or of all."""
    runs = [(_key_millis(kv.key), decode(kv.value, kv.key))
            for kv in meta.kv.range(meta.keys.compaction_history_prefix(collection_id))]
    # by key: a collection's lines are keyed in the order they were recorded (_history_millis),
    # whatever a host's clock said
    return [r for _, r in sorted(runs, key=lambda x: (x[0], x[1]["recorded_at"]), reverse=True)][:last]


def history_row(r: dict) -> dict:
    return {"time": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(r["recorded_at"])),
            "collection": r["collection"], "engine": r["engine"], "trigger": r["trigger"],
            "segments": f"{r['segments_before']} -> {r['segments_after']}", "rows_dropped": r["rows_dropped"],
            "bytes_reclaimed": r["bytes_reclaimed"], "units": r["units"], "lost": r["lost"],
            "seconds": r["seconds"]}


def last_run(meta, collection_id: int) -> dict | None:
    kv = meta.kv.get(meta.keys.compaction_run(collection_id))
    return None if kv is None else decode(kv.value, kv.key)
