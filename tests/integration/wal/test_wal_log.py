"""The WAL log and its fenced writers against real etcd, local files and SeaweedFS."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from seglake.errors import ValidationError
from seglake.storage import layout
from seglake.wal import message as M
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import CorruptFragment, Fenced, WalLog
from seglake.wal.writer import WalWriter

from wal_helpers import all_messages, inserted_pks, make_collection, pchannels

P = "seglake-dml_3"
BATCH_AGE = 0.06   # > alloc.BATCH_MAX_AGE: a TSO batch reserved before a clock move has expired


def _coll(meta, store, settings, shards=1):
    with WalClient(meta, store, settings) as c:
        return make_collection(c, shards=shards)


def _insert_msg(coll, first_pk, n=3):
    v = coll.vchannels[0]
    return M.Message.insert(v, coll.collection_id, coll.partitions[0].partition_id,
                            synthetic_rows(coll, n, first_pk).to_batches()[0])


def _writer_for(meta, store, settings, coll, **kw):
    return WalWriter.open(meta, store, pchannels(coll)[0], settings, **kw)


def _frag_key(meta, store, p, n):
    """The object key of committed fragment n (from the log's index)."""
    return next(r.key for r in WalLog(meta, store, p).fragments(n) if r.n == n)


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_two_producers_append_side_by_side_neither_fenced(backend, meta, store, settings, request):
    """Producers of one pchannel never fence each other: both keep appending, every
    acknowledged row is in the log once, ticks rise in log order."""
    st = store if backend == "local" else request.getfixturevalue("s3_store")
    coll = _coll(meta, st, settings)
    a = _writer_for(meta, st, settings, coll)
    b = _writer_for(meta, st, settings, coll)
    for i in range(5):
        a.append(_insert_msg(coll, 1 + 10 * i))
        b.append(_insert_msg(coll, 1000 + 10 * i))
    assert a.term == b.term == 0
    msgs = all_messages(meta, st, pchannels(coll)[0], settings)
    pks = inserted_pks(msgs)
    assert sorted(pks) == sorted([1 + 10 * i + j for i in range(5) for j in range(3)]
                                 + [1000 + 10 * i + j for i in range(5) for j in range(3)])
    ticks = [m.time_tick for m in WalLog(meta, st, pchannels(coll)[0]).messages()]
    assert ticks == sorted(ticks) and len(set(ticks)) == len(ticks)
    a.close(), b.close()


def test_takeover_bumps_the_term_and_ends_older_txns_producers_go_on(meta, store, settings):
    from seglake.wal.writer import takeover
    coll = _coll(meta, store, settings)
    p, v = pchannels(coll)[0], coll.vchannels[0]
    a = _writer_for(meta, store, settings, coll)
    a.append([M.Message.begin_txn(v, 77, 60000)])
    assert takeover(meta, p) == 1
    a.append(_insert_msg(coll, 1))           # not fenced: it appends at the new term
    with pytest.raises(ValidationError, match="not open"):
        a.append([M.Message.commit_txn(v, 77)])
    assert WalLog(meta, store, p).state().term == 1
    a.close()


@pytest.mark.parametrize("backend", ["local", "s3"])
def test_a_swapped_or_overwritten_fragment_is_an_error_naming_it(backend, meta, store, settings, request):
    """The index records each fragment's size and crc32c: a file replaced after its
    commit (a late PUT on a store that ignores If-None-Match, a swap) is caught."""
    st = store if backend == "local" else request.getfixturevalue("s3_store")
    coll = _coll(meta, st, settings)
    p = pchannels(coll)[0]
    w = _writer_for(meta, st, settings, coll)
    w.append(_insert_msg(coll, 1))
    w.append(_insert_msg(coll, 100))
    w.close()
    k1, k2 = _frag_key(meta, st, p, 2), _frag_key(meta, st, p, 3)
    st.put(k2, st.get(k1))      # a well-formed fragment, but not the committed one
    with pytest.raises(CorruptFragment, match=k2):
        all_messages(meta, st, p, settings)


def test_exclusive_create_refuses_existing_fragment_s3(s3_store):
    """SeaweedFS honours If-None-Match: * (412): the S3 fragment write is fenced too."""
    from seglake.wal.log import put_exclusive
    key = layout.wal_fragment(P, 1)
    assert put_exclusive(s3_store, key, b"first")
    assert not put_exclusive(s3_store, key, b"second")
    assert s3_store.get(key) == b"first"


def _flaky_put(monkeypatch, s3_store, fail_after_landing: bool, times: int = 1):
    """The S3 client's put_object fails transiently `times` times: before the PUT reaches
    the server, or after it landed (its answer lost)."""
    from botocore.exceptions import ClientError

    client = s3_store.client
    real, left = client.put_object, [times]

    def put_object(**kw):
        if left[0]:
            left[0] -= 1
            if fail_after_landing:
                real(**kw)
            raise ClientError({"Error": {"Code": "ServiceUnavailable", "Message": "try again"},
                               "ResponseMetadata": {"HTTPStatusCode": 503}}, "PutObject")
        return real(**kw)
    monkeypatch.setattr(client, "put_object", put_object)


@pytest.mark.parametrize("landed", [False, True], ids=["lost-request", "lost-answer"])
def test_exclusive_create_retries_and_knows_its_own_write_s3(s3_store, monkeypatch, landed):
    """A transient failure of the fragment PUT is retried; a retry meeting 412 because the
    first PUT landed (its answer lost) is this call's own write: True, not 'taken' (the
    writer would write the fragment again under another name and leak this one)."""
    from seglake.wal.log import put_exclusive
    key = layout.wal_fragment(P, 7, "abcdef012345")
    _flaky_put(monkeypatch, s3_store, fail_after_landing=landed, times=2)
    assert put_exclusive(s3_store, key, [b"fir", b"st"])
    assert s3_store.get(key) == b"first"
    assert not put_exclusive(s3_store, key, b"first")          # a fresh call: it existed before
    other = layout.wal_fragment(P, 8, "abcdef012345")
    s3_store.put(other, b"someone else's")
    _flaky_put(monkeypatch, s3_store, fail_after_landing=False)
    assert not put_exclusive(s3_store, other, b"first")       # a retry meeting other bytes: taken
    assert s3_store.get(other) == b"someone else's"


def test_exclusive_create_refuses_existing_fragment_local(store):
    from seglake.wal.log import put_exclusive
    key = layout.wal_fragment(P, 1)
    assert put_exclusive(store, key, b"first")
    assert not put_exclusive(store, key, b"second")
    assert store.get(key) == b"first"
    assert [o.key for o in store.list("wal/")] == [key]   # no temp file left


def test_open_at_stale_term_refused(meta, store, settings):
    coll = _coll(meta, store, settings)
    w = _writer_for(meta, store, settings, coll, term=3)
    with pytest.raises(Exception, match="expired term"):
        _writer_for(meta, store, settings, coll, term=w.term)
    w.close()


def test_time_ticks_monotonic_across_failover_with_clock_set_back(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    now = [time.time() + 3600]
    wide = settings.replace(max_clock_skew=86400)   # the widest bound: ticks are under test here
    a = _writer_for(meta, store, wide, coll, clock=lambda: now[0])
    a.append(_insert_msg(coll, 1))
    a.close()
    hwm = WalLog(meta, store, p).state().last_tt
    now[0] -= 20 * 3600              # the wall clock jumps back 20 hours
    b = _writer_for(meta, store, wide, coll, clock=lambda: now[0])
    b.append(_insert_msg(coll, 10))
    b.append(_insert_msg(coll, 20))
    b.close()
    ticks = [m.time_tick for m in all_messages(meta, store, p, settings) if m.type != M.TIME_TICK]
    ticks_all = [m.time_tick for m in WalLog(meta, store, p).messages()]
    assert ticks_all == sorted(ticks_all) and len(set(ticks_all)) == len(ticks_all)
    assert min(t for t in ticks_all[-4:]) > hwm
    assert ticks == sorted(ticks)


def test_truncated_fragment_reported_by_name(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 50, 1))
    last = WalLog(meta, store, p).state().last
    path = store.root / _frag_key(meta, store, p, last)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(CorruptFragment, match=_frag_key(meta, store, p, last)):
        all_messages(meta, store, p, settings)


def test_bit_flipped_fragment_reported_by_name(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 50, 1))
    last = WalLog(meta, store, p).state().last
    key = _frag_key(meta, store, p, last)
    path = store.root / key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFragment, match=rf"{key} .*crc32c .* do not match the index"):
        all_messages(meta, store, p, settings)


