"""Issue 26 item 5: ONE rate limit shared by all copy work of a store (copy jobs,
exports, imports), on top of each run's own limit: two restores and an export running at
once, none with a limit of its own, move at the store's rate together. Judged from the
shared clock in etcd and a LOWER bound on the elapsed time (a slower machine only makes
a run longer), never an upper one."""

from __future__ import annotations

import threading
import time

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore
from seglake.throttle import BURST, set_store_limit

MiB = 1 << 20


def test_two_restores_and_an_export_share_the_store_limit(meta, store, tmp_path, capfd):
    coll, _ = demo.seed(meta, store, demo.SeedParams(partitions=1, segments=4, rows=3000, dim=64))
    snapshot.create(meta, store, coll.name, "s")
    rec = meta.snapshots.find(coll.collection_id, "s")
    limit = 16 * MiB
    set_store_limit(meta, limit, 0)
    jobs = [restore.restore(meta, store, coll.name, "s", f"copy{i}") for i in range(2)]
    for j in jobs:
        assert meta.copyjobs.get(j)[0].max_bytes_per_second == 0   # no limit of its own
        copyjob.plan(meta, j, 2)
    errors = []

    def run(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    work = [lambda j=j: copyjob.run_inline(meta, store, j, threads=2) for j in jobs]
    work.append(lambda: exports.export(meta, store, LocalStore(tmp_path / "backup"), coll.name, "s",
                                       say=lambda line: None))
    t0 = time.time()
    threads = [threading.Thread(target=run, args=(w,)) for w in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.time() - t0
    assert not errors, errors
    for j in jobs:
        assert copyjob.finalize(meta, j).state == "Completed"
    moved = 3 * rec.bytes          # each restore copies every byte, the export reads every byte
    clock = float(meta.kv.get(meta.keys.copy_store_throttle()).value)
    assert clock >= t0 + moved / limit * 0.99, "the shared clock advanced by every run's bytes"
    assert took >= moved / limit - 3 * BURST, (took, moved / limit)

    # a run with no limit of its own still reports what the store's limit made it wait
    err = capfd.readouterr().err
    for j in jobs:
        assert f"copy job {j}: rate limit unlimited B/s" in err and "store-wide limit 16.0 MiB/s" in err, err[-2000:]
