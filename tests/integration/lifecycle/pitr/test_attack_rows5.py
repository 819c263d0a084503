"""Adversary rows5 (issues 26, 28, 30 together): a random workload in which every
acknowledged call may be RETRIED later (same seq, same rows) -- across flushes, seals,
compactions, GC with zero tolerances, snapshots, and a takeover of the named producer id --
from two clients, one of them with a clock 3 s ahead (inside max_clock_skew), with small
batch_rows (calls split over appends), upsert-heavy, with partition-scoped deletes; then
restores to many instants (message ticks, tick - 1, right after each compaction), a restore
of one of those restores to instants after its own writes, retries and compaction, and a
drop + undrop of the source with the retries sent again after it. Every copy compared row
by row (pk, value) with pitr_model.Model of the first acknowledgement of each call only.

Found (seed 600 at 110 steps, fixed in wal/client.py): a new holder of the named id numbered
a NEW call with a number the earlier holder had committed (its numbers ran ahead of the TSO's
time while the fast clock held it): refused as "another payload" (with the same rows it was
answered from the earlier call's record: tests/integration/wal/test_wal_takeover_numbers.py).
Sweep run once (not kept): seeds 600..611 x 110 steps, 12 passed, 13,740 rows compared."""

from __future__ import annotations

import random
import time

import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import compaction, copyjob, drop, gc, pitr, snapshot
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.catalog import pchannel_of
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, route0, rows, visible_of

PARTS = ["_default", "p1", "p2"]
STEPS = 40


def _policy(**kw):
    return compaction.Policy(**{"min_segment_rows": 1000, "target_rows": 40, "delete_ratio": 0.0,
                                "protection": 0.0, "l0_age": 0.0, **kw})


def _gc(meta, store, settings):
    return gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                          force=True, copy_job_retention=0.0))


class Workload:
    """Random calls on `name` through a named client (taken over now and then) and an
    unnamed client whose clock runs ahead; each call remembered for its retries."""

    def __init__(self, meta, store, settings, rng, name, model, batch_rows, pid="rows5-a"):
        self.meta, self.store, self.settings, self.rng = meta, store, settings, rng
        self.name, self.model, self.batch_rows = name, model, batch_rows
        self.named = WalClient(meta, store, settings, batch_rows=batch_rows, producer_id=pid)
        self.fast = WalClient(meta, store, settings, batch_rows=rng.choice([1, 3, 8]),
                              clock=lambda: time.time() + 3.0)
        self.calls = []       # (client tag, method, args, kwargs, seq)
        self.nxt, self.live = 1, []
        self.instants = []
        self.retried = 0

    def close(self):
        self.named.close()
        self.fast.close()

    def client(self, tag):
        return self.named if tag == "named" else self.fast

    def call(self, tag, method, args, kwargs, v, txn=False):
        res = getattr(self.client(tag), method)(self.name, *args, **kwargs)
        self.model.record(res, v, txn=txn)
        self.calls.append((tag, method, args, kwargs, res.seq))
        for msg in self.model.messages(res):
            self.instants.append(msg.time_tick)
            self.instants.append(msg.time_tick - 1)
        return res

    def retry(self, k=None):
        """An acknowledged call sent again with its seq: nothing may change."""
        if not self.calls:
            return
        tag, method, args, kwargs, seq = self.calls[k if k is not None else self.rng.randrange(len(self.calls))]
        getattr(self.client(tag), method)(self.name, *args, **{**kwargs, "seq": seq})
        self.retried += 1

    def takeover(self):
        """A new client claims the named producer id (the old one is fenced)."""
        old = self.named
        self.named = WalClient(self.meta, self.store, self.settings, batch_rows=self.batch_rows,
                               producer_id=old.producer_id)
        self.named.holder()
        old.close()

    def step(self, v, coll):
        rng, part = self.rng, self.rng.choice(PARTS)
        tag = rng.choice(["named", "named", "fast"])
        kind = rng.choice(["insert", "upsert", "upsert", "upsert", "partdel", "partdel", "delete", "txn",
                           "txndel", "retry", "retry", "retry", "flush", "seal", "compact", "snapshot", "gc",
                           "takeover"])
        if kind == "insert" or (kind in ("upsert", "partdel", "delete") and not self.live):
            pks = list(range(self.nxt, self.nxt + rng.randint(2, 9))) + rng.sample(self.live, min(2, len(self.live)))
            self.nxt += 10
            self.call(tag, "insert", (rows(pks, v),), {"partition": part}, v)
            self.live += pks
        elif kind == "upsert":   # pks moved between partitions, duplicated inside the call, and new ones
            pks = rng.sample(self.live, min(len(self.live), rng.randint(1, 6))) + [self.nxt]
            if rng.random() < 0.3:
                pks.append(pks[0])
            self.nxt += 1
            self.call(tag, "upsert", (rows(pks, v),), {"partition": part}, v)
            self.live.append(pks[-1])
        elif kind in ("partdel", "delete"):
            gone = rng.sample(self.live, min(len(self.live), rng.randint(1, 5))) + [self.nxt + 500]
            self.call(tag, "delete", (gone,), {"partition": part} if kind == "partdel" else {}, v)
        elif kind == "txn":
            pks = [int(x) for x in route0(range(self.nxt, self.nxt + 30), coll.shards)][:rng.randint(1, 7)]
            self.nxt += 30
            self.call(tag, "insert", (rows(pks, v),), {"partition": part, "txn": True}, v, txn=True)
            self.live += pks
        elif kind == "txndel":
            gone = [int(x) for x in route0(self.live, coll.shards)][:rng.randint(1, 4)]
            if gone:
                self.call(tag, "delete", (gone,), {"partition": part, "txn": True}, v, txn=True)
        elif kind == "retry":
            self.retry()
        elif kind == "flush":
            flush_all(self.meta, self.store, self.settings, coll)
        elif kind == "seal":
            flush_all(self.meta, self.store, self.settings, coll, flush_all=False)
        elif kind == "compact":
            pol = rng.choice([_policy(), _policy(target_rows=1000), _policy(min_segment_rows=1, delete_ratio=0.01),
                              _policy(target_rows=5), _policy(min_segment_rows=1, delete_ratio=0.9)])
            compaction.compact(self.meta, self.store, self.name, pol)
            self.instants.append(self.meta.tso.now())
            self.retry()      # a retry right after a compaction commit
        elif kind == "snapshot":
            snapshot.create(self.meta, self.store, self.name, f"s{int(v)}")
        elif kind == "gc":
            _gc(self.meta, self.store, self.settings)
        elif kind == "takeover":
            self.takeover()
            self.retry()
        return kind


