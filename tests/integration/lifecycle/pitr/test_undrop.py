"""Undrop (issue 30, deliver 5): a collection dropped inside its point-in-time window comes
back as a new collection, as it was just before the drop (rows equal to the model of every
acknowledged operation), through the engine and `seglake collections undrop`; the window
keeps holding its log and base snapshot after the drop; refusals before anything is made."""

from __future__ import annotations

import time

import pytest

from seglake import cli
from seglake.errors import StateError
from seglake.lifecycle import copyjob, drop, gc, pitr, snapshot
from seglake.lifecycle.pitr import window as pwindow
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, flush_all, rows, visible_of


def _dropped_source(meta, store, settings, name="src", window="1h"):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(name, SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, name, window)
        model = Model(meta, store, name)
        model.record(c.insert(name, rows(range(1, 80), 1.0)), 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, name, "s1")
        model.record(c.delete(name, list(range(1, 10))), 2.0)
        model.record(c.upsert(name, rows(range(20, 30), 3.0), partition="p1"), 3.0)
        model.record(c.insert(name, rows(range(100, 140), 4.0), txn=False), 4.0)
    drop.begin_drop(meta, store, settings, name)
    flush_all(meta, store, settings, coll, flush_all=False)   # the flushers release the vchannels
    assert drop.finish_drop(meta, name, collection_id=coll.collection_id)["state"] == "Dropped"
    return coll, model


def _drive(meta, store, settings, job_id, target):
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id)
    copyjob.finalize(meta, job_id)
    return pitr.replay(meta, store, settings, meta.catalog.get_by_name(target).collection_id)


def test_undrop_brings_back_the_collection_as_it_was_before_the_drop(meta, store, settings, monkeypatch):
    coll, model = _dropped_source(meta, store, settings)
    # the drop does not end the window: it still holds the dropped collection's log and base snapshot
    (h,) = pitr.holds(meta)
    assert h.collection == "src" and h.snapshot is None    # s1 is inside the window: held from creation
    monkeypatch.setattr(pwindow, "clock", lambda: time.time() + 3700)   # the drop has left the window
    assert pitr.holds(meta) == []
    monkeypatch.setattr(pwindow, "clock", time.time)
    gc.run(meta, store, gc.GCOptions(missing_tolerance=3600, drop_tolerance=3600))
    out = _drive(meta, store, settings, pitr.undrop(meta, store, "src", "back"), "back")
    back = meta.catalog.get_by_name("back")
    assert back.state == "Created" and out["snapshot"] == "s1"
    assert visible_of(meta, store, back) == model.visible(meta.tso.now())
    assert meta.catalog.get(coll.collection_id).state == "Dropped"    # the source stays dropped
    # a re-run changes nothing; another name for the same drop is a second copy
    assert pitr.undrop(meta, store, "src", "back") == meta.catalog.get_by_name("back").properties["restore_job_id"]


def test_undrop_from_the_cli_and_refusals(meta, store, settings, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    coll, model = _dropped_source(meta, store, settings)
    rc = cli.main(["collections", "undrop", "src", "--as", "src_back"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "as it was just before its drop" in out
    assert visible_of(meta, store, meta.catalog.get_by_name("src_back")) == model.visible(meta.tso.now())
    # refused before anything is created: a live collection, a drop outside the window, no window
    with pytest.raises(StateError, match="not dropped"):
        pitr.undrop(meta, store, "src_back", "x")
    monkeypatch.setattr(pwindow, "clock", lambda: time.time() + 7200)
    with pytest.raises(pitr.OutsideWindow, match="the drop at .* is outside the point-in-time window"):
        pitr.undrop(meta, store, "src", "x")
    assert not [c for c in meta.catalog.list(include_dropped=True) if c.name == "x"]


def test_an_instant_before_a_drop_still_in_progress_is_restored(meta, store, settings):
    """README: `seglake restore demo demo_noon --as-of T` restores the collection that held
    the name at T, dropped since. While the drop waits for wal_flush (Dropping: on a fresh
    install wal_flush is paused), the restore was refused ('is Dropping; a restore to a
    time needs a live collection') though the undrop of the same collection was accepted."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 30), 1.0)), 1.0)
        t = meta.tso.now()
        time.sleep(0.002)
        model.record(c.delete("src", [1, 2]), 2.0)
    drop.begin_drop(meta, store, settings, "src")
    assert meta.catalog.get_by_name("src").state == "Dropping"
    out = _drive(meta, store, settings, pitr.restore_as_of(meta, store, "src", "at_t", t), "at_t")
    assert out is not None
    assert visible_of(meta, store, meta.catalog.get_by_name("at_t")) == model.visible(t)
    with pytest.raises(StateError, match="Dropping"):   # an instant after the drop began: undrop it instead
        pitr.plan(meta, store, "src", meta.tso.now() + (5 << 18) * 1000)


def test_a_window_on_a_dropped_name_says_it_is_dropped(meta, store, settings):
    """`pitr show src` says 'Dropped: undrop ...' but `pitr set src 2d` said "collection 'src'
    not found"; it says the collection is Dropped and how to bring it back."""
    _dropped_source(meta, store, settings)
    with pytest.raises(StateError, match=r"'src' is Dropped.*seglake collections undrop src --as NEW"):
        pitr.set_window(meta, "src", "2d")


def test_an_undrop_without_a_window_does_not_advise_setting_one(meta, store, settings):
    """The window cleared after the drop: the undrop said 'set one (`seglake pitr set src 3d`)',
    which is refused for a dropped collection. It says what can still bring it back."""
    _dropped_source(meta, store, settings)
    pitr.clear_window(meta, "src")
    with pytest.raises(pitr.OutsideWindow) as e:
        pitr.undrop(meta, store, "src", "back")
    msg = str(e.value)
    assert "pitr set" not in msg and "'src' is Dropped" in msg and "--from-target" in msg, msg
    assert "seglake snapshots list --collection src" in msg
