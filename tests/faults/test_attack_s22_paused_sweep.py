"""attack s22: a backup target's data sweep paused (SIGSTOP: a VM suspended, a GC pause)
between its last check and its delete, for longer than its lock's TTL.

The sweep's protocol: lock (renewed by a heartbeat thread), mark, read every bundle
twice, `beat.check()` (the lock renewed within LOCK_TTL / 2), then `delete_checked`.
An export that finds no live lock and the same mark at its listing and at its check
trusts that every data file it listed is still there. A sweep frozen right after its
check lets its lock go stale; an export meanwhile reuses (deduplicates against) the data
files the frozen sweep already chose as candidates, and commits its bundle. The sweep
then wakes and deletes them (`delete_checked` only compares size and mtime, which the
dedupe did not change): a committed bundle with missing data files.
LOCK_TTL is 10 min; here it is 3 s in both processes (a 3.5 s pause stands for a longer
than 1 h one). Expected: the bundle intact -- the sweep checks its lock again right
before each delete (delete_checked's guard) and stops: it went unrenewed past TTL / 2.
"""

import json
import os
import signal
import sys
import time

from fault_harness import seed_and_snapshot, wait_until

from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export, holds, prune, verify
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)

CHILD = r"""
import json, os, signal, sys
from seglake.lifecycle.backup import prune
from seglake.storage.local import LocalStore
prune.LOCK_TTL = float(sys.argv[2])          # both sides agree on the TTL (10 min in production)
t = LocalStore(sys.argv[1])
real = t.delete_checked
done = []
def paused(objects, guard=None):
    objects = list(objects)
    if not done:                              # the candidates' delete (not the lock's, later)
        done.append(1)
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen right after the sweep's last check
    return real(objects, guard=guard)
t.delete_checked = paused
try:
    rep = prune.sweep_data(t, min_age=3600.0, say=lambda line: None)
except prune.SweepRefused as e:
    rep = {"refused": str(e)}
print(json.dumps(rep))
"""


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_sweep_paused_past_its_lock_ttl_does_not_delete_what_an_export_reused(meta, store, settings, spawn,
                                                                                 tmp_path, monkeypatch):
    seed_and_snapshot(meta, store)
    path = tmp_path / "backup"
    target = LocalStore(path)
    export.export(meta, store, target, "demo", "s1", bundle="b1", **quiet)
    assert holds.drop_unless_held(target, "default", "demo", "b1") == []   # b1 pruned: its data files unreferenced
    old = time.time() - 2 * 86400
    for sha in bundles.blobs(target):
        os.utime(path / f"data/{sha[:2]}/{sha}", (old, old))
    n = len(bundles.blobs(target))
    ttl = 3.0
    child = spawn("", {}, settings, argv=[sys.executable, "-c", CHILD, str(path), str(ttl)])
    wait_until(lambda: _stopped(child.pid) or not child.alive(), timeout=60, what="the sweep frozen before deleting")
    assert child.alive(), child.err.read_text()[-2000:]
    try:
        monkeypatch.setattr(prune, "LOCK_TTL", ttl)   # the frozen sweep's lock goes stale
        time.sleep(ttl + 0.5)
        rep = export.export(meta, store, target, "demo", "s1", bundle="b2", **quiet)
        print("export:", rep["state"])
        assert rep["state"] == "committed"
        assert verify.verify(target, "demo", "b2", **quiet)["ok"]
    finally:
        os.kill(child.pid, signal.SIGCONT)
    out = child.wait(60)
    print("sweep:", out.out.strip()[-300:], out.err[-500:])
    left = len(bundles.blobs(target))
    assert left == n and verify.verify(target, "demo", "b2", **quiet)["ok"], (
        f"the woken sweep deleted {n - left} of the {n} data files the committed bundle b2 lists")
    assert "unrenewed" in json.loads(out.out.strip().splitlines()[-1])["refused"]
