"""attack-s22: the README retry path across restores: an upsert U of a, b (two pchannels)
whose pchannel B refuses (AppendIncomplete); another client deletes b; flush; compaction
(folds, l0_age 0); a snapshot AFTER the fold; U retried with its seq (its first try's
timestamp). Restores at instants after each step (their bases: the snapshot before, the
snapshot after the fold), and an undrop, equal the model and the source."""

from __future__ import annotations

import pyarrow as pa

from seglake.lifecycle import compaction, drop, pitr, snapshot
from seglake.meta.catalog import pchannel_of
from seglake.wal.client import WalClient, synthetic_rows

from pitr_model import Model, copy_and_replay, flush_all, restore_to
from wal_helpers import append_incomplete, make_collection

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=1000, delete_ratio=0.0, protection=0.0, l0_age=0.0)


class OnceModel(Model):
    """A retry's result names the first try's commits too (answered from the producer
    record): each message is recorded once."""

    def messages(self, res):
        seen = self.__dict__.setdefault("_seen", set())
        out = [m for m in super().messages(res) if (m.vchannel, m.id.fragment, m.id.offset, m.id.term) not in seen]
        seen.update((m.vchannel, m.id.fragment, m.id.offset, m.id.term) for m in out)
        return out


def _vis(meta, store, coll):
    from seglake.visibility import visible_rows
    from collections import Counter
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    return Counter(zip(t.column("pk").to_pylist(), (round(x, 3) for x in t.column("price").to_pylist())))


def test_an_upsert_retried_across_a_fold_and_a_snapshot_restored_at_each_step(meta, store, settings, monkeypatch):
    name = "src"
    marks = []
    with WalClient(meta, store, settings, producer_id="ups") as c:
        coll = make_collection(c, shards=2, name=name)
        pitr.set_window(meta, name, "1h")
        model = OnceModel(meta, store, name)
        pb = pchannel_of(coll.vchannels[1])
        a = int(synthetic_rows(coll, 1, 1, shard=0).column("pk")[0].as_py())
        b = int(synthetic_rows(coll, 1, 1, shard=1).column("pk")[0].as_py())

        def rows_of(pks, price):
            t = synthetic_rows(coll, len(pks), 1)
            return t.set_column(0, "pk", pa.array(pks, pa.int64())).set_column(
                2, "price", pa.array([price] * len(pks), pa.float32()))
        model.record(c.insert(name, rows_of([a, b], 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, name, "before")
        u1 = rows_of([a, b], 2.0)
        e = append_incomplete(monkeypatch, pb, lambda: c.upsert(name, u1))
        model.record(e.value.result, 2.0)
        marks.append(("first try", meta.tso.reserve(1, linearizable=True)))
    with WalClient(meta, store, settings) as c2:
        model.record(c2.delete(name, [b]), 3.0)
    flush_all(meta, store, settings, coll)
    marks.append(("deleted", meta.tso.reserve(1, linearizable=True)))
    compaction.compact(meta, store, name, FOLD)
    snapshot.create(meta, store, name, "after_fold")
    marks.append(("folded", meta.tso.reserve(1, linearizable=True)))
    with WalClient(meta, store, settings, producer_id="ups") as c3:
        model.record(c3.upsert(name, u1, seq=e.value.result.seq), 2.0)
    flush_all(meta, store, settings, coll)
    compaction.compact(meta, store, name, FOLD)
    now = meta.tso.reserve(1, linearizable=True)
    marks.append(("retried", now))
    src_now = _vis(meta, store, coll)
    bad = []
    if src_now != model.visible(now):
        bad.append(("source", sorted(src_now.items()), sorted(model.visible(now).items())))
    for i, (what, t) in enumerate(marks):
        got = _vis(meta, store, restore_to(meta, store, settings, name, f"r{i}", t))
        if got != model.visible(t):
            bad.append((what, sorted(got.items()), sorted(model.visible(t).items())))
    drop.begin_drop(meta, store, settings, name)
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, name, collection_id=coll.collection_id)
    back = copy_and_replay(meta, store, settings, pitr.undrop(meta, store, name, "back"), "back")
    if _vis(meta, store, back) != src_now:
        bad.append(("undrop", sorted(_vis(meta, store, back).items()), sorted(src_now.items())))
    assert not bad, bad
