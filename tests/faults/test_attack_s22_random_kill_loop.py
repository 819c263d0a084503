"""attack s22: a random kill loop over real subprocesses -- snapshot create, restore
(copy job), bundle export, GC (aggressive: every file aged two days, force) -- each
SIGKILLed after a random delay (not at a named fault point), in a random order, several
at once now and then. Then every step is re-run to completion and the end state checked
exactly: invariants, every restore byte-equal to its snapshot with the source's rows,
every bundle verifies, the source's rows unchanged."""

import os
import random
import time

import pytest
from fault_harness import price_rows as _rows
from fault_harness import assert_invariants, assert_restored, seed_and_snapshot

from seglake.lifecycle import copyjob, gc, snapshot
from seglake.lifecycle.backup import export, verify
from seglake.storage import layout
from seglake.storage.local import LocalStore

DAY = 86400
quiet = dict(say=lambda line: None)
SLOW = "copy.after_file:sleep=0.02,export.after_file:sleep=0.02,snapshot.after_manifests:sleep=0.3"
GC_OPTS = {"missing_tolerance": 0, "drop_tolerance": 0, "force": True, "snapshot_pending_timeout": 3600}




def _age_all(store):
    t = time.time() - 2 * DAY
    for o in store.list(""):
        try:
            os.utime(os.path.join(store.uri, o.key), (t, t))
        except FileNotFoundError:
            pass


@pytest.mark.parametrize("seed", [1])
def test_random_kills_then_re_run_converges(meta, store, settings, spawn, tmp_path, seed):
    rng = random.Random(seed)
    _, s0 = seed_and_snapshot(meta, store, snap="s0")
    want = _rows(meta, store, "demo")
    part = meta.catalog.get_by_name("demo").partitions[0].partition_id
    backup = tmp_path / "backup"
    steps = [
        ("snapshot_create", lambda i: {"collection": "demo", "name": f"s{i + 1}", "owner": f"o{i + 1}"}),
        ("restore_all", lambda i: {"collection": "demo", "snapshot": "s0", "target": f"r{i}"}),
        ("backup_export", lambda i: {"collection": "demo", "snapshot": "s0", "target": str(backup / str(i % 3))}),
        ("gc_run", lambda i: {"opts": GC_OPTS, "delete_delay": 0.01}),
    ]
    killed = []
    for i in range(12):
        for j in range(30):    # garbage for the GC to sweep while it may be killed
            store.put(layout.insert_log(s0.collection_id, part, 900_000 + 100 * i + j, 100, 1), b"orphan")
        _age_all(store)
        batch = rng.sample(steps, rng.choice([1, 1, 2]))
        kids = [spawn(name, args(i), settings, faults=SLOW) for name, args in batch]
        time.sleep(rng.uniform(0.8, 3.0))
        for (name, _), k in zip(batch, kids):
            if k.alive():
                killed.append(name)
            k.kill()
    print("killed mid-run:", killed)
    assert len(killed) >= 4, killed
    # re-run everything to completion, in one process, the way the DAG retries would
    for rec in meta.snapshots.list():
        if rec.state != "COMMITTED" and rec.name != "s0":
            snapshot.create(meta, store, "demo", rec.name, owner="o" + rec.name[1:], per_file=2)
    for job in meta.copyjobs.list():
        copyjob.plan(meta, job.job_id, 3)
        copyjob.run_inline(meta, store, job.job_id)
        assert copyjob.finalize(meta, job.job_id).state == "Completed"
        assert _rows(meta, store, job.target_collection) == want
        assert_restored(meta, store, job.job_id, meta.snapshots.get(job.source_collection_id, "s0")[0])
    for b in range(3):
        rep = export.export(meta, store, LocalStore(backup / str(b)), "demo", "s0", **quiet)
        assert rep["state"] == "committed"
        assert verify.verify(LocalStore(backup / str(b)), "demo", "s0", **quiet)["ok"]
    _age_all(store)
    gc.run(meta, store, gc.GCOptions(**GC_OPTS), run_id=f"gc-{time.time_ns()}")
    assert _rows(meta, store, "demo") == want
    assert_invariants(meta, store)
    for job in meta.copyjobs.list():
        assert _rows(meta, store, job.target_collection) == want