def test_missing_committed_fragment_reported(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    store.delete_many([_frag_key(meta, store, p, 1)])
    with pytest.raises(CorruptFragment, match="committed in etcd but missing"):
        all_messages(meta, store, p, settings)


# -- bad input: clear error, nothing appended -------------------------------------------------
def _log_unchanged(meta, store, p, before):
    assert WalLog(meta, store, p).state().last == before


@pytest.mark.parametrize("mutate, match", [
    (lambda t: t.drop_columns(["price"]), "missing column"),
    (lambda t: t.append_column("extra", pa.array([1] * t.num_rows)), "unknown column"),
    (lambda t: t.set_column(0, "pk", pa.array(["x"] * t.num_rows)), "must be Int64"),
    (lambda t: t.set_column(1, "embedding", pa.FixedSizeListArray.from_arrays(
        pa.array([0.5] * (t.num_rows * 4), pa.float32()), 4)), "dim 4, schema says 8"),
    (lambda t: t.set_column(0, "pk", pa.array([None] * t.num_rows, pa.int64())), "must not contain nulls"),
    (lambda t: t.set_column(1, "embedding", pa.FixedSizeListArray.from_arrays(
        pa.array([float("nan")] + [0.5] * (t.num_rows * 8 - 1), pa.float32()), 8)), "NaN or infinity"),
    (lambda t: t.set_column(2, "price", pa.array([float("inf")] * t.num_rows, pa.float32())), "NaN or infinity"),
])
def test_rows_not_matching_schema_refused(meta, store, settings, mutate, match):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    before = WalLog(meta, store, p).state().last
    bad = mutate(synthetic_rows(coll, 5, 1))
    good = synthetic_rows(coll, 5, 100)
    with WalClient(meta, store, settings) as c, pytest.raises(ValidationError, match=match):
        c.insert("c1", pa.concat_tables([good, bad]) if bad.schema == good.schema else bad)
    _log_unchanged(meta, store, p, before)


def test_unknown_collection_refused(meta, store, settings):
    from seglake.errors import NotFound
    _coll(meta, store, settings)
    with WalClient(meta, store, settings) as c, pytest.raises(NotFound, match="nope"):
        c.insert("nope", pa.table({"pk": [1]}))


def test_unknown_vchannel_refused_nothing_appended(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    w = _writer_for(meta, store, settings, coll)
    before = w.state.last
    good = _insert_msg(coll, 1)
    for v in (f"{p}_999v0", "seglake-dml_9_1v0"):
        bad = M.Message.insert(v, coll.collection_id, coll.partitions[0].partition_id, good.body)
        with pytest.raises(ValidationError, match="unknown vchannel"):
            w.append([good, bad])   # the good one is not appended either
    _log_unchanged(meta, store, p, before)
    w.close()


def test_unknown_partition_and_empty_insert_refused(meta, store, settings):
    coll = _coll(meta, store, settings)
    w = _writer_for(meta, store, settings, coll)
    good = _insert_msg(coll, 1)
    with pytest.raises(ValidationError, match="unknown partition"):
        w.append(M.Message.insert(coll.vchannels[0], coll.collection_id, 999999, good.body))
    with pytest.raises(ValidationError, match="at least one row"):
        w.append(M.Message.insert(coll.vchannels[0], coll.collection_id, coll.partitions[0].partition_id,
                                  good.body.slice(0, 0)))
    w.close()


@pytest.mark.parametrize("value", [-1, 0, float("nan"), float("inf"), True, "10"])
def test_bad_counts_refused(meta, store, settings, value):
    from seglake.wal.client import check_count
    with pytest.raises(ValidationError):
        check_count("--rows", value)
    with pytest.raises(ValidationError):
        WalClient(meta, store, settings, batch_rows=value)


def test_delete_bad_pks_refused(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    before = WalLog(meta, store, p).state().last
    with WalClient(meta, store, settings) as c:
        for bad in ([], [1, None], ["x"], [2**70]):
            with pytest.raises(ValidationError):
                c.delete("c1", bad)
    _log_unchanged(meta, store, p, before)


def test_insert_into_dropped_collection_refused(meta, store, settings):
    coll = _coll(meta, store, settings)
    w = _writer_for(meta, store, settings, coll)
    meta.catalog.set_state(coll.collection_id, "Dropping")
    import time
    time.sleep(1.1)  # past the writer's collection cache
    with pytest.raises(ValidationError, match="is Dropping"):
        w.append(_insert_msg(coll, 1))
    w.append(M.Message(M.DROP_COLLECTION, coll.vchannels[0], collection_id=coll.collection_id))
    w.close()


def test_wal_settings_must_be_finite(settings):
    from seglake.wal.log import check_wal_settings
    import dataclasses
    for k, v in (("wal_batch_time", float("inf")), ("wal_txn_keepalive", float("nan")),
                 ("wal_scanner_startup_delay", 10**9), ("wal_txn_keepalive", 0.0), ("wal_pause_poll", 0.0),
                 ("wal_batch_time", -1.0), ("wal_fragment_bytes", 1 << 40), ("wal_fragment_records", 10**9)):
        with pytest.raises(ValidationError, match=k):
            check_wal_settings(dataclasses.replace(settings, **{k: v}))
        with pytest.raises(ValidationError, match=k):   # refused at the edge: no writer, no append
            WalClient(None, None, dataclasses.replace(settings, **{k: v}))


def test_gc_leaves_wal_untouched(meta, store, settings):
    """A GC run with zero tolerance (forced) never deletes or moves a WAL fragment while
    nothing is truncatable: no vchannel has a checkpoint yet (nothing flushed). The
    fragments are judged (kept as needed), not left unrecognised."""
    from seglake.lifecycle import gc
    coll = _coll(meta, store, settings)
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 20, 1))
    before = sorted((o.key, o.size) for o in store.list("wal/"))
    assert before
    # an old fragment: mtime far in the past, so any age-based rule would pick it
    import os
    for o in store.list("wal/"):
        os.utime(store.root / o.key, (1, 1))
    before = sorted((o.key, o.size) for o in store.list("wal/"))
    r = gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))
    assert sorted((o.key, o.size) for o in store.list("wal/")) == before
    assert r["mark"]["kept"][gc.WAL_RETAINED] == len(before)
    assert r["mark"]["wal"] == {"pchannels": len(pchannels(coll)), "truncatable": 0, "error": None}


