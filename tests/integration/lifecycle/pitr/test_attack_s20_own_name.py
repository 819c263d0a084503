"""attack-s20: a collection dropped inside its window restored to an instant before the
drop INTO ITS OWN NAME (the name free again), re-run (resumes, no duplicate), then the
restored collection written, snapshotted and restored to a time itself; and an undrop of
the original after that (the name now the restore's): refused naming the taken target."""

from __future__ import annotations

import pytest

from seglake.lifecycle import drop, pitr, snapshot
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of


def test_a_dropped_collection_restored_into_its_own_name(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 40), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.delete("src", [1, 2, 3]), 2.0)
        t = meta.tso.now()
        model.record(c.insert("src", rows(range(40, 50), 3.0)), 3.0)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, "src", collection_id=coll.collection_id)
    back = restore_to(meta, store, settings, "src", "src", t)
    assert back.collection_id != coll.collection_id and back.state == "Created"
    assert visible_of(meta, store, back) == model.visible(t)
    again = pitr.restore_as_of(meta, store, "src", "src", t)   # a re-run: the same job, nothing more
    assert again == back.properties["restore_job_id"]
    assert visible_of(meta, store, meta.catalog.get(back.collection_id)) == model.visible(t)
    # the restored collection lives on: writes, a snapshot, a restore to a time of it
    with WalClient(meta, store, settings) as c:
        m2 = Model(meta, store, "src")
        c.delete("src", [10])
        snapshot.create(meta, store, "src", "own")
        pitr.set_window(meta, "src", "1h")
        m2.record(c.insert("src", rows(range(500, 505), 9.0)), 9.0)
        t2 = meta.tso.now()
    flush_all(meta, store, settings, back)
    r2 = restore_to(meta, store, settings, "src", "src_t2", t2)
    want = model.visible(t)
    want.pop((10, 1.0), None)
    want.update(m2.visible(t2))
    assert visible_of(meta, store, r2) == want
    # the original drop can still be undropped, into another name
    with pytest.raises(Exception, match="exists|taken|already"):
        pitr.undrop(meta, store, "src", "src")
