"""atk-s25-drop: the flush that releases a Dropping collection's last vchannel finishes
the drop (drop.finish_released). Real etcd, real files."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import drop, gc
from seglake.lifecycle.flush import Flusher, flush_pchannel
from seglake.meta.catalog import DROPPED as COLL_DROPPED, DROPPING, Collection, Schema, pchannel_of, vchannel_names
from seglake.meta.codec import encode
from seglake.meta.kv import Put
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import make_collection, pchannels, schema


def _many_records(meta, n: int, state="Dropped") -> None:
    """n collection records (as catalog.create writes them), in batched txns."""
    sch = Schema.build(schema())
    first = meta.ids.allocate(2 * n)
    ops = []
    for i in range(n):
        cid = first + 2 * i
        c = Collection(collection_id=cid, name=f"old{i}", db="default", schema=sch, partitions=(),
                       shards=2, vchannels=vchannel_names(cid, 2), state=state, created_ts=1,
                       properties={"released_vchannels": list(vchannel_names(cid, 2))})
        ops.append(Put(meta.keys.collection(cid), encode(c.to_json())))
        if len(ops) == 100:
            meta.kv.txn([], ops)
            ops = []
    if ops:
        meta.kv.txn([], ops)


def test_bench_finish_released_overhead_per_flush_with_2000_collection_records(meta, store, settings, capsys):
    """Printed, not asserted: the cost finish_released adds to a flush of one pchannel
    with 2,000 (Dropped) collection records in the catalog."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "live", shards=1)
        c.insert("live", synthetic_rows(coll, 50, 1))
    _many_records(meta, 2000)
    p = pchannels(coll)[0]
    flush_pchannel(meta, store, p, settings, flush_all=True)      # warm
    n = 8
    flush_only = whole = fin = 0.0
    for _ in range(n):   # interleaved: the shared machine's load hits both alike
        t0 = time.perf_counter()
        Flusher(meta, store, p, settings).run(flush_all=True)
        t1 = time.perf_counter()
        flush_pchannel(meta, store, p, settings, flush_all=True)
        t2 = time.perf_counter()
        f = Flusher(meta, store, p, settings)
        f.run(flush_all=True)
        t3 = time.perf_counter()
        drop.finish_released(meta, p, collection_ids=f.finish_candidates)   # what flush_pchannel adds
        t4 = time.perf_counter()
        flush_only, whole, fin = flush_only + (t1 - t0) / n, whole + (t2 - t1) / n, fin + (t4 - t3) / n
    t0 = time.perf_counter()
    for _ in range(n):
        drop.finish_released(meta, p)   # the full read of every record (the finisher as landed)
    scan = (time.perf_counter() - t0) / n
    with capsys.disabled():
        print(f"\nBENCH finish_released 2000 records: Flusher.run {flush_only * 1000:.1f} ms, flush_pchannel "
              f"{whole * 1000:.1f} ms; finish_released with the flusher's candidates {fin * 1000:.2f} ms, "
              f"reading every record {scan * 1000:.1f} ms per flush of a pchannel")


def _dropping_one_pchannel(meta, store, settings, name="c1", rows=30):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, name, shards=1)
        c.insert(name, synthetic_rows(coll, rows, 1))
    assert drop.drop_collection(meta, store, settings, name)["state"] == DROPPING
    return coll


@pytest.mark.parametrize("damage", [b'{"v":1,"name":"x"}', b'{"v":99,"collection_id":1}',
                                    b'{"v":1,"collection_id":1,"name":"o","db":"default","schema":{"fields":[]},'
                                    b'"partitions":[],"shards":1,"vchannels":[],"state":"Dropping","properties":[]}'])
