"""Attack s21: a differential fuzz. Two collections get the same acknowledged writes in
the same order through named WAL producers -- inserts, upserts and deletes (scoped and
collection-wide), some of whose first tries fail on one pchannel (AppendIncomplete) and are
retried later with their seq (keeping their one call timestamp) -- and the same flushes;
only one of them is compacted (merges, rewrites and L0 folds at l0_age 0, random policies)
and GC'd (zero tolerances) between the steps. Their visible rows (pk, partition, value)
must be equal after every flush and at the end: whatever a compaction does, it never
changes what the writes show. (Seed 4 failed before the fold's cap at the oldest remembered
call timestamp: an upsert retried after a delete newer than its call was folded.)"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import compaction, gc
from seglake.meta.catalog import pchannel_of
from seglake.visibility import visible_rows
from seglake.wal import writer as W
from seglake.wal.client import AppendIncomplete, WalClient

from compaction_helpers import Writer  # noqa: F401  (puts the restore helpers on the path)
from copy_model_helpers import SCHEMA, table
from wal_helpers import pchannels
from seglake.lifecycle.flush import flush_pchannel

pytestmark = pytest.mark.etcd

PARTS = ["_default", "p1"]


def _view(meta, store, name) -> Counter:
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    part = {p.partition_id: p.name for p in coll.partitions}
    return Counter((pk, part[p], round(v, 4)) for pk, p, v in
                   zip(*(t.column(c).to_pylist() for c in ("pk", "partition_id", "v"))))


def _flush(meta, store, settings, name):
    for p in pchannels(meta.catalog.get_by_name(name)):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _failing(monkeypatch, pchannel):
    real = W.WalWriter._commit

    def fails(self, frag):
        if self.pchannel == pchannel:
            raise SeglakeError("etcd refused the write")
        return real(self, frag)
    monkeypatch.setattr(W.WalWriter, "_commit", fails)


@pytest.mark.parametrize("l0_age", [0.0, 3.0])
@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S21_SEEDS", "4,5").split(",")])
def test_compacted_and_plain_twins_show_the_same_rows(meta, store, settings, monkeypatch, seed, l0_age):
    """l0_age 3: on a simulated clock (step k at k seconds; a tick at its step's time) L0
    folds take only deletes 3 steps old, so row-bearing carriers are folded in part (their
    newer entries carried on) -- session 22's per-entry folding."""
    rng = np.random.default_rng(seed)
    starts: list[int] = []
    clock = pytest.MonkeyPatch()      # apart from `monkeypatch`, which the loop undoes
    if l0_age:
        import bisect

        from seglake.lifecycle.compaction import folding
        clock.setattr(folding, "physical_ms", lambda tick: max(bisect.bisect_right(starts, tick) - 1, 0) * 1000)
    names = ("plain", "comp")
    clients = {n: WalClient(meta, store, settings, producer_id=f"prod-{n}-{seed}") for n in names}
    try:
        for n in names:
            clients[n].create_collection(n, SCHEMA, shards=2, partitions=PARTS)
        pending: list[tuple] = []        # (kind, args, {name: seq})
        log = []

        def call(kind, args, n, seq=None):
            c = clients[n]
            if kind == "del":
                pks, part = args
                return c.delete(n, pks, partition=part, seq=seq)
            pks, part, v = args
            return c.insert(n, table(pks, v), partition=part, upsert=(kind == "ups"), seq=seq)

        for step in range(int(os.environ.get("S21_STEPS", "60"))):
            starts.append(meta.tso.now())
            op = rng.choice(["ins", "ups", "ups", "del", "retry", "flush", "compact", "compact"])
            pks = sorted({int(x) for x in rng.integers(1, 16, size=int(rng.integers(1, 5)))})
            part = str(rng.choice(PARTS))
            log.append((step, str(op), pks, part))
            if op in ("ins", "ups", "del"):
                args = (pks, None if (op == "del" and rng.random() < 0.5) else part) if op == "del" \
                    else (pks, part, float(step))
                fail = op != "ins" and rng.random() < 0.5
                shard = int(rng.integers(0, 2))
                seqs = {}
                for n in names:
                    if fail:        # the first try fails on the pchannel of vchannel `shard`
                        _failing(monkeypatch, pchannel_of(meta.catalog.get_by_name(n).vchannels[shard]))
                    try:
                        call(op, args, n)
                    except AppendIncomplete as e:
                        seqs[n] = e.result.seq
                    finally:
                        monkeypatch.undo()
                if seqs and len(seqs) == len(names):
                    pending.append((str(op), args, seqs))
                elif seqs:          # the failing pchannel held no part of one twin's call: retry now
                    for n, s in seqs.items():
                        call(op, args, n, seq=s)
            elif op == "retry" and pending:
                kind, args, seqs = pending.pop(int(rng.integers(0, len(pending))))
                for n in names:
                    call(kind, args, n, seq=seqs[n])
            elif op == "flush":
                for n in names:
                    _flush(meta, store, settings, n)
                assert _view(meta, store, "comp") == _view(meta, store, "plain"), (seed, log)
            elif op == "compact":
                pol = compaction.Policy(min_segment_rows=int(rng.choice([1, 4, 1000])),
                                        target_rows=int(rng.choice([1, 8, 10_000])),
                                        delete_ratio=float(rng.choice([0.0, 0.5, 1.0])), protection=0.0,
                                        l0_age=l0_age)
                before = _view(meta, store, "comp")
                s = compaction.compact(meta, store, "comp", pol, **({"now": float(step)} if l0_age else {}))
                log.append(("compacted", [(u.kind, u.segment_ids, [h[0] for h in u.hits]) for u in s.plan.units]))
                assert _view(meta, store, "comp") == before, (seed, log)
                if rng.random() < 0.5:
                    coll = meta.catalog.get_by_name("comp")
                    gc.run(meta, store, gc.GCOptions.from_settings(
                        settings, drop_tolerance=0.0, missing_tolerance=0.0, force=True, copy_job_retention=0.0,
                        collection_id=coll.collection_id))
        for kind, args, seqs in pending:
            for n in names:
                call(kind, args, n, seq=seqs[n])
        for n in names:
            _flush(meta, store, settings, n)
        assert _view(meta, store, "comp") == _view(meta, store, "plain"), (seed, log)
    finally:
        clock.undo()
        for c in clients.values():
            c.close()
