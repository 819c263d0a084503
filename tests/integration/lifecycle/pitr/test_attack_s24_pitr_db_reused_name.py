"""attack-s24-pitr: a whole database at one instant FROM THE BACKUP TARGET, when a name of
the database was dropped before the instant and reused after it. At the instant the
database held `keep` alone (`a`'s first collection was dropped before it, its second was
created after it); the set must be {keep}, equal to its model -- the archive and the
bundles say both facts (the drop before, the creation after)."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle.backup import archive
from seglake.lifecycle.pitr.database import drive, plan_database, restore_database_as_of
from seglake.lifecycle.pitr.from_target import DroppedBefore
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, drop_now, export_and_archive, rows, visible_of

quiet = dict(say=lambda line: None)


def test_a_database_from_the_target_at_an_instant_between_a_drop_and_the_names_reuse(meta, store, settings,
                                                                                     tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        k = c.create_collection("keep", SCHEMA, shards=1)
        mk = Model(meta, store, "keep")
        mk.record(c.insert("keep", rows(range(1, 9), 1.0)), 1.0)
        export_and_archive(meta, store, settings, backup, k, keep_last=5)
        a1 = c.create_collection("a", SCHEMA, shards=1)
        c.insert("a", rows(range(1, 5), 1.0))
        export_and_archive(meta, store, settings, backup, a1, keep_last=5)
        archive.run(meta, store, backup)
    drop_now(meta, store, settings, "a")
    with WalClient(meta, store, settings) as c:
        mk.record(c.insert("keep", rows(range(20, 25), 2.0)), 2.0)
        time.sleep(1.2)   # (past the drop's second of slack)
        t = meta.tso.reserve(1, linearizable=True)
        time.sleep(0.01)
        a2 = c.create_collection("a", SCHEMA, shards=1)   # the name reused after the instant
        c.insert("a", rows(range(100, 104), 3.0))
        t2 = meta.tso.reserve(1, linearizable=True)   # a2 lived then; its only bundle is later
        export_and_archive(meta, store, settings, backup, a2, "s2", keep_last=5)
        mk.record(c.insert("keep", rows(range(30, 33), 4.0)), 4.0)
    archive.run(meta, store, backup)
    ts, to, plans = plan_database(meta, store, "default", t, suffix="_x", target=backup)
    assert sorted(plans) == ["keep"], sorted(plans)
    jobs = restore_database_as_of(meta, store, "default", t, suffix="_x", target=backup)
    out = drive(meta, store, settings, jobs, "default")
    assert [(r["target"], r["state"]) for r in out] == [("keep_x", "Created")]
    assert visible_of(meta, store, meta.catalog.get_by_name("keep_x")) == mk.visible(t)
    # the converse still refused: at t2 the name's second collection lived, and no bundle has it then
    with pytest.raises(DroppedBefore):
        plan_database(meta, store, "default", t2, suffix="_y", target=backup)
