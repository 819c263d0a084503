"""attack-s20: every refusal of a restore to a time / undrop writes NOTHING: not only no
collection, copy job or store file, but the etcd revision unchanged (issue 30 deliver 6:
'refusals before anything is created'; the brief: etcd revision unchanged on each refusal)."""

from __future__ import annotations

import time

import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import drop, pitr
from seglake.lifecycle.pitr import window as pwindow
from seglake.meta.alloc import compose_ts
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, flush_all, rows
from etcd_root import root_changes, root_state



def _refused_without_a_write(meta, store, fn, match):
    files = {o.key for o in store.list("")}
    rev = root_state(meta)
    with pytest.raises(SeglakeError, match=match):
        fn()
    return (root_changes(rev, root_state(meta)), len({o.key for o in store.list("")} ^ files))


def test_refusals_leave_the_etcd_revision_unchanged(meta, store, settings, monkeypatch):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        c.insert("src", rows(range(1, 20), 1.0))
        other = c.create_collection("gone", SCHEMA, shards=1)
        c.insert("gone", rows(range(1, 5), 1.0))
    pitr.set_window(meta, "src", "1m")
    pitr.set_window(meta, "gone", "1m")
    drop.begin_drop(meta, store, settings, "gone")
    flush_all(meta, store, settings, other, flush_all=False)
    drop.finish_drop(meta, "gone", collection_id=other.collection_id)
    time.sleep(0.2)
    wrote = {}
    near_future = lambda: compose_ts(int(time.time() * 1000) + 400)   # within the TSO's reserved batch
    cases = {
        "near future (400 ms)": (lambda: pitr.restore_as_of(meta, store, "src", "r", near_future()), "future"),
        "before creation": (lambda: pitr.restore_as_of(meta, store, "src", "r", coll.created_ts - 1), "before"),
    }
    for name, (fn, m) in cases.items():
        wrote[name] = _refused_without_a_write(meta, store, fn, m)
    old = meta.tso.now() - compose_ts(1)
    monkeypatch.setattr(pwindow, "clock", lambda: time.time() + 3600)   # the drop and now-1h out of the window
    cases = {
        "outside the window": (lambda: pitr.restore_as_of(meta, store, "src", "r", old),
                               "outside"),
        "undrop of a drop outside its window": (lambda: pitr.undrop(meta, store, "gone", "back"), "outside"),
        "undrop of a live collection": (lambda: pitr.undrop(meta, store, "src", "back"), "not dropped"),
    }
    for name, (fn, m) in cases.items():
        wrote[name] = _refused_without_a_write(meta, store, fn, m)
    assert all(v == ([], 0) for v in wrote.values()), wrote


def _cli(settings, *args):
    """A fresh process, as an operator's `seglake ...` is (no TSO batch of its own yet)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "SEGLAKE_CONFIG": json.dumps(settings.to_dict(secrets=True))}
    return subprocess.run([sys.executable, "-m", "seglake.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_cli_refusals_leave_the_etcd_revision_unchanged(meta, store, settings):
    """`seglake collections undrop` of a collection that is not dropped (or gone from its
    window) and `seglake restore --as-of` 300 ms ahead are refused -- after a write to etcd:
    the undrop reserves its instant (a linearizable TSO: a new batch, a put of the global
    mark) before any check; the near-future instant is judged by issuing a timestamp."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=2)
        c.insert("src", rows(range(1, 20), 1.0))
    pitr.set_window(meta, "src", "1h")
    wrote = {}
    for name, args in {"undrop of a live collection": ["collections", "undrop", "src", "--as", "back"],
                       "undrop of a name never seen": ["collections", "undrop", "nope", "--as", "back"]}.items():
        rev = root_state(meta)
        p = _cli(settings, *args)
        assert p.returncode != 0 and "Traceback" not in p.stderr, (name, p.returncode, p.stderr)
        wrote[name] = (root_changes(rev, root_state(meta)), p.stderr.strip()[-120:])
    assert all(not v[0] for v in wrote.values()), wrote


def test_cli_undrop_of_a_drop_outside_its_window_writes_nothing(meta, store, settings):
    """The undrop's instant is reserved (meta.tso.reserve(1, linearizable=True): a fresh
    process puts a new batch's mark in etcd) in restoring.plan_undrop BEFORE planning.plan
    judges the window; a refusal of a drop outside its window should write nothing, as the
    refusal of a future instant does (test_refusals: 'a refusal wrote to etcd')."""
    import json

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("gone", SCHEMA, shards=1)
        c.insert("gone", rows(range(1, 5), 1.0))
    pitr.set_window(meta, "gone", "1m")
    drop.begin_drop(meta, store, settings, "gone")
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, "gone", collection_id=coll.collection_id)
    # the window as if 1 s long (the shortest settable is 1 min: waiting it out is a minute)
    key = meta.keys.pitr_window(coll.collection_id)
    doc = json.loads(meta.kv.get(key).value)
    meta.kv.put(key, json.dumps({**doc, "window_s": 1.0}))
    time.sleep(1.5)
    files = {o.key for o in store.list("")}
    rev = root_state(meta)
    p = _cli(settings, "collections", "undrop", "gone", "--as", "back")
    assert p.returncode != 0 and "outside the point-in-time window" in p.stderr, p.stderr
    assert {o.key for o in store.list("")} == files
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"


