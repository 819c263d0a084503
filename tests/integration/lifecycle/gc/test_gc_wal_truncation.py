"""WAL truncation by GC against real etcd and real files: ingest through WalClient, flush
with the flusher, then GC removes only fragments below every vchannel checkpoint, and
only once they are older than missing_tolerance."""

from __future__ import annotations

import os
import time

from seglake.lifecycle import gc
from seglake.lifecycle.gc import walview as gcwalview
from seglake.lifecycle.flush import flush_pchannel
from seglake.wal.checkpoints import live_vchannels, read_checkpoint, truncated_before
from seglake.meta.catalog import pchannel_of
from seglake.storage import layout
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import inserted_pks, make_collection, pchannels

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


def _fragments(store, pchannel=None):
    out = {}
    for o in store.list(f"{layout.WAL}/"):
        p = layout.parse_wal_fragment(o.key)
        if p and (pchannel is None or p[0] == pchannel):
            out[o.key] = p
    return out


def _age(store, keys, seconds=3 * 86400):
    t = time.time() - seconds
    for k in keys:
        os.utime(store.root / k, (t, t))


def _min_checkpoint(meta, pchannel) -> int:
    return min(read_checkpoint(meta, v)[0].message_id.fragment for v in live_vchannels(meta, pchannel))


def _ingest_and_flush(meta, store, settings, name="c1", batches=4, first_pk=1):
    """`batches` inserts (each in its own fragment), a flush of every pchannel, then one
    more insert that stays above the checkpoint. Returns the collection."""
    with WalClient(meta, store, settings) as c:
        coll = meta.catalog.get_by_name(name) if first_pk > 1 else make_collection(c, name, shards=2)
        for i in range(batches):
            c.insert(name, synthetic_rows(coll, 50, first_pk + 50 * i))
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    with WalClient(meta, store, settings) as c:
        c.insert(name, synthetic_rows(coll, 50, first_pk + 50 * batches))
    return coll


def test_gc_keeps_fragments_at_or_above_min_checkpoint_and_removes_older_after_tolerance(meta, store, settings):
    coll = _ingest_and_flush(meta, store, settings)
    before = _fragments(store)
    mins = {p: _min_checkpoint(meta, p) for p in pchannels(coll)}
    below = {k for k, (p, n) in before.items() if n < mins[p]}
    assert below and set(before) - below  # the test can tell both sides apart

    # young: every fragment is kept, the truncatable ones as kept_young
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    assert set(_fragments(store)) == set(before)
    assert r["mark"]["kept"].get(gc.YOUNG, 0) >= len(below)
    assert r["mark"]["wal"]["truncatable"] == len(below) and r["mark"]["wal"]["error"] is None

    # old: a dry run reports exactly the fragments below the minimum checkpoint ...
    _age(store, before)
    dry = gc.mark(meta, store, gc.GCOptions(dry_run=True, **OPTS), run_id="dry-wal")
    assert {c["path"] for c in dry.candidates if c["reason"] == gc.WAL_TRUNCATED} == below
    # ... and the real run deletes exactly those, recording the truncation first
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    assert r["sweep"]["by_reason"][gc.WAL_TRUNCATED]["files"] == len(below)
    left = _fragments(store)
    assert set(left) == set(before) - below
    assert all(n >= mins[p] for p, n in left.values())
    for p in pchannels(coll):
        assert truncated_before(meta, p) == mins[p]
    # idempotent: nothing more to truncate
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    assert set(_fragments(store)) == set(left)
    assert gc.WAL_TRUNCATED not in r["sweep"]["by_reason"]


def test_vchannel_without_checkpoint_blocks_truncation_of_its_pchannel(meta, store, settings):
    coll = _ingest_and_flush(meta, store, settings)
    with WalClient(meta, store, settings) as c:   # a second collection, never flushed
        other = make_collection(c, "c2", shards=16)  # one vchannel on every pchannel
        c.insert("c2", synthetic_rows(other, 10, 1))
    blocked = {pchannel_of(v) for v in other.vchannels}
    assert blocked & set(pchannels(coll))
    before = _fragments(store)
    _age(store, before)
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    after = _fragments(store)
    for p in blocked:
        assert {k for k in before if before[k][0] == p} <= set(after)
    assert r["mark"]["kept"].get(gc.WAL_RETAINED, 0) > 0
    # once flushed, the blocking vchannel has a checkpoint: truncation proceeds
    for p in blocked:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    _age(store, _fragments(store))
    gc.run(meta, store, gc.GCOptions(**OPTS))
    for p in blocked:
        assert all(n >= _min_checkpoint(meta, p) for _, n in _fragments(store, p).values())
    shared = blocked & set(pchannels(coll))   # where c1 left fragments below its checkpoint
    assert len(_fragments(store)) < len(before)
    assert sum(len(_fragments(store, p)) for p in shared) < sum(1 for k in before if before[k][0] in shared)


