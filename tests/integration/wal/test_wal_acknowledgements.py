"""Issue 26, the producer side: an acknowledgement means written.

Each test is a reproduction of the issue (its number in the test's docstring), seen
failing on the code before the fix: a retry is answered from a remembered commit only
when its payload is the same; one producer id has one live holder; any call of any size
is retryable and out-of-order commits never duplicate; no insert is acknowledged once a
drop began; an upsert takes one timestamp per call; producer records cost the flusher
nothing and expire by themselves."""

from __future__ import annotations

import pytest

from seglake.errors import SeglakeError, ValidationError
from seglake.lifecycle.flush import flush_pchannel
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import make_collection, pchannels


def _flush(meta, store, settings, coll):
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _pks(meta, store, coll):
    return sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())


def test_a_retry_with_another_payload_under_a_used_seq_is_refused_naming_both_digests(meta, store, settings):
    """Reproduction 2a: the same seq with a different payload was acknowledged with the
    first commit's ids and its rows never appeared."""
    with WalClient(meta, store, settings, producer_id="digest") as c:
        coll = make_collection(c, shards=1)
        res = c.insert("c1", synthetic_rows(coll, 3, 1))
        with pytest.raises(ValidationError) as e:
            c.insert("c1", synthetic_rows(coll, 6, 100), seq=res.seq)
        assert f"seq {res.seq}" in str(e.value) and "digest" in str(e.value)
        again = c.insert("c1", synthetic_rows(coll, 3, 1), seq=res.seq)   # the same payload: answered
        assert again.positions == res.positions
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [1, 2, 3]


def test_two_clients_taking_turns_with_one_producer_id_never_acknowledge_an_unwritten_call(meta, store, settings):
    """Reproduction 2b (sequential turns): two live clients with one producer id each
    read the producer record once and issued the same numbers; the second's calls were
    answered with the first's commits (10 of 30 acknowledged calls never visible). Now
    the newer holder fences the older one, which is refused clearly."""
    acked, fenced = [], 0
    with WalClient(meta, store, settings, producer_id="shared") as a, \
            WalClient(meta, store, settings, producer_id="shared") as b:
        coll = make_collection(a, shards=1)
        for turn in range(6):
            for who, c in (("a", a), ("b", b)):
                first = 1000 * turn + (0 if who == "a" else 500)
                try:
                    c.insert("c1", synthetic_rows(coll, 2, first))
                    acked += [first, first + 1]
                except SeglakeError as e:
                    if "fenced" not in str(e):
                        raise
                    assert "shared" in str(e)
                    fenced += 1
    _flush(meta, store, settings, coll)
    assert sorted(acked) == _pks(meta, store, coll)
    assert fenced >= 1


