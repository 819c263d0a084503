"""attack-s22: a whole database at one instant FROM THE BACKUP TARGET, refused for its second
collection, must write nothing (issue 30 deliver 6). The s20 adversary left this open
("a database from the target still judges the instant per collection"): the first
collection's plan_from_target issues the exact timestamp (a put of the TSO mark from a
fresh process) before the second collection is refused."""

from __future__ import annotations

import time

from seglake.lifecycle import retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.backup import export as exports
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from etcd_root import root_changes, root_state
from pitr_model import SCHEMA, flush_all, rows
from test_attack_s20_refusals import _cli

quiet = dict(say=lambda line: None)


def test_cli_restore_database_from_a_target_refused_for_its_second_collection_writes_nothing(meta, store, settings,
                                                                                            tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        a = c.create_collection("a1", SCHEMA, shards=1)
        c.insert("a1", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, a)
        snapshot.create(meta, store, "a1", "s1")
        exports.export(meta, store, backup, "a1", "s1", **quiet)
        retention.set_policy(meta, "a1", {"keep_last": 5, "archive": True})
        c.insert("a1", rows(range(5, 9), 2.0))
        t = meta.tso.reserve(1, linearizable=True)
        time.sleep(0.01)
        b = c.create_collection("b2", SCHEMA, shards=1)     # born after the instant
        c.insert("b2", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, b)
        snapshot.create(meta, store, "b2", "s1")
        exports.export(meta, store, backup, "b2", "s1", **quiet)
        archive.run(meta, store, backup)
    rev = root_state(meta)
    p = _cli(settings, "restore-database", "--as-of", str(t), "--suffix", "_x", "--collections", "a1,b2",
             "--from-target", f"file://{tmp_path / 'backup'}")
    assert p.returncode != 0 and "b2" in p.stderr, (p.returncode, p.stderr[-2000:])
    assert not [x for x in meta.catalog.list() if x.name.endswith("_x")]
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"