def test_a_collection_record_damaged_during_the_flush_never_fails_the_flush(meta, store, settings, damage):
    """The flush committed its work; the finisher met a record damaged since the flusher
    opened (a missing field: KeyError; a newer seglake's record: SeglakeError; properties
    not a dict): it skips it and finishes the others, instead of failing the flush."""
    with WalClient(meta, store, settings) as c:
        other = make_collection(c, "other", shards=1)
    coll = _dropping_one_pchannel(meta, store, settings)
    okey = meta.keys.collection(other.collection_id)
    good = meta.kv.get(okey).value

    def spoil(f, vchannel):
        meta.kv.put(okey, damage)

    try:
        rep = flush_pchannel(meta, store, pchannels(coll)[0], settings, hooks={"after_release": spoil})
        assert rep["drops_finished"] == ["c1"]
        assert meta.catalog.get(coll.collection_id).state == COLL_DROPPED
    finally:
        meta.kv.put(okey, good)


def _purge(meta, store):
    for _ in range(2):   # files, then the segment records, then the collection record
        gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))


def test_the_drops_own_finish_after_the_flush_finished_it_and_gc_purged_it_reports_dropped(meta, store, settings):
    """The drop DAG (wait_for_flush) or `--wait` polls; meanwhile wal_flush finished the
    drop and GC (drop_tolerance 0, forced) purged the Dropped record. The drop's own
    wait and finish (collection_id: the one begun) then failed with NotFound, the run
    failed though the drop was done. Expected: reported Dropped (purged)."""
    coll = _dropping_one_pchannel(meta, store, settings)
    cid = coll.collection_id
    assert flush_pchannel(meta, store, pchannels(coll)[0], settings)["drops_finished"] == ["c1"]
    _purge(meta, store)
    with pytest.raises(Exception):
        meta.catalog.get(cid)                                     # purged
    rep = drop.wait_released(meta, "c1", collection_id=cid, poll=0.01, timeout=5)
    assert rep["state"] == COLL_DROPPED and rep["collection_id"] == cid
    rep = drop.finish_drop(meta, "c1", collection_id=cid)
    assert rep["state"] == COLL_DROPPED and rep["collection_id"] == cid
    # a begin that re-runs on it (the DAG's re-run: begin with the run's recorded id) reports too
    assert drop.begin_drop(meta, store, settings, "c1", collection_id=cid)["state"] == COLL_DROPPED
    # an id that was never dropped is still NotFound
    with pytest.raises(Exception, match="not found"):
        drop.finish_drop(meta, "c1", collection_id=cid + 10_000)


def test_cli_wait_while_the_flush_finishes_and_gc_purges_reports_dropped(meta, store, settings):
    """`seglake collections drop c1 --wait --yes` (drop_collection wait=True): the poll
    sleeps; the flush finishes the drop and GC purges it before the next poll."""
    import threading

    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c1", shards=1)
        c.insert("c1", synthetic_rows(coll, 30, 1))
    out = {}

    def waiter():
        try:
            out["rep"] = drop.drop_collection(meta, store, settings, "c1", wait=True, poll=3.0, timeout=120)
        except Exception as e:   # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=waiter)
    t.start()
    for _ in range(600):   # until a flush released it (the DropCollection is appended after the flip)
        if meta.catalog.get(coll.collection_id).state == DROPPING:
            flush_pchannel(meta, store, pchannels(coll)[0], settings)
            if meta.catalog.get(coll.collection_id).state == COLL_DROPPED:
                break
        time.sleep(0.01)
    _purge(meta, store)
    t.join(150)
    assert "error" not in out, out
    assert out["rep"]["state"] == COLL_DROPPED


