"""attack-s20: a snapshot captured at EVERY intermediate state of a flusher run (after each
segment's commit: some partitions' segments synced, others still buffered; deletes
buffered or synced), each then the base of a restore to its own consistent_ts: every
restore equals the model (the positions read at the capture's revision must say exactly
what the captured segments hold and where the replay starts)."""

from __future__ import annotations

import random

from seglake.errors import SeglakeError
from seglake.lifecycle import pitr, snapshot
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.catalog import pchannel_of
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def test_snapshots_at_every_step_of_a_flush_are_exact_bases(meta, store, settings):
    settings = settings.replace(flush_seal_rows=6)
    rng = random.Random(5)
    with WalClient(meta, store, settings, batch_rows=5) as c:
        coll = c.create_collection("src", SCHEMA, shards=1, partitions=["_default", "p1", "p2"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        nxt = 1
        for step in range(30):
            v = float(step + 1)
            part = rng.choice(["_default", "p1", "p2"])
            kind = rng.choice(["ins", "ins", "del", "pdel", "ups"])
            if kind == "ins" or nxt < 5:
                model.record(c.insert("src", rows(range(nxt, nxt + rng.randint(1, 9)), v), partition=part), v)
                nxt += 10
            elif kind == "del":
                model.record(c.delete("src", rng.sample(range(1, nxt), 3)), v)
            elif kind == "pdel":
                model.record(c.delete("src", rng.sample(range(1, nxt), 3), partition=part), v)
            else:
                model.record(c.upsert("src", rows(rng.sample(range(1, nxt), 3), v), partition=part), v)
            if step == 12:
                flush_all(meta, store, settings, coll, flush_all=False)   # by size: some sealed, some growing
    taken = []

    def capture(flusher, **kw):
        name = f"s{len(taken)}"
        try:
            taken.append(snapshot.create(meta, store, "src", name))
        except SeglakeError as e:
            taken.append(e)

    flush_pchannel(meta, store, pchannel_of(coll.vchannels[0]), settings, flush_all=True,
                   hooks={"after_commit": capture})
    recs = [r for r in taken if not isinstance(r, Exception)]
    assert len(recs) >= 5, taken
    want = model.visible(meta.tso.now())
    bad = {}
    for i, r in enumerate(recs):
        target = restore_to(meta, store, settings, "src", f"r{i}", r.consistent_ts)
        assert pitr.summary(meta, target)["snapshot"] == r.name
        got = visible_of(meta, store, target)
        exp = model.visible(r.consistent_ts)
        assert exp == want
        if got != exp:
            bad[r.name] = (sorted((exp - got).elements())[:5], sorted((got - exp).elements())[:5])
    assert not bad, bad
