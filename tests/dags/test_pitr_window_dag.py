"""pitr_window (the point-in-time window form) through dag.test() against real etcd: set,
change, clear; a bad window refused before any change."""

from __future__ import annotations

import pytest
from dag_helpers import load_dag, task_states

from seglake.lifecycle import pitr
from seglake.wal.client import WalClient

pytestmark = pytest.mark.airflow
SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4}]


def test_the_form_sets_changes_and_clears_the_window(airflow_env, meta, store, settings, capfd):
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
    run = load_dag("pitr_window").test(run_conf={"collection": "src", "window": "3d"})
    assert run.state == "success", task_states(run)
    assert pitr.get_window(meta, "src")["window"] == "3d"
    assert load_dag("pitr_window").test(run_conf={"collection": "src", "window": "12h"}).state == "success"
    assert pitr.get_window(meta, "src")["window"] == "12h"
    for bad in ({"collection": "src", "window": "nan"}, {"collection": "src"},
                {"collection": "src", "window": "3d", "windw": 1}, {"collection": "nope", "window": "3d"}):
        assert load_dag("pitr_window").test(run_conf=bad).state == "failed", bad
        assert pitr.get_window(meta, "src")["window"] == "12h"
    out, err = capfd.readouterr()
    assert "did you mean 'window'" in out + err
    assert load_dag("pitr_window").test(run_conf={"collection": "src", "clear": True}).state == "success"
    assert pitr.get_window(meta, "src") is None
