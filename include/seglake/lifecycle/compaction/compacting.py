"""A whole compaction of one collection, inline: plan -> run every unit -> summary."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from seglake import runners
from seglake.meta.catalog import DEFAULT_DB
from seglake.lifecycle.compaction.planning import Plan, plan
from seglake.lifecycle.compaction.policy import Policy, Unit
from seglake.lifecycle.compaction.running import ALREADY, COMMITTED, LOST, UnitResult, run_unit


@dataclass
class Summary:
    plan: Plan
    results: list[UnitResult] = field(default_factory=list)
    dry_run: bool = False
    seconds: float = 0.0

    def counts(self) -> dict:
        by = {s: sum(1 for r in self.results if r.status == s) for s in (COMMITTED, ALREADY, LOST)}
        done = [r for r in self.results if r.status in (COMMITTED, ALREADY)]
        return {**by, "segments_in": sum(r.inputs for r in done), "segments_out": len(done),
                "rows_dropped": sum(r.rows_dropped for r in done), "bytes_in": sum(r.bytes_in for r in done),
                "bytes_out": sum(r.bytes_out for r in done)}

    def to_json(self) -> dict:
        return {"plan": self.plan.to_json(), "gain": self.plan.gain(), "dry_run": self.dry_run,
                "results": [r.to_json() for r in self.results], "counts": self.counts(),
                "seconds": round(self.seconds, 3)}


def run_units(meta, store, units: list[Unit], *, workers: int = 1, now: float | None = None) -> list[UnitResult]:
    """Run units (they never share an input) through THE inline pool, results in unit order."""
    return list(runners.run_inline(lambda u: run_unit(meta, store, u, now=now), units, workers=workers))


def compact(meta, store, collection: str, policy: Policy, *, db: str = DEFAULT_DB, dry_run: bool = False,
            workers: int = 1, now: float | None = None) -> Summary:
    """Plan the collection's compaction and (unless dry_run) run every unit inline."""
    started = time.monotonic()
    p = plan(meta, store, collection, policy, db=db, now=now)
    out = Summary(p, dry_run=dry_run)
    if not dry_run and p.units:
        out.results = run_units(meta, store, p.units, workers=workers, now=now)
    out.seconds = time.monotonic() - started
    return out