def test_create_collection_announced_on_each_pchannel(meta, store, settings):
    coll = _coll(meta, store, settings, shards=3)
    assert len(pchannels(coll)) == 3
    for p in pchannels(coll):
        creates = [m for m in all_messages(meta, store, p, settings) if m.type == M.CREATE_COLLECTION]
        assert [m.vchannel for m in creates] == [v for v in coll.vchannels if v.startswith(p + "_")]
        assert creates[0].props["schema"] == coll.schema.to_json()


def test_lifetime_with_real_writers(meta, store, settings):
    from seglake.errors import SeglakeError
    from seglake.wal.lifetime import ExpiredTerm, WalLifetime, writer_opener
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    current = WalLog(meta, store, p).term().term
    life = WalLifetime(writer_opener(meta, store, p, settings), p)
    try:
        w1 = life.open(current + 1, timeout=10)
        w1.append(_insert_msg(coll, 1))
        w2 = life.open(current + 2, timeout=10)
        with pytest.raises(SeglakeError, match="closed"):
            w1.append(_insert_msg(coll, 200))    # the old term was closed before the new opened
        w2.append(_insert_msg(coll, 300))
        # another process jumps ahead to term +5: our open at +3 fails, final for that term
        WalWriter.open(meta, store, p, settings, term=current + 5).close()
        with pytest.raises(Exception, match="expired term"):
            life.open(current + 3, timeout=10)
        with pytest.raises(ExpiredTerm):
            life.open(current + 3, timeout=10)
        pks = inserted_pks(all_messages(meta, store, p, settings))
        assert sorted(pks) == [1, 2, 3, 300, 301, 302]
    finally:
        life.close()


