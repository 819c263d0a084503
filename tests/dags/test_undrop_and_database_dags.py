"""collection_undrop and restore_database (issue 30 items 4 and 5, "a DAG form") through
dag.test() against real etcd and real files: an undrop from this store, an undrop from the
backup target alone after the source store and etcd root are deleted, a whole database at
one instant -- each equal to its model, row by row; the run note says what was used and the
rows; bad conf refused before any change (unknown keys naming the closest)."""

from __future__ import annotations

import shutil
import sys
import uuid
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

from seglake.lifecycle import drop, pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration" / "lifecycle" / "pitr"))
from pitr_model import SCHEMA, Model, flush_all, rows, visible_of  # noqa: E402

pytestmark = pytest.mark.airflow


def _write_and_drop(meta, store, settings, target=None):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        if target is not None:
            retention.set_policy(meta, "src", {"keep_last": 2, "archive": True})
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 70), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        if target is not None:
            exports.export(meta, store, target, "src", "s1", say=lambda line: None)
        model.record(c.delete("src", list(range(1, 12))), 2.0)
        model.record(c.upsert("src", rows(range(30, 40), 3.0), partition="p1"), 3.0)
        model.record(c.insert("src", rows(range(100, 130), 4.0)), 4.0)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    if target is not None:
        archive.run(meta, store, target)
    return model.visible(meta.tso.now())


def test_the_undrop_form_brings_a_dropped_collection_back(airflow_env, meta, store, settings, capfd):
    want = _write_and_drop(meta, store, settings)
    run = load_dag("collection_undrop").test(run_conf={"collection": "src", "target": "back", "engine": "inline"})
    states = task_states(run)
    assert run.state == "success", states
    assert states["replay"] == "success" and states["verify.summarize"] == "success"
    back = meta.catalog.get_by_name("back")
    assert back.state == "Created" and visible_of(meta, store, back) == want
    out, err = capfd.readouterr()
    assert "undrop src (as it was just before its drop" in out + err and "from snapshot s1" in out + err
    # a re-run resumes the same undrop (nothing new); bad conf refused before any change
    assert load_dag("collection_undrop").test(run_conf={"collection": "src", "target": "back",
                                                        "engine": "inline"}).state == "success"
    assert visible_of(meta, store, meta.catalog.get_by_name("back")) == want
    for bad, words in (({"collection": "src", "target": "b2", "from_targt": True}, "did you mean 'from_target'"),
                       ({"collection": "src", "target": "back"}, None),        # taken by this very undrop: resumes
                       ({"collection": "nope", "target": "b3"}, "not found"),
                       ({"collection": "src", "target": "b4", "bundle": "s1"}, "bundle goes with an undrop from")):
        run = load_dag("collection_undrop").test(run_conf={**bad, "engine": "inline"})
        if words is None:
            assert run.state == "success"
            continue
        assert run.state == "failed", bad
        out, err = capfd.readouterr()
        assert words in out + err, bad
    assert {c.name for c in meta.catalog.list()} == {"back"}


def test_the_undrop_form_from_the_backup_target_alone(airflow_env, meta, store, settings, tmp_path, capfd):
    from seglake.meta import Meta
    from seglake.storage import open_store

    target = LocalStore(tmp_path / "backup")
    want = _write_and_drop(meta, store, settings, target)
    meta.kv.delete_prefix(meta.keys.prefix)   # the source is gone: its etcd root and its store
    shutil.rmtree(store.root)
    run = load_dag("collection_undrop").test(run_conf={"collection": "src", "target": "back", "from_target": True,
                                                       "bundle": "s1", "backup_uri": str(target.root),
                                                       "engine": "inline"})
    assert run.state == "success", task_states(run)
    meta2, store2 = Meta.from_settings(settings), open_store(settings)
    try:
        assert visible_of(meta2, store2, meta2.catalog.get_by_name("back")) == want
    finally:
        meta2.close()
    out, err = capfd.readouterr()
    assert "bundle s1 + the WAL archive" in out + err


def test_the_database_form_restores_every_collection_at_one_instant(airflow_env, meta, store, settings, capfd):
    models, cut = {}, None
    with WalClient(meta, store, settings) as c:
        for n in ("a", "b"):
            c.create_collection(n, SCHEMA, shards=2)
            pitr.set_window(meta, n, "1h")
            models[n] = Model(meta, store, n)
        for rnd in range(4):
            for i, n in enumerate(("a", "b")):
                v = float(rnd * 10 + i)
                models[n].record(c.insert(n, rows(range(100 * rnd, 100 * rnd + 7), v)), v)
                if rnd:
                    models[n].record(c.delete(n, [100 * (rnd - 1), 100 * (rnd - 1) + 1]), v)
            if rnd == 2:
                cut = meta.tso.now()
    run = load_dag("restore_database").test(run_conf={"as_of": str(cut), "suffix": "_cut"})
    assert run.state == "success", task_states(run)
    for n in ("a", "b"):
        got = visible_of(meta, store, meta.catalog.get_by_name(f"{n}_cut"))
        assert got == models[n].visible(cut) and got != models[n].visible(meta.tso.now()), n
    out, err = capfd.readouterr()
    rows_a = sum(models["a"].visible(cut).values())
    assert f"a -> a_cut {rows_a} rows (Created)" in out + err
    before = sorted(c.name for c in meta.catalog.list())
    from airflow.sdk.definitions.param import ParamValidationError
    with pytest.raises(ParamValidationError, match="suffix"):     # required, no default: the form refuses
        load_dag("restore_database").test(run_conf={"as_of": str(cut)})
    for bad, words in (({"as_of": str(cut), "suffix": "x/y"}, "conf key 'suffix'"),
                       ({"as_of": "nan", "suffix": "_n"}, "conf key 'as_of'"),
                       ({"as_of": str(cut), "suffix": "_n", "sufix": "_n"}, "did you mean 'suffix'"),
                       ({"as_of": str(cut), "suffix": "_n", "collections": "a,nope"}, "nope")):
        run = load_dag("restore_database").test(run_conf=bad)
        assert run.state == "failed", bad
        out, err = capfd.readouterr()
        assert words in out + err, bad
    assert sorted(c.name for c in meta.catalog.list()) == before


def test_an_undrop_run_whose_replay_dies_ends_failed_and_a_re_run_finishes_it(airflow_env, meta, store, settings,
                                                                              monkeypatch, capfd):
    """attack-pitr: the replay dies in every attempt (the task's retries too): the run ends
    FAILED (not green), the target stays Importing (unusable), the note says how far the
    replay got; a re-run of the same conf resumes and ends row-exact."""
    from seglake import faults
    from seglake.lifecycle.pitr import replaying

    want = _write_and_drop(meta, store, settings)
    monkeypatch.setattr(replaying, "PROGRESS_EVERY_S", 0.0)
    conf = {"collection": "src", "target": "back", "engine": "inline"}
    with faults.inject("pitr.progress"):
        run = load_dag("collection_undrop").test(run_conf=conf)
    states = task_states(run)
    assert run.state == "failed" and states["replay"] == "failed", states
    assert meta.catalog.get_by_name("back").state == "Importing"
    out, err = capfd.readouterr()
    assert "the replay stopped at" in out + err
    run = load_dag("collection_undrop").test(run_conf=conf)
    assert run.state == "success", task_states(run)
    back = meta.catalog.get_by_name("back")
    assert back.state == "Created" and visible_of(meta, store, back) == want
    assert pitr.progress(meta, back.collection_id)["percent"] == 100.0
