"""attack-s24-pitr: a whole database at one instant FROM THE BACKUP TARGET alone must never be
restored silently lacking a collection the database held at that instant. `fresh` was created
(with `archive: true`) after the last export and written; the source is then lost. Its
creation (a CreateCollection naming its db, name and schema on each vchannel) and every write
are in the WAL archive, but no bundle of it is in the target. The set restored at T was
{keep} alone -- `fresh`'s rows silently missing from "the database at T". Expected: refused,
naming `fresh` (or `fresh` restored); when the collections are named, the set named."""

from __future__ import annotations

import pytest

from seglake.lifecycle import retention
from seglake.lifecycle.backup import archive
from seglake.lifecycle.pitr.database import plan_database
from seglake.lifecycle.pitr.planning import OutsideWindow
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from etcd_root import root_changes, root_state
from pitr_model import SCHEMA, export_and_archive, rows

quiet = dict(say=lambda line: None)


def test_a_database_from_the_target_never_silently_lacks_an_archived_collection_without_a_bundle(
        meta, store, settings, tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        k = c.create_collection("keep", SCHEMA, shards=2)
        c.insert("keep", rows(range(1, 9), 1.0))
        export_and_archive(meta, store, settings, backup, k, keep_last=5)
        c.create_collection("fresh", SCHEMA, shards=2)         # after the last export
        retention.set_policy(meta, "fresh", {"keep_last": 5, "archive": True})
        c.insert("fresh", rows(range(1, 30), 2.0))
        c.insert("keep", rows(range(20, 25), 2.0))
        t = meta.tso.reserve(1, linearizable=True)
    archive.run(meta, store, backup)
    rev = root_state(meta)
    with pytest.raises(OutsideWindow, match="fresh"):
        plan_database(meta, store, "default", t, suffix="_x", target=backup)
    assert root_state(meta) == rev, root_changes(rev, root_state(meta))
    # the CLI, from a fresh process: the same refusal, exit code != 0, nothing written
    from test_attack_s20_refusals import _cli

    p = _cli(settings, "restore-database", "--as-of", str(t), "--suffix", "_x", "--from-target",
             f"file://{tmp_path / 'backup'}")
    assert p.returncode != 0 and "fresh" in p.stderr, (p.returncode, p.stderr[-2000:])
    assert root_state(meta) == rev, root_changes(rev, root_state(meta))
    # named: the set named (the user leaves `fresh` out knowingly)
    ts, to, plans = plan_database(meta, store, "default", t, suffix="_x", target=backup, collections=["keep"])
    assert sorted(plans) == ["keep"]


def test_unbundled_collections_dropped_before_the_instant_or_of_another_db_do_not_refuse_the_set(
        meta, store, settings, tmp_path):
    """The check's other side: a collection never exported but dropped before the instant, and
    one of another database, were not in the database at the instant: the set is restored."""
    from pitr_model import Model, drop_now, visible_of
    from seglake.lifecycle.pitr.database import drive, restore_database_as_of
    import time

    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        k = c.create_collection("keep", SCHEMA, shards=2)
        mk = Model(meta, store, "keep")
        mk.record(c.insert("keep", rows(range(1, 9), 1.0)), 1.0)
        export_and_archive(meta, store, settings, backup, k, keep_last=5)
        c.create_collection("brief", SCHEMA, shards=2)
        retention.set_policy(meta, "brief", {"keep_last": 5, "archive": True})
        c.insert("brief", rows(range(1, 5), 2.0))
        c.create_collection("elsewhere", SCHEMA, shards=2, db="other")
        retention.set_policy(meta, "elsewhere", {"keep_last": 5, "archive": True}, db="other")
        c.insert("elsewhere", rows(range(1, 5), 2.0), db="other")
    drop_now(meta, store, settings, "brief")
    time.sleep(1.1)
    with WalClient(meta, store, settings) as c:
        mk.record(c.insert("keep", rows(range(20, 25), 3.0)), 3.0)
        t = meta.tso.reserve(1, linearizable=True)
    archive.run(meta, store, backup)
    jobs = restore_database_as_of(meta, store, "default", t, suffix="_x", target=backup)
    out = drive(meta, store, settings, jobs, "default")
    assert [(r["target"], r["state"]) for r in out] == [("keep_x", "Created")]
    assert visible_of(meta, store, meta.catalog.get_by_name("keep_x")) == mk.visible(t)
