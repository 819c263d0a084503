"""snapshot_export, snapshot_verify and snapshot_restore_external through dag.test()
against real etcd and real files: export a snapshot, verify the bundle, restore it into a
new collection; the runs' notes; bad conf refused before any change."""

from __future__ import annotations

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import holds
from seglake.lifecycle.backup import export as exports
from seglake.storage import layout
from seglake.storage.local import LocalStore
from seglake.visibility import visible_count

pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=1, segments=2, rows=40, dim=4)


@pytest.fixture
def backup(tmp_path, monkeypatch):
    path = tmp_path / "backup"
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(path))
    return LocalStore(path)


def test_export_verify_restore_from_a_bundle(airflow_env, meta, store, backup, capfd):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    run = load_dag("snapshot_export").test(run_conf={"collection": "demo", "snapshot": "s1", "bundle": "b1"})
    assert run.state == "success", task_states(run)
    assert [b["bundle"] for b in bundles.list_bundles(backup)] == ["b1"]
    assert [e["state"] for e in exports.list_exports(meta)] == ["committed"]
    out, _ = capfd.readouterr()
    assert "run note: export demo/s1: bundle b1 committed" in out, out[-2000:]

    run = load_dag("snapshot_verify").test(run_conf={"collection": "demo", "bundle": "b1"})
    assert run.state == "success", task_states(run)

    conf = {"collection": "demo", "bundle": "b1", "target": "demo_dr", "engine": "inline"}
    # issue 27: its last check (the rows against the bundle's) marked success instead of run: the note read
    # verify.summarize and the run was green; now not green, and the next run resumes and compares
    run = load_dag("snapshot_restore_external").test(run_conf=conf, mark_success_pattern=r"^compare$")
    assert run.state == "failed" and task_states(run)["compare"] == "success", task_states(run)
    run = load_dag("snapshot_restore_external").test(run_conf=conf)
    assert run.state == "success", task_states(run)
    target = meta.catalog.get_by_name("demo_dr")
    assert visible_count(meta, store, target.collection_id) == visible_count(meta, store, coll.collection_id) > 0
    # straight from the bundle: no imported snapshot, the bundle's hold gone with the job
    assert [(r.collection_name, r.name) for r in meta.snapshots.list()] == [("demo", "s1")]
    assert holds.holders(backup, "default", "demo", "b1") == []

    # the operator page: the export, its last verification, the pin the export held is gone
    from seglake import console
    from seglake_airflow.ui.render import render_page

    snapshot.pin(meta, "demo", "s1", 3600, by="ops")
    data = console.overview(meta, store)
    (e,) = data["backup"]["rows"]["exports"]
    assert (e["bundle"], e["state"], e["verified_ok"]) == ("b1", "committed", True)
    html = render_page(data)
    section = html[html.index('<section id="backups">'):]
    assert "b1" in section and ">OK<" in section and "ops" in section, section[:3000]

    # a damaged data file: the verify run fails naming it
    doc = bundles.read(backup, "default", "demo", "b1")
    key, f = sorted(doc["files"].items())[0]
    backup.put(layout.bundle_blob(f["sha256"]), b"x" * f["size"])
    capfd.readouterr()
    run = load_dag("snapshot_verify").test(run_conf={"collection": "demo", "bundle": "b1"})
    assert run.state == "failed"
    out, err = capfd.readouterr()
    assert key in out + err


@pytest.mark.parametrize("dag_id, conf, words", [
    ("snapshot_export", {"collection": "demo", "snapshot": "s1", "bundel": "x"}, "did you mean 'bundle'"),
    ("snapshot_export", {"collection": "demo", "snapshot": "s1", "backup_uri": "relative/dir"},
     "an absolute local path or s3://bucket/prefix"),
    ("snapshot_verify", {"collection": "demo", "bundle": "nope"}, "not found in the backup target"),
    # a restore from a bundle imports nothing: the import's name is no key of it
    ("snapshot_restore_external", {"collection": "demo", "bundle": "b1", "target": "t", "as_collection": "x"},
     "'as_collection' (did you mean 'collection'?)"),
])
def test_bad_conf_is_refused_before_any_change(airflow_env, meta, store, backup, dag_id, conf, words, capfd):
    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    run = load_dag(dag_id).test(run_conf=conf)
    assert run.state == "failed"
    assert list(backup.list("")) == [] and exports.list_exports(meta) == []
    out, err = capfd.readouterr()
    assert words in out + err


def test_a_missing_target_is_refused_before_a_run_exists(airflow_env, meta, store, backup):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="param target"):
        load_dag("snapshot_restore_external").test(run_conf={"collection": "demo", "bundle": "b1"})


@pytest.mark.spark
def test_verify_on_spark_checks_every_file_and_names_a_bad_one(airflow_env, meta, store, backup, capfd):
    """engine=spark: the data files spread over the executors, the report recorded in
    etcd by the job and judged by the DAG; a damaged data file fails the run naming it."""
    from seglake.lifecycle.backup import verify

    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    exports.export(meta, store, backup, "demo", "s1", bundle="b1", say=lambda line: None)
    run = load_dag("snapshot_verify").test(run_conf={"collection": "demo", "bundle": "b1", "engine": "spark"})
    assert run.state == "success", task_states(run)
    states = task_states(run)
    assert states["check_spark"] == "success" and states["check_inline"] == "skipped", states
    rec = verify.recorded(meta, "default", "demo", "b1")
    assert rec["ok"] and rec["engine"] == "spark" and rec["data_files"] > 0

    doc = bundles.read(backup, "default", "demo", "b1")
    key, f = sorted(doc["files"].items())[-1]
    backup.put(layout.bundle_blob(f["sha256"]), b"y" * f["size"])
    capfd.readouterr()
    run = load_dag("snapshot_verify").test(run_conf={"collection": "demo", "bundle": "b1", "engine": "spark"})
    assert run.state == "failed"
    out, err = capfd.readouterr()
    assert key in out + err
    rec = verify.recorded(meta, "default", "demo", "b1")
    assert not rec["ok"] and rec["engine"] == "spark" and rec["problem_count"] >= 1


def test_verify_judges_only_its_own_target_s_report(airflow_env, meta, store, backup, tmp_path, monkeypatch,
                                                    capfd):
    """Two verify runs of bundles of the same name in two targets overlap (max_active_runs
    4): the run of the damaged one must not pass on the other's OK report, recorded
    after its own under the same key."""
    from seglake.lifecycle.backup import verify

    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")
    other = LocalStore(tmp_path / "other")
    for t in (backup, other):
        exports.export(meta, store, t, "demo", "s1", bundle="b1", say=lambda line: None)
    doc = bundles.read(other, "default", "demo", "b1")
    key, f = sorted(doc["files"].items())[0]
    other.put(layout.bundle_blob(f["sha256"]), b"x" * f["size"])
    real = verify.verify

    def overlapped(target, *a, **kw):
        rep = real(target, *a, **kw)
        real(backup, *a, **kw)   # the other run (default target) records right after
        return rep

    monkeypatch.setattr(verify, "verify", overlapped)
    run = load_dag("snapshot_verify").test(run_conf={"collection": "demo", "bundle": "b1",
                                                     "backup_uri": str(tmp_path / "other"), "engine": "inline"})
    assert run.state == "failed", task_states(run)
