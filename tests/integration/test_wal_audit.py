"""Adversarial audit of the shared WAL (h5-audit): edges of the producer API."""

from __future__ import annotations

import pytest

from seglake.lifecycle.flush import flush_pchannel
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import make_collection, pchannels


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
