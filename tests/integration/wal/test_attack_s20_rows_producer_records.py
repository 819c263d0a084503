"""Adversary s20 (issue 26 #9 / deliver 7: "Producer records are bounded (by count and
age)"). A client without a producer id gets a fresh id; its record (one per pchannel it
wrote) and a fresh etcd lease live FRESH_WINDOW x 1.5..2 (15-20 min) after its last
commit. Nothing bounds their COUNT: a program that opens a WalClient per call (as every
README example does: `with WalClient(...) as c: c.insert(...)`) leaves one record and one
lease per call -- at 100 calls/s that is ~100k records and leases alive in etcd.
Real etcd."""

from __future__ import annotations

from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import make_collection


def test_a_client_per_call_leaves_a_bounded_number_of_producer_records(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, "c", shards=1)
    calls = 60
    for i in range(calls):
        with WalClient(meta, store, settings) as c:
            c.insert("c", synthetic_rows(coll, 1, 10 + i))
    recs = [kv.key for kv in meta.kv.range(meta.keys.prefix, keys_only=True) if "/producers/" in kv.key]
    leases = {kv.lease for kv in meta.kv.range(meta.keys.prefix, keys_only=True) if "/producers/" in kv.key}
    assert len(recs) <= 16, f"{calls} calls, one client each: {len(recs)} producer records on {len(leases)} leases alive"
