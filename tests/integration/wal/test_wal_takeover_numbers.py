"""Adversary rows5 (issue 26 item 2: an acknowledgement means written): the first call a
new holder of a named producer id numbers must lie above every call the earlier holder
committed, also when the earlier holder's numbers ran ahead of the TSO's time (calls
faster than the TSO's physical clock moves -- here because another writer's clock 4 s
ahead, inside max_clock_skew, holds the TSO's physical time while the wall clock catches
up; a busy client does the same, up to MAX_CALL_LEAD_MS ahead). Rows compared with the
model of every acknowledged call after a flush."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.alloc import TSO
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import make_collection, pchannels


def _rows(meta, store, coll) -> list[tuple]:
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    return sorted(zip(t.column("pk").to_pylist(), t.column("price").to_pylist()))


def _push_tso_ahead(meta, settings, seconds: float) -> None:
    """Another process whose clock runs `seconds` ahead takes a timestamp: the TSO's
    physical time stays there until the wall clock catches up."""
    assert seconds < settings.max_clock_skew
    TSO(meta.kv, meta.keys.alloc_tso(), clock=lambda: time.time() + seconds,
        max_clock_skew=settings.max_clock_skew).reserve(1, linearizable=True)


@pytest.mark.parametrize("second", ["same rows", "other rows"])
def test_a_new_holder_numbers_its_first_call_above_the_earlier_holder_s_calls(meta, store, settings, second):
    """DEFECT (seen failing first): holder A made three calls while the TSO's physical time
    stood still (consecutive numbers N, N+1, N+2); holder B claimed the id and numbered its
    first call from the TSO's time: N+1, a number A had committed. With the same rows as
    A's call N+1 (a legitimate duplicate insert) B's call was answered from A's record and
    appended nothing -- acknowledged, lost; with other rows it was refused as "another
    payload" although the caller gave no seq."""
    with WalClient(meta, store, settings) as c0:
        coll = make_collection(c0, shards=2)
    rows = synthetic_rows(coll, 6, 1)
    other = synthetic_rows(coll, 6, 100, seed=3)
    _push_tso_ahead(meta, settings, 4.0)
    want = []
    a = WalClient(meta, store, settings, producer_id="takeover-numbers")
    seqs = []
    for t in (rows, rows, rows):
        seqs.append(a.insert("c1", t).seq)
        want += list(zip(t.column("pk").to_pylist(), t.column("price").to_pylist()))
    assert seqs[2] - seqs[0] <= 2 + 1000, seqs   # (the numbers ran ahead of the TSO's time)
    with WalClient(meta, store, settings, producer_id="takeover-numbers") as b:
        t = rows if second == "same rows" else other
        res = b.insert("c1", t)
        want += list(zip(t.column("pk").to_pylist(), t.column("price").to_pylist()))
        assert res.seq > max(seqs), (res.seq, seqs)
    a.close()
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    assert _rows(meta, store, coll) == sorted(want)


def test_a_call_fenced_before_it_committed_anything_is_retried_exactly_after_the_new_holder_s_calls(meta, store,
                                                                                                     settings):
    """DEFECT (seen failing first): A numbered a call and was fenced (B claimed the id)
    before any of it committed; B's first call, the same rows, took the same number (A's
    number was in no record); the fenced call retried as its error says (seq=err.result.seq,
    from a new client) was answered from B's call: 2 of 3 acknowledged inserts visible.
    Now a named client reserves its numbers under its claim before it hands them out, and a
    new holder numbers above every reserved one."""
    from seglake.errors import SeglakeError

    with WalClient(meta, store, settings) as c0:
        coll = make_collection(c0, shards=2)
    rows = synthetic_rows(coll, 6, 1)
    _push_tso_ahead(meta, settings, 4.0)
    a = WalClient(meta, store, settings, producer_id="fenced-numbers")
    a.insert("c1", rows)
    b = WalClient(meta, store, settings, producer_id="fenced-numbers")
    b.holder()   # the claim: A is fenced at its next commit
    with pytest.raises(SeglakeError, match="fenced|claimed") as e:
        a.insert("c1", rows)
    fenced = e.value.result.seq
    assert not e.value.result.committed
    b.insert("c1", rows)
    with WalClient(meta, store, settings, producer_id="fenced-numbers") as c:
        c.insert("c1", rows, seq=fenced)   # the fenced call, retried as its error says
    a.close()
    b.close()
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    one = list(zip(rows.column("pk").to_pylist(), rows.column("price").to_pylist()))
    assert _rows(meta, store, coll) == sorted(one * 3)


def test_a_call_fenced_before_it_was_numbered_carries_no_seq_and_its_retry_is_a_new_call(meta, store, settings,
                                                                                          monkeypatch):
    """A's numbers reserved one at a time (NUMBERS_AHEAD 1): once B claimed the id, A's next
    call is refused at its reservation, before it has a number: ProducerFenced whose
    `.result.seq` is None, nothing appended; the retry as its error says (seq=None, from a
    new client) appends it once. Rows exact."""
    from seglake.wal import client as C
    from seglake.wal.producers import ProducerFenced

    monkeypatch.setattr(C, "NUMBERS_AHEAD", 1)
    with WalClient(meta, store, settings) as c0:
        coll = make_collection(c0, shards=2)
    rows = synthetic_rows(coll, 6, 1)
    a = WalClient(meta, store, settings, producer_id="fenced-unnumbered")
    a.insert("c1", rows)
    b = WalClient(meta, store, settings, producer_id="fenced-unnumbered")
    b.holder()
    with pytest.raises(ProducerFenced, match="not numbered") as e:
        a.insert("c1", rows)
    assert e.value.result.seq is None and not e.value.result.committed
    b.close()
    with WalClient(meta, store, settings, producer_id="fenced-unnumbered") as c:
        c.insert("c1", rows, seq=e.value.result.seq)
    a.close()
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    one = list(zip(rows.column("pk").to_pylist(), rows.column("price").to_pylist()))
    assert _rows(meta, store, coll) == sorted(one * 2)
