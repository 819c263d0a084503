"""Compaction's L0 fold holds back for the timestamp of an upsert call that may still add
rows (its rows carry its first append's tick, and a retry keeps it), and only for such a
call: one whose appends every pchannel's producer record holds (the plan its first append
carries) holds nothing, nor does a delete call. Real etcd, real files."""

from __future__ import annotations

import pyarrow as pa
import pytest

from seglake.meta import keys as keymod
from seglake.meta.catalog import pchannel_of
from seglake.lifecycle.compaction.folding import remembered_call_ts
from seglake.wal import writer as W
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows

from wal_helpers import make_collection


def test_an_unfinished_upsert_holds_the_fold_until_its_retry_completes_it(meta, store, settings, monkeypatch):
    c0 = WalClient(meta, store, settings)
    coll = make_collection(c0, "c", shards=2)
    ps = sorted({pchannel_of(v) for v in coll.vchannels})
    p1, p2 = (pchannel_of(v) for v in coll.vchannels)
    assert p1 != p2
    both = pa.concat_tables([synthetic_rows(coll, 2, 1, shard=0), synthetic_rows(coll, 2, 1, shard=1)])
    c0.upsert("c", both)                          # whole: holds nothing
    c0.delete("c", [1, 2])                        # a delete: holds nothing
    assert remembered_call_ts(meta, ps, keymod) is None
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
            c1.upsert("c", both)
        t0 = c1.writer(p1).remembered(ei.value.result.seq)["t0"]
    assert remembered_call_ts(meta, ps, keymod) == t0     # its part on p2 may still come: held
    armed["on"] = False
    with WalClient(meta, store, settings, producer_id="ops") as c2:
        c2.upsert("c", both, seq=ei.value.result.seq)
    assert remembered_call_ts(meta, ps, keymod) is None   # whole now
    c0.close()


def test_a_txn_upsert_holds_nothing(meta, store, settings):
    """A txn's upserts take their bodies' ticks (no call timestamp): a live client's
    committed txn upsert never holds a fold back."""
    with WalClient(meta, store, settings, producer_id="txn") as c:
        coll = make_collection(c, "c", shards=1)
        c.upsert("c", synthetic_rows(coll, 3, 1), txn=True)
        ps = sorted({pchannel_of(v) for v in coll.vchannels})
        assert remembered_call_ts(meta, ps, keymod) is None