def test_sweep_rechecks_the_truncatable_set_before_deleting(meta, store, settings):
    """A vchannel without checkpoint that appears between the mark and the sweep stops
    the truncation of its pchannel: the sweep re-reads the set, nothing is deleted."""
    coll = _ingest_and_flush(meta, store, settings)
    _age(store, _fragments(store))
    m = gc.mark(meta, store, gc.GCOptions(**OPTS))
    wal_cands = [c for c in m.candidates if c["reason"] == gc.WAL_TRUNCATED]
    assert wal_cands
    with WalClient(meta, store, settings) as c:
        make_collection(c, "late", shards=16)
    before = _fragments(store)
    s = gc.sweep(meta, store, m.run_id)
    assert set(_fragments(store)) == set(before)
    assert s.rechecked_kept >= len(wal_cands) and s.deleted == 0
    assert all(truncated_before(meta, p) == 1 for p in pchannels(coll))


def test_wal_error_fails_closed_for_wal_only(meta, store, settings, monkeypatch):
    coll = _ingest_and_flush(meta, store, settings)
    before = _fragments(store)
    _age(store, before)
    orphan = layout.insert_log(coll.collection_id, 9, 424242, 100, 1)
    store.put(orphan, b"x")
    _age(store, [orphan])

    def broken(meta, pchannel, holds=None, wanted=None):
        raise RuntimeError("etcd went away")
    monkeypatch.setattr(gcwalview, "wal_truncatable", broken)
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    assert set(_fragments(store)) == set(before)
    assert "etcd went away" in r["mark"]["wal"]["error"]
    assert r["mark"]["kept"][gc.WAL_SKIPPED] == len(before)
    assert not store.exists(orphan)  # the rest of GC ran
    assert "wal: not judged" in gc.format_summary(r)


def test_flusher_and_recovery_work_after_truncation(meta, store, settings):
    coll = _ingest_and_flush(meta, store, settings)
    _age(store, _fragments(store))
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    assert r["sweep"]["by_reason"][gc.WAL_TRUNCATED]["files"] > 0
    # a new ingest and flush on the truncated log
    coll = _ingest_and_flush(meta, store, settings, batches=2, first_pk=10001)
    flushed = sum(s.num_rows for s in meta.segments.list(coll.collection_id) if s.state == "Flushed")
    assert flushed == 4 * 50 + 50 + 2 * 50  # every row committed before the last (unflushed) insert
    # a fresh recovery scan from the minimum checkpoint reads fine and still holds the
    # rows not yet flushed (the last insert)
    from seglake.wal.scanner import recovery_scanner
    seen = []
    for p in pchannels(coll):
        low = min(read_checkpoint(meta, v)[0].message_id for v in live_vchannels(meta, p))
        assert low.fragment >= truncated_before(meta, p) > 1
        msgs = recovery_scanner(meta, store, p, settings, start=low, follow=False).drain()
        seen += inserted_pks(msgs)
    assert set(seen) >= set(range(10101, 10151))


def test_a_producers_uncommitted_fragment_is_reclaimed_after_tolerance_committed_ones_kept(meta, store, settings):
    """A producer that wrote its fragment and never committed it (killed, lost every
    commit race for a minute) leaves a file no index record names: GC reclaims it once
    older than the tolerance, never a committed fragment above the checkpoints."""
    from seglake.wal.log import WalLog, encode_fragment, put_exclusive
    coll = _ingest_and_flush(meta, store, settings)
    p = pchannels(coll)[0]
    orphan = layout.wal_fragment(p, 999, "0123456789ab")
    assert put_exclusive(store, orphan, encode_fragment(0, 999, [b"never committed"]))
    committed = {r.key for r in WalLog(meta, store, p).fragments()}
    mins = _min_checkpoint(meta, p)
    above = {r.key for r in WalLog(meta, store, p).fragments() if r.n >= mins}
    assert above
    _age(store, [orphan, *committed])
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    left = set(_fragments(store, p))
    assert orphan not in left and above <= left
    fresh = layout.wal_fragment(p, 1000, "0123456789ac")   # young: kept
    assert put_exclusive(store, fresh, encode_fragment(0, 1000, [b"in flight"]))
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert fresh in set(_fragments(store, p))
    assert r is not None
