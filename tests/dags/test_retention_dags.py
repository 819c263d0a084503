"""snapshot_retention (the policy form) and snapshot_schedule (the scheduled runs)
through dag.test() against real etcd and real files; bad conf refused before any change."""

from __future__ import annotations

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import retention

pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=1, segments=2, rows=40, dim=4)


def test_set_policy_then_scheduled_runs_take_and_keep_snapshots(airflow_env, meta, store, capfd):
    coll, _ = demo.seed(meta, store, SMALL)
    run = load_dag("snapshot_retention").test(run_conf={"collection": coll.name, "keep_last": 1,
                                                        "keep_daily": 2})
    assert run.state == "success", task_states(run)
    pol = retention.get_policy(meta, coll.name)
    assert (pol["keep_last"], pol["keep_daily"], pol["keep_hourly"]) == (1, 2, 0)

    capfd.readouterr()
    run = load_dag("snapshot_schedule").test(run_conf={"dry_run": True})
    assert run.state == "success", task_states(run)
    assert list(meta.snapshots.list(coll.collection_id)) == []
    out, err = capfd.readouterr()   # the note says it was a dry run and what it would do (not "policies run")
    assert "run note: snapshot_schedule DRY RUN (nothing created, pruned or exported): 1 retention policies run: " \
           "would create 1 snapshots" in out + err, out + err

    run = load_dag("snapshot_schedule").test(run_conf={"collection": coll.name})
    assert run.state == "success", task_states(run)
    out, err = capfd.readouterr()
    assert "run note: snapshot_schedule: 1 retention policies run: 1 snapshots created, 0 pruned" in out + err
    (rec,) = meta.snapshots.list(coll.collection_id)
    assert rec.state == "COMMITTED" and retention.sched_time(rec.name) is not None
    # a second run the same day: the policy's finest unit is the day -> nothing new, nothing dropped
    run = load_dag("snapshot_schedule").test(run_conf={})
    assert run.state == "success", task_states(run)
    assert [r.name for r in meta.snapshots.list(coll.collection_id)] == [rec.name]

    run = load_dag("snapshot_retention").test(run_conf={"collection": coll.name, "clear": True})
    assert run.state == "success" and retention.get_policy(meta, coll.name) is None


def test_a_param_out_of_range_is_refused_before_a_run_exists(airflow_env, meta, store):
    from airflow.sdk.definitions.param import ParamValidationError
    demo.seed(meta, store, SMALL)
    with pytest.raises(ParamValidationError, match="param keep_daily"):
        load_dag("snapshot_retention").test(run_conf={"collection": "demo", "keep_daily": -1})
    assert retention.list_policies(meta) == []


@pytest.mark.parametrize("dag_id, conf, words", [
    ("snapshot_retention", {"collection": "demo", "keep_dayly": 3}, "did you mean 'keep_daily'"),
    ("snapshot_retention", {"collection": "demo"}, "every count is 0"),
    ("snapshot_schedule", {"collection": "nope"}, "no retention policy"),
])
def test_bad_conf_is_refused_before_any_change(airflow_env, meta, store, dag_id, conf, words, capfd):
    demo.seed(meta, store, SMALL)
    run = load_dag(dag_id).test(run_conf=conf)
    assert run.state == "failed"
    assert retention.list_policies(meta) == []
    out, err = capfd.readouterr()
    assert words in out + err


def test_an_exporting_policy_keeps_its_snapshots_in_the_backup_target(airflow_env, meta, store, tmp_path,
                                                                      monkeypatch):
    """The form sets `export`; the scheduled run takes the snapshot and exports it to the
    backup target as a bundle of the same name; a dry run lists it and writes nothing."""
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.storage.local import LocalStore

    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))
    coll, _ = demo.seed(meta, store, SMALL)
    run = load_dag("snapshot_retention").test(run_conf={"collection": coll.name, "keep_last": 2, "export": True})
    assert run.state == "success", task_states(run)
    assert retention.get_policy(meta, coll.name)["export"] is True
    target = LocalStore(tmp_path / "backup")
    run = load_dag("snapshot_schedule").test(run_conf={"dry_run": True})
    assert run.state == "success", task_states(run)
    assert list(target.list("")) == []
    run = load_dag("snapshot_schedule").test(run_conf={"collection": coll.name})
    assert run.state == "success", task_states(run)
    (rec,) = meta.snapshots.list(coll.collection_id)
    assert [(b, ok) for _, _, b, ok in bundles.find(target, "default", coll.name)] == [(rec.name, True)]
