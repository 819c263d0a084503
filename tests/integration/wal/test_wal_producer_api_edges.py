"""Adversarial audit of the shared WAL (h5-audit): edges of the producer API."""

from __future__ import annotations

import pytest

from seglake.errors import ValidationError
from seglake.lifecycle.flush import flush_pchannel
from seglake.visibility import visible_rows
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows

from wal_helpers import lose_reply_then_fail_gets, make_collection, pchannels


def _flush(meta, store, settings, coll):
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _pks(meta, store, coll):
    return sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())


def test_a_new_client_reusing_a_producer_id_never_answers_a_new_call_from_an_old_one(meta, store, settings):
    with WalClient(meta, store, settings, producer_id="job-1") as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 10, 1))
    with WalClient(meta, store, settings, producer_id="job-1") as c:   # a new process, same id, no seq
        c.insert("c1", synthetic_rows(coll, 10, 11))
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == list(range(1, 21))


def test_a_client_without_a_producer_id_takes_only_the_numbers_it_issued(meta, store, settings):
    """A client without a producer_id has a fresh id no other client knows. A number of the
    caller's own (seq=7) was taken as a new call, so the same call retried from a new
    process (a new fresh id) was appended twice. Any number it did not issue is now refused
    before anything is appended -- the caller's own, another client's res.seq -- and its own
    res.seq is still a retry answered from the first commit."""
    with WalClient(meta, store, settings) as a:
        coll = make_collection(a, shards=1)
        r = a.insert("c1", synthetic_rows(coll, 3, 1))
        assert a.insert("c1", synthetic_rows(coll, 3, 1), seq=r.seq).positions == r.positions
        for seq in (7, r.seq + 1):
            with pytest.raises(ValidationError, match=f"seq {seq} was not issued by this client.*producer_id"):
                a.insert("c1", synthetic_rows(coll, 3, 100), seq=seq)
    with WalClient(meta, store, settings) as b:   # another process, retrying either way
        for seq in (7, r.seq):
            with pytest.raises(ValidationError, match=f"seq {seq} was not issued by this client"):
                b.insert("c1", synthetic_rows(coll, 3, 1), seq=seq)
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [1, 2, 3]


def test_a_retry_with_another_batch_rows_is_refused_saying_what_a_payload_is(meta, store, settings):
    """The same rows retried by a client with another batch_rows are cut into other appends:
    another payload, refused -- but the refusal said only "another payload", and the caller
    had sent the very same rows. It now says what a payload is."""
    with WalClient(meta, store, settings, producer_id="bs", batch_rows=2) as c:
        coll = make_collection(c, shards=1)
        r = c.insert("c1", synthetic_rows(coll, 4, 1))
    with WalClient(meta, store, settings, producer_id="bs", batch_rows=3) as c:
        with pytest.raises(ValidationError, match="the same rows with the same batch_rows"):
            c.insert("c1", synthetic_rows(coll, 4, 1), seq=r.seq)
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [1, 2, 3, 4]


def test_a_txn_call_retried_with_its_seq_is_never_acknowledged_when_it_was_rolled_back(meta, store, settings,
                                                                                       monkeypatch):
    """A txn call whose body append was not acknowledged in time (a slow etcd commit that
    did go through) fails with AppendIncomplete, which says: retry with seq=... The
    client appended RollbackTxn under the seq its CommitTxn would use, so the retry was
    answered with the rollback's ids and acknowledged a transaction that was rolled back."""
    import time as _time

    from seglake.errors import SeglakeError
    from seglake.wal import message as M
    from seglake.wal import writer as W

    real_result, real_commit = W._Request.result, W.WalWriter._commit
    monkeypatch.setattr(W._Request, "result", lambda self, timeout=60.0: real_result(self, 0.3))

    def slow(self, frag):
        if any(m.type == M.INSERT and m.txn_id for r in frag.reqs for m in r.messages):
            _time.sleep(0.8)          # etcd slow: the commit happens after the caller gave up
        return real_commit(self, frag)
    monkeypatch.setattr(W.WalWriter, "_commit", slow)
    with WalClient(meta, store, settings, producer_id="txn-job") as c:
        coll = make_collection(c, shards=1)
        rows = synthetic_rows(coll, 5, 1)
        with pytest.raises(SeglakeError) as e:
            c.insert("c1", rows, txn=True)
        seq = e.value.result.seq
        _time.sleep(1.5)              # everything in flight has committed
        try:
            c.insert("c1", rows, txn=True, seq=seq)   # what the error message says to do
            acked = True
        except SeglakeError:
            acked = False
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == (list(range(1, 6)) if acked else [])


def _lose_reply_then_unreachable(monkeypatch, kv, gets_failing: int = 2):
    """etcd applies the next producer commit but its answer is lost, and the next
    `gets_failing` reads fail too (a leader election): the writer cannot learn at once
    whether its commit happened."""
    return lose_reply_then_fail_gets(monkeypatch, kv, set(range(1, gets_failing + 1)))