def test_two_flushes_both_seeing_the_last_release_finish_it_once_and_one_says_so(meta, store, settings):
    """Two pchannels of one collection flushed at once, each waiting after its release for
    the other's (so both finishers see every vchannel released): one guarded finish wins,
    the drop ends once, and exactly one flush reports it (both did: a wal_flush summary
    counted the drop twice)."""
    import threading

    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c1", shards=2)
        c.insert("c1", synthetic_rows(coll, 40, 1))
    drop.drop_collection(meta, store, settings, "c1")
    ps = pchannels(coll)
    assert len(ps) == 2
    released = {p: threading.Event() for p in ps}
    out, errs = {}, []

    def one(p, q):
        def after(f, vchannel):
            released[p].set()
            assert released[q].wait(60)
        try:
            out[p] = flush_pchannel(meta, store, p, settings, hooks={"after_release": after})
        except Exception as e:   # noqa: BLE001
            errs.append(e)
    ts = [threading.Thread(target=one, args=(ps[0], ps[1])), threading.Thread(target=one, args=(ps[1], ps[0]))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errs, errs
    assert sorted(n for r in out.values() for n in r["drops_finished"]) == ["c1"]
    assert meta.catalog.get(coll.collection_id).state == COLL_DROPPED


def test_a_flusher_sigkilled_between_its_last_release_and_the_finish(meta, store, settings, tmp_path):
    """A real process: flush_pchannel SIGKILLed right after it released the last vchannel.
    The name stays reserved (Dropping); the next flush of the pchannel finishes the drop,
    the name is free, a new collection under it gets new vchannels and its rows."""
    import os
    import signal
    import subprocess
    import sys

    from seglake.errors import Conflict
    from seglake.wal.checkpoints import live_vchannels

    coll = _dropping_one_pchannel(meta, store, settings)
    p = pchannels(coll)[0]
    code = ("import sys; from seglake.config import Settings; from seglake.meta import Meta; "
            "from seglake.storage import open_store; from seglake.lifecycle.flush import flush_pchannel; "
            "s = Settings.load(); m = Meta.from_settings(s); "
            f"flush_pchannel(m, open_store(s), {p!r}, s)")
    env = {**os.environ, **settings.to_env(), "SEGLAKE_FAULTS": "flush.after_release:kill",
           "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, timeout=120, capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    cur = meta.catalog.get(coll.collection_id)
    assert cur.state == DROPPING and not drop._held(cur)
    with WalClient(meta, store, settings) as c, pytest.raises(Conflict):
        make_collection(c, "c1", shards=1)                  # still reserved
    assert flush_pchannel(meta, store, p, settings)["drops_finished"] == ["c1"]
    with WalClient(meta, store, settings) as c:
        new = make_collection(c, "c1", shards=1)
        c.insert("c1", synthetic_rows(new, 15, 1000))
    assert not set(new.vchannels) & set(coll.vchannels)
    assert set(live_vchannels(meta, p)) >= set(v for v in new.vchannels if pchannel_of(v) == p)
    flush_pchannel(meta, store, pchannels(new)[0], settings, flush_all=True)
    from seglake.lifecycle.verify import segment_rows
    from seglake.meta.segments import FLUSHED
    assert segment_rows(meta, store, new.collection_id, [FLUSHED])[0] == list(range(1000, 1015))


def test_the_dropped_collections_own_record_damaged_after_its_release_never_fails_the_flush(meta, store, settings):
    """The candidate itself unreadable when the finisher reads it: skipped (logged), the flush
    returns; once the record is readable again the next flush finishes the drop."""
    coll = _dropping_one_pchannel(meta, store, settings)
    key = meta.keys.collection(coll.collection_id)
    saved = {}

    def spoil(f, vchannel):
        saved["good"] = meta.kv.get(key).value
        meta.kv.put(key, b'{"v":1,"collection_id":' + str(coll.collection_id).encode() + b'}')

    p = pchannels(coll)[0]
    rep = flush_pchannel(meta, store, p, settings, hooks={"after_release": spoil})
    assert rep["drops_finished"] == []
    meta.kv.put(key, saved["good"])
    assert flush_pchannel(meta, store, p, settings)["drops_finished"] == ["c1"]
    assert meta.catalog.get(coll.collection_id).state == COLL_DROPPED