def test_two_clients_racing_with_one_producer_id_never_acknowledge_an_unwritten_call(meta, store, settings):
    """Reproduction 2c (concurrently): 30 of 60 acknowledged calls were not visible, a
    lost race handed a call another process's commit."""
    import threading

    acked, lock = [], threading.Lock()
    with WalClient(meta, store, settings) as setup:
        coll = make_collection(setup, shards=1)

    def run(base: int) -> None:
        with WalClient(meta, store, settings, producer_id="racing") as c:
            for i in range(15):
                first = base + 10 * i
                try:
                    c.insert("c1", synthetic_rows(coll, 2, first))
                except SeglakeError:
                    continue
                with lock:
                    acked.extend([first, first + 1])
    threads = [threading.Thread(target=run, args=(base,)) for base in (1000, 5000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _flush(meta, store, settings, coll)
    assert sorted(acked) == _pks(meta, store, coll)


def test_a_call_of_more_than_64_appends_on_one_pchannel_is_retryable(meta, store, settings):
    """Reproduction 3a: a call with more than 64 appends on one pchannel could not be
    retried with seq=err.result.seq (the dedup window was 64 appends: ValidationError)."""
    with WalClient(meta, store, settings, producer_id="big", batch_rows=1) as c:
        coll = make_collection(c, shards=1)
        rows = synthetic_rows(coll, 70, 1)
        res = c.insert("c1", rows)
        assert sum(res.committed.values()) == 70
        again = c.insert("c1", rows, seq=res.seq)   # e.g. its answer was lost: retried whole
        assert again.positions == res.positions
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == list(range(1, 71))


def test_calls_committed_out_of_number_order_never_duplicate_on_retry(meta, store, settings):
    """Reproduction 3b: calls of one producer that commit out of number order (a client
    used from two threads) let a retry append again (710 rows visible for 705 written).
    Here deterministically: call b commits, then call a < b with 64 appends; the retry of
    b was no longer remembered but above the window's floor, and appended again."""
    with WalClient(meta, store, settings, producer_id="ooo", batch_rows=1) as c:
        coll = make_collection(c, shards=1)
        b = c.insert("c1", synthetic_rows(coll, 1, 1000), seq=900)
        c.insert("c1", synthetic_rows(coll, 64, 1), seq=800)
        again = c.insert("c1", synthetic_rows(coll, 1, 1000), seq=900)
        assert again.positions == b.positions
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [*range(1, 65), 1000]


def test_no_insert_is_acknowledged_once_the_drop_of_its_collection_began(meta, store, settings, monkeypatch):
    """Reproduction 4: an insert acknowledged after a drop began was silently dropped
    (the writer judged the collection from a cached read). The cache is made long here
    so that the old code fails deterministically; the commit must not depend on it."""
    import time

    from seglake.lifecycle import drop
    from seglake.wal import writer as W

    monkeypatch.setattr(W, "COLLECTION_CACHE_SECONDS", 3600.0)
    with WalClient(meta, store, settings, producer_id="before-drop") as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 2, 1))
        drop._to_dropping(meta, meta.catalog.get(coll.collection_id), time.time)
        with pytest.raises(ValidationError) as e:
            c.insert("c1", synthetic_rows(coll, 2, 10))
        assert "Dropping" in str(e.value)


def test_an_upsert_split_over_several_appends_keeps_every_row_of_the_call(meta, store, settings):
    """Reproduction 7: each append of one upsert took its own timestamp, so with a batch
    of 1 row, the upsert of pk 7 twice kept 1 of 2 copies; Milvus keeps both (one
    timestamp per request)."""
    import pyarrow as pa

    with WalClient(meta, store, settings, producer_id="ups", batch_rows=1) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 3, 6))                      # pks 6, 7, 8
        rows = synthetic_rows(coll, 2, 7)
        rows = rows.set_column(0, "pk", pa.array([7, 7], pa.int64()))
        c.upsert("c1", rows)
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [6, 7, 7, 8]


def test_a_flusher_run_does_not_read_producer_records(meta, store, settings, monkeypatch):
    """Reproduction 9: producer records lived 7 days and every flusher run scanned them
    (~160k records, ~190 MB for an ingest every minute on 16 pchannels). They expire by
    themselves now (an etcd lease), and a flusher run never reads them."""
    with WalClient(meta, store, settings, producer_id="rec") as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 2, 1))
    read = []
    real_range = meta.kv.range

    def spy(prefix, *a, **k):
        read.append(prefix)
        return real_range(prefix, *a, **k)
    monkeypatch.setattr(meta.kv, "range", spy)
    _flush(meta, store, settings, coll)
    assert not [p for p in read if "/producers/" in p]


def test_producer_records_are_bounded_in_age_and_outlive_no_retry_they_could_answer(meta, store, settings):
    """Reproduction 9 and its s20 sequel (F3): a producer record is bounded in age, and a
    retry after it went is refused whatever the retrier's clock says. A named id's record
    has no lease (a lease runs out on etcd's clock, and a retrier's slow clock against an
    idle store's old TSO mark judged the call young again: it was appended twice);
    expire_producers removes it two windows after its last commit, judged by a
    linearizable TSO tick, so the TSO is past that age before the record goes. A fresh
    id's record lives on its client's lease."""
    from seglake.meta import keys as keymod

    s = settings.replace(wal_producer_expiry=600.0)
    with WalClient(meta, store, s, producer_id="named") as c, WalClient(meta, store, s) as fresh:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 2, 1))
        fresh.insert("c1", synthetic_rows(coll, 2, 5))
        (p,) = pchannels(coll)
        kv = meta.kv.get(keymod.wal_producer(meta.keys, p, "named"))
        assert not kv.lease, "a named id's record is on a lease: it could run out under a retry"
        owner = meta.kv.get(keymod.wal_producer_owner(meta.keys, "named"))
        assert owner.lease and 600 <= meta.kv.lease_ttl(owner.lease) <= 1202
        fkv = meta.kv.get(keymod.wal_producer(meta.keys, p, fresh.producer_id))
        assert fkv.lease and meta.kv.lease_ttl(fkv.lease) <= 1202


