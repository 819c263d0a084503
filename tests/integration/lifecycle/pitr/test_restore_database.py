"""A whole database at one instant (issue 30 item 4): three collections written in turns
(inserts, deletes, upserts, a transaction), restored as of ONE timestamp into new
collections; each equals its own model at that instant, row by row -- one cut across all
of them. One collection that cannot be restored refuses the set before anything is
created. The CLI prints each collection with its rows at that instant."""

from __future__ import annotations

import json

import pytest

from seglake import cli
from seglake.errors import ValidationError
from seglake.lifecycle import copyjob, pitr
from seglake.lifecycle.pitr.database import restore_database_as_of
from seglake.lifecycle.pitr.planning import OutsideWindow
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, rows, visible_of

NAMES = ("a", "b", "c")


def _write(meta, store, settings):
    models, cut = {}, None
    with WalClient(meta, store, settings) as c:
        for n in NAMES:
            c.create_collection(n, SCHEMA, shards=2, partitions=["_default", "p1"])
            pitr.set_window(meta, n, "1h")
            models[n] = Model(meta, store, n)
        for rnd in range(6):
            for i, n in enumerate(NAMES):
                v = float(rnd * 10 + i)
                base = 1000 * rnd + 1
                models[n].record(c.insert(n, rows(range(base, base + 8), v)), v)
                if rnd:
                    models[n].record(c.delete(n, [base - 1000, base - 999]), v)
                    models[n].record(c.upsert(n, rows([base - 998], v), partition="p1"), v)
            if rnd == 3:
                cut = meta.tso.now()
        for n in NAMES:
            flush_all(meta, store, settings, meta.catalog.get_by_name(n))
    return models, cut


def test_every_collection_at_one_instant_equals_its_model(meta, store, settings):
    models, cut = _write(meta, store, settings)
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_cut")
    assert [j["target"] for j in jobs] == ["a_cut", "b_cut", "c_cut"]
    for j in jobs:
        copyjob.plan(meta, j["job_id"], 3)
        copyjob.run_inline(meta, store, j["job_id"])
        assert copyjob.finalize(meta, j["job_id"]).state == "Completed"
        pitr.replay(meta, store, settings, meta.catalog.get_by_name(j["target"]).collection_id)
    for n in NAMES:
        got, want = visible_of(meta, store, meta.catalog.get_by_name(f"{n}_cut")), models[n].visible(cut)
        assert got == want and got != models[n].visible(meta.tso.now()), n
    # a re-run of the set resumes (nothing new)
    again = restore_database_as_of(meta, store, "default", cut, suffix="_cut", collections=list(NAMES))
    assert [j["job_id"] for j in again] == [j["job_id"] for j in jobs]


def test_one_collection_that_cannot_be_restored_refuses_the_set_before_anything(meta, store, settings):
    models, cut = _write(meta, store, settings)
    pitr.clear_window(meta, "b")
    before = sorted(c.name for c in meta.catalog.list())
    with pytest.raises(OutsideWindow, match="'b'"):
        restore_database_as_of(meta, store, "default", cut, suffix="_x")
    with pytest.raises(ValidationError, match="one of the collections"):
        restore_database_as_of(meta, store, "default", cut, suffix="", collections=["a"])
    with pytest.raises(ValidationError):
        restore_database_as_of(meta, store, "default", cut, suffix="/x")
    assert sorted(c.name for c in meta.catalog.list()) == before