def test_each_fragment_ends_with_a_time_tick_above_its_messages(meta, store, settings):
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    with WalClient(meta, store, settings, batch_rows=4) as c:
        c.insert("c1", synthetic_rows(coll, 20, 1))      # 5 batches, possibly fewer fragments
    log = WalLog(meta, store, p)
    for rec in log.fragments():
        msgs = log.read_fragment(rec)
        assert msgs[-1].type == M.TIME_TICK
        assert all(m.time_tick < msgs[-1].time_tick for m in msgs[:-1])
    raw = list(log.messages())
    assert sum(m.type == M.INSERT for m in raw) == 5


def test_a_failed_commit_fails_the_pipeline_retriably_and_a_retry_never_duplicates(meta, store, settings):
    """Fragment n+1 may be written while n commits: if n's commit fails, n+1 is never
    committed either (its call fails with Retry); retrying every call with its own
    sequence number appends each exactly once."""
    import dataclasses
    from seglake.errors import Unavailable
    from seglake.wal.writer import Retry
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    one = dataclasses.replace(settings, wal_fragment_records=1, wal_batch_time=0.05)
    w = _writer_for(meta, store, one, coll)
    real = w._commit
    calls = []

    def flaky(frag):
        calls.append(frag)
        if len(calls) == 2:
            raise Unavailable("etcd went away")
        return real(frag)
    w._commit = flaky
    seqs = [w.next_seq() for _ in range(3)]
    reqs = [w.append_async(_insert_msg(coll, pk), seq=s) for pk, s in zip((1, 100, 200), seqs)]
    assert reqs[0].result()
    failed = []
    for r in reqs[1:]:
        try:
            r.result()
        except Retry:
            failed.append(r)
    assert failed
    for pk, s in zip((1, 100, 200), seqs):      # retry every call (also the acknowledged one)
        w.append(_insert_msg(coll, pk), seq=s)
    w.close()
    pks = inserted_pks(all_messages(meta, store, p, settings))
    assert sorted(pks) == [1, 2, 3, 100, 101, 102, 200, 201, 202]