def test_an_ambiguous_commit_whose_reread_fails_is_never_appended_twice(meta, store, settings, monkeypatch):
    with WalClient(meta, store, settings, producer_id="amb") as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 3, 1))
        state = _lose_reply_then_unreachable(monkeypatch, meta.kv)
        try:
            c.insert("c1", synthetic_rows(coll, 3, 10))    # retried inside the client, same seq
        except AppendIncomplete as e:                      # what its message says to do
            c.insert("c1", synthetic_rows(coll, 3, 10), seq=e.result.seq)
        assert not state["armed"]
        c.insert("c1", synthetic_rows(coll, 3, 20))    # the producer goes on
    monkeypatch.undo()
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [1, 2, 3, 10, 11, 12, 20, 21, 22]


@pytest.mark.parametrize("gets_failing", [0, 2])
def test_a_txn_whose_begin_lost_its_answer_still_commits_once(meta, store, settings, monkeypatch, gets_failing):
    """The BeginTxn's commit applied but its answer was lost (and, with gets_failing, the
    re-reads fail too: the writer resets without knowing): the writer learns from its
    record that the Begin committed and that its txn is open, so the body and the commit
    of the same call follow, once ('not open on this producer' before)."""
    with WalClient(meta, store, settings, producer_id="amb-txn") as c:
        coll = make_collection(c, shards=1)
        c.insert("c1", synthetic_rows(coll, 3, 1))
        state = _lose_reply_then_unreachable(monkeypatch, meta.kv, gets_failing)
        try:
            c.insert("c1", synthetic_rows(coll, 4, 10), txn=True)
        except AppendIncomplete as e:   # what its message says to do
            c.insert("c1", synthetic_rows(coll, 4, 10), txn=True, seq=e.result.seq)
        assert not state["armed"]
    monkeypatch.undo()
    _flush(meta, store, settings, coll)
    assert _pks(meta, store, coll) == [1, 2, 3, 10, 11, 12, 13]


def test_expire_producers_removes_idle_records_and_the_flusher_leaves_them_alone(meta, store, settings):
    """A named producer's records have no lease (issue 26, F3): expire_producers removes
    a record whose producer has not committed for two windows, after moving the TSO past
    that instant, and keeps live ones; a record without a last-commit tick is stamped
    first, so its clock starts then, not at 0. A flusher run reads none of them."""
    from seglake.meta import keys as keymod
    from seglake.meta.alloc import compose_ts, physical_ms
    from seglake.meta.codec import decode, encode
    from seglake.wal.log import expire_producers

    from seglake.meta import Meta

    s = settings.replace(wal_producer_expiry=60.0, max_clock_skew=3600.0)
    meta = Meta.from_settings(s)   # the sweep runs the TSO ahead (standing in for waiting)
    with WalClient(meta, store, s, producer_id="idle") as a, WalClient(meta, store, s, producer_id="busy") as b:
        coll = make_collection(a, shards=1)
        a.insert("c1", synthetic_rows(coll, 3, 1))
        b.insert("c1", synthetic_rows(coll, 3, 10))
    (p,) = pchannels(coll)
    key = lambda pid: keymod.wal_producer(meta.keys, p, pid)  # noqa: E731
    rec = decode(meta.kv.get(key("idle")).value)
    assert isinstance(rec["tt"], int) and rec["w"] == 60.0 and not meta.kv.get(key("idle")).lease
    meta.kv.put(key("idle"), encode({**rec, "tt": compose_ts(physical_ms(rec["tt"]) - 121_000)}))  # 121 s ago
    legacy = {k: v for k, v in decode(meta.kv.get(key("busy")).value).items() if k not in ("tt", "w")}
    meta.kv.put(key("old"), encode(legacy))
    flush_pchannel(meta, store, p, s, flush_all=True)
    assert meta.kv.get(key("idle")) is not None                            # the flusher left it
    assert expire_producers(meta, p, 60.0) == 1
    assert meta.kv.get(key("idle")) is None and meta.kv.get(key("busy")) is not None
    assert isinstance(decode(meta.kv.get(key("old")).value)["tt"], int)   # stamped, kept
    # two minutes later by the TSO: busy and old go too, and the TSO is past that instant
    later = compose_ts(physical_ms(meta.tso.now()) + 121_000)
    assert expire_producers(meta, p, 60.0, now_tt=later) == 2
    assert meta.tso.reserve(1, linearizable=True) > later
    # a reused id starts afresh and appends normally
    with WalClient(meta, store, s, producer_id="idle") as a:
        a.insert("c1", synthetic_rows(coll, 2, 20))
    _flush(meta, store, s, coll)
    assert _pks(meta, store, coll) == [1, 2, 3, 10, 11, 12, 20, 21]