"""attack-s22: a whole database at one instant, stopped after the first collection's copy
(its replay never ran) and after GC ran (window holds / replay holds keep the log), then the
same restore-database run again: it resumes every member (no 'exists already'), and each
target equals its model at the instant; a third run changes nothing."""

from __future__ import annotations

from seglake.lifecycle import compaction, copyjob, gc, pitr, snapshot
from seglake.lifecycle.pitr import database
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, copy_and_replay, flush_all, rows, visible_of

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=1000, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def test_a_database_restore_resumed_after_a_stop_between_copy_and_replay(meta, store, settings):
    models = {}
    with WalClient(meta, store, settings, batch_rows=3) as c:
        for n in ("a", "b"):
            coll = c.create_collection(n, SCHEMA, shards=2)
            pitr.set_window(meta, n, "1h")
            models[n] = (coll, Model(meta, store, n))
            models[n][1].record(c.insert(n, rows(range(1, 20), 1.0)), 1.0)
            flush_all(meta, store, settings, coll)
            snapshot.create(meta, store, n, "s1")
            models[n][1].record(c.upsert(n, rows(range(5, 12), 2.0)), 2.0)
            models[n][1].record(c.delete(n, [1, 2, 15]), 3.0)
        t = meta.tso.reserve(1, linearizable=True)
        for n in ("a", "b"):
            models[n][1].record(c.delete(n, [3, 4]), 4.0)
            flush_all(meta, store, settings, models[n][0])
            compaction.compact(meta, store, n, FOLD)
    jobs = database.restore_database_as_of(meta, store, "default", t, suffix="_t")
    first = jobs[0]["job_id"]
    copyjob.plan(meta, first, 3)
    copyjob.run_inline(meta, store, first, threads=2)
    copyjob.finalize(meta, first)                     # ... stopped here: no replay, b not copied
    gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))
    again = database.restore_database_as_of(meta, store, "default", t, suffix="_t")
    assert [j["job_id"] for j in again] == [j["job_id"] for j in jobs]
    for j in again:
        coll = copy_and_replay(meta, store, settings, j["job_id"], j["target"])
        assert visible_of(meta, store, coll) == models[j["collection"]][1].visible(t), j
    third = database.restore_database_as_of(meta, store, "default", t, suffix="_t")
    assert [j["job_id"] for j in third] == [j["job_id"] for j in jobs]
