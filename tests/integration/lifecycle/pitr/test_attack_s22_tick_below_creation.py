"""attack-s22: a collection's first rows may carry ticks below its created_ts (window.py's
CLOCK_SLACK_MS: another process's TSO batch may lag, alloc.BATCH_MAX_AGE). A database at
one instant T between such a row's tick and the collection's created_ts: the row is in the
TSO cut (tick <= T) but the collection is not a member (at_instant: created_ts <= T).
Held: a writer whose TSO batch lags still commits at a tick above the creation."""

from __future__ import annotations

from seglake.lifecycle import pitr
from seglake.lifecycle.pitr import database
from seglake.meta import Meta, alloc
from seglake.wal import message as M
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, rows


def test_a_row_ticked_below_its_collections_creation(meta, store, settings, monkeypatch):
    other = Meta.from_settings(settings.replace(
        etcd_endpoint=settings.etcd_endpoint.replace("127.0.0.1", "localhost")))
    try:
        monkeypatch.setattr(alloc, "BATCH_MAX_AGE", 30.0)
        with WalClient(other, store, settings) as w:
            w.create_collection("warm", SCHEMA, shards=1)
            pitr.set_window(other, "warm", "1h")
            w.insert("warm", rows(range(1, 3), 1.0))
            lag = other.tso.now()
            with WalClient(meta, store, settings) as c:
                x = c.create_collection("x", SCHEMA, shards=1)
                pitr.set_window(meta, "x", "1h")
            res = w.insert("x", rows(range(1, 5), 2.0))
            m = Model(meta, store, "x")
            tick = max(mm.time_tick for mm in m.messages(res) if mm.type == M.INSERT)
        print("lag", lag, "created", x.created_ts, "row tick", tick, "below creation:", tick < x.created_ts)
        monkeypatch.setattr(alloc, "BATCH_MAX_AGE", 0.05)
        # held: the commit's tick is above every timestamp issued before it (not the lagging batch's)
        assert tick >= x.created_ts, f"row tick {tick} below x's creation {x.created_ts}"
        assert "x" in database.at_instant(meta, "default", tick)
    finally:
        other.close()
