"""attack s22: a referenced data file of the store replaced by a symlink (to an identical
copy outside the store) before a GC, a restore copy job, a snapshot create and an export:
nothing outside is read or deleted, no step serves or copies the linked bytes, every
step fails closed with a clear error; once the file is put back, the steps complete."""

import hashlib
import os
import shutil
import time

import pytest
from fault_harness import assert_invariants, assert_restored, seed_and_snapshot

from seglake.errors import SeglakeError
from seglake.lifecycle import copyjob, gc, restore, snapshot
from seglake.lifecycle.backup import export
from seglake.storage import layout
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)
DAY = 86400


def _age_all(store):
    t = time.time() - 2 * DAY
    for o in store.list(""):
        os.utime(os.path.join(store.uri, o.key), (t, t))


@pytest.mark.parametrize("op", ["gc", "restore", "snapshot", "export"])
def test_a_referenced_file_swapped_for_a_symlink(meta, store, tmp_path, op):
    coll, snap = seed_and_snapshot(meta, store)
    _age_all(store)
    seg = sorted(meta.segments.list(coll.collection_id), key=lambda s: s.segment_id)[0]
    f = next(f for f in layout.segment_files(seg) if f.key.split("/")[-2] == "102")
    inside = os.path.join(store.uri, f.key)
    outside = tmp_path / "outside" / "x.parquet"
    outside.parent.mkdir()
    shutil.move(inside, outside)
    os.symlink(outside, inside)
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    outcome = None
    try:
        if op == "gc":
            outcome = gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, force=True),
                             run_id=f"gc-{time.time_ns()}")
        elif op == "restore":
            job = restore.restore(meta, store, "demo", "s1", "r")
            copyjob.plan(meta, job)
            copyjob.run_inline(meta, store, job)
            outcome = copyjob.finalize(meta, job)
            assert outcome.state != "Completed", "a restore copied a file through a symlink"
        elif op == "snapshot":
            outcome = snapshot.create(meta, store, "demo", "s2")
        else:
            outcome = export.export(meta, store, LocalStore(tmp_path / "backup"), "demo", "s1", **quiet)
            assert outcome["state"] != "committed", "an export read a file through a symlink"
    except SeglakeError as e:
        outcome = f"{type(e).__name__}: {e}"
    print(op, "->", str(outcome)[:300])
    assert outside.exists() and hashlib.sha256(outside.read_bytes()).hexdigest() == digest
    assert os.path.islink(inside) or op == "gc", "the link was removed by a step that is not GC"
    if op == "gc":
        assert os.path.islink(inside), f"GC removed a referenced key (a symlink to its bytes): {outcome}"
    # put the file back: everything completes
    os.unlink(inside)
    shutil.move(outside, inside)
    job = restore.restore(meta, store, "demo", "s1", "r_ok")
    copyjob.plan(meta, job)
    copyjob.run_inline(meta, store, job)
    assert copyjob.finalize(meta, job).state == "Completed"
    assert_restored(meta, store, job, snap)
    assert_invariants(meta, store)
