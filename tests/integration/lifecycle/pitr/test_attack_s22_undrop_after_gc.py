"""attack-s22: a collection born inside its window, never snapshotted, written (split
upserts, scoped deletes, a txn), flushed and folded, then dropped; GC runs with
drop_tolerance 0 (its files reclaimed, its WAL truncated as far as GC may) and other
collections keep writing on the same pchannels (their checkpoints move on). The window
holds the record and the log: the undrop, from the log alone, equals the model just before
the drop. Then the window cleared: the next GC releases it, and the undrop is refused
writing nothing."""

from __future__ import annotations

import os
import time

import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import compaction, drop, gc, pitr
from seglake.storage import layout
from seglake.wal.client import WalClient

from etcd_root import root_changes, root_state
from pitr_model import SCHEMA, Model, copy_and_replay, flush_all, route0, rows, visible_of

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=1000, delete_ratio=0.0, protection=0.0, l0_age=0.0)
OPTS = dict(missing_tolerance=0, drop_tolerance=0, floor=0, force=True)


def _age_all(store) -> None:
    t = time.time() - 3 * 86400
    for o in store.list(f"{layout.WAL}/"):
        if layout.parse_wal_fragment(o.key):
            os.utime(store.root / o.key, (t, t))


def test_undrop_from_the_log_alone_after_gc_and_other_writers(meta, store, settings):
    settings = settings.replace(flush_seal_rows=4)
    with WalClient(meta, store, settings, batch_rows=3) as c:
        other = c.create_collection("other", SCHEMA, shards=16)
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 30), 1.0)), 1.0)
        model.record(c.upsert("src", rows(range(10, 20), 2.0), partition="p1"), 2.0)
        flush_all(meta, store, settings, coll)
        model.record(c.delete("src", list(range(1, 6))), 3.0)
        model.record(c.delete("src", list(range(10, 14)), partition="p1"), 4.0)
        pk0 = [int(x) for x in route0(range(1, 40))][:5]
        model.record(c.insert("src", rows(pk0, 5.0), txn=True, upsert=True), 5.0, txn=True)
        flush_all(meta, store, settings, coll)
        compaction.compact(meta, store, "src", FOLD)
        t = meta.tso.reserve(1, linearizable=True)
        drop.begin_drop(meta, store, settings, "src")
        flush_all(meta, store, settings, coll, flush_all=False)
        drop.finish_drop(meta, "src", collection_id=coll.collection_id)
        for i in range(4):
            c.insert("other", rows(range(100 * i, 100 * i + 30), 0.5))
            flush_all(meta, store, settings, other)
    _age_all(store)
    gc.run(meta, store, gc.GCOptions(**OPTS))
    back = copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "back"), "back")
    assert visible_of(meta, store, back) == model.visible(t)
    # the window cleared: released at the next GC; the undrop refused, writing nothing
    assert pitr.clear_window(meta, "src")
    gc.run(meta, store, gc.GCOptions(**OPTS))
    rev = root_state(meta)
    with pytest.raises(SeglakeError):
        pitr.undrop(meta, store, "src", "back2")
    assert root_state(meta) == rev, root_changes(rev, root_state(meta))