def _compare(meta, store, coll, model, t, where):
    got, want = visible_of(meta, store, coll), model.visible(t)
    assert got == want, (where, sorted((got - want).items())[:6], sorted((want - got).items())[:6])
    return sum(want.values())


@pytest.mark.parametrize("seed", [501, 502, 503])
def test_retries_across_flush_compaction_gc_takeover_and_undrop_restored_at_many_instants(meta, store, settings,
                                                                                           seed):
    rng = random.Random(seed)
    settings = settings.replace(flush_seal_rows=rng.choice([7, 25]))
    c0 = WalClient(meta, store, settings)
    coll = c0.create_collection("src", SCHEMA, shards=1 + seed % 3, partitions=PARTS)
    c0.close()
    pitr.set_window(meta, "src", "1h")
    model = Model(meta, store, "src")
    w = Workload(meta, store, settings, rng, "src", model, rng.choice([1, 2, 3, 8]))
    kinds = []
    try:
        for step in range(STEPS):
            kinds.append(w.step(float(step + 1), coll))
        for k in range(len(w.calls)):     # every call retried once more at the end
            w.retry(k)
        flush_all(meta, store, settings, coll)   # visible_of reads flushed segments
        audited = _compare(meta, store, coll, model, meta.tso.now(), ("source", seed))
        chosen = sorted(set(rng.sample(w.instants, min(10, len(w.instants)))))
        for i, t in enumerate(chosen):
            r = restore_to(meta, store, settings, "src", f"r{i}", t)
            audited += _compare(meta, store, r, model, t, ("as_of", seed, i, t, kinds))

        # a restore of a restore: r0's rows are in no log of its own -> a snapshot first, then
        # its own retried workload, and restores of it to instants after that snapshot
        t0 = chosen[len(chosen) // 2]
        mid = restore_to(meta, store, settings, "src", "r_mid", t0)
        ids = {p.partition_id: mid.partition(p.name).partition_id for p in coll.partitions}   # ids mapped
        ids[0] = 0
        m2 = Model(meta, store, "r_mid")
        m2.inserted = [(*x[:4], ids[x[4]]) for x in model.inserted if x[3] <= t0]
        m2.deletes = [(*x[:3], ids[x[3]]) for x in model.deletes if x[2] <= t0]
        pitr.set_window(meta, "r_mid", "1h")
        snapshot.create(meta, store, "r_mid", "base")
        w2 = Workload(meta, store, settings, rng, "r_mid", m2, rng.choice([1, 2, 8]), pid="rows5-b")
        w2.nxt = w.nxt + 1000
        w2.live = list(w.live)
        kinds2 = []
        try:
            for step in range(20):
                kinds2.append(w2.step(float(100 + step), mid))
            for k in range(len(w2.calls)):
                w2.retry(k)
        finally:
            w2.close()
        flush_all(meta, store, settings, mid)
        audited += _compare(meta, store, mid, m2, meta.tso.now(), ("r_mid now", seed, kinds2))
        later = sorted(set(t for t in w2.instants if t > t0))
        for i, t in enumerate(sorted(set(rng.sample(later, min(6, len(later)))))):
            try:
                rr = restore_to(meta, store, settings, "r_mid", f"rr{i}", t)
            except pitr.OutsideWindow as e:   # before r_mid's base snapshot: refused, saying so
                assert "not in its own log" in str(e) or "snapshot" in str(e), e
                continue
            audited += _compare(meta, store, rr, m2, t, ("as_of of a restore", seed, i, t))

        # drop + undrop of the source under its own name, then every call retried again
        t_drop = meta.tso.now()
        drop.begin_drop(meta, store, settings, "src")
        for p in sorted({pchannel_of(v) for v in coll.vchannels}):
            flush_pchannel(meta, store, p, settings, flush_all=False)
        assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
        job = pitr.undrop(meta, store, "src", "src")
        copyjob.plan(meta, job, 3)
        copyjob.run_inline(meta, store, job)
        copyjob.finalize(meta, job)
        pitr.replay(meta, store, settings, meta.catalog.get_by_name("src").collection_id)
        back = meta.catalog.get_by_name("src")
        assert back.collection_id != coll.collection_id
        audited += _compare(meta, store, back, model, t_drop, ("undrop", seed))
        refused = 0
        for k in range(len(w.calls)):
            try:
                w.retry(k)
            except SeglakeError as e:   # refused naming the seq's other payload (the old collection id)
                assert "another payload" in str(e), e
                refused += 1
        audited += _compare(meta, store, back, model, t_drop, ("undrop, then every call retried", seed, refused))
        print("seed", seed, "steps", kinds, "calls", len(w.calls), "retries", w.retried, "refused after undrop",
              refused, "rows compared", audited)
    finally:
        w.close()
