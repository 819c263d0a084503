"""Attack s25: STALE plans. A compaction plan made some steps ago (other writes, flushes,
compactions, GCs and snapshots since) is run late, its units in a random order or only
some of them, against a model of every acknowledged call. Policies at random, byte
limits and L0 folds (l0_age 0) included. After each step the visible rows equal the
model; a compaction never changes a kept row's row id or timestamp; a snapshot taken at
any point restores to the rows of that moment, however the source was compacted and
collected since."""

from __future__ import annotations

import os

import numpy as np
import pytest

from seglake.lifecycle import compaction, gc, snapshot
from seglake.lifecycle.flush import flush_pchannel

from compaction_helpers import Writer, exact, policy, rows, run_restore
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd

PARTS = ["_default", "p1", "p2"]


def _pol(rng):
    return policy(min_segment_rows=int(rng.choice([1, 4, 1000])), target_rows=int(rng.choice([1, 6, 10_000])),
                  delete_ratio=float(rng.choice([0.0, 0.25, 1.0])), l0_age=float(rng.choice([0.0, 0.0, 1e6])),
                  min_segment_bytes=int(rng.choice([0, 0, 10_000_000])),
                  target_bytes=int(rng.choice([1, 4096, 1 << 30])))


def _kept(before, after):
    """Every row visible after a compaction was visible before it, with the same row id and
    timestamp (a compaction drops hidden rows only: visible ones are all kept)."""
    assert after == before, ("extra", after - before, "missing", before - after)


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S25S_SEEDS", "1,2,3").split(",")])
def test_stale_plans_run_late_in_any_order(meta, store, settings, seed):
    rng = np.random.default_rng(seed)
    small = settings.replace(flush_seal_rows=int(rng.choice([3, 1000])))
    w = Writer(meta, store, small)
    w.create("st", PARTS, shards=int(rng.choice([1, 2])))
    coll = meta.catalog.get_by_name("st")
    pchs = sorted(pchannels(coll))
    stale: list = []            # plans waiting to be run late
    snaps: dict[str, object] = {}
    log = []

    def flush_all():
        for p in pchs:
            flush_pchannel(meta, store, p, small, flush_all=True)

    steps = int(os.environ.get("S25S_STEPS", "45"))
    for step in range(steps):
        op = str(rng.choice(["ins", "ins", "ups", "del", "wide", "flush", "flush", "plan", "plan", "late", "late",
                             "compact", "gc", "snap"]))
        pks = sorted({int(x) for x in rng.integers(0, 14, size=int(rng.integers(1, 6)))})
        part = str(rng.choice(PARTS))
        log.append((step, op, pks, part))
        if op in ("ins", "ups"):
            w.insert("st", pks, part, float(step), upsert=op == "ups")
        elif op == "del":
            w.delete("st", pks, partition=part)
        elif op == "wide":
            w.delete("st", pks)
        elif op == "flush":
            flush_pchannel(meta, store, pchs[int(rng.integers(0, len(pchs)))], small,
                           flush_all=bool(rng.integers(0, 2)))
        elif op == "plan":
            p = compaction.plan(meta, store, "st", _pol(rng))
            stale.append(p)
        elif op == "late" and stale:
            p = stale.pop(int(rng.integers(0, len(stale))))
            units = list(p.units)
            rng.shuffle(units)
            units = units[:int(rng.integers(0, len(units) + 1))] if units else units
            before = exact(meta, store, "st")
            results = compaction.run_units(meta, store, units, sources_revision=p.revision)
            assert all(r.status in (compaction.COMMITTED, compaction.ALREADY, compaction.LOST) for r in results)
            _kept(before, exact(meta, store, "st"))
        elif op == "compact":
            before = exact(meta, store, "st")
            compaction.compact(meta, store, "st", _pol(rng))
            _kept(before, exact(meta, store, "st"))
        elif op == "gc":
            gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                           collection_id=coll.collection_id))
        elif op == "snap":
            flush_all()
            name = f"s{step}"
            snapshot.create(meta, store, "st", name)
            snaps[name] = w.model.visible()
        if op not in ("late", "compact", "gc", "snap") and rng.random() < 0.6:
            continue            # unflushed rows stay in the WAL for a while (plans see them later)
        flush_all()             # unflushed rows are invisible until flushed: judge after a full flush
        got, want = rows(meta, store, "st"), w.model.visible()
        assert got == want, (seed, step, "extra", got - want, "missing", want - got, log[-12:])
    # what is left of the stale plans, then restores of every snapshot
    flush_all()
    for p in stale:
        before = exact(meta, store, "st")
        compaction.run_units(meta, store, p.units, sources_revision=p.revision)
        _kept(before, exact(meta, store, "st"))
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    assert rows(meta, store, "st") == w.model.visible()
    for i, (name, want) in enumerate(sorted(snaps.items())[:3]):
        run_restore(meta, store, "st", name, f"r{i}")
        assert rows(meta, store, f"r{i}") == want, (seed, name)