@pytest.mark.parametrize("retrier_clock", [0.0, -700.0], ids=["right-clock", "clock-700s-slow"])
def test_a_retry_after_its_record_expired_is_refused_not_appended_twice(meta, store, settings, retrier_clock):
    """Reproduction 9: a retry after the producer record expired appended twice. A call
    the client numbered carries its time; once its record is gone it is judged by the
    commit's own TSO tick, which expire_producers moved past the record's age: refused,
    from a right clock and from one slower than the whole window (s20 F3)."""
    import time

    from seglake.meta import keys as keymod
    from seglake.meta.alloc import compose_ts, physical_ms
    from seglake.wal.log import expire_producers

    # the TSO run 1201 s ahead below stands in for waiting: it must not stop this test's
    # own (right-clock) flush, so the bound is wider than that
    s = settings.replace(wal_producer_expiry=600.0, max_clock_skew=3600.0)
    from seglake.meta import Meta
    meta = Meta.from_settings(s)
    with WalClient(meta, store, s, producer_id="expired") as c:
        coll = make_collection(c, shards=1)
        rows = synthetic_rows(coll, 2, 1)
        res = c.insert("c1", rows)
        (p,) = pchannels(coll)
    key = keymod.wal_producer(meta.keys, p, "expired")
    later = compose_ts(physical_ms(meta.tso.now()) + 1_201_000)   # two windows and a second later
    assert expire_producers(meta, p, now_tt=later) == 1 and meta.kv.get(key) is None
    meta.kv.revoke_lease(meta.kv.get(keymod.wal_producer_owner(meta.keys, "expired")).lease)   # the claim too
    with WalClient(meta, store, s, producer_id="expired", clock=lambda: time.time() + retrier_clock) as c2:
        with pytest.raises(ValidationError) as e:
            c2.insert("c1", rows, seq=res.seq)
        assert "retry window" in str(e.value)
    _flush(meta, store, s, coll)
    assert _pks(meta, store, coll) == [1, 2]
    meta.close()


def test_an_upsert_retried_from_another_client_keeps_its_first_timestamp(meta, store, settings, monkeypatch):
    """The class of reproduction 7 across a retry: the first append of an upsert
    committed, the second did not; the retry (a new client, seq=err.result.seq) must
    not delete the first copy with a later timestamp: the call keeps its one timestamp."""
    import pyarrow as pa

    from seglake.wal import writer as W
    from seglake.wal.client import AppendIncomplete

    real = W.WalWriter._commit

    def second_upsert_fails(self, frag):   # (one append per fragment: wal_fragment_records=1)
        if any(m.props.get("upsert") and r.seq & W.INDEX_MASK == 1 for r in frag.reqs for m in r.messages):
            raise SeglakeError("etcd refused the write")
        return real(self, frag)
    settings = settings.replace(wal_fragment_records=1)
    with WalClient(meta, store, settings, producer_id="ups-retry", batch_rows=1) as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 3, 6))
        rows = synthetic_rows(coll, 2, 7).set_column(0, "pk", pa.array([7, 7], pa.int64()))
        monkeypatch.setattr(W.WalWriter, "_commit", second_upsert_fails)
        with pytest.raises(AppendIncomplete) as e:
            c.upsert("c1", rows)
        monkeypatch.undo()
    # the first client is gone (a crash); a new one retries the call
    with WalClient(meta, store, settings, producer_id="ups-retry", batch_rows=1) as c2:
        c2.upsert("c1", rows, seq=e.value.result.seq)
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [6, 7, 7, 8]


