"""A restore to a time FROM THE BACKUP TARGET ALONE SIGKILLed during its replay (after the
files of a vchannel, between two chunks, before the target is made usable), then re-run
(attack-archive): it converges on the model of the acknowledged operations, nothing is
committed twice, the target stays Importing meanwhile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fault_harness import assert_nothing_committed_twice

from seglake.lifecycle.backup import archive
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "pitr"))
from pitr_model import SCHEMA, Model, export_and_archive, rows, visible_of  # noqa: E402


def _source(meta, store, settings, backup) -> tuple[Model, int]:
    with WalClient(meta, store, settings, batch_rows=2000) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 200), 1.0)), 1.0)
        export_and_archive(meta, store, settings, backup, coll)
        model.record(c.insert("src", rows(range(1000, 12000), 2.0)), 2.0)
        model.record(c.insert("src", rows(range(7000, 9000), 3.0), partition="p1"), 3.0)
        model.record(c.delete("src", list(range(1, 50)) + list(range(1000, 1100))), 4.0)
        model.record(c.upsert("src", rows(range(7000, 7050), 5.0), partition="p1"), 5.0)
        t = meta.tso.now()
        model.record(c.delete("src", list(range(50, 60))), 6.0)   # after the instant
        model.record(c.insert("src", rows(range(20000, 20010), 7.0)), 7.0)
    archive.run(meta, store, backup)
    return model, t


@pytest.mark.parametrize("point", ["pitr.after_files", "pitr.between_chunks", "pitr.before_created"])
def test_attack_archive_replay_from_target_killed_then_re_run(meta, store, settings, spawn, tmp_path, point):
    settings = settings.replace(flush_seal_rows=40)
    backup = tmp_path / "backup"
    model, t = _source(meta, store, settings, LocalStore(backup))
    args = {"collection": "src", "target": "r", "as_of": t, "backup": str(backup)}
    out = spawn("pitr_restore_from_target", args, settings, faults=f"{point}:kill").wait(300)
    assert out.rc == -9, out.err[-2000:]
    target = meta.catalog.get_by_name("r")
    assert target.state == "Importing"
    done = spawn("pitr_restore_from_target", args, settings).wait(300)
    assert done.rc == 0, done.err[-3000:]
    target = meta.catalog.get(target.collection_id)
    assert target.state == "Created"
    assert visible_of(meta, store, target) == model.visible(t)
    assert_nothing_committed_twice(meta, store)
