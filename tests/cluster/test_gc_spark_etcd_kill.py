"""The etcd leader SIGKILLed during a GC mark that runs on the Spark standalone cluster
(issue 13 item 4, engine=spark): spark-submit of spark/jobs/gc_scan.py against the
cluster's master, one segment record per reference task, and every executor's Python
worker held at a gate at its SECOND segment task (`gc.mark.segments:gate=PATH@2`): at
least one key range of segment records has been read, the rest not. Then the kill (by
pid), then the gate opens.

- `leader`: the leader goes (one member of three): the mark completes from the other
  two members with exactly the report of a quiet mark, or fails closed;
- `quorum`: the leader and a follower go: the remaining ranges cannot be read, so the
  job must fail -- closed: no summary.json (the sweep refuses the run, latest.json does
  not name it), nothing deleted.

Either way a re-run converges: a Spark mark on the healed cluster has the quiet report,
its sweep deletes exactly the orphans, nothing referenced is lost."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_harness import assert_invariants, child_env, seed_and_snapshot, wait_until

from seglake.dev import demo
from seglake.errors import NotFound
from seglake.lifecycle import gc
from seglake.meta import Meta
from seglake.storage import layout, open_store

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.spark]
REPO = Path(__file__).resolve().parents[2]


def _submit(cluster, settings, run_id: str, log: Path, faults: str = "") -> subprocess.Popen:
    """gc_scan.py on the standalone master, its own process group (killed by the caller)."""
    env = child_env(settings, faults=faults, extra={"PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"})
    cmd = [str(Path(sys.executable).parent / "spark-submit"), "--master", cluster.spark_master_url,
           "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
           str(REPO / "spark" / "jobs" / "gc_scan.py"), "--run-id", run_id, "--segment-range-keys", "1",
           "--missing-tolerance", "0", "--drop-tolerance", "0", "--force", "1", "--dry-run", "0"]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()


def _report(store, run_id: str) -> set[tuple[str, str]]:
    return {(c["path"], c["reason"]) for c in gc.read_report(store, run_id)}


def _leader(cluster) -> int:
    """Index of the leader, once the live members agree there is one."""
    seen: list = []
    wait_until(lambda: seen.append(cluster.leader()) or seen[-1] is not None, timeout=30, poll=0.05,
               what="an etcd leader")
    return seen[-1]


@pytest.mark.parametrize("lose", ["leader", "quorum"])
def test_etcd_leader_killed_during_a_spark_gc_mark_completes_or_fails_closed_then_converges(
        healthy_cluster, root_prefix, tmp_path, lose):
    cluster = healthy_cluster
    # short etcd waits: a task that cannot read fails in seconds (Spark retries it 4 times)
    settings = cluster.settings(root=root_prefix, prefix=root_prefix, etcd_timeout=3, etcd_retries=1)
    with Meta.from_settings(settings) as meta:
        store = open_store(settings)
        coll, _ = seed_and_snapshot(meta, store)
        demo.seed(meta, store, demo.SeedParams(name="other", partitions=1, segments=2, rows=50, dim=8))
        orphans = [layout.insert_log(coll.collection_id, coll.partitions[0].partition_id, 900_000_000 + i, demo.PK, 1)
                   for i in range(3)]
        for key in orphans:
            store.put(key, b"orphan")
        quiet = gc.mark(meta, store, gc.GCOptions.from_settings(settings, force=True, dry_run=True,
                                                               missing_tolerance=0.0))
        want = _report(store, quiet.run_id)
        assert {p for p, _ in want} == set(orphans)

        gate = tmp_path / "gate"
        run = f"gc-kill-{lose}"
        proc = _submit(cluster, settings, run, tmp_path / "mark.log", faults=f"gc.mark.segments:gate={gate}@2")
        killed = []
        try:
            wait_until(lambda: Path(f"{gate}.reached").exists() or proc.poll() is not None, timeout=240,
                       poll=0.05, what="an executor at its second segment range")
            assert proc.poll() is None, "the mark ended before the gate:\n" + (tmp_path / "mark.log").read_text()[-3000:]
            lead = _leader(cluster)
            victims = [lead] if lose == "leader" else [lead, (lead + 1) % len(cluster.etcd)]
            for i in victims:
                cluster.kill_member(i)  # SIGKILL by pid
                killed.append(cluster.etcd[i].member)
            gate.touch()
            t = time.time()
            rc = _finish(proc)
            after = time.time() - t
        finally:
            gate.touch()
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait()
        held = Path(f"{gate}.reached").read_text().split()
        log = (tmp_path / "mark.log").read_text()
        print(f"\nkilled etcd {killed} with {len(held)} executor worker(s) held at their 2nd segment range; "
              f"spark-submit rc {rc}, {after:.1f} s after the gate opened")

        if lose == "quorum":
            assert rc != 0, "a mark that could not read its references completed:\n" + log[-3000:]
            cluster.restart_members(victims)
        if rc == 0:  # completed: exactly the quiet mark's report, and it is sweepable
            assert _report(store, run) == want
        else:  # failed closed: nothing a sweep accepts, nothing deleted
            assert "references" in log or "etcd" in log, log[-3000:]
            with pytest.raises(NotFound):
                store.get(f"{gc.GC_PREFIX}/{run}/summary.json")
            assert gc.latest_summary(store)["run_id"] != run
            with pytest.raises(NotFound):
                gc.sweep(meta, store, run)
            assert all(store.head(k) for k in orphans)
            assert_invariants(meta, store)
            run = f"{run}-again"  # the re-run, on the healed cluster
            rc = _finish(_submit(cluster, settings, run, tmp_path / "again.log"))
            assert rc == 0, (tmp_path / "again.log").read_text()[-3000:]
            assert _report(store, run) == want

        swept = gc.sweep(meta, store, run)
        assert swept.deleted == len(orphans) and not swept.errors
        for key in orphans:
            with pytest.raises(NotFound):
                store.head(key)
        assert_invariants(meta, store)
        again = gc.mark(meta, store, gc.GCOptions.from_settings(settings, force=True, dry_run=True,
                                                               missing_tolerance=0.0))
        assert again.counts.candidates == 0