def test_concurrent_producers_all_commit_with_distinct_places(meta, store, settings):
    import threading
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    barrier = threading.Barrier(4)
    out = []

    def go(i):
        w = WalWriter.open(meta, store, p, settings)
        barrier.wait()
        for j in range(5):
            out.append(w.append(_insert_msg(coll, 1000 * (i + 1) + 10 * j))[0])
        w.close()
    threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
    [t.start() for t in threads]
    [t.join(60) for t in threads]
    assert len(out) == 20 and len(set(out)) == 20
    assert len(inserted_pks(all_messages(meta, store, p, settings))) == 60


@pytest.mark.parametrize("typ", [M.INSERT, M.DELETE, M.CREATE_COLLECTION, M.DROP_COLLECTION, M.BEGIN_TXN])
def test_only_flush_may_be_broadcast(meta, store, settings, typ):
    coll = _coll(meta, store, settings)
    w = _writer_for(meta, store, settings, coll)
    before = w.state.last
    with pytest.raises(ValidationError, match="needs a vchannel"):
        w.append(M.Message(typ, "", collection_id=coll.collection_id, txn_id=1 if typ == M.BEGIN_TXN else 0,
                           props={"keepalive_ms": 1000}))
    w.append(M.Message(M.FLUSH, ""))
    assert w.state.last == before + 1
    w.close()


def test_store_write_failure_is_typed_and_not_acknowledged(meta, store, settings, monkeypatch):
    """A fragment that cannot be written (disk full at link time) fails the append with
    a typed error naming the fragment; nothing is committed; the next append works."""
    import errno
    import os
    from seglake.errors import Unavailable
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    w = _writer_for(meta, store, settings, coll)
    before = w.state.last
    real_link = os.link

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "link", full)
    with pytest.raises(Unavailable, match=r"cannot write WAL fragment wal/.*No space left"):
        w.append(_insert_msg(coll, 1))
    monkeypatch.setattr(os, "link", real_link)
    assert WalLog(meta, store, p).state().last == before
    w.append(_insert_msg(coll, 100))
    assert inserted_pks(all_messages(meta, store, p, settings)) == [100, 101, 102]
    assert not [o.key for o in store.list(layout.wal_prefix(p)) if ".seglake-tmp-" in o.key]
    w.close()


def _txn_insert(coll, txn_id, first_pk):
    return M.Message.insert(coll.vchannels[0], coll.collection_id, coll.partitions[0].partition_id,
                            synthetic_rows(coll, 3, first_pk).to_batches()[0], txn_id=txn_id)


def _delivered_pks(meta, store, settings, coll):
    return sorted(inserted_pks(all_messages(meta, store, pchannels(coll)[0], settings)))


