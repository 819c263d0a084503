"""attack-s22: a restore of a restore from the backup target: src restored to an instant
into R (replay-written segments, copied L0 carriers), R written (split upserts, scoped
deletes) and compacted, snapshotted and exported with its WAL archived, written more;
then R restored to instants after its bundle from this store and from the target alone:
equal to each other and to R read at that instant's model (R at "now")."""

from __future__ import annotations

from seglake.lifecycle import compaction, pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import (SCHEMA, Model, flush_all, restore_from_target, restore_to, rows, source_with_s1,
                        visible_of)

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=20, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def test_a_restore_of_a_restore_from_the_target_equals_the_one_from_this_store(meta, store, settings, tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings, batch_rows=3) as c:
        coll, model = source_with_s1(c, meta, store, settings)
        model.record(c.upsert("src", rows(range(5, 15), 2.0)), 2.0)
        model.record(c.delete("src", [20, 21, 22]), 3.0)
        t1 = meta.tso.reserve(1, linearizable=True)
        model.record(c.insert("src", rows(range(100, 110), 4.0)), 4.0)
    r = restore_to(meta, store, settings, "src", "r", t1)
    assert visible_of(meta, store, r) == model.visible(t1)
    with WalClient(meta, store, settings, batch_rows=3) as c:
        c.upsert("r", rows(range(1, 8), 5.0))
        c.delete("r", [9, 10, 11])
        flush_all(meta, store, settings, r)
        compaction.compact(meta, store, "r", FOLD)
        pitr.set_window(meta, "r", "1h")
        snapshot.create(meta, store, "r", "sr")
        exports.export(meta, store, backup, "r", "sr", say=lambda line: None)
        retention.set_policy(meta, "r", {"keep_last": 5, "archive": True})
        instants = [meta.tso.reserve(1, linearizable=True)]
        c.upsert("r", rows(range(30, 36), 6.0))
        instants.append(meta.tso.reserve(1, linearizable=True))
        c.delete("r", [1, 2, 3, 31])
        flush_all(meta, store, settings, r, flush_all=False)
        compaction.compact(meta, store, "r", FOLD)
        instants.append(meta.tso.reserve(1, linearizable=True))
        archive.run(meta, store, backup)
    flush_all(meta, store, settings, r)
    now_rows = visible_of(meta, store, r)   # (read from Flushed segments: everything flushed first)
    bad = []
    for i, t in enumerate(instants):
        here = visible_of(meta, store, restore_to(meta, store, settings, "r", f"h{i}", t))
        there = visible_of(meta, store, restore_from_target(meta, store, settings, backup, "r", f"x{i}", t))
        if here != there:
            bad.append((i, sorted((here - there).items())[:4], sorted((there - here).items())[:4]))
    last = visible_of(meta, store, meta.catalog.get_by_name(f"h{len(instants) - 1}"))
    assert not bad, bad
    assert last == now_rows
