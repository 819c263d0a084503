"""`seglake demo purge` / `demo seed --reset` delete demo data only (issue 8, item 20):
a seeded collection, or one restored from a snapshot of one, never while a snapshot of
it exists or a copy job still uses it. A refusal changes nothing in etcd or the store."""

import pytest

from seglake import cli
from seglake.dev import demo
from seglake.errors import StateError
from seglake.lifecycle import copyjob, restore, snapshot

SMALL = demo.SeedParams(partitions=1, segments=2, rows=50, dim=4)


def _state(meta, store):
    return {kv.key: kv.value for kv in meta.kv.range(meta.keys.prefix)}, sorted(o.key for o in store.list(""))


def test_a_collection_not_seeded_by_demo_is_never_purged(meta, store):
    coll = meta.catalog.create("prod", demo.demo_schema(4))
    store.put(f"insert_log/{coll.collection_id}/1/2/100/3", b"precious")
    before = _state(meta, store)
    with pytest.raises(StateError, match="not created by `seglake demo seed`"):
        demo.purge(meta, store, "prod")
    with pytest.raises(StateError, match="not created by `seglake demo seed`"):
        demo.seed(meta, store, demo.SeedParams(name="prod", partitions=1, segments=1, rows=5, dim=4), reset=True)
    assert _state(meta, store) == before


def test_a_snapshot_blocks_purge_and_reset(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, coll.name, "keep")
    before = _state(meta, store)
    with pytest.raises(StateError, match="has snapshots 'keep'"):
        demo.purge(meta, store, coll.name)
    with pytest.raises(StateError, match="has snapshots 'keep'"):
        demo.seed(meta, store, SMALL, reset=True)
    assert _state(meta, store) == before
    snapshot.drop(meta, store, coll.name, "keep")
    new, created = demo.seed(meta, store, SMALL, reset=True)
    assert created and new.collection_id != coll.collection_id
    assert new.properties[demo.DEMO_PROPERTY] is True


def test_a_restored_demo_copy_is_purgeable_once_its_job_ended(meta, store):
    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s")
    job_id = restore.restore(meta, store, "demo", "s", "demo_restored")
    before = _state(meta, store)
    with pytest.raises(StateError, match=f"unfinished copy jobs \\[{job_id}\\]"):
        demo.purge(meta, store, "demo_restored")
    assert _state(meta, store) == before
    copyjob.plan(meta, job_id)
    copyjob.run_inline(meta, store, job_id)
    assert copyjob.finalize(meta, job_id).state == "Completed"
    target = meta.catalog.get_by_name("demo_restored")
    coll, n = demo.purge(meta, store, "demo_restored")
    assert coll.collection_id == target.collection_id and n > 0
    assert list(meta.segments.list(target.collection_id)) == []
    assert meta.catalog.get_by_name("demo").name == "demo"  # the source is untouched


def test_cli_demo_purge_refuses_with_a_clear_error(meta, store, settings, monkeypatch, capsys):
    for k, v in {"ETCD_ENDPOINT": settings.etcd_endpoint, "ETCD_ROOT": settings.etcd_root,
                 "STORE_URI": settings.store_uri}.items():
        monkeypatch.setenv(f"SEGLAKE_{k}", v)
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, coll.name, "keep")
    before = _state(meta, store)
    assert cli.main(["demo", "purge", coll.name]) == 2
    assert "has snapshots 'keep'" in capsys.readouterr().err
    assert _state(meta, store) == before
