"""An undrop from the backup target (issue 30 item 5) SIGKILLed during its replay, then
re-run through the CLI (`seglake collections undrop --from-target --bundle`): it converges
on the model of the acknowledged operations before the drop, nothing committed twice, the
target Importing (not usable) until then; the progress read never goes down across the
death and ends at 100 %."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fault_harness import assert_nothing_committed_twice

from seglake import cli
from seglake.lifecycle import drop, pitr
from seglake.lifecycle.backup import archive
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "pitr"))
from pitr_model import SCHEMA, Model, export_and_archive, flush_all, rows, visible_of  # noqa: E402


def _dropped(meta, store, settings, backup) -> Model:
    with WalClient(meta, store, settings, batch_rows=2000) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 200), 1.0)), 1.0)
        export_and_archive(meta, store, settings, backup, coll)
        model.record(c.insert("src", rows(range(1000, 9000), 2.0)), 2.0)
        model.record(c.insert("src", rows(range(7000, 8000), 3.0), partition="p1"), 3.0)
        model.record(c.delete("src", list(range(1, 50)) + list(range(1000, 1100))), 4.0)
        model.record(c.upsert("src", rows(range(7000, 7050), 5.0), partition="p1"), 5.0)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    archive.run(meta, store, backup)
    return model


@pytest.mark.parametrize("point", ["pitr.between_chunks", "pitr.before_created"])
def test_undrop_from_the_target_killed_then_re_run_by_the_cli(meta, store, settings, spawn, tmp_path, monkeypatch,
                                                              capsys, point):
    settings = settings.replace(flush_seal_rows=40)
    backup = tmp_path / "backup"
    model = _dropped(meta, store, settings, LocalStore(backup))
    want = model.visible(meta.tso.now())
    args = {"collection": "src", "target": "back", "backup": str(backup), "bundle": "s1"}
    out = spawn("pitr_undrop", args, settings, faults=f"{point}:kill").wait(300)
    assert out.rc == -9, out.err[-2000:]
    target = meta.catalog.get_by_name("back")
    assert target.state == "Importing"
    seen = pitr.progress(meta, target.collection_id)
    assert seen["bytes_total"] > 0 and 0 <= seen["bytes"] <= seen["bytes_total"]
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    rc = cli.main(["collections", "undrop", "src", "--as", "back", "--from-target", str(backup), "--bundle", "s1"])
    assert rc == 0, capsys.readouterr().err
    target = meta.catalog.get(target.collection_id)
    assert target.state == "Created"
    end = pitr.progress(meta, target.collection_id)
    assert end["bytes"] == end["bytes_total"] >= seen["bytes"] and end["percent"] == 100.0
    assert end["messages"] >= seen["messages"] and end["vchannels_done"] == end["vchannels"]
    assert visible_of(meta, store, target) == want
    assert_nothing_committed_twice(meta, store)
