"""Attack s25: restores to instants of a compacted source AFTER GC ran with zero
tolerances (force): compacted inputs Dropped a moment ago, WAL fragments below the
flushers' checkpoints. The point-in-time window (1 h) must keep what a restore inside it
needs -- its base snapshot's segments (compaction inputs among them) and the log from that
snapshot's positions -- so every restore equals the model of every acknowledged call."""

from __future__ import annotations

import os
import random

import pytest

from seglake.lifecycle import gc

from pitr_model import restore_to, visible_of
from test_attack_s22_compacted_instants import _produce

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S25P_SEEDS", "5,6").split(",")])
def test_restores_to_instants_after_zero_tolerance_gc_of_a_compacted_source(meta, store, settings, seed):
    rng = random.Random(seed)
    settings = settings.replace(flush_seal_rows=5)
    coll, model, instants, now = _produce(meta, store, settings, rng)
    for _ in range(2):
        gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True))
    assert visible_of(meta, store, coll) == model.visible(now)
    picks = sorted(set(rng.sample(sorted(set(instants)), min(8, len(set(instants))))) | {now})
    bad = []
    for i, t in enumerate(picks):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        if got != want:
            bad.append((i, t, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))
    assert not bad, (seed, bad)
