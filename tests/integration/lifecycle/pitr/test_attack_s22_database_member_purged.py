"""attack-s22: a whole database at one instant must hold every collection the database held
then, or refuse. A collection of the database at the instant, dropped since WITHOUT a
window, refuses the set while its Dropped record exists (README: "one dropped since that
cannot be restored ... refuses the set, saying so"); once GC has reclaimed its files and
purged its record, the same restore silently gives the database without it."""

from __future__ import annotations

import pytest

from seglake.lifecycle import drop, gc, pitr
from seglake.lifecycle.pitr import database
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, database_with_b_dropped, flush_all, rows


def test_a_database_at_an_instant_never_silently_lacks_a_collection_it_held(meta, store, settings):
    b, t = database_with_b_dropped(meta, store, settings, after_t=lambda c: c.insert("a", rows(range(5, 9), 2.0)))
    # while b's record exists: refused, naming b
    with pytest.raises(Exception, match="'b'"):
        database.plan_database(meta, store, "default", t, suffix="_t")
    gc.run(meta, store, gc.GCOptions(drop_tolerance=0, missing_tolerance=0, floor=0, force=True))
    gone = [x for x in meta.catalog.list(include_dropped=True) if x.name == "b"]
    print("b records left:", gone)
    # the database held a and b at t: the set must still be refused (or restore b), never a alone
    try:
        _, to, plans = database.plan_database(meta, store, "default", t, suffix="_t")
    except Exception as e:   # refused: fine
        print("refused:", e)
        return
    assert "b" in plans, f"database at {t} planned as {sorted(plans)} only: b, which it held then, silently left out"


def test_a_rolled_back_restore_target_purged_by_gc_does_not_refuse_a_database(meta, store, settings):
    """A restore target rolled back (never usable, Dropped without a drop) and purged by GC
    is no member of the database at any instant (planning.at_instant skips it too)."""
    from seglake.lifecycle import restore, snapshot
    from seglake.lifecycle.copyjob.target import rollback_target

    with WalClient(meta, store, settings) as c:
        a = c.create_collection("a", SCHEMA, shards=1)
        pitr.set_window(meta, "a", "1h")
        c.insert("a", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, a)
        snapshot.create(meta, store, "a", "s1")
        restore.restore(meta, store, "a", "s1", "r")
        r = meta.catalog.get_by_name("r")
        rollback_target(meta, r.collection_id, "test")
        t = meta.tso.reserve(1, linearizable=True)
    gc.run(meta, store, gc.GCOptions(drop_tolerance=0, missing_tolerance=0, floor=0, force=True))
    assert not [x for x in meta.catalog.list(include_dropped=True) if x.name == "r"]
    _, to, plans = database.plan_database(meta, store, "default", t, suffix="_t")
    assert sorted(plans) == ["a"]


def test_a_restore_or_undrop_of_a_purged_name_says_when_it_was_dropped_and_purged(meta, store, settings):
    """Session 23: a named `restore --as-of` or undrop of a collection whose records GC purged
    said only "not found"; GC's tombstone says when it was dropped and purged, and the error
    says so (and where it may still come from)."""
    from seglake.errors import NotFound

    with WalClient(meta, store, settings) as c:
        b = c.create_collection("b", SCHEMA, shards=1)
        c.insert("b", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, b)
        t = meta.tso.reserve(1, linearizable=True)
    drop.begin_drop(meta, store, settings, "b")
    flush_all(meta, store, settings, b, flush_all=False)
    drop.finish_drop(meta, "b", collection_id=b.collection_id)
    gc.run(meta, store, gc.GCOptions(drop_tolerance=0, missing_tolerance=0, floor=0, force=True))
    assert not [x for x in meta.catalog.list(include_dropped=True) if x.name == "b"]
    for attempt in (lambda: pitr.restore_as_of(meta, store, "b", "b_t", t), lambda: pitr.undrop(meta, store, "b", "b_u")):
        with pytest.raises(NotFound, match=r"'b' not found in db 'default': it was dropped at .* and GC purged its "
                                           r"records on .*--from-target"):
            attempt()
    with pytest.raises(NotFound, match=r"^collection 'never' not found in db 'default'$"):
        pitr.restore_as_of(meta, store, "never", "n_t", t)
