"""Operators' pins of snapshots (issue 19 item 4; Milvus 3.0's pin_snapshot_data /
unpin_snapshot_data), real etcd + real files: a pinned snapshot cannot be dropped nor
expire, so GC keeps every file it references; pins expire by themselves; unpin of an
unknown id is one clear sentence; bad TTLs are refused before any change."""

from __future__ import annotations

import json
import math
import time

import pytest
from etcd_root import pin_leases_over

from seglake import cli
from seglake.dev import demo
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.lifecycle import copyjob, gc, snapshot

SMALL = demo.SeedParams(partitions=1, segments=2, rows=50, dim=4)


@pytest.fixture
def coll(meta, store):
    return demo.seed(meta, store, SMALL)[0]


def _files(store, meta, name):
    rec = meta.snapshots.find(demo_id(meta), name)
    return sorted(path for _, entries in snapshot.read_entries(store, rec) for e in entries
                  for path, _ in __import__("seglake.manifest", fromlist=["x"]).entry_files(e))


def demo_id(meta):
    return meta.catalog.get_by_name("demo").collection_id


def test_a_pinned_snapshot_is_not_dropped_and_gc_keeps_its_files_after_the_collection_is_gone(meta, store, coll):
    snapshot.create(meta, store, "demo", "s1")
    p = snapshot.pin(meta, "demo", "s1", 3600, by="test")
    assert p["pin_id"] > 0 and p["snapshot"] == "s1" and p["by"] == "test"
    with pytest.raises(Conflict, match=rf"snapshot 's1' is pinned \(pin {p['pin_id']}\)"):
        snapshot.drop(meta, store, "demo", "s1")
    files = _files(store, meta, "s1")
    # the collection's segments are dropped and old: only the snapshot keeps their files
    from seglake.lifecycle import restore
    copyjob.drop_segments(meta, coll.collection_id, now=time.time() - 10 * 86400)
    gc.run(meta, store, gc.GCOptions())   # the drop is older than drop_tolerance
    assert all(store.exists(f) for f in files)
    assert meta.snapshots.find(coll.collection_id, "s1").state == "COMMITTED"
    # unpinned: the drop goes through, and the files go with the next GC
    out = snapshot.unpin(meta, p["pin_id"])
    assert out["pin_id"] == p["pin_id"]
    snapshot.drop(meta, store, "demo", "s1")
    assert not set(files) & set(gc.load_references(meta, store).files)   # now GC's to judge


def test_a_pin_holds_a_snapshot_past_its_own_ttl_and_expired_pins_vanish(meta, store, coll):
    snapshot.create(meta, store, "demo", "short", ttl=1)
    p = snapshot.pin(meta, "demo", "short", 2)
    time.sleep(1.1)   # the snapshot's TTL is over, the pin's is not
    res = gc.clean_records(meta, store, gc.GCOptions())
    assert res.get("expired_snapshots", 0) == 0 and res["expired_pins_removed"] == 0
    assert [d["pin_id"] for d in snapshot.list_pins(meta, "demo")] == [p["pin_id"]]
    # a GC whose `now` is ahead of the clock does not end the pin (pins run on the wall clock)
    res = gc.clean_records(meta, store, gc.GCOptions(), now=time.time() + 3600)
    assert res["expired_pins_removed"] == 0 and meta.snapshots.find(coll.collection_id, "short") is not None
    time.sleep(1.0)   # now the pin expired: it binds nothing, GC removes it and the expired snapshot
    pin_leases_over(meta)   # (and its etcd lease, which etcd times in whole seconds)
    assert snapshot.list_pins(meta) == []
    res = gc.clean_records(meta, store, gc.GCOptions())
    assert res["expired_pins_removed"] == 1 and res["expired_snapshots"] == 1
    assert meta.snapshots.pin_record(p["pin_id"]) is None
    assert meta.snapshots.find(coll.collection_id, "short") is None
    with pytest.raises(NotFound, match=rf"pin {p['pin_id']} not found"):
        snapshot.unpin(meta, p["pin_id"])


def test_an_expired_pin_no_longer_blocks_a_drop(meta, store, coll):
    snapshot.create(meta, store, "demo", "s1")
    snapshot.pin(meta, "demo", "s1", 1)
    time.sleep(1.1)
    pin_leases_over(meta)
    snapshot.drop(meta, store, "demo", "s1")   # not refused
    assert meta.snapshots.find(coll.collection_id, "s1") is None


