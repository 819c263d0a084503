"""Undrop from a backup target (issue 30 item 5, "its archive is in a target"): a collection
written through the WAL (inserts, deletes, upserts, a transaction), exported once and its
WAL archived, then dropped; the drop is archived. The source store directory and its etcd
root are deleted; a NEW seglake (another etcd root, an empty store) brings it back with
`seglake collections undrop NAME --as NEW --from-target URI` -- the drop's instant read
from the archive alone -- equal to the model of every acknowledged operation, row by row.
Refused, saying why for both the store and the target, before anything is created."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest

from seglake import cli
from seglake.errors import NotFound
from seglake.lifecycle import copyjob, drop, pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.pitr import from_target
from seglake.lifecycle.pitr.planning import LogGap, OutsideWindow
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, route0, rows, visible_of

quiet = dict(say=lambda line: None)


def _archived_then_dropped(meta, store, settings, target, name="src", *, dropped=True):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(name, SCHEMA, shards=2, partitions=["_default", "p1"])
        retention.set_policy(meta, name, {"keep_last": 3, "archive": True})
        model = Model(meta, store, name)
        model.record(c.insert(name, rows(range(1, 60), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, name, "s1")
        exports.export(meta, store, target, name, "s1", **quiet)
        model.record(c.delete(name, list(range(1, 8))), 2.0)
        model.record(c.upsert(name, rows(range(20, 30), 3.0), partition="p1"), 3.0)
        model.record(c.insert(name, rows(route0(range(200, 230)), 4.0), txn=True), 4.0, txn=True)
        model.record(c.insert(name, rows(range(100, 140), 5.0), partition="p1"), 5.0)
        flush_all(meta, store, settings, coll, flush_all=False)   # some of it flushed, the rest only in the log
    if dropped:
        drop.begin_drop(meta, store, settings, name)
        flush_all(meta, store, settings, coll, flush_all=False)
        assert drop.finish_drop(meta, name, collection_id=coll.collection_id)["state"] == "Dropped"
    archive.run(meta, store, target)
    return coll, model


def _lose_the_source(meta, store, settings, tmp_path, monkeypatch):
    """Delete the source's etcd root and store; a new seglake (its env for the CLI)."""
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    for k, v in s2.to_env().items():
        monkeypatch.setenv(k, v)
    return s2, Meta.from_settings(s2), open_store(s2)


def test_undrop_from_the_target_alone_equals_the_model(meta, store, settings, tmp_path, monkeypatch, capsys):
    target = LocalStore(tmp_path / "backup")
    coll, model = _archived_then_dropped(meta, store, settings, target)
    want = model.visible(meta.tso.now())
    assert sum(want.values()) > 0 and want != model.visible(model.inserted[59][3])   # the log matters
    s2, meta2, store2 = _lose_the_source(meta, store, settings, tmp_path, monkeypatch)
    try:
        # the drop's instant comes from the archive: each vchannel's DropCollection
        p, doc = from_target.plan_undrop_from_target(meta2, target, "src")
        assert doc["bundle"] == "s1" and set(p.vchannels) == set(coll.vchannels) and p.archive
        assert p.as_of > max(at for *_, at, _ in model.inserted)
        rc = cli.main(["collections", "undrop", "src", "--as", "back", "--from-target", str(target.root), "--bundle",
                       "s1", "--json"])
        out, err = capsys.readouterr()
        assert rc == 0, err
        res = json.loads(out)
        assert res["snapshot"] == "s1" and res["verified"] is True and res["rows_replayed"] > 0
        back = meta2.catalog.get_by_name("back")
        assert back.state == "Created"
        assert visible_of(meta2, store2, back) == want
        # a re-run resumes the same undrop: nothing new
        job = pitr.undrop(meta2, store2, "src", "back", backup=target)
        assert job == back.properties["restore_job_id"]
        assert visible_of(meta2, store2, meta2.catalog.get_by_name("back")) == want
        # writes land after it
        with WalClient(meta2, store2, s2) as c:
            c.insert("back", rows([9999], 9.0))
        flush_all(meta2, store2, s2, meta2.catalog.get_by_name("back"))
        assert visible_of(meta2, store2, meta2.catalog.get_by_name("back"))[(9999, 9.0)] == 1
    finally:
        meta2.close()


def test_undrop_is_refused_when_neither_the_store_nor_the_target_can_give_it(meta, store, settings, tmp_path,
                                                                             monkeypatch, capsys):
    target = LocalStore(tmp_path / "backup")
    _archived_then_dropped(meta, store, settings, target, "live", dropped=False)   # archived, never dropped
    s2, meta2, store2 = _lose_the_source(meta, store, settings, tmp_path, monkeypatch)
    try:
        before = sorted(c.name for c in meta2.catalog.list(include_dropped=True))
        files = sorted(o.key for o in store2.list(""))
        with pytest.raises(LogGap, match=r"not from this store \(collection 'live' not found.*no drop of it"):
            pitr.undrop(meta2, store2, "live", "x1", backup=target)
        with pytest.raises(OutsideWindow, match="no bundle of default.nothing"):
            pitr.undrop(meta2, store2, "nothing", "x2", backup=target)
        with pytest.raises(NotFound, match="not found"):    # without a target: this store only
            pitr.undrop(meta2, store2, "live", "x3")
        assert cli.main(["collections", "undrop", "live", "--as", "x4", "--from-target", str(target.root)]) != 0
        assert "no drop of it" in capsys.readouterr().err
        assert cli.main(["collections", "undrop", "live", "--as", "x5", "--bundle", "s1"]) != 0
        assert "--bundle goes with --from-target" in capsys.readouterr().err
        assert cli.main(["collections", "undrop", "live", "--as", "x6", "--from-target", str(target.root),
                         "--bundle", "nope"]) != 0
        assert "nope" in capsys.readouterr().err
        with pytest.raises(SystemExit) as bad:
            cli.main(["collections", "undrop", "live", "--as", "bad/name", "--from-target", str(target.root)])
        assert bad.value.code != 0 and "invalid collection name" in capsys.readouterr().err
        assert sorted(c.name for c in meta2.catalog.list(include_dropped=True)) == before
        assert sorted(o.key for o in store2.list("")) == files
    finally:
        meta2.close()


def test_undrop_on_the_same_site_falls_back_to_the_target_when_the_store_cannot_give_it(meta, store, settings,
                                                                                         tmp_path):
    """The collection's record is still here (Dropped), but it had no window and its files
    and the WAL in the store are lost: this store refuses, the target gives it."""
    target = LocalStore(tmp_path / "backup")
    coll, model = _archived_then_dropped(meta, store, settings, target)
    want = model.visible(meta.tso.now())
    shutil.rmtree(store.root)   # the store's files lost (segments, snapshots, the WAL)
    store.root.mkdir()
    with pytest.raises(OutsideWindow, match="no point-in-time window"):
        pitr.undrop(meta, store, "src", "back")          # this store alone cannot
    job = pitr.undrop(meta, store, "src", "back", backup=target)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    out = pitr.replay(meta, store, settings, meta.catalog.get_by_name("back").collection_id)
    assert out["snapshot"] == "s1" and out["rows_replayed"] > 0
    assert visible_of(meta, store, meta.catalog.get_by_name("back")) == want
    assert meta.catalog.get(coll.collection_id).state == "Dropped"
