"""Adversary s24 (damaged persisted records), producer records: expire_producers removes a
named producer's record (what answers its retries) once idle two windows. A record whose
window or tick is damaged is kept, never judged expired at once. Real etcd, real files."""

from __future__ import annotations

import json

import pytest

from seglake.meta import keys as keymod
from seglake.meta.alloc import compose_ts, physical_ms
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import expire_producers

from wal_helpers import all_messages, inserted_pks, make_collection, pchannels, wide  # noqa: F401 (fixtures)


@pytest.mark.parametrize("field,value", [("w", '"0.001"'), ("w", "-5"), ("w", "[]"), ("tt", "true"), ("tt", "-1")])
def test_a_damaged_producer_record_is_not_expired_and_its_retry_is_answered(meta, store, wide, field, value):
    """`float(rec.get("w") or 0)` read "0.001" as a window of a millisecond and a tick of
    true was an int (1: 1970), so the record went at the next sweep and the producer's
    retry of an acknowledged call was refused ("retry window") instead of answered."""
    with WalClient(meta, store, wide) as c0:
        coll = make_collection(c0, "c", shards=1)
    rows = synthetic_rows(coll, 5, 1)
    (p,) = pchannels(coll)
    with WalClient(meta, store, wide, producer_id="job") as c1:
        res = c1.insert("c", rows)
    key = keymod.wal_producer(meta.keys, p, "job")
    doc = json.loads(meta.kv.get(key).value)
    meta.kv.put(key, json.dumps({**doc, field: "@"}).replace('"@"', value))
    soon = compose_ts(physical_ms(meta.tso.now()) + 2000)
    expire_producers(meta, p, now_tt=soon)
    assert meta.kv.get(key) is not None
    rec = json.loads(meta.kv.get(key).value)
    assert rec["calls"] == doc["calls"]
    with WalClient(meta, store, wide, producer_id="job") as c2:
        again = c2.insert("c", rows, seq=res.seq)
    assert again.positions == res.positions
    assert sorted(inserted_pks(all_messages(meta, store, p, wide))) == [1, 2, 3, 4, 5]
