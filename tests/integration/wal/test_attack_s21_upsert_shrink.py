"""s21 adversary: a caller-numbered upsert, partly committed on two pchannels, retried
after expire_producers shrank its record (README: "its retry stays refused for good").
The pchannel whose record floored it refuses; the other, which never saw the call,
appends its part with a NEW timestamp (the shrink dropped the call's t0): the refused
call hides a row acknowledged after its first try. Real etcd."""

from __future__ import annotations

import pyarrow as pa
import pytest

from seglake.errors import ValidationError
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.alloc import compose_ts, physical_ms
from seglake.meta.catalog import pchannel_of
from seglake.visibility import visible_rows
from seglake.wal import writer as W
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows
from seglake.wal.log import expire_producers

from wal_helpers import make_collection, pchannels, wide, wide_meta  # noqa: F401 (fixtures)


def test_a_refused_upsert_retry_after_the_shrink_never_hides_an_acknowledged_row(meta, store, wide, monkeypatch):
    c0 = WalClient(meta, store, wide)
    coll = make_collection(c0, "c", shards=2)
    p1, p2 = (pchannel_of(v) for v in coll.vchannels)
    assert p1 != p2 and sorted([p1, p2]) == pchannels(coll)
    a, b = synthetic_rows(coll, 1, 1, shard=0), synthetic_rows(coll, 1, 1, shard=1)
    both = pa.concat_tables([a, b])
    b_pk = b.column("pk")[0].as_py()
    real = W.WalWriter.append_async
    armed = {"on": True}

    def flaky(self, msgs, *, seq=None, digest=None):   # call 7's append to p2 never commits
        if armed["on"] and self.pchannel == p2 and seq is not None and seq >> 20 == 7:
            r = W._Request([], [], 0, seq)
            r.finish(error=W.Retry("injected: not committed"))
            return r
        return real(self, msgs, seq=seq, digest=digest)

    monkeypatch.setattr(W.WalWriter, "append_async", flaky)
    with WalClient(meta, store, wide, producer_id="ops") as c1:
        with pytest.raises(AppendIncomplete) as ei:
            c1.upsert("c", both, seq=7)
    assert ei.value.result.committed == {p1: 1}
    armed["on"] = False
    # after the call's first try: another client's row of pk b, acknowledged
    mine = b.set_column(b.schema.get_field_index("price"), "price", pa.array([555.0], pa.float32()))
    c0.insert("c", mine)
    later = compose_ts(physical_ms(meta.tso.now()) + 122_000)
    assert expire_producers(meta, p1, now_tt=later) == 1       # call 7's record on p1: shrunk to floor 7
    with WalClient(meta, store, wide, producer_id="ops") as c2:
        with pytest.raises(ValidationError) as ei2:
            c2.upsert("c", both, seq=7)                         # refused, as the README says ...
    c0.close()
    for q in (p1, p2):
        flush_pchannel(meta, store, q, wide, flush_all=True)
    t = visible_rows(meta, store, coll.collection_id, columns=["price"]).to_pydict()
    prices = sorted(pr for pk, pr in zip(t["pk"], t["price"]) if pk == b_pk)
    # ... and then it must not have changed pk b: the acknowledged row stays visible
    assert 555.0 in prices, f"pk {b_pk} visible prices {prices}; refusal said: {str(ei2.value)[-120:]}"
