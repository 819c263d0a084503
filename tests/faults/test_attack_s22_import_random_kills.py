"""attack s22: a bundle import SIGKILLed after random delays (not at its named point),
six times, then run to the end under the same name: one COMMITTED snapshot with the
bundle's counts, a restore of it has exactly the source's rows, no data file of the
import's collection outside what that snapshot references, nothing twice."""

import random
import time
import uuid

import pytest
from fault_harness import price_rows as _rows
from fault_harness import assert_invariants, seed_and_snapshot

from seglake.config import Settings
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.backup import export, imports
from seglake.meta import Meta
from seglake.storage import layout, open_store
from seglake.storage.local import TMP_PREFIX, LocalStore

quiet = dict(say=lambda line: None)




@pytest.mark.parametrize("seed", [3])
def test_import_random_kills_then_re_run(meta, store, etcd_server, spawn, tmp_path, seed):
    rng = random.Random(seed)
    _, snap = seed_and_snapshot(meta, store)
    want = _rows(meta, store, "demo")
    path = tmp_path / "backup"
    export.export(meta, store, LocalStore(path), "demo", "s1", **quiet)
    other = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                                "store_uri": str(tmp_path / "dr"), "etcd_timeout": 5})
    killed = 0
    for _ in range(6):
        k = spawn("backup_import", {"collection": "demo", "bundle": "s1", "target": str(path)}, other,
                  faults="import.after_file:sleep=0.02")
        time.sleep(rng.uniform(0.5, 2.5))
        killed += k.alive()
        k.kill()
    print("killed mid-run:", killed)
    with Meta.from_settings(other) as meta2:
        store2 = open_store(other)
        imports.import_bundle(meta2, store2, LocalStore(path), "demo", "s1", **quiet)
        recs = list(meta2.snapshots.list())
        assert [(r.state, r.rows, r.segments) for r in recs] == [("COMMITTED", snap.rows, snap.segments)], recs
        (rec,) = recs
        referenced = {f.key for s in snapshot.read_segments(store2, rec) for f in layout.segment_files(s)}
        # a write SIGKILLed mid-file leaves its temp file: never visible nor referenced, GC's orphan
        # once it is old enough not to be a live writer's (not a data file of the import)
        present = {o.key for p in layout.collection_prefixes(rec.collection_id) for o in store2.list(p)
                   if TMP_PREFIX not in o.key}
        assert present <= referenced, f"files of the import not referenced by its snapshot: {sorted(present - referenced)[:5]}"
        job = restore.restore(meta2, store2, "demo", "s1", "demo_r")
        copyjob.plan(meta2, job)
        copyjob.run_inline(meta2, store2, job)
        assert copyjob.finalize(meta2, job).state == "Completed"
        assert _rows(meta2, store2, "demo_r") == want
        assert_invariants(meta2, store2)
