"""attack s22: etcd frozen (SIGSTOP) or killed for 3 s during a restore to a time (its
replay between chunks of segment records): the step completes after etcd is back or fails
with a clear error; a re-run converges on the model, nothing twice, and the target is
never usable before it is complete."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from fault_harness import assert_nothing_committed_twice, wait_until

from seglake.errors import NotFound
from seglake.meta.segments import DROPPED

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_pitr_kills import _source  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "pitr"))
from pitr_model import visible_of  # noqa: E402

from seglake.lifecycle import pitr  # noqa: E402


def _target_segments(meta, name):
    try:
        cid = meta.catalog.get_by_name(name).collection_id
    except NotFound:
        return 0
    return sum(1 for s in meta.segments.list(cid) if s.source is None)


@pytest.mark.parametrize("mode", ["stop", "kill"])
def test_etcd_outage_during_a_pitr_replay(etcd, fmeta, fstore, fsettings, spawn, mode):
    settings = fsettings.replace(flush_seal_rows=40)
    model, t = _source(fmeta, fstore, settings)
    args = {"collection": "src", "target": "r", "as_of": t}
    child = spawn("pitr_restore", args, settings, faults="pitr.between_chunks:sleep=0.3")
    wait_until(lambda: _target_segments(fmeta, "r") >= 1, timeout=120, what="replay under way")
    if mode == "kill":
        etcd.kill()
        time.sleep(3)
        assert fmeta.catalog  # noqa: the parent's client stays
        etcd.restart()
    else:
        etcd.pause()
        time.sleep(3)
        etcd.resume()
    done = child.wait(300).assert_ok_or_clear_error("etcd")
    target = fmeta.catalog.get_by_name("r")
    if not done:
        assert target.state == "Importing"
        again = spawn("pitr_restore", args, settings).wait(300)
        assert again.rc == 0, again.err[-3000:]
    target = fmeta.catalog.get(target.collection_id)
    assert target.state == "Created"
    assert visible_of(fmeta, fstore, target) == model.visible(t)
    assert_nothing_committed_twice(fmeta, fstore)
    live = [s for s in fmeta.segments.list(target.collection_id) if s.state != DROPPED and s.source is None]
    markers = pitr.summary(fmeta, target)["vchannels"]
    assert sum(v["rows"] for v in markers.values()) == sum(s.num_rows for s in live)
