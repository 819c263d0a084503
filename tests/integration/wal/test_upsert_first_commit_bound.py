"""An upsert's rows carry its call's one timestamp, taken before any of its appends
commits. Compaction's L0 fold forgets a delete once no row it could hide can still
arrive: it holds back for every call timestamp a producer record remembers (a retry keeps
its first try's), and a call no record holds yet must commit its first part within
UPSERT_FIRST_COMMIT of its timestamp (wal/writer.py _refusal). A first try older than that
is refused, nothing appended; its retry without seq takes a new timestamp. A part retried
on a pchannel that never saw the call, while another pchannel's record holds its
timestamp, goes on with it (s21 adversaries: a paused upsert's row came back after a
fold). Real etcd, real files."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from seglake.errors import ValidationError
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.alloc import compose_ts, physical_ms
from seglake.meta.catalog import pchannel_of
from seglake.visibility import visible_rows
from seglake.wal import writer as W
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows

from wal_helpers import all_messages, inserted_pks, make_collection


def _priced(t: pa.Table, price: float) -> pa.Table:
    return t.set_column(t.schema.get_field_index("price"), "price", pa.array([price] * t.num_rows, pa.float32()))


def _rows(meta, store, settings, coll) -> dict:
    for v in coll.vchannels:
        flush_pchannel(meta, store, pchannel_of(v), settings, flush_all=True)
    t = visible_rows(meta, store, coll.collection_id, columns=["price"]).to_pydict()
    return dict(zip(t["pk"], t["price"]))


def test_an_upsert_whose_first_try_took_its_timestamp_too_long_ago_is_refused(meta, store, settings, monkeypatch):
    from seglake.wal.client import WalClient as C

    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c", shards=1)
        c.insert("c", _priced(synthetic_rows(coll, 3, 1), 1.0))
        real = C._call_ts
        # the call took its timestamp 61 s before it reached the writer (paused, backed off)
        monkeypatch.setattr(C, "_call_ts", lambda self, coll, seq: compose_ts(physical_ms(real(self, coll, seq))
                                                                                - 61_000))
        with pytest.raises(ValidationError, match="upsert again"):
            c.upsert("c", _priced(synthetic_rows(coll, 2, 2), 9.0))
        monkeypatch.undo()
        (p,) = {pchannel_of(v) for v in coll.vchannels}
        assert sorted(inserted_pks(all_messages(meta, store, p, settings))) == [1, 2, 3]   # nothing appended
        c.upsert("c", _priced(synthetic_rows(coll, 2, 2), 9.0))   # again, a new call: a new timestamp
    assert _rows(meta, store, settings, coll) == {1: 1.0, 2: 9.0, 3: 9.0}


def test_a_part_retried_where_the_call_never_was_goes_on_while_a_record_holds_its_timestamp(
        meta, store, settings, monkeypatch):
    monkeypatch.setattr(W, "UPSERT_FIRST_COMMIT", 0.5)   # stands in for a minute
    c0 = WalClient(meta, store, settings)
    coll = make_collection(c0, "c", shards=2)
    p1, p2 = (pchannel_of(v) for v in coll.vchannels)
    both = pa.concat_tables([synthetic_rows(coll, 1, 1, shard=0), synthetic_rows(coll, 1, 1, shard=1)])
    real = W.WalWriter.append_async
    armed = {"on": True}

    def flaky(self, msgs, *, seq=None, digest=None):   # the call's append to p2 does not commit
        if armed["on"] and self.pchannel == p2 and seq is not None:
            r = W._Request([], [], 0, seq)
            r.finish(error=W.Retry("injected: not committed"))
            return r
        return real(self, msgs, seq=seq, digest=digest)

    monkeypatch.setattr(W.WalWriter, "append_async", flaky)
    with WalClient(meta, store, settings, producer_id="ops") as c1:
        with pytest.raises(AppendIncomplete) as ei:
            c1.upsert("c", both)
    assert ei.value.result.committed == {p1: 1}
    armed["on"] = False
    time.sleep(1.0)   # the call's timestamp is past the bound now; p1's record holds it
    with WalClient(meta, store, settings, producer_id="ops") as c2:
        again = c2.upsert("c", both, seq=ei.value.result.seq)
    assert again.committed == {p1: 1, p2: 1}   # p1 answered from its record, p2 appended
    c0.close()
    rows = _rows(meta, store, settings, coll)
    assert sorted(rows) == sorted(both.column("pk").to_pylist())
