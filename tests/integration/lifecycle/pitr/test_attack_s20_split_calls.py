"""attack-s20: one delete, one upsert and one insert call each carried by several appends
(batch_rows=4), across two shards; restores at every append's tick and one tick before
it (the call half applied): each equal to the model (a delete's one call timestamp, taken
before its first append, hides only rows older than the call)."""

from __future__ import annotations

from seglake.lifecycle import pitr, snapshot
from seglake.wal import message as M
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def test_calls_split_over_appends_restored_between_their_appends(meta, store, settings):
    instants = []
    with WalClient(meta, store, settings, batch_rows=4) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 30), 1.0)), 1.0)
        model.record(c.insert("src", rows(range(1, 30), 1.5), partition="p1"), 1.5)
        flush_all(meta, store, settings, coll, flush_all=False)
        snapshot.create(meta, store, "src", "s1")
        for res, v in ((c.delete("src", list(range(1, 21))), 2.0),
                       (c.upsert("src", rows(range(5, 25), 3.0), partition="p1"), 3.0),
                       (c.delete("src", list(range(10, 30)), partition="p1"), 4.0),
                       (c.insert("src", rows(range(100, 120), 5.0)), 5.0)):
            model.record(res, v)
            ticks = sorted({m.time_tick for m in model.messages(res) if m.type in (M.INSERT, M.DELETE)})
            assert len(ticks) >= 4
            instants += [t for tk in ticks for t in (tk - 1, tk)]
    bad = []
    for i, t in enumerate(sorted(set(instants))):
        target = restore_to(meta, store, settings, "src", f"r{i}", t)
        got, want = visible_of(meta, store, target), model.visible(t)
        if got != want:
            bad.append((t, sorted((got - want).items())[:3], sorted((want - got).items())[:3]))
    assert not bad, bad