def test_a_txn_whose_drop_began_before_its_commit_is_not_acknowledged(meta, store, settings, monkeypatch):
    """The class of reproduction 4 for a transaction: its body was appended while the
    collection was Created, the drop began before its CommitTxn. The CommitTxn is
    judged on the collection too (its record compared at commit): the call is refused,
    never acknowledged for rows the drop discards."""
    import time

    from seglake.lifecycle import drop
    from seglake.wal import message as M
    from seglake.wal import writer as W

    monkeypatch.setattr(W, "COLLECTION_CACHE_SECONDS", 3600.0)
    real = W.WalWriter.append_async

    def drop_before_commit(self, messages, **kw):
        msgs = [messages] if isinstance(messages, M.Message) else list(messages)
        if any(m.type == M.COMMIT_TXN for m in msgs):
            drop._to_dropping(meta, meta.catalog.get_by_name("c1"), time.time)
        return real(self, messages, **kw)
    with WalClient(meta, store, settings, producer_id="txn-drop") as c:
        coll = make_collection(c, shards=1)
        monkeypatch.setattr(W.WalWriter, "append_async", drop_before_commit)
        with pytest.raises(ValidationError) as e:
            c.insert("c1", synthetic_rows(coll, 3, 1), txn=True)
        assert "Dropping" in str(e.value)


def test_a_client_used_from_two_threads_never_duplicates_when_every_call_is_retried(meta, store, settings):
    """Reproduction 3b as it was seen (710 rows visible for 705 written): one client used
    from two threads, calls of several appends committing out of number order; then
    every call is retried with its seq and its rows: each retry is answered with its
    first commit's positions (40 calls: within the 64 calls a record remembers, whatever
    their order), nothing appended twice."""
    import threading

    results, lock = [], threading.Lock()
    with WalClient(meta, store, settings, producer_id="threads", batch_rows=2) as c:
        coll = make_collection(c, shards=1)

        def run(base: int) -> None:
            for i in range(20):
                rows = synthetic_rows(coll, 6, base + 10 * i)     # 3 appends per call
                res = c.insert("c1", rows)
                with lock:
                    results.append((rows, res))
        threads = [threading.Thread(target=run, args=(b,)) for b in (1000, 5000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for rows, res in results:
            assert c.insert("c1", rows, seq=res.seq).positions == res.positions
    _flush(meta, store, settings, coll)
    written = sorted(pk for rows, _ in results for pk in rows.column("pk").to_pylist())
    assert _pks(meta, store, coll) == written


def test_a_running_call_outnumbered_by_64_later_calls_goes_on(meta, store, settings, monkeypatch):
    """A call that is still running when 64 higher-numbered calls of the same producer
    commit (one client, two threads) is not evicted from the producer record: its next
    append goes on, and its retry is answered (it was refused as 'older than the window')."""
    import threading

    from seglake.wal import writer as W

    first_done, others_done = threading.Event(), threading.Event()
    real = W.WalWriter.append_async

    def pause_second_append(self, messages, *, seq=None, **kw):
        if seq is not None and seq == (100 << W.CALL_BITS) | 1:
            first_done.set()
            assert others_done.wait(60)
        return real(self, messages, seq=seq, **kw)
    monkeypatch.setattr(W.WalWriter, "append_async", pause_second_append)
    out = {}
    with WalClient(meta, store, settings, producer_id="outnumbered", batch_rows=2) as c:
        coll = make_collection(c, shards=1)
        rows = synthetic_rows(coll, 4, 1)                  # 2 appends

        def long_call():
            try:
                out["res"] = c.insert("c1", rows, seq=100)
            except Exception as e:  # noqa: BLE001 - judged below
                out["err"] = e
        t = threading.Thread(target=long_call)
        t.start()
        assert first_done.wait(60)
        for i in range(64):
            c.insert("c1", synthetic_rows(coll, 1, 1000 + i), seq=200 + i)
        others_done.set()
        t.join()
        assert "err" not in out, out.get("err")
        assert c.insert("c1", rows, seq=100).positions == out["res"].positions
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [1, 2, 3, 4, *range(1000, 1064)]
