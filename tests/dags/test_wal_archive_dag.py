"""wal_archive (continuous backup) through dag.test() against real etcd and real files: the
retention form turns archiving on, a run ships the WAL, its note says how far; bad conf
refused before anything is written."""

from __future__ import annotations

import pytest
from dag_helpers import load_dag, task_states

from seglake.lifecycle import retention
from seglake.lifecycle.backup import archive
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import WalLog

pytestmark = pytest.mark.airflow
SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4}]


def _ingest(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("arch", SCHEMA, shards=2)
        for i in range(3):
            c.insert("arch", synthetic_rows(coll, 10, 1 + 10 * i))
    return coll


def test_the_retention_form_turns_archiving_on_and_a_run_ships_the_wal(airflow_env, meta, store, settings, tmp_path):
    _ingest(meta, store, settings)
    run = load_dag("snapshot_retention").test(run_conf={"collection": "arch", "keep_last": 2, "archive": True})
    assert run.state == "success", task_states(run)
    assert retention.get_policy(meta, "arch")["archive"] is True
    target = tmp_path / "backup"
    run = load_dag("wal_archive").test(run_conf={"seconds": 0, "backup_uri": str(target)})
    assert run.state == "success", task_states(run)
    site = archive.site_id(meta)
    for p in archive.archived_pchannels(meta):
        last = WalLog(meta, store, p).state().last
        assert [r.n for r in archive.ArchivedLog(LocalStore(target), site, p).fragments()] == list(range(1, last + 1))
    assert all(s["behind"] == 0 for s in archive.status(meta))


@pytest.mark.parametrize("conf, words", [
    ({"seconds": -1}, "param seconds"),
    ({"secs": 5}, "did you mean 'seconds'"),
])
def test_bad_conf_is_refused_before_anything_is_written(airflow_env, meta, store, settings, tmp_path, conf, words,
                                                       capfd):
    from airflow.sdk.definitions.param import ParamValidationError

    _ingest(meta, store, settings)
    retention.set_policy(meta, "arch", {"keep_last": 1, "archive": True})
    target = tmp_path / "backup"
    try:
        run = load_dag("wal_archive").test(run_conf={**conf, "backup_uri": str(target)})
    except ParamValidationError as e:
        assert words in str(e)
    else:
        assert run.state == "failed"
        out, err = capfd.readouterr()
        assert words in out + err
    assert not target.exists() or not any(target.rglob("*.frag"))
