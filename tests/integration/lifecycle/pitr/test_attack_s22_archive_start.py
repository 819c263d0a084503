"""attack-s22: a restore to a time from the backup target alone, whose bundle recorded a
vchannel without a flusher checkpoint (nothing of it flushed when the snapshot was taken),
on a pchannel whose log was truncated long before the collection was born (other
collections' writes, flushed, GC'd), so the archive begins at the log's first retained
fragment, not at fragment 1. Everything the restore needs is in the archive."""

from __future__ import annotations

import os
import time

from seglake.lifecycle import gc, pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.meta.catalog import pchannel_of
from seglake.storage import layout
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_from_target, restore_to, rows, visible_of

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)
quiet = dict(say=lambda line: None)


def _age_all(store) -> None:
    t = time.time() - 3 * 86400
    for o in store.list(f"{layout.WAL}/"):
        if layout.parse_wal_fragment(o.key):
            os.utime(store.root / o.key, (t, t))


def test_a_restore_from_the_target_of_a_bundle_taken_before_the_first_flush(meta, store, settings, tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        old = c.create_collection("old", SCHEMA, shards=16)
        for i in range(6):
            c.insert("old", rows(range(1000 * i, 1000 * i + 50), 0.5))
        flush_all(meta, store, settings, old)
        _age_all(store)
        gc.run(meta, store, gc.GCOptions(**OPTS))
        time.sleep(1.2)   # the log's first retained fragment older than the creation's clock slack (1 s)
        coll = c.create_collection("src", SCHEMA, shards=1)
        pch = pchannel_of(coll.vchannels[0])
        from seglake.wal.log import WalLog
        first = WalLog(meta, None, pch).state().first
        assert first > 1, first          # the pchannel's early log is truncated
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 20), 1.0)), 1.0)
        snapshot.create(meta, store, "src", "s1")     # nothing of src flushed yet: no checkpoint
        rec = meta.snapshots.get(coll.collection_id, "s1")[0]
        exports.export(meta, store, backup, "src", "s1", **quiet)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        model.record(c.insert("src", rows(range(20, 30), 2.0)), 2.0)
        model.record(c.delete("src", [1, 2, 3]), 3.0)
        flush_all(meta, store, settings, coll)
        t = meta.tso.reserve(1, linearizable=True)
        archive.run(meta, store, backup)
    print("positions", rec.positions)
    # from this store: exact
    here = restore_to(meta, store, settings, "src", "here", t)
    assert visible_of(meta, store, here) == model.visible(t)
    # from the target alone: everything needed (from src's creation on) is archived
    there = restore_from_target(meta, store, settings, backup, "src", "there", t)
    assert visible_of(meta, store, there) == model.visible(t)


def test_a_flushed_bundle_of_a_two_shard_collection_whose_second_shard_had_no_write_yet(meta, store, settings,
                                                                                        tmp_path):
    from pitr_model import route0

    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        old = c.create_collection("old", SCHEMA, shards=16)
        for i in range(6):
            c.insert("old", rows(range(1000 * i, 1000 * i + 50), 0.5))
        flush_all(meta, store, settings, old)
        _age_all(store)
        gc.run(meta, store, gc.GCOptions(**OPTS))
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(route0(range(1, 40)), 1.0)), 1.0)   # shard 0 only
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        rec = meta.snapshots.get(coll.collection_id, "s1")[0]
        exports.export(meta, store, backup, "src", "s1", **quiet)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        model.record(c.insert("src", rows(range(100, 130), 2.0)), 2.0)       # both shards
        model.record(c.delete("src", [100, 101, 102, 103]), 3.0)
        flush_all(meta, store, settings, coll)
        t = meta.tso.reserve(1, linearizable=True)
        archive.run(meta, store, backup)
    print("positions", rec.positions)
    there = restore_from_target(meta, store, settings, backup, "src", "there", t)
    assert visible_of(meta, store, there) == model.visible(t)


def test_a_bundle_of_a_collection_born_after_every_archived_fragment(meta, store, settings, tmp_path):
    """(F1 fix's edge) the collection was created after the last fragment of its pchannel
    and never written: no archived fragment reaches its creation; the restore from the
    target replays nothing and gives the bundle's rows."""
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        old = c.create_collection("old", SCHEMA, shards=16)
        c.insert("old", rows(range(0, 50), 0.5))
        flush_all(meta, store, settings, old)
        time.sleep(1.2)
        coll = c.create_collection("src", SCHEMA, shards=1)
        snapshot.create(meta, store, "src", "s1")     # empty, no checkpoint
        exports.export(meta, store, backup, "src", "s1", **quiet)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        t = meta.tso.reserve(1, linearizable=True)
        archive.run(meta, store, backup)
    there = restore_from_target(meta, store, settings, backup, "src", "there", t)
    assert visible_of(meta, store, there) == visible_of(meta, store, coll)


def test_an_undrop_from_the_target_of_a_bundle_taken_before_the_first_flush(meta, store, settings, tmp_path):
    """F1 through the undrop: no window here (this store cannot give it), the target can."""
    from seglake.lifecycle import drop

    from pitr_model import copy_and_replay

    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        old = c.create_collection("old", SCHEMA, shards=16)
        for i in range(6):
            c.insert("old", rows(range(1000 * i, 1000 * i + 50), 0.5))
        flush_all(meta, store, settings, old)
        _age_all(store)
        gc.run(meta, store, gc.GCOptions(**OPTS))
        time.sleep(1.2)
        coll = c.create_collection("src", SCHEMA, shards=1)
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 20), 1.0)), 1.0)
        snapshot.create(meta, store, "src", "s1")     # no checkpoint yet
        exports.export(meta, store, backup, "src", "s1", **quiet)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        model.record(c.upsert("src", rows(range(15, 25), 2.0)), 2.0)
        model.record(c.delete("src", [1, 2]), 3.0)
        t = meta.tso.reserve(1, linearizable=True)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, "src", collection_id=coll.collection_id)
    archive.run(meta, store, backup)
    job = pitr.undrop(meta, store, "src", "back", backup=backup)
    back = copy_and_replay(meta, store, settings, job, "back")
    assert visible_of(meta, store, back) == model.visible(t)
