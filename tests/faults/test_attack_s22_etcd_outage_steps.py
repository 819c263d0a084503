"""attack s22: etcd frozen (SIGSTOP) or killed in the middle of a bundle export, a
bundle import and a compaction (test_etcd_outage covers restore, snapshot commit and GC):
the step completes after etcd comes back or fails with a clear error; a re-run converges
to exactly the rows of before, nothing partial visible, nothing twice."""

import sys
import uuid
from pathlib import Path

import pytest
from fault_harness import outage as _outage
from fault_harness import price_rows as _rows
from fault_harness import assert_invariants, seed_and_snapshot, wait_until

from seglake.config import Settings
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export, imports, verify
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.storage.local import LocalStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))
from compaction_helpers import Writer, exact, mixed_workload, policy, rows  # noqa: E402

from seglake.lifecycle import compaction  # noqa: E402

quiet = dict(say=lambda line: None)





@pytest.mark.parametrize("mode", ["stop", "kill"])
def test_etcd_outage_during_an_export(etcd, fmeta, fstore, fsettings, spawn, tmp_path, mode):
    _, snap = seed_and_snapshot(fmeta, fstore)
    path = tmp_path / "backup"
    child = spawn("backup_export", {"collection": "demo", "snapshot": "s1", "target": str(path)}, fsettings,
                  faults="export.after_file:sleep=0.05")
    wait_until(lambda: path.exists() and len(bundles.blobs(LocalStore(path))) >= snap.files // 3,
               what="a third exported")
    _outage(etcd, mode)
    done = child.wait(120).assert_ok_or_clear_error("etcd")
    if not done:
        rep = export.export(fmeta, fstore, LocalStore(path), "demo", "s1", **quiet)
        assert rep["state"] == "committed"
    assert verify.verify(LocalStore(path), "demo", "s1", **quiet)["ok"]
    assert_invariants(fmeta, fstore)


@pytest.mark.parametrize("mode", ["stop", "kill"])
def test_etcd_outage_during_an_import(etcd, fmeta, fstore, fsettings, spawn, tmp_path, mode):
    _, snap = seed_and_snapshot(fmeta, fstore)
    want = _rows(fmeta, fstore, "demo")
    path = tmp_path / "backup"
    export.export(fmeta, fstore, LocalStore(path), "demo", "s1", **quiet)
    other = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:6]}",
                                "store_uri": str(tmp_path / "dr"), "etcd_timeout": 2, "etcd_retries": 3})
    child = spawn("backup_import", {"collection": "demo", "bundle": "s1", "target": str(path)}, other,
                  faults="import.after_file:sleep=0.05")
    wait_until(lambda: (tmp_path / "dr").exists() and
               sum(1 for _ in open_store(other).list("insert_log/")) >= 10, what="import under way")
    _outage(etcd, mode)
    done = child.wait(120).assert_ok_or_clear_error("etcd")
    with Meta.from_settings(other) as meta2:
        store2 = open_store(other)
        if not done:
            imports.import_bundle(meta2, store2, LocalStore(path), "demo", "s1", **quiet)
        (rec,) = meta2.snapshots.list()
        assert rec.state == "COMMITTED" and rec.rows == snap.rows and rec.segments == snap.segments
        from seglake.lifecycle import copyjob, restore
        job = restore.restore(meta2, store2, "demo", "s1", "demo_r")
        copyjob.plan(meta2, job)
        copyjob.run_inline(meta2, store2, job)
        assert copyjob.finalize(meta2, job).state == "Completed"
        assert _rows(meta2, store2, "demo_r") == want
        assert_invariants(meta2, store2)


@pytest.mark.parametrize("mode", ["stop", "kill"])
def test_etcd_outage_during_a_compaction(etcd, fmeta, fstore, fsettings, spawn, mode):
    pol = policy(target_rows=10_000)
    w = Writer(fmeta, fstore, fsettings)
    w.create("c", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "c", step)
    before = exact(fmeta, fstore, "c")
    n_units = len(compaction.plan(fmeta, fstore, "c", pol).units)
    assert n_units >= 2
    child = spawn("compact", {"collection": "c", "policy": pol.to_json()}, fsettings,
                  faults="compaction.after_files:sleep=1.0")
    wait_until(lambda: any(r["state"] for r in compaction.unit_records(fmeta)), what="a unit prepared")
    _outage(etcd, mode)
    out = child.wait(120)
    out.assert_ok_or_clear_error("etcd")
    assert exact(fmeta, fstore, "c") == before
    again = spawn("compact", {"collection": "c", "policy": pol.to_json()}, fsettings).wait(120)
    assert again.rc == 0, again.err[-2000:]
    assert exact(fmeta, fstore, "c") == before and rows(fmeta, fstore, "c") == w.model.visible()
    assert compaction.plan(fmeta, fstore, "c", pol).units == []
    assert {r["state"] for r in compaction.unit_records(fmeta)} == {compaction.COMMITTED}
