"""Adversary s24 (damaged persisted records), GC's tombstones of purged collections: a
damaged one is kept by GC and refuses a whole database at an instant, naming it. Real etcd,
real files; the records module is tests/integration/lifecycle/test_attack_s24_damaged_records.py."""

from __future__ import annotations

import json

import pytest

from seglake.lifecycle import drop, gc, pitr
from seglake.lifecycle.pitr import database
from seglake.lifecycle.pitr.planning import OutsideWindow
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, flush_all, rows


@pytest.mark.parametrize("field,value", [("purged_at", "NaN"), ("drop_began_ts", '"x"'), ("created_ts", "null"),
                                         ("db", "7"), ("purged_at", "-1")])
def test_a_damaged_tombstone_is_kept_by_gc_and_refuses_the_database_restore(meta, store, settings, field, value):
    """GC keeps a tombstone of each collection it purges (its db and lifetime), so a whole
    database at an instant the collection lived in is refused, never given without it. A
    damaged tombstone was skipped by that check (the set silently lacked the collection) and
    deleted by GC's next pass as if old. Now it is kept and refuses the set, naming it."""
    with WalClient(meta, store, settings) as c:
        c.create_collection("a", SCHEMA, shards=1)
        pitr.set_window(meta, "a", "1h")
        c.insert("a", rows(range(1, 5), 1.0))
        b = c.create_collection("b", SCHEMA, shards=1)
        c.insert("b", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, b)
        t = meta.tso.reserve(1, linearizable=True)
    drop.begin_drop(meta, store, settings, "b")
    flush_all(meta, store, settings, b, flush_all=False)
    drop.finish_drop(meta, "b", collection_id=b.collection_id)
    opts = gc.GCOptions(drop_tolerance=0, missing_tolerance=0, floor=0, force=True)
    gc.run(meta, store, opts)
    key = meta.keys.pitr_gone(b.collection_id)
    doc = json.loads(meta.kv.get(key).value)
    meta.kv.put(key, json.dumps({**doc, field: "@"}).replace('"@"', value))
    with pytest.raises(OutsideWindow, match=key if field != "purged_at" else f"{key}|'b'"):
        database.plan_database(meta, store, "default", t, suffix="_t")
    gc.run(meta, store, opts)
    assert meta.kv.get(key) is not None
    with pytest.raises(OutsideWindow):
        database.plan_database(meta, store, "default", t, suffix="_t")
