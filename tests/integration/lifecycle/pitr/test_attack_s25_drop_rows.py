"""atk-s25-drop: a drop that the flush finishes by itself, audited row by row against a
model of every acknowledged write: two pchannels flushed at once both seeing the last
release, the name taken again at once (its writes never hidden, its vchannels never the
old ones), the undrop and a restore to an instant just before the drop, GC with
drop_tolerance 0, inserts after the drop began refused. Real etcd, real files."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from seglake.errors import ValidationError
from seglake.lifecycle import drop, gc, pitr, snapshot
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.catalog import pchannel_of
from seglake.wal.checkpoints import live_vchannels
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, copy_and_replay, flush_all, restore_to, rows, visible_of
from wal_helpers import pchannels


def _flush_at_once(meta, store, settings, coll) -> list[dict]:
    """Every pchannel of `coll` flushed by its own thread, started together."""
    ps = pchannels(coll)
    assert len(ps) == 2
    barrier, out, errs = threading.Barrier(len(ps)), {}, []

    def one(p):
        try:
            barrier.wait(30)
            out[p] = flush_pchannel(meta, store, p, settings)
        except Exception as e:   # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=one, args=(p,)) for p in ps]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    return [out[p] for p in ps]


@pytest.mark.parametrize("round_", range(3))
def test_auto_finished_drop_rows_name_reuse_undrop_and_restore_just_before(meta, store, settings, round_):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 60), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.delete("src", list(range(1, 8))), 2.0)
        model.record(c.upsert("src", rows(range(20, 30), 3.0), partition="p1"), 3.0)
        model.record(c.insert("src", rows(range(100, 130), 4.0)), 4.0)   # buffered: only in the log
        before = meta.tso.reserve(1, linearizable=True)                   # after every acknowledged write
        rep = drop.drop_collection(meta, store, settings, "src")          # begun, not waited for
        assert rep["state"] == "Dropping"
        with pytest.raises(ValidationError):                              # after the drop began: refused
            c.insert("src", rows(range(500, 510), 9.0))
        with pytest.raises(ValidationError):
            c.delete("src", [100])
    finished = [n for r in _flush_at_once(meta, store, settings, coll) for n in r["drops_finished"]]
    assert finished == ["src"]                                            # one of the two flushes ended it
    old = meta.catalog.get(coll.collection_id)
    assert old.state == "Dropped"
    # the drop's own finish (the DAG's, --wait's) reports it done
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    want = model.visible(before)
    assert sum(want.values()) == 59 - 7 + 10 + 30   # the upsert into p1 hides rows of p1 only

    # the undrop: every insert acknowledged before the drop, nothing after
    back = copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "back"), "back")
    assert visible_of(meta, store, back) == want

    # the name at once: new ids, new vchannels, its writes visible and never mixed with the old ones
    with WalClient(meta, store, settings) as c:
        new = c.create_collection("src", SCHEMA, shards=2)
        assert new.collection_id != coll.collection_id and not set(new.vchannels) & set(coll.vchannels)
        new_model = Model(meta, store, "src")
        new_model.record(c.insert("src", rows(range(1, 25), 7.0)), 7.0)
        new_model.record(c.delete("src", [3]), 7.5)
    for p in pchannels(coll):
        assert not set(live_vchannels(meta, p)) & set(coll.vchannels)
    flush_all(meta, store, settings, new)
    assert visible_of(meta, store, new) == new_model.visible(meta.tso.now())

    # GC at drop_tolerance 0: the old drop's files go, the window keeps what a restore needs
    for _ in range(2):
        gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))
    assert visible_of(meta, store, new) == new_model.visible(meta.tso.now())
    assert visible_of(meta, store, back) == want

    # a restore to the instant just before the drop: the old collection, not the new one
    at = restore_to(meta, store, settings, "src", "just_before", before)
    assert visible_of(meta, store, at) == want
    # and the drop that the flush finished is not re-finished onto the new collection
    assert meta.catalog.get_by_name("src").collection_id == new.collection_id
    assert meta.catalog.get(new.collection_id).state == "Created"
    for p in {pchannel_of(v) for v in new.vchannels}:
        assert flush_pchannel(meta, store, p, settings)["drops_finished"] == []


def test_a_restore_planned_while_dropping_survives_the_auto_finish_and_gc(meta, store, settings):
    """A restore to an instant before the drop, planned while the source is Dropping; then
    the flush finishes the drop, the name is taken again, and GC runs at drop_tolerance 0
    before the restore copies and replays: the target equals the model at the instant."""
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 40), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.delete("src", [5, 6]), 2.0)
        model.record(c.insert("src", rows(range(40, 70), 3.0)), 3.0)
        before = meta.tso.reserve(1, linearizable=True)
    assert drop.drop_collection(meta, store, settings, "src")["state"] == "Dropping"
    job = pitr.restore_as_of(meta, store, "src", "t", before)
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings)
    assert meta.catalog.get(coll.collection_id).state == "Dropped"
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
        c.insert("src", rows(range(1, 5), 8.0))
    for _ in range(2):
        gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))
    target = copy_and_replay(meta, store, settings, job, "t")
    assert visible_of(meta, store, target) == model.visible(before)
    assert sum(model.visible(before).values()) == 39 - 2 + 30