def test_the_cli_lists_each_collection_with_its_rows_at_the_instant(meta, store, settings, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    models, cut = _write(meta, store, settings)
    assert cli.main(["restore-database", "--as-of", str(cut), "--suffix", "_t", "--collections", "a,c",
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(r["target"], r["state"], r["rows"]) for r in out] == \
        [(f"{n}_t", "Created", sum(models[n].visible(cut).values())) for n in ("a", "c")]


def test_each_collection_is_planned_once(meta, store, settings, monkeypatch):
    from seglake.lifecycle.pitr import planning, restoring

    models, cut = _write(meta, store, settings)
    planned = []
    real = planning.plan

    def counting(meta, store, collection, *a, **kw):
        planned.append(collection)
        return real(meta, store, collection, *a, **kw)

    monkeypatch.setattr(planning, "plan", counting)
    monkeypatch.setattr(restoring, "make_plan", counting)
    jobs = restore_database_as_of(meta, store, "default", cut, suffix="_once")
    assert sorted(planned) == sorted(NAMES)    # the set-up used the plan made when checking the set
    for j in jobs:
        got = meta.catalog.get_by_name(j["target"]).properties["restored_from"]["replay"]
        assert got["as_of"] == cut and got["collection"] == j["collection"]
    with pytest.raises(ValueError, match="the plan given is of"):
        restoring.restore_as_of(meta, store, "a", "a_other", cut, planned=real(meta, store, "b", cut))
    with pytest.raises(Exception):
        meta.catalog.get_by_name("a_other")


def test_a_database_at_one_instant_from_the_backup_target_alone(meta, store, settings, tmp_path, monkeypatch):
    """Every collection archived and exported; the source store and etcd root deleted; a new
    seglake restores the database at one instant from the target -- each collection planned
    once (the set-up uses the plan that checked the set) and equal to its model."""
    import shutil
    import uuid

    from seglake.lifecycle import retention, snapshot
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.lifecycle.pitr import from_target
    from seglake.meta import Meta
    from seglake.storage import open_store
    from seglake.storage.local import LocalStore

    target = LocalStore(tmp_path / "backup")
    models, cut = {}, None
    with WalClient(meta, store, settings) as c:
        for n in ("a", "b"):
            coll = c.create_collection(n, SCHEMA, shards=2)
            retention.set_policy(meta, n, {"keep_last": 2, "archive": True})
            models[n] = Model(meta, store, n)
            models[n].record(c.insert(n, rows(range(1, 30), 1.0)), 1.0)
            flush_all(meta, store, settings, coll)
            snapshot.create(meta, store, n, "s1")
            exports.export(meta, store, target, n, "s1", say=lambda line: None)
        for rnd in range(4):
            for n in ("a", "b"):
                v = float(10 + rnd)
                models[n].record(c.insert(n, rows(range(100 * rnd + 100, 100 * rnd + 108), v)), v)
                models[n].record(c.delete(n, [rnd + 1]), v)
            if rnd == 1:
                cut = meta.tso.now()
    archive.run(meta, store, target)
    wants = {n: models[n].visible(cut) for n in models}
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    try:
        planned = []
        real = from_target.plan_from_target

        def counting(meta, target, collection, *a, **kw):
            planned.append(collection)
            return real(meta, target, collection, *a, **kw)

        monkeypatch.setattr(from_target, "plan_from_target", counting)
        jobs = restore_database_as_of(meta2, store2, "default", cut, suffix="_cut", target=target)
        assert sorted(planned) == ["a", "b"]
        from seglake.lifecycle.pitr.database import drive
        out = drive(meta2, store2, s2, jobs, "default")
        assert [(r["target"], r["state"]) for r in out] == [("a_cut", "Created"), ("b_cut", "Created")]
        for n in ("a", "b"):
            got = visible_of(meta2, store2, meta2.catalog.get_by_name(f"{n}_cut"))
            assert got == wants[n] and sum(got.values()) == [r["rows"] for r in out if r["collection"] == n][0], n
    finally:
        meta2.close()


def test_a_target_name_held_by_a_restore_of_another_collection_refuses_the_set_before_anything(meta, store,
                                                                                              settings):
    """b's target name `b_cut` is taken by a restore of `a` at the SAME instant: that is not
    b's restore to resume, so the set is refused before a_cut is created (found by the
    attack on issue 30: the check compared the instant only, a_cut was created, then b's
    set-up failed)."""
    from seglake.errors import Conflict
    from seglake.lifecycle.pitr import restoring

    models, cut = _write(meta, store, settings)
    restoring.restore_as_of(meta, store, "a", "b_cut", cut)
    before = sorted(c.name for c in meta.catalog.list())
    with pytest.raises((ValidationError, Conflict), match="b_cut"):
        restore_database_as_of(meta, store, "default", cut, suffix="_cut")
    assert sorted(c.name for c in meta.catalog.list()) == before


def test_a_database_restore_from_a_target_two_sites_share_is_refused_unless_collections_are_named(
        meta, store, settings, tmp_path, etcd_server):
    """Two seglakes (etcd roots) export their `default` database into one target: a whole
    database restore from it restored every site's collections as one database at one
    instant, though each site has its own clock and ids (rows adversary s21). Refused
    before anything is created, naming the sites; named collections are restored."""
    import sys
    from pathlib import Path

    from seglake.lifecycle import snapshot
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.lifecycle.pitr.database import plan_database
    from seglake.storage.local import LocalStore

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))
    from copy_model_helpers import other_root
    from etcd_root import root_state

    target = LocalStore(tmp_path / "backup")
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "s")
    try:
        from seglake.lifecycle import retention

        cuts = {}
        for m, st, se, name in ((meta, store, settings, "a"), (meta2, store2, settings2, "z")):
            with WalClient(m, st, se) as c:
                coll = c.create_collection(name, SCHEMA, shards=1)
                retention.set_policy(m, name, {"keep_last": 2, "archive": True})
                c.insert(name, rows(range(1, 10), 1.0))
                flush_all(m, st, se, coll)
                snapshot.create(m, st, name, "s1")
                exports.export(m, st, target, name, "s1", say=lambda line: None)
                c.insert(name, rows(range(10, 20), 1.0))
                cuts[name] = m.tso.now()
                c.insert(name, rows(range(20, 30), 1.0))
            archive.run(m, st, target)
        now = cuts["a"]
        before = root_state(meta)
        with pytest.raises(ValidationError, match="2 sources .*name the collections"):
            restore_database_as_of(meta, store, "default", now, suffix="_x", target=target)
        assert root_state(meta) == before
        ts, to, plans = plan_database(meta, store, "default", now, suffix="_x", collections=["a"], target=target)
        assert to == {"a": "a_x"} and set(plans) == {"a"}
    finally:
        meta2.close()
