"""attack-s22: the README's recipe for a restored collection ("take a snapshot of a
restored collection when you turn its window on: instants from then on can be restored"),
on a store where GC truncated the shared pchannels' log after the restore (other
collections written and flushed meanwhile): the restored collection R has written nothing
through the WAL, its snapshot sR holds all its rows, and nothing of R's log is missing;
a restore of R to an instant after sR must work."""

from __future__ import annotations

import os
import time

from seglake.lifecycle import copyjob, gc, pitr, restore, snapshot
from seglake.storage import layout
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, flush_all, restore_to, rows, visible_of

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


def _age_all(store) -> None:
    t = time.time() - 3 * 86400
    for o in store.list(f"{layout.WAL}/"):
        if layout.parse_wal_fragment(o.key):
            os.utime(store.root / o.key, (t, t))


def test_a_restored_collection_snapshotted_after_gc_truncated_its_pchannels_restores_to_a_time(meta, store,
                                                                                              settings):
    with WalClient(meta, store, settings) as c:
        src = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", rows(range(1, 30), 1.0))
        flush_all(meta, store, settings, src)
        snapshot.create(meta, store, "src", "s1")
        job = restore.restore(meta, store, "src", "s1", "r")
        copyjob.plan(meta, job, 3)
        copyjob.run_inline(meta, store, job, threads=2)
        assert copyjob.finalize(meta, job).state == "Completed"
        r = meta.catalog.get_by_name("r")
        other = c.create_collection("other", SCHEMA, shards=16)   # the same pchannels, busy
        time.sleep(1.2)
        for i in range(5):
            c.insert("other", rows(range(100 * i, 100 * i + 20), 0.5))
        flush_all(meta, store, settings, other)
        _age_all(store)
        gc.run(meta, store, gc.GCOptions(**OPTS))
        pitr.set_window(meta, "r", "1h")
        snapshot.create(meta, store, "r", "sr")
        rec = meta.snapshots.get(r.collection_id, "sr")[0]
        print("sr positions", rec.positions)
        c.insert("other", rows(range(900, 910), 0.5))
        t = meta.tso.reserve(1, linearizable=True)
    want = visible_of(meta, store, r)
    got = visible_of(meta, store, restore_to(meta, store, settings, "r", "r_t", t))
    assert got == want