def test_several_pins_each_hold_until_its_own_unpin(meta, store, coll):
    snapshot.create(meta, store, "demo", "s1")
    a = snapshot.pin(meta, "demo", "s1", 600)
    b = snapshot.pin(meta, "demo", "s1", 600)
    snapshot.unpin(meta, a["pin_id"])
    with pytest.raises(Conflict, match=rf"pin {b['pin_id']}"):
        snapshot.drop(meta, store, "demo", "s1")
    with pytest.raises(NotFound, match=rf"pin {a['pin_id']} not found"):
        snapshot.unpin(meta, a["pin_id"])
    snapshot.unpin(meta, b["pin_id"])
    snapshot.drop(meta, store, "demo", "s1")


@pytest.mark.parametrize("ttl", [0, -5, math.nan, math.inf, 366 * 86400, "60", True])
def test_bad_ttl_is_refused_before_any_change(meta, store, coll, ttl):
    snapshot.create(meta, store, "demo", "s1")
    before = meta.kv.get(meta.keys.snapshot(coll.collection_id, "s1")).mod_revision
    with pytest.raises(ValidationError, match="pin ttl"):
        snapshot.pin(meta, "demo", "s1", ttl)
    assert meta.kv.get(meta.keys.snapshot(coll.collection_id, "s1")).mod_revision == before
    assert meta.snapshots.pin_records() == []


def test_pin_of_a_missing_or_pending_snapshot_and_bad_ids_are_clear_errors(meta, store, coll):
    with pytest.raises(NotFound, match="snapshot 'nope' not found"):
        snapshot.pin(meta, "demo", "nope", 60)
    snapshot.begin(meta, "demo", "pend")
    with pytest.raises(StateError, match="snapshot 'pend' is PENDING; only a COMMITTED snapshot can be pinned"):
        snapshot.pin(meta, "demo", "pend", 60)
    for bad in (0, -1, "7", 1.5, True):
        with pytest.raises(ValidationError, match="pin id must be a positive integer"):
            snapshot.unpin(meta, bad)


def test_a_lost_answer_then_retry_makes_one_pin(meta, store, coll, monkeypatch):
    """The hold's txn applied but its answer was lost: the retry finds its own hold and
    does not fail or add a second one."""
    from seglake.errors import Unavailable
    snapshot.create(meta, store, "demo", "s1")
    real = meta.kv.txn
    state = {"armed": True}

    def txn(compares, ops, *a, **k):
        rev = real(compares, ops, *a, **k)
        if state["armed"] and any("/snapshot_pins/" in getattr(o, "key", "") for o in ops):
            state["armed"] = False
            raise Unavailable("etcd: request timed out (it was applied)")
        return rev
    monkeypatch.setattr(meta.kv, "txn", txn)
    from seglake.meta.kv import retry_on_conflict  # noqa: F401 - the retry path under test
    try:
        snapshot.pin(meta, "demo", "s1", 60)
    except Unavailable:   # surfaced to the caller: a retry of the whole call is safe
        pass
    monkeypatch.undo()
    rec = meta.snapshots.find(coll.collection_id, "s1")
    assert len(rec.holds) <= 1 and len(meta.snapshots.pin_records()) == len(rec.holds)


def test_cli_pin_pins_unpin(meta, store, settings, coll, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    snapshot.create(meta, store, "demo", "s1")
    assert cli.main(["snapshots", "pin", "demo", "s1", "--ttl-hours", "0.5", "--by", "ops", "--json"]) == 0
    pin = json.loads(capsys.readouterr().out)
    assert pin["expires_at"] - pin["created_at"] == pytest.approx(1800)
    assert cli.main(["snapshots", "pins"]) == 0
    out = capsys.readouterr().out
    assert str(pin["pin_id"]) in out and "s1" in out and "ops" in out
    assert cli.main(["snapshots", "drop", "demo", "s1"]) == 2
    assert f"pinned (pin {pin['pin_id']})" in capsys.readouterr().err
    assert cli.main(["snapshots", "unpin", str(pin["pin_id"])]) == 0
    assert cli.main(["snapshots", "pins"]) == 0
    assert "no pins" in capsys.readouterr().out
