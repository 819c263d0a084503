"""A restore to a time SIGKILLed during its replay (after the files of a vchannel, between
two chunks of its segment records, before the target is made usable), then re-run: it
converges on the model of the acknowledged operations, no segment is committed twice,
and nothing of the target was visible meanwhile (Importing)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fault_harness import assert_nothing_committed_twice

from seglake.lifecycle import pitr, snapshot
from seglake.meta.segments import DROPPED
from seglake.wal.client import WalClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "pitr"))
from pitr_model import SCHEMA, Model, flush_all, rows, visible_of  # noqa: E402


def _source(meta, store, settings) -> tuple[Model, int]:
    """A snapshot, then ~5000 rows per vchannel, deletes and an upsert to replay."""
    with WalClient(meta, store, settings, batch_rows=2000) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 200), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.insert("src", rows(range(1000, 7000), 2.0)), 2.0)
        model.record(c.insert("src", rows(range(7000, 11000), 3.0), partition="p1"), 3.0)
        model.record(c.delete("src", list(range(1, 50)) + list(range(1000, 1100))), 4.0)
        model.record(c.upsert("src", rows(range(7000, 7050), 5.0), partition="p1"), 5.0)
        t = meta.tso.now()
        model.record(c.delete("src", list(range(50, 60))), 6.0)   # after the instant
    return model, t


@pytest.mark.parametrize("point", ["pitr.after_files", "pitr.between_chunks", "pitr.before_created"])
def test_replay_killed_then_re_run_converges(meta, store, settings, spawn, point):
    settings = settings.replace(flush_seal_rows=40)   # the replay cuts >100 segments per vchannel
    model, t = _source(meta, store, settings)
    args = {"collection": "src", "target": "r", "as_of": t}
    out = spawn("pitr_restore", args, settings, faults=f"{point}:kill").wait(300)
    assert out.rc == -9, out.err[-2000:]
    target = meta.catalog.get_by_name("r")
    assert target.state == "Importing"     # nothing of it usable until the replay finished
    done = spawn("pitr_restore", args, settings).wait(300)
    assert done.rc == 0, done.err[-3000:]
    target = meta.catalog.get(target.collection_id)
    assert target.state == "Created"
    assert visible_of(meta, store, target) == model.visible(t)
    assert_nothing_committed_twice(meta, store)
    live = [s for s in meta.segments.list(target.collection_id) if s.state != DROPPED and s.source is None]
    markers = pitr.summary(meta, target)["vchannels"]
    assert sum(v["rows"] for v in markers.values()) == sum(s.num_rows for s in live)
    if point == "pitr.between_chunks":   # the killed attempt's committed chunk was set aside
        assert any(s.state == DROPPED and s.source is None for s in meta.segments.list(target.collection_id))
