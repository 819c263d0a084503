"""Attack s25: plans converge. After a random workload (inserts, upserts, scoped and
collection-wide deletes, everything deleted in a partition, partial flushes), compacting
again and again with one policy reaches a state it plans nothing for within a few runs
(no unit rewritten for ever: each run must gain something), and the rows stay the model."""

from __future__ import annotations

import os

import numpy as np
import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.flush import flush_pchannel

from compaction_helpers import Writer, exact, policy, rows
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd

PARTS = ["_default", "p1", "p2"]
POLICIES = [dict(min_segment_rows=1000, target_rows=10_000, delete_ratio=0.0, l0_age=0.0),
            dict(min_segment_rows=1, target_rows=1, delete_ratio=0.0, l0_age=0.0),
            dict(min_segment_rows=4, target_rows=6, delete_ratio=0.3, l0_age=0.0),
            dict(min_segment_rows=1000, target_rows=5, delete_ratio=1.0, l0_age=1e6),
            dict(min_segment_rows=1000, target_rows=10_000, target_bytes=1, delete_ratio=0.0, l0_age=0.0)]


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S25C_SEEDS", "1,2").split(",")])
@pytest.mark.parametrize("pol", range(len(POLICIES)))
def test_repeated_compactions_reach_a_fixed_point(meta, store, settings, seed, pol):
    rng = np.random.default_rng(seed * 10 + pol)
    small = settings.replace(flush_seal_rows=int(rng.choice([3, 1000])))
    w = Writer(meta, store, small)
    w.create("cv", PARTS, shards=int(rng.choice([1, 2])))
    coll = meta.catalog.get_by_name("cv")
    pchs = sorted(pchannels(coll))
    for step in range(int(os.environ.get("S25C_STEPS", "30"))):
        op = str(rng.choice(["ins", "ins", "ups", "del", "wide", "flush", "wipe"]))
        pks = sorted({int(x) for x in rng.integers(0, 12, size=int(rng.integers(1, 6)))})
        part = str(rng.choice(PARTS))
        if op in ("ins", "ups"):
            w.insert("cv", pks, part, float(step), upsert=op == "ups")
        elif op == "del":
            w.delete("cv", pks, partition=part)
        elif op == "wide":
            w.delete("cv", pks)
        elif op == "wipe":
            w.delete("cv", range(0, 12), partition=part)
        else:
            flush_pchannel(meta, store, pchs[int(rng.integers(0, len(pchs)))], small, flush_all=True)
    for p in pchs:
        flush_pchannel(meta, store, p, small, flush_all=True)
    want = w.model.visible()
    assert rows(meta, store, "cv") == want
    pl = policy(**POLICIES[pol])
    history = []
    for run in range(8):
        before = exact(meta, store, "cv")
        s = compaction.compact(meta, store, "cv", pl)
        assert exact(meta, store, "cv") == before
        history.append([(u.kind, len(u.inputs), len(u.hits), u.rows, u.deleted, u.delta_logs) for u in s.plan.units])
        assert all(r.status == compaction.COMMITTED for r in s.results), s.results
        if not s.plan.units:
            break
    else:
        pytest.fail(f"no fixed point after 8 runs: {history[-3:]}")
    assert rows(meta, store, "cv") == want
