"""Attack s25 (found by the s21 twin fuzz at seed 314): an upsert whose first try committed
on one pchannel only is retried with its seq -- keeping its call's timestamp t0 -- AFTER a
delete of its pks (ts > t0) was acknowledged and flushed. Its retry completes the call
(every pchannel's producer record holds all its appends), so the fold's cap at the oldest
remembered call timestamp let go of t0 -- but the retried rows were still in the WAL,
above the checkpoint, unflushed. An L0 fold (l0_age 0) then forgot the delete (its tick at
or below the checkpoint), and once the retried rows were flushed they were visible:
rows a delete had hidden came back, only in the compacted collection.

A whole call must hold its t0 until its appends are durable (below the checkpoints of the
collection's vchannels on every pchannel it appended to)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.catalog import pchannel_of
from seglake.visibility import visible_rows
from seglake.wal import writer as W
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows

from wal_helpers import make_collection

pytestmark = pytest.mark.etcd

FOLD = compaction.Policy(min_segment_rows=1000, target_rows=10_000, delete_ratio=0.0, protection=0.0, l0_age=0.0)


def _visible(meta, store, name) -> Counter:
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id)
    return Counter(t.column("pk").to_pylist())


def _flush(meta, store, settings, coll):
    for p in sorted({pchannel_of(v) for v in coll.vchannels}):
        flush_pchannel(meta, store, p, settings, flush_all=True)


@pytest.mark.parametrize("compact_before_retry_flush", [True, False], ids=["fold", "no-fold"])
def test_a_retried_upsert_s_unflushed_rows_stay_hidden_by_the_delete_after_a_fold(meta, store, settings,
                                                                                 monkeypatch,
                                                                                 compact_before_retry_flush):
    c0 = WalClient(meta, store, settings)
    coll = make_collection(c0, "c", shards=2)
    p1, p2 = (pchannel_of(v) for v in coll.vchannels)
    assert p1 != p2
    both = pa.concat_tables([synthetic_rows(coll, 2, 1, shard=0), synthetic_rows(coll, 2, 1, shard=1)])
    pks = sorted(both.column("pk").to_pylist())
    c0.insert("c", both)                              # old rows of every pk, flushed
    _flush(meta, store, settings, coll)
    real = W.WalWriter.append_async
    armed = {"on": True}

    def flaky(self, msgs, *, seq=None, digest=None):   # the call's appends to p2 do not commit
        if armed["on"] and self.pchannel == p2 and seq is not None:
            r = W._Request([], [], 0, seq)
            r.finish(error=W.Retry("injected: not committed"))
            return r
        return real(self, msgs, seq=seq, digest=digest)

    monkeypatch.setattr(W.WalWriter, "append_async", flaky)
    with WalClient(meta, store, settings, producer_id="ops") as c1:
        with pytest.raises(AppendIncomplete) as ei:
            c1.upsert("c", both)                      # t0: committed on p1 only
    armed["on"] = False
    c0.delete("c", pks)                               # acknowledged after the upsert's call: hides its rows
    _flush(meta, store, settings, coll)               # the delete and the upsert's p1 part flushed
    assert _visible(meta, store, "c") == Counter()
    with WalClient(meta, store, settings, producer_id="ops") as c2:
        c2.upsert("c", both, seq=ei.value.result.seq)   # the retry: the call is whole, its p2 rows unflushed
    if compact_before_retry_flush:
        s = compaction.compact(meta, store, "c", FOLD)
        assert all(r.status == compaction.COMMITTED for r in s.results), s.results
    _flush(meta, store, settings, coll)               # the retried rows land, stamped t0 < the delete's ts
    assert _visible(meta, store, "c") == Counter(), "a row the delete hides is visible"
    s = compaction.compact(meta, store, "c", FOLD)    # and a fold now (the rows flushed) keeps it so
    assert _visible(meta, store, "c") == Counter()
    # the hold ends once the retried rows are flushed: the deletes are folded, none is left
    c0.insert("c", synthetic_rows(coll, 4, 100))     # the log moves on (ticks past the retry)
    _flush(meta, store, settings, coll)
    compaction.compact(meta, store, "c", FOLD)
    left = [x.segment_id for x in meta.segments.list(coll.collection_id, states=["Flushed"]) if x.deltalogs]
    assert not left, left
    assert _visible(meta, store, "c") == Counter(range(100, 104))
    c0.close()


def test_a_fresh_client_s_retried_upsert_closed_before_the_flush_stays_hidden_after_a_fold(meta, store, settings,
                                                                                          monkeypatch):
    """The same with a client of a fresh producer id (no name): it retries the call itself
    and closes -- its producer records go with its lease -- before the retried rows are
    flushed. Nothing then remembers t0, yet the rows stamped t0 are still in the WAL above
    the checkpoint."""
    c0 = WalClient(meta, store, settings)
    coll = make_collection(c0, "c", shards=2)
    p1, p2 = (pchannel_of(v) for v in coll.vchannels)
    both = pa.concat_tables([synthetic_rows(coll, 2, 1, shard=0), synthetic_rows(coll, 2, 1, shard=1)])
    pks = sorted(both.column("pk").to_pylist())
    c0.insert("c", both)
    _flush(meta, store, settings, coll)
    real = W.WalWriter.append_async
    armed = {"on": True}

    def flaky(self, msgs, *, seq=None, digest=None):
        if armed["on"] and self.pchannel == p2 and seq is not None:
            r = W._Request([], [], 0, seq)
            r.finish(error=W.Retry("injected: not committed"))
            return r
        return real(self, msgs, seq=seq, digest=digest)

    monkeypatch.setattr(W.WalWriter, "append_async", flaky)
    c1 = WalClient(meta, store, settings)                 # a fresh producer id
    with pytest.raises(AppendIncomplete) as ei:
        c1.upsert("c", both)
    armed["on"] = False
    c0.delete("c", pks)
    _flush(meta, store, settings, coll)
    assert _visible(meta, store, "c") == Counter()
    c1.upsert("c", both, seq=ei.value.result.seq)         # the retry, then the client goes
    c1.close()
    s = compaction.compact(meta, store, "c", FOLD)
    assert all(r.status == compaction.COMMITTED for r in s.results), s.results
    _flush(meta, store, settings, coll)
    assert _visible(meta, store, "c") == Counter(), "a row the delete hides is visible"
    c0.close()
