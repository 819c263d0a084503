"""attack-s22: a name dropped and created again, each incarnation written with split upserts,
scoped deletes, txns, flushed, snapshotted and compacted (folds, l0_age 0); then undrop
twice, restores of each incarnation's instants, and a database at an instant of the first
incarnation; every copy compared with its incarnation's model."""

from __future__ import annotations

from seglake.lifecycle import compaction, drop, pitr, snapshot
from seglake.lifecycle.pitr import database
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, copy_and_replay, flush_all, restore_to, route0, rows, visible_of

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=30, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _life(meta, store, settings, c, v0: float):
    coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
    pitr.set_window(meta, "src", "1h")
    m = Model(meta, store, "src")
    m.record(c.insert("src", rows(range(1, 30), v0)), v0)
    m.record(c.upsert("src", rows(range(10, 20), v0 + 1), partition="p1"), v0 + 1)
    flush_all(meta, store, settings, coll)
    snapshot.create(meta, store, "src", "s1")
    m.record(c.delete("src", list(range(1, 8))), v0 + 2)
    m.record(c.delete("src", list(range(10, 14)), partition="p1"), v0 + 3)
    flush_all(meta, store, settings, coll)
    compaction.compact(meta, store, "src", FOLD)
    mid = meta.tso.reserve(1, linearizable=True)
    pk0 = [int(x) for x in route0(range(1, 40))][:6]
    m.record(c.insert("src", rows(pk0, v0 + 4), txn=True, upsert=True), v0 + 4, txn=True)
    m.record(c.upsert("src", rows(range(25, 35), v0 + 5)), v0 + 5)
    flush_all(meta, store, settings, coll, flush_all=False)
    end = meta.tso.reserve(1, linearizable=True)
    return coll, m, mid, end


def test_two_incarnations_undropped_twice_and_restored_at_their_instants(meta, store, settings):
    settings = settings.replace(flush_seal_rows=4)
    with WalClient(meta, store, settings, batch_rows=3) as c:
        c.create_collection("a", SCHEMA, shards=1)
        pitr.set_window(meta, "a", "1h")
        ma = Model(meta, store, "a")
        ma.record(c.insert("a", rows(range(1, 10), 9.0)), 9.0)
        c1, m1, mid1, end1 = _life(meta, store, settings, c, 1.0)
        drop.begin_drop(meta, store, settings, "src")
        flush_all(meta, store, settings, c1, flush_all=False)
        drop.finish_drop(meta, "src", collection_id=c1.collection_id)
        ma.record(c.delete("a", [1, 2]), 9.5)
        c2, m2, mid2, end2 = _life(meta, store, settings, c, 100.0)
        drop.begin_drop(meta, store, settings, "src")
        flush_all(meta, store, settings, c2, flush_all=False)
        drop.finish_drop(meta, "src", collection_id=c2.collection_id)
    bad = []

    def check(what, coll, want):
        got = visible_of(meta, store, coll)
        if got != want:
            bad.append((what, sorted((got - want).items())[:4], sorted((want - got).items())[:4]))

    for name in ("u1", "u2"):   # undrop twice: the newest incarnation, as at its drop
        job = pitr.undrop(meta, store, "src", name)
        check(name, copy_and_replay(meta, store, settings, job, name), m2.visible(end2))
    for t, m, tag in ((mid1, m1, "mid1"), (end1, m1, "end1"), (mid2, m2, "mid2"), (end2, m2, "end2")):
        check(tag, restore_to(meta, store, settings, "src", f"r_{tag}", t), m.visible(t))
    jobs = database.restore_database_as_of(meta, store, "default", mid1, suffix="_db1")
    names = sorted(j["collection"] for j in jobs)
    assert names == ["a", "src"], names
    for j in jobs:
        coll = copy_and_replay(meta, store, settings, j["job_id"], j["target"])
        check(f"db {j['collection']}", coll, (m1 if j["collection"] == "src" else ma).visible(mid1))
    assert not bad, bad
