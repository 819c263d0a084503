"""Attack s20: the flusher's recovery rule over compacted + GC'd vchannels. Random writes,
(partial) flushes, compactions (folds on) and GC with zero tolerances; at random points a
vchannel's checkpoint is removed and the pchannel flushed again -- the whole log replayed,
skipped only by the high-water marks the (compacted) segment records carry (the project's
own 'full WAL replay: nothing comes back, nothing twice' check). rows == Model after each."""

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
                  delete_ratio=float(rng.choice([0.0, 0.3, 1.0])), l0_age=float(rng.choice([0.0, 0.0, 1e6])))


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S20R_SEEDS", "51,52,53").split(",")])
def test_full_replays_after_compactions_and_gc_bring_nothing_back(meta, store, settings, seed):
    rng = np.random.default_rng(seed)
    small = settings.replace(flush_seal_rows=int(rng.choice([3, 5, 1000])))
    w = Writer(meta, store, small)
    parts = ["_default", "p1", "p2"]
    w.create("rp", parts, shards=int(rng.choice([1, 2])))
    coll = meta.catalog.get_by_name("rp")
    pchs = sorted(pchannels(coll))
    log = []

    def flush_all():
        for p in pchs:
            flush_pchannel(meta, store, p, small, flush_all=True)

    for step in range(int(os.environ.get("S20R_STEPS", "70"))):
        op = rng.choice(["ins", "ins", "ins", "ups", "del", "wide", "flush", "flushall", "compact", "compact",
                         "gc", "replay"])
        pks = sorted({int(x) for x in rng.integers(0, 16, size=int(rng.integers(1, 6)))})
        part = str(rng.choice(parts))
        log.append((step, op, pks, part))
        if op in ("ins", "ups"):
            w.insert("rp", pks, part, float(step), upsert=op == "ups")
        elif op == "del":
            w.delete("rp", pks, partition=part)
        elif op == "wide":
            w.delete("rp", pks)
        elif op in ("flush", "flushall"):
            flush_pchannel(meta, store, pchs[int(rng.integers(0, len(pchs)))], small, flush_all=op == "flushall")
        elif op == "compact":
            before = exact(meta, store, "rp")
            compaction.compact(meta, store, "rp", _pol(rng))
            assert exact(meta, store, "rp") == before
        elif op == "gc":
            gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                           collection_id=coll.collection_id))
        else:
            flush_all()
            assert rows(meta, store, "rp") == w.model.visible(), (seed, step, "before the replay")
            v = coll.vchannels[int(rng.integers(0, len(coll.vchannels)))]
            meta.kv.delete(meta.keys.channel_checkpoint(v))
            flush_all()
            got, want = rows(meta, store, "rp"), w.model.visible()
            assert got == want, (seed, step, "after a full replay of", v, "extra", got - want,
                                 "missing", want - got, log[-25:])
    flush_all()
    assert rows(meta, store, "rp") == w.model.visible()
