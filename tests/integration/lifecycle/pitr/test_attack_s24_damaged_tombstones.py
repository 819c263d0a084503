"""Adversary s24 (damaged persisted records), GC's tombstones of purged collections: a
damaged one is kept by GC and refuses a whole database at an instant, naming it. Real etcd,
real files; the records module is tests/integration/lifecycle/test_attack_s24_damaged_records.py."""

from __future__ import annotations

import json

import pytest

from seglake.lifecycle import gc
from seglake.lifecycle.pitr import database
from seglake.lifecycle.pitr.planning import OutsideWindow

from pitr_model import database_with_b_dropped


@pytest.mark.parametrize("field,value", [("purged_at", "NaN"), ("drop_began_ts", '"x"'), ("created_ts", "null"),
                                         ("db", "7"), ("purged_at", "-1")])
def test_a_damaged_tombstone_is_kept_by_gc_and_refuses_the_database_restore(meta, store, settings, field, value):
    """GC keeps a tombstone of each collection it purges (its db and lifetime), so a whole
    database at an instant the collection lived in is refused, never given without it. A
    damaged tombstone was skipped by that check (the set silently lacked the collection) and
    deleted by GC's next pass as if old. Now it is kept and refuses the set, naming it."""
    b, t = database_with_b_dropped(meta, store, settings)
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
