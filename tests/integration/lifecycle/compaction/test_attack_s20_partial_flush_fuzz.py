"""Attack s20: compaction (folds on) and GC with zero tolerances run INSIDE flusher runs
(between two segment commits of one run, via the flusher's after_commit hook), with seal
policies that flush only some partitions (the checkpoint held back below Flushed segments,
so every fresh flusher replays rows and deletes that are already Flushed and must skip them
by the high-water marks that compaction outputs carry). Invariants: every compaction keeps
the Flushed view row-exact; after a final full flush the rows == the Model."""

from __future__ import annotations

import os

import numpy as np
import pytest

from seglake.lifecycle import compaction, gc
from seglake.lifecycle.flush import flush_pchannel

from compaction_helpers import Writer, exact, policy, rows
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd


def _pol(rng):
    return policy(min_segment_rows=int(rng.choice([1, 3, 8, 1000])), target_rows=int(rng.choice([1, 5, 20, 10_000])),
                  delete_ratio=float(rng.choice([0.0, 0.3, 1.0])), l0_age=0.0)


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S20_SEEDS", "11,12,13").split(",")])
def test_partial_flushes_with_compaction_and_gc_between_flusher_commits(meta, store, settings, seed):
    rng = np.random.default_rng(seed)
    small = settings.replace(flush_seal_rows=int(rng.choice([3, 5, 8])))
    w = Writer(meta, store, small)
    parts = ["_default", "p1", "p2"]
    w.create("fz", parts, shards=int(rng.choice([1, 2])))
    coll = meta.catalog.get_by_name("fz")
    pchs = sorted(pchannels(coll))
    log = []

    def gc_all():
        gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True, copy_job_retention=0.0,
                                                       collection_id=coll.collection_id))

    def compact_now(tag):
        before = exact(meta, store, "fz")
        s = compaction.compact(meta, store, "fz", _pol(rng))
        log.append((tag, [(u.kind, u.segment_ids, [h[0] for h in u.hits]) for u in s.plan.units]))
        assert exact(meta, store, "fz") == before, (seed, tag, s.to_json())
        if rng.random() < 0.5:
            gc_all()
            assert exact(meta, store, "fz") == before, (seed, tag, "after gc")

    def hook(f, segment_id):
        if rng.random() < 0.4:
            compact_now(f"in-flush after {segment_id}")

    for step in range(int(os.environ.get("S20_STEPS", "70"))):
        op = rng.choice(["ins", "ins", "ins", "ups", "del", "wide", "flush", "flush", "flushall", "compact"])
        pks = sorted({int(x) for x in rng.integers(0, 20, size=int(rng.integers(1, 7)))})
        part = str(rng.choice(parts))
        if op in ("ins", "ups"):
            w.insert("fz", pks, part, float(step), upsert=op == "ups")
        elif op == "del":
            w.delete("fz", pks, partition=part)
        elif op == "wide":
            w.delete("fz", pks)
        elif op in ("flush", "flushall"):
            p = pchs[int(rng.integers(0, len(pchs)))]
            flush_pchannel(meta, store, p, small, flush_all=op == "flushall", hooks={"after_commit": hook})
        else:
            compact_now(f"step {step}")
        log.append((step, op, pks, part))
    for p in pchs:
        flush_pchannel(meta, store, p, small, flush_all=True, hooks={"after_commit": hook})
    got, want = rows(meta, store, "fz"), w.model.visible()
    assert got == want, (seed, "extra", got - want, "missing", want - got, log[-30:])
    compact_now("end")
    gc_all()
    for p in pchs:      # a fresh flusher after it all: nothing comes back
        flush_pchannel(meta, store, p, small, flush_all=True)
    got = rows(meta, store, "fz")
    assert got == want, (seed, "extra", got - want, "missing", want - got)
