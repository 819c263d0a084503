"""Restore to a time from the backup target alone (issue 30 items 2 and 3): the producer's
operations (inserts, deletes, upserts, transactions, flushes, seals, two snapshots) with
the collection's WAL archived and its snapshots exported; then the source store and its
etcd root are deleted, and a NEW seglake (another etcd root, an empty store) restores the
collection at many instants from the target alone -- each equal to the model of the
acknowledged operations, row by row. Refusals before anything is created."""

from __future__ import annotations

import random
import shutil
import uuid

import pytest

from seglake.lifecycle import pitr, retention
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.pitr import from_target
from seglake.lifecycle.pitr.planning import LogGap, OutsideWindow
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.storage.local import LocalStore

from pitr_model import flush_all, restore_from_target, visible_of
from test_restore_as_of import _produce

quiet = dict(say=lambda line: None)


@pytest.fixture
def small_seals(settings):
    return settings.replace(flush_seal_rows=25)


def _restore(meta, store, settings, target, name, as_of, **kw):
    return restore_from_target(meta, store, settings, target, "src", name, as_of, **kw)


def test_restores_from_the_target_alone_equal_the_model(meta, store, small_seals, tmp_path, etcd_server):
    settings = small_seals
    coll, model, instants = _produce(meta, store, settings)
    flush_all(meta, store, settings, coll, flush_all=False)
    retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
    target = LocalStore(tmp_path / "backup")
    snaps = sorted(meta.snapshots.list(coll.collection_id), key=lambda r: r.consistent_ts)
    assert len(snaps) == 2
    for r in snaps:
        exports.export(meta, store, target, "src", r.name, **quiet)
    site = archive.run(meta, store, target)["site"]
    covered = min(archive.ArchivedLog(target, site, p).covered() for p in archive.archived_pchannels(meta))
    first_base = snaps[0].consistent_ts
    usable = [(k, t) for k, t in instants if first_base <= t <= covered]
    rng = random.Random(3)
    chosen = [x for x in usable if not x[0].startswith("after step")][:10] + \
        rng.sample([x for x in usable if x[0].startswith("after step")], 6)
    assert any("snapshot" in k for k, _ in chosen) and any("delete" in k or "commit" in k or "transaction" in k
                                                         for k, _ in chosen)
    wants = {t: model.visible(t) for _, t in chosen}
    early = next(t for _, t in instants if t < first_base)
    # the source is gone: its store and its etcd root
    meta.kv.delete_prefix(meta.keys.prefix)
    shutil.rmtree(store.root)
    s2 = settings.replace(etcd_root=f"dr{uuid.uuid4().hex[:8]}", store_uri=str(tmp_path / "dr_store"))
    meta2, store2 = Meta.from_settings(s2), open_store(s2)
    try:
        assert len(chosen) >= 12
        replayed = 0
        for i, (label, t) in enumerate(chosen):
            restored = _restore(meta2, store2, s2, target, f"r{i}", t)
            got, want = visible_of(meta2, store2, restored), wants[t]
            assert got == want, (label, t, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
            assert restored.state == "Created"
            replayed += pitr.summary(meta2, restored)["rows_replayed"]
        assert replayed > 0, "nothing came from the archive: the test would not tell"
        # refusals, nothing created
        before = [c.name for c in meta2.catalog.list()]
        with pytest.raises(OutsideWindow, match="no bundle"):
            from_target.restore_as_of_from_target(meta2, store2, target, "src", "x1", early)
        with pytest.raises(LogGap, match="recovery point"):
            from_target.restore_as_of_from_target(meta2, store2, target, "src", "x2", meta2.tso.now() - 1)
        with pytest.raises(OutsideWindow, match="future"):
            from_target.restore_as_of_from_target(meta2, store2, target, "src", "x3", meta2.tso.now() + (10**6 << 18))
        assert [c.name for c in meta2.catalog.list()] == before
    finally:
        meta2.close()


def test_the_cli_restores_to_a_time_from_the_target(meta, store, settings, tmp_path, monkeypatch, capsys):
    import json

    from seglake import cli
    from seglake.lifecycle import snapshot
    from seglake.wal.client import WalClient, synthetic_rows

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    schema = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
              {"field_id": 101, "name": "vec", "dtype": "FloatVector", "dim": 4}]
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", schema, shards=2)
        c.insert("src", synthetic_rows(coll, 30, 1))
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, target, "src", "s1", **quiet)
        c.delete("src", [1, 2])
        as_of = meta.tso.now()
        c.insert("src", synthetic_rows(coll, 20, 500))
    retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
    archive.run(meta, store, target)
    assert cli.main(["restore", "src", "back", "--as-of", str(as_of), "--from-target", str(target.root),
                     "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["snapshot"] == "s1" and out["verified"] is True
    from seglake.visibility import visible_rows
    pks = visible_rows(meta, store, meta.catalog.get_by_name("back").collection_id).column("pk").to_pylist()
    assert sorted(pks) == list(range(3, 31))
    assert cli.main(["restore", "src", "back2", "--as-of", "nan", "--from-target", str(target.root)]) != 0
    assert "as_of" in capsys.readouterr().err
    with pytest.raises(Exception):
        meta.catalog.get_by_name("back2")
    assert cli.main(["restore", "src", "back3", "--as-of", str(as_of), "--bundle", "s1"]) != 0
    assert "--bundle goes with --from-target" in capsys.readouterr().err
