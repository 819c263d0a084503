"""Every DAG's conf at the edge (issue 8, items 3, 19 and "Conf"): refused before a run
exists (Param form: NaN, Infinity, a trailing newline, a missing name) or by the DAG's
first task `check_conf` (unknown and misspelt keys), before any side effect: the run's
other tasks never start and nothing in etcd or the store changes."""

import math

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=1, segments=2, rows=50, dim=4)
DAG_IDS = ["snapshot_create", "snapshot_drop", "snapshot_restore", "copy_segment_job", "gc", "verify_collection"]


def _etcd(meta) -> dict:
    return {kv.key: kv.value for kv in meta.kv.range(meta.keys.prefix)}


def _files(store) -> list:
    return sorted(o.key for o in store.list(""))


@pytest.fixture
def stocked(airflow_env, meta, store):
    """A collection with a COMMITTED snapshot and a finished copy job to aim bad confs at."""
    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "snap")
    return meta


@pytest.fixture(scope="module")
def dags(airflow_home):
    return {d: load_dag(d) for d in DAG_IDS}


@pytest.mark.parametrize("dag_id,conf,param", [
    ("snapshot_create", {"collection": "demo", "name": "s", "ttl_hours": math.nan}, "ttl_hours"),
    ("snapshot_create", {"collection": "demo", "name": "s", "ttl_hours": math.inf}, "ttl_hours"),
    ("snapshot_create", {"collection": "demo", "name": "s\n"}, "name"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "snap", "target": "t", "timeout_hours": math.nan},
     "timeout_hours"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "snap", "target": "t", "timeout_hours": 1e9},
     "timeout_hours"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "snap", "target": "t\n"}, "target"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "snap"}, "target"),     # no default target
    ("snapshot_drop", {"collection": "demo", "snapshot": "snap"}, "name"),          # no default snapshot
    ("copy_segment_job", {}, "job_id"),                                              # no default job
    ("copy_segment_job", {"job_id": 2**63}, "job_id"),                               # ids have a maximum
    ("copy_segment_job", {"job_id": math.nan}, "job_id"),
    ("gc", {"missing_tolerance_hours": math.nan}, "missing_tolerance_hours"),
    ("gc", {"drop_tolerance_hours": -math.inf}, "drop_tolerance_hours"),
    ("gc", {"collection": "demo\n"}, "collection"),
    ("verify_collection", {}, "collection"),
])
def test_bad_conf_is_refused_before_a_run_exists(stocked, store, dags, dag_id, conf, param):
    from airflow.sdk.definitions.param import ParamValidationError

    before = (_etcd(stocked), _files(store))
    with pytest.raises(ParamValidationError, match=f"param {param}"):
        dags[dag_id].test(run_conf=conf)
    assert (_etcd(stocked), _files(store)) == before


@pytest.mark.parametrize("dag_id,conf,message", [
    ("snapshot_drop", {"collection": "demo", "name": "snap", "snapshot": "snap"}, "unknown conf key 'snapshot'"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "snap", "target": "t", "tagret": "u"},
     "did you mean 'target'"),
    ("gc", {"dryrun": True}, "did you mean 'dry_run'"),
    ("copy_segment_job", {"job_id": 1, "engin": "inline"}, "did you mean 'engine'"),
    ("snapshot_create", {"collection": "demo", "name": "s2", "ttl": 1}, "unknown conf key 'ttl'"),
    ("verify_collection", {"collection": "demo", "database": "default"}, "unknown conf key 'database'"),
])
def test_unknown_conf_keys_fail_the_first_task_before_any_side_effect(stocked, store, dags, dag_id, conf,
                                                                     message, capfd):
    before = (_etcd(stocked), _files(store))
    run = dags[dag_id].test(run_conf=conf)
    states = task_states(run)
    assert run.state == "failed", states
    assert states.pop("check_conf") == "failed"
    # the teardown notes the failure and is the leaf that fails the run (issue 27); it writes no state
    assert states.pop("run_note", "failed") == "failed"
    # nothing ran: a clean-up task with a failure trigger rule may only skip itself
    assert all(s in (None, "upstream_failed", "skipped") for s in states.values()), states
    assert (_etcd(stocked), _files(store)) == before
    out, err = capfd.readouterr()
    assert message in out + err


@pytest.mark.parametrize("variable,message", [
    ('{"missing_tolerance": NaN}', "key 'missing_tolerance' is NaN"),
    ('{"missing_tolerance": 1e999}', "'missing_tolerance' is 1e999, only finite numbers are allowed"),
    ('{"missing_tolerence": 60}', "did you mean 'missing_tolerance'"),
])
def test_a_bad_variable_fails_the_first_task_and_gc_deletes_nothing(stocked, store, dags, monkeypatch, variable,
                                                                     message, capfd):
    """The data-loss case of item 3: a NaN tolerance made the age cutoff NaN and every
    unreferenced file was deleted regardless of age."""
    import os
    import time

    orphan = store.put("insert_log/999/1/2/100/3", b"old and unreferenced")
    os.utime(store.root / orphan.key, (time.time() - 30 * 86400,) * 2)
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", variable.replace("{", '{"store_uri": "%s", ' % store.uri, 1))
    before = (_etcd(stocked), _files(store))
    run = dags["gc"].test(run_conf={"dry_run": False})
    states = task_states(run)
    assert run.state == "failed" and states.pop("check_conf") == "failed", states
    # the teardown notes the failure and is the leaf that fails the run (issue 27); it writes no state
    assert states.pop("run_note", "failed") == "failed"
    # nothing ran: a clean-up task with a failure trigger rule may only skip itself
    assert all(s in (None, "upstream_failed", "skipped") for s in states.values()), states
    assert (_etcd(stocked), _files(store)) == before
    out, err = capfd.readouterr()
    assert message in out + err


def test_every_dag_declares_the_contract_and_checks_it_first(dagbag):
    """Every DAG in dags/ takes its Params from seglake.contract, and `check_conf` is its
    only root: no task can run before the strict check."""
    from seglake.contract import SPECS

    assert not dagbag.import_errors, dagbag.import_errors
    assert set(dagbag.dag_ids) == set(SPECS)
    for dag_id, dag in dagbag.dags.items():
        assert set(dag.params) == set(SPECS[dag_id]), dag_id
        assert [t.task_id for t in dag.roots] == ["check_conf"], dag_id
        check = dag.get_task("check_conf")
        assert check.get_flat_relative_ids(upstream=False) == {t.task_id for t in dag.tasks} - {"check_conf"}, dag_id
