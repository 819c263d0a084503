"""The point-in-time window against GC, retention and drop (issue 30, deliver 1): with a
window on, WAL truncation keeps exactly the fragments a restore to any instant of the
window needs (from its base snapshot's positions, or the collection's creation), even
below the flushers' checkpoints, and the base snapshot; turning it off or shortening it
releases them at the next GC. Real etcd, real files; time moves through window.clock."""

from __future__ import annotations

import os
import time

import pytest

from seglake.errors import Conflict, ValidationError
from seglake.lifecycle import gc, pitr, snapshot
from seglake.lifecycle.gc.records import clean_records
from seglake.lifecycle.pitr import window as pwindow
from seglake.storage import layout
from seglake.wal.checkpoints import live_vchannels, read_checkpoint
from seglake.wal.client import WalClient

from etcd_root import etcd_clock_past_ttls
from pitr_model import SCHEMA, Model, flush_all, restore_to, rows, visible_of

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


def _fragments(store) -> dict[str, tuple[str, int]]:
    out = {}
    for o in store.list(f"{layout.WAL}/"):
        p = layout.parse_wal_fragment(o.key)
        if p:
            out[o.key] = p
    return out


def _age_all(store) -> None:
    t = time.time() - 3 * 86400
    for k in _fragments(store):
        os.utime(store.root / k, (t, t))


def _min_checkpoint(meta, p) -> int:
    return min(read_checkpoint(meta, v)[0].message_id.fragment for v in live_vchannels(meta, p))


def _batches(c, model, name, first, n, v):
    for i in range(n):
        model.record(c.insert(name, rows(range(first + 10 * i, first + 10 * i + 10), v)), v)


def test_window_keeps_what_restores_need_and_releases_it_when_off(meta, store, settings, monkeypatch):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        model = Model(meta, store, "src")
        pitr.set_window(meta, "src", "1h")
        _batches(c, model, "src", 1, 4, 1.0)
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "base", ttl=600)
        _batches(c, model, "src", 100, 4, 2.0)
        model.record(c.delete("src", [1, 2, 101]), 3.0)
        t_mid = meta.tso.now()
        _batches(c, model, "src", 200, 4, 4.0)
        flush_all(meta, store, settings, coll)
    (p,) = {layout.parse_wal_fragment(k)[0] for k in _fragments(store)}
    base = meta.snapshots.get(coll.collection_id, "base")[0]
    held_from = base.positions[coll.vchannels[0]]["checkpoint"][1]
    cp = _min_checkpoint(meta, p)
    assert 1 < held_from < cp     # the test tells the three sides apart
    _age_all(store)

    # now: the window reaches back before the snapshot: held from the collection's creation
    assert pitr.held_fragment(pitr.holds(meta), p) == 1
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert min(n for _, n in _fragments(store).values()) == 1

    # two hours later the window's oldest instant is after the snapshot: held from its position
    later = time.time() + 7200
    monkeypatch.setattr(pwindow, "clock", lambda: later)
    (h,) = pitr.holds(meta)
    assert h.snapshot.name == "base" and h.fragments == {p: held_from}
    cost = pitr.cost(meta)
    assert cost["snapshot_bytes"] == base.bytes > 0 and cost["window_only_bytes"] > 0
    assert cost["log_bytes"] > cost["window_only_bytes"]
    r = gc.run(meta, store, gc.GCOptions(**OPTS), )
    left = sorted(n for _, n in _fragments(store).values())
    assert left[0] == held_from, (left, held_from, cp)            # exactly the window's need ...
    assert r["sweep"]["by_reason"][gc.WAL_TRUNCATED]["files"] == held_from - 1   # ... and not one more
    # the base snapshot outlives its TTL, retention and a drop while the window holds it
    with pytest.raises(Conflict, match="point-in-time window"):
        snapshot.drop_by_id(meta, store, coll.collection_id, "base")
    # its TTL has passed: GC's records step at a time past it (not a wait: an expiry that a loaded
    # run reached before the first GC above would rightly have dropped it, the window then not holding it)
    etcd_clock_past_ttls(meta)
    r = clean_records(meta, store, gc.GCOptions(**OPTS), now=base.expires_at + 1)
    assert meta.snapshots.get(coll.collection_id, "base")[0].state == "COMMITTED"
    assert r["expired_snapshots_held_by_window"] == 1
    # a restore to an instant after the snapshot still works from it, after the truncation
    monkeypatch.setattr(pwindow, "clock", time.time)
    target = restore_to(meta, store, settings, "src", "mid", t_mid)
    assert pitr.summary(meta, target)["snapshot"] == "base"
    assert visible_of(meta, store, target) == model.visible(t_mid)
    # ... an instant before it reaches into the truncated log: refused, naming the fragments
    with pytest.raises(pitr.LogGap, match=rf"fragments 1\.\.{held_from - 1} were truncated"):
        pitr.restore_as_of(meta, store, "src", "early", base.consistent_ts - 1)
    assert not [c for c in meta.catalog.list() if c.name == "early"]

    # off: the next GC releases the log below the checkpoints and the snapshot (TTL passed)
    monkeypatch.setattr(pwindow, "clock", lambda: later)
    assert pitr.clear_window(meta, "src")
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert min(n for _, n in _fragments(store).values()) == cp
    clean_records(meta, store, gc.GCOptions(**OPTS), now=base.expires_at + 1)
    assert meta.snapshots.find(coll.collection_id, "base") is None


def test_window_is_checked_before_anything_is_written(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=1)
    for bad in ("0", "59", "nan", "-3d", "3 d", "1e3", "3w", True, float("nan"), float("inf"), "400d", None, [1]):
        with pytest.raises(ValidationError):
            pitr.set_window(meta, "src", bad)
    assert pitr.get_window(meta, "src") is None
    doc = pitr.set_window(meta, "src", "12h")
    assert doc["window_s"] == 43200 and pitr.get_window(meta, "src")["window"] == "12h"
    assert pitr.set_window(meta, "src", "3d")["window_s"] == 3 * 86400
    assert [w["collection"] for w in pitr.list_windows(meta)] == ["src"]
    assert pitr.clear_window(meta, "src") and not pitr.clear_window(meta, "src")