def test_cli_restore_refused_for_a_gap_or_no_snapshot_writes_nothing(meta, store, settings):
    """planning.plan issues a timestamp (not_in_future: reserve(1, linearizable=True)) BEFORE
    the refusals that come after it: a log gap (a committed fragment missing) and a
    collection whose rows are not in its log with no snapshot. From a fresh process (the
    CLI, a DAG task) each such refusal puts the TSO mark in etcd."""
    from seglake.storage import layout

    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=2)
        c.insert("src", rows(range(1, 20), 1.0))
    pitr.set_window(meta, "src", "1h")
    t = meta.tso.now()
    frag = sorted(o.key for o in store.list(f"{layout.WAL}/"))[0]
    store.delete_many([frag])
    files = {o.key for o in store.list("")}
    rev = root_state(meta)
    p = _cli(settings, "restore", "src", "r", "--as-of", str(t))
    assert p.returncode != 0 and "not whole" in p.stderr, p.stderr
    assert {o.key for o in store.list("")} == files
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"


def test_cli_restore_from_a_target_refused_writes_nothing(meta, store, settings, tmp_path):
    """from_target.plan_from_target judged the instant not in the future by issuing a
    timestamp first, before its refusals (no bundle, the archive short of the instant)."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", rows(range(1, 5), 1.0))
    t = meta.tso.now()
    backup = tmp_path / "backup"
    backup.mkdir()
    rev = root_state(meta)
    p = _cli(settings, "restore", "src", "r", "--as-of", str(t), "--from-target", f"file://{backup}")
    assert p.returncode != 0 and "no bundle" in p.stderr, p.stderr
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"


def test_cli_undrop_refused_for_a_gap_writes_nothing(meta, store, settings):
    """An undrop refused for a log gap (a committed fragment missing) after its instant was
    reserved: the refusal wrote the TSO mark."""
    from seglake.storage import layout

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("gone", SCHEMA, shards=1)
        c.insert("gone", rows(range(1, 5), 1.0))
    pitr.set_window(meta, "gone", "1h")
    drop.begin_drop(meta, store, settings, "gone")
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, "gone", collection_id=coll.collection_id)
    frag = sorted(o.key for o in store.list(f"{layout.WAL}/"))[0]
    store.delete_many([frag])
    files = {o.key for o in store.list("")}
    rev = root_state(meta)
    p = _cli(settings, "collections", "undrop", "gone", "--as", "back")
    assert p.returncode != 0 and "not whole" in p.stderr, p.stderr
    assert {o.key for o in store.list("")} == files
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"


def test_cli_restore_database_refused_for_its_second_collection_writes_nothing(meta, store, settings):
    """A database at one instant is refused whole when one collection cannot be restored
    (here the second: no window); the first collection's plan had issued a timestamp."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("a1", SCHEMA, shards=1)
        c.insert("a1", rows(range(1, 5), 1.0))
        c.create_collection("b2", SCHEMA, shards=1)
        c.insert("b2", rows(range(1, 5), 1.0))
    pitr.set_window(meta, "a1", "1h")
    t = meta.tso.now()
    rev = root_state(meta)
    p = _cli(settings, "restore-database", "--as-of", str(t), "--suffix", "_x")
    assert p.returncode != 0 and "b2" in p.stderr and "window" in p.stderr, p.stderr
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"


def test_cli_undrop_from_a_target_without_a_bundle_writes_nothing(meta, store, settings, tmp_path):
    """from_target.plan_undrop_from_target took meta.tso.now() (a new batch: a put of the
    mark from a fresh process) before refusing an undrop the target cannot give."""
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("gone", SCHEMA, shards=1)
        c.insert("gone", rows(range(1, 5), 1.0))
    drop.begin_drop(meta, store, settings, "gone")
    flush_all(meta, store, settings, coll, flush_all=False)
    drop.finish_drop(meta, "gone", collection_id=coll.collection_id)
    backup = tmp_path / "backup"
    backup.mkdir()
    rev = root_state(meta)
    p = _cli(settings, "collections", "undrop", "gone", "--as", "back", "--from-target", f"file://{backup}")
    assert p.returncode != 0 and "cannot be undropped" in p.stderr, p.stderr
    assert root_state(meta) == rev, f"the refusal changed etcd keys {root_changes(rev, root_state(meta))}"

