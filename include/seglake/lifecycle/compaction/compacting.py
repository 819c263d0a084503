"""A whole compaction of one collection: plan -> run every unit (inline here, or on
Spark executors through `run_partition`) -> a summary, recorded in etcd
(`{root}/compaction/runs/{collection}`: the last run, for the CLI, the page and a DAG)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from seglake import runners
from seglake.meta.catalog import DEFAULT_DB
from seglake.meta.codec import decode, encode
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
        return {**by, "segments_in": sum(r.inputs for r in done), "segments_out": len(done),
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
            workers: int = 1, now: float | None = None) -> Summary:
    """Plan the collection's compaction and (unless dry_run) run every unit inline."""
    started = time.monotonic()
    p = plan(meta, store, collection, policy, db=db, now=now)
    out = Summary(p, dry_run=dry_run)
    if not dry_run and p.units:
        out.results = run_units(meta, store, p.units, workers=workers, now=now, sources_revision=p.revision)
    out.seconds = time.monotonic() - started
    if not dry_run:
        record(meta, out)
    return out


def record(meta, summary: Summary) -> None:
    """The run's summary as the collection's last compaction run (unit results capped)."""
    doc = summary.to_json()
    doc["results"] = doc["results"][:200]
    doc["plan"]["units"] = doc["plan"]["units"][:200]
    doc["recorded_at"] = time.time()
    meta.kv.put(meta.keys.compaction_run(summary.plan.collection_id), encode(doc))


def last_run(meta, collection_id: int) -> dict | None:
    kv = meta.kv.get(meta.keys.compaction_run(collection_id))
    return None if kv is None else decode(kv.value, kv.key)