def test_a_commit_after_the_keepalive_is_refused_never_acknowledged_then_lost(meta, store, settings):
    """The scanner drops a txn whose keepalive passed before its commit: the writer must
    refuse such a commit (and a late body) instead of acknowledging rows no consumer
    will ever see. A txn still alive commits and is delivered."""
    coll = _coll(meta, store, settings)
    v = coll.vchannels[0]
    now = [time.time() + 100]                            # ahead of the log's ticks
    # (a clock 100 s ahead of a store in use: a bound that allows it, or it is refused as fast)
    w = _writer_for(meta, store, settings.replace(max_clock_skew=3600), coll, clock=lambda: now[0])
    try:
        w.append(M.Message.begin_txn(v, 11, 1000))        # keepalive 1 s
        w.append(_txn_insert(coll, 11, 1))
        w.append(M.Message.begin_txn(v, 12, 1000))
        now[0] += 5                                       # both keepalives pass
        time.sleep(BATCH_AGE)   # the TSO's batch follows the moved clock
        with pytest.raises(ValidationError, match="expired"):
            w.append(M.Message.commit_txn(v, 11))
        with pytest.raises(ValidationError, match="expired"):
            w.append(_txn_insert(coll, 12, 100))
        w.append(M.Message.rollback_txn(v, 11))           # a rollback is always accepted
        w.append(M.Message.begin_txn(v, 13, 1000))
        w.append(_txn_insert(coll, 13, 200))
        now[0] += 0.5
        time.sleep(BATCH_AGE)   # the TSO's batch follows the moved clock
        w.append(_txn_insert(coll, 13, 300))              # a body extends the keepalive
        now[0] += 0.8
        time.sleep(BATCH_AGE)   # the TSO's batch follows the moved clock
        w.append(M.Message.commit_txn(v, 13))
    finally:
        w.close()
    assert _delivered_pks(meta, store, settings, coll) == [200, 201, 202, 300, 301, 302]


def test_txn_messages_for_a_txn_not_open_on_this_writer_are_refused(meta, store, settings):
    """A body or commit of a txn never begun (or begun under an older term, whose writer
    is fenced) is refused: the scanner would drop it silently."""
    coll = _coll(meta, store, settings)
    v = coll.vchannels[0]
    w1 = _writer_for(meta, store, settings, coll)
    w1.append(M.Message.begin_txn(v, 21, 60_000))
    w1.append(_txn_insert(coll, 21, 1))
    w2 = _writer_for(meta, store, settings, coll)         # another producer: txn 21 is not its
    try:
        with pytest.raises(ValidationError, match="not open"):
            w2.append(M.Message.commit_txn(v, 21))
        with pytest.raises(ValidationError, match="not open"):
            w2.append(_txn_insert(coll, 22, 50))
        with pytest.raises(ValidationError, match="already open"):
            w2.append([M.Message.begin_txn(v, 23, 60_000), M.Message.begin_txn(v, 23, 60_000)])
        w2.append([M.Message.begin_txn(v, 24, 60_000), _txn_insert(coll, 24, 70), M.Message.commit_txn(v, 24)])
    finally:
        w1.close()
        w2.close()
    assert _delivered_pks(meta, store, settings, coll) == [70, 71, 72]


def test_a_commit_whose_answer_is_lost_is_never_appended_twice(meta, store, settings):
    """etcd applies the commit but the answer is lost (Unavailable), then the re-read
    fails too: the call fails with Retry; retrying it (same seq) returns the first
    commit's ids and appends nothing; a later call appends normally."""
    from seglake.errors import Unavailable
    from seglake.wal.writer import Retry
    coll = _coll(meta, store, settings)
    p = pchannels(coll)[0]
    w = _writer_for(meta, store, settings, coll)
    real_txn, real_refresh = w.meta.kv.txn, w._refresh
    state = {"txn": 0, "refresh": 0}

    def lossy_txn(compares, ops, *a, **k):
        rev = real_txn(compares, ops, *a, **k)
        if not any(getattr(o, "key", "") == w.log.log_key for o in ops):
            return rev             # (the TSO's batches)
        state["txn"] += 1
        if state["txn"] == 1:
            raise Unavailable("the answer was lost")
        return rev

    def failing_refresh():
        state["refresh"] += 1
        if state["refresh"] == 1:
            raise Unavailable("etcd still away")
        return real_refresh()
    w.meta.kv.txn, w._refresh = lossy_txn, failing_refresh
    try:
        seq = w.next_seq()
        with pytest.raises(Retry):
            w.append(_insert_msg(coll, 1), seq=seq)
        ids = w.append(_insert_msg(coll, 1), seq=seq)      # the retry
        assert ids and state["txn"] == 1                     # nothing new committed
        w.append(_insert_msg(coll, 100))
    finally:
        w.meta.kv.txn = real_txn
        w.close()
    assert sorted(inserted_pks(all_messages(meta, store, p, settings))) == [1, 2, 3, 100, 101, 102]
