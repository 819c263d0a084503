"""Attack s20: real concurrency. The main thread writes (inserts, upserts, scoped and wide
deletes) and flushes one pchannel at a time with a small seal (partial flushes); a second
thread compacts in a loop (random policies, folds on); a third runs GC (drop_tolerance 0).
Each has its own Meta and Store. At the end, after a full flush: rows == Model; a final
compaction + GC + a fresh flush changes nothing."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from seglake.lifecycle import compaction, gc
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta import Meta
from seglake.storage import open_store

from compaction_helpers import Writer, policy, rows
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd


def _pol(rng):
    return policy(min_segment_rows=int(rng.choice([1, 3, 8, 1000])), target_rows=int(rng.choice([1, 5, 20, 10_000])),
                  delete_ratio=float(rng.choice([0.0, 0.3, 1.0])), l0_age=0.0)


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("S20T_SEEDS", "31,32,33").split(",")])
def test_writes_flushes_compactions_and_gc_in_threads(meta, store, settings, seed):
    rng = np.random.default_rng(seed)
    small = settings.replace(flush_seal_rows=int(rng.choice([3, 5])))
    w = Writer(meta, store, small)
    parts = ["_default", "p1", "p2"]
    w.create("ct", parts, shards=2)
    coll = meta.catalog.get_by_name("ct")
    pchs = sorted(pchannels(coll))
    stop = threading.Event()
    errors, stats = [], {"units": 0, "lost": 0, "gc": 0}

    def compactor():
        m, s = Meta.from_settings(settings), open_store(settings)
        r = np.random.default_rng(seed + 1000)
        try:
            while not stop.is_set():
                out = compaction.compact(m, s, "ct", _pol(r))
                stats["units"] += len(out.results)
                stats["lost"] += sum(1 for x in out.results if x.status == compaction.LOST)
        except BaseException as e:      # noqa: BLE001
            errors.append(("compactor", repr(e)))
        finally:
            m.close()

    def collector():
        m, s = Meta.from_settings(settings), open_store(settings)
        try:
            while not stop.is_set():
                gc.run(m, s, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                        collection_id=coll.collection_id))
                stats["gc"] += 1
                stop.wait(0.2)
        except BaseException as e:      # noqa: BLE001
            errors.append(("gc", repr(e)))
        finally:
            m.close()

    threads = [threading.Thread(target=compactor), threading.Thread(target=collector)]
    for t in threads:
        t.start()
    try:
        for step in range(int(os.environ.get("S20T_STEPS", "100"))):
            op = rng.choice(["ins", "ins", "ins", "ups", "del", "wide", "flush", "flush", "flushall"])
            pks = sorted({int(x) for x in rng.integers(0, 20, size=int(rng.integers(1, 7)))})
            part = str(rng.choice(parts))
            if op in ("ins", "ups"):
                w.insert("ct", pks, part, float(step), upsert=op == "ups")
            elif op == "del":
                w.delete("ct", pks, partition=part)
            elif op == "wide":
                w.delete("ct", pks)
            else:
                flush_pchannel(meta, store, pchs[int(rng.integers(0, len(pchs)))], small,
                               flush_all=op == "flushall")
            if errors:
                break
    finally:
        stop.set()
        for t in threads:
            t.join(300)
    assert not errors, errors
    for p in pchs:
        flush_pchannel(meta, store, p, small, flush_all=True)
    got, want = rows(meta, store, "ct"), w.model.visible()
    assert got == want, (seed, stats, "extra", got - want, "missing", want - got)
    compaction.compact(meta, store, "ct", _pol(rng))
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=coll.collection_id))
    for p in pchs:
        flush_pchannel(meta, store, p, small, flush_all=True)
    got = rows(meta, store, "ct")
    assert got == want, (seed, stats, "after: extra", got - want, "missing", want - got)
    print("STATS", seed, stats)


@pytest.mark.parametrize("seed", [41])
def test_after_the_storm_every_file_is_a_live_segments_and_gc_reclaims_the_rest(meta, store, settings, seed):
    """The same storm; then (nothing else running) GC with zero tolerances: every file left
    under the collection's prefixes belongs to a Flushed segment record, and every file a
    Flushed record names exists (no orphan GC cannot reclaim, nothing referenced reclaimed)."""
    from seglake.meta.segments import FLUSHED
    from seglake.storage import layout

    test_writes_flushes_compactions_and_gc_in_threads(meta, store, settings, seed)
    coll = meta.catalog.get_by_name("ct")
    for _ in range(2):
        gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True, collection_id=coll.collection_id))
    live = [s for s in meta.segments.list(coll.collection_id)]
    assert all(s.state == FLUSHED for s in live), [(s.segment_id, s.state) for s in live if s.state != FLUSHED]
    named = {f.key for s in live for f in layout.segment_files(s)}
    stored = {o.key for p in layout.collection_prefixes(coll.collection_id) for o in store.list(p)}
    assert named - stored == set(), sorted(named - stored)[:10]
    assert stored - named == set(), sorted(stored - named)[:10]
