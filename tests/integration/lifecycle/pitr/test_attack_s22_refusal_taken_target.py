"""attack-s22: `seglake restore SRC TARGET --as-of T` into a TARGET name another collection
holds is refused -- it must write nothing (issue 30 deliver 6: refusals before anything is
created; s20: the etcd keys under the root unchanged). The plan's exact judgement of the
instant (a linearizable TSO: a put of the mark from a fresh process) runs before the
name is judged."""

from __future__ import annotations

from seglake.lifecycle import pitr
from seglake.wal.client import WalClient

from etcd_root import root_changes, root_state
from pitr_model import SCHEMA, rows
from test_attack_s20_refusals import _cli


def test_cli_restore_to_a_time_into_a_taken_name_writes_nothing(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", rows(range(1, 5), 1.0))
        c.create_collection("taken", SCHEMA, shards=1)
    pitr.set_window(meta, "src", "1h")
    t = meta.tso.reserve(1, linearizable=True)
    rev = root_state(meta)
    p = _cli(settings, "restore", "src", "taken", "--as-of", str(t))
    assert p.returncode != 0 and "taken" in p.stderr, (p.returncode, p.stderr[-1500:])
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"


def test_cli_restore_from_the_target_into_a_taken_name_writes_nothing(meta, store, settings, tmp_path):
    from seglake.lifecycle import retention, snapshot
    from seglake.lifecycle.backup import archive
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore

    from pitr_model import flush_all

    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", say=lambda line: None)
        retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        c.insert("src", rows(range(5, 9), 2.0))
        c.create_collection("taken", SCHEMA, shards=1)
        t = meta.tso.reserve(1, linearizable=True)
        archive.run(meta, store, backup)
    rev = root_state(meta)
    p = _cli(settings, "restore", "src", "taken", "--as-of", str(t), "--from-target", f"file://{tmp_path / 'backup'}")
    assert p.returncode != 0 and "taken" in p.stderr, (p.returncode, p.stderr[-1500:])
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"
