"""Adversary s20 (issue 26 #9 / README "How long a retry stays safe"): "a retry of [a
client-numbered call] older than the window that no record remembers is refused, never
appended twice".

The call's age is judged by the RETRYING process's clock (max(its wall clock, the TSO
mark's time)). On a quiet store the mark stops where the last write left it, so a retrier
whose clock is slow (here 100 s; the window is the smallest allowed, 60 s) sees the call as
young once its record has expired (etcd's lease clock), and appends it again. The TSO's
max_clock_skew check does not catch it: the slow clock is still ahead of the idle mark.
(With the default window of 1 day it needs a clock ~12 h slow; the rule is the same.)

Real etcd; waits for the record's real lease expiry (~2 min)."""

from __future__ import annotations

import time

import pytest

from seglake.errors import SeglakeError
from seglake.meta import keys as keymod
from seglake.wal.client import WalClient, synthetic_rows

from wal_helpers import inserted_pks, all_messages, make_collection, pchannels


def test_a_retry_after_the_record_expired_is_refused_even_from_a_slow_clock(meta, store, settings):
    s = settings.replace(wal_producer_expiry=60.0)
    with WalClient(meta, store, s) as c0:
        coll = make_collection(c0, "c", shards=1)
    rows = synthetic_rows(coll, 5, 1)
    (p,) = pchannels(coll)
    with WalClient(meta, store, s, producer_id="job") as c1:
        res = c1.insert("c", rows)
    key = keymod.wal_producer(meta.keys, p, "job")
    t0 = time.time()
    while meta.kv.get(key) is not None and time.time() - t0 < 200:   # the record's lease runs out
        time.sleep(2)
    assert meta.kv.get(key) is None
    waited = time.time() - t0
    slow = 100.0
    refused = None
    try:
        with WalClient(meta, store, s, producer_id="job", clock=lambda: time.time() - slow) as c2:
            c2.insert("c", rows, seq=res.seq)
    except SeglakeError as e:
        refused = e
    pks = inserted_pks(all_messages(meta, store, p, s))
    assert refused is not None and sorted(pks) == [1, 2, 3, 4, 5], (
        f"retry of seq {res.seq} {waited:.0f} s after its record expired (window 60 s), retrier clock "
        f"{slow:g} s slow: {'refused' if refused else 'ACCEPTED'}; pks in the log {sorted(pks)}")


def test_a_caller_numbered_retry_after_the_record_expired_is_not_appended_twice(meta, store, settings):
    """The issue (#9): "A retry after a record expired appends twice". The README now says a
    seq the caller chose (below 2**40) "is recognised only while the record lives: do not
    retry it after the window" -- i.e. it is still appended twice. The expiry is simulated
    by deleting the id's keys (what the lease does at 1.5..2 windows)."""
    with WalClient(meta, store, settings) as c0:
        coll = make_collection(c0, "c", shards=1)
    rows = synthetic_rows(coll, 5, 1)
    (p,) = pchannels(coll)
    with WalClient(meta, store, settings, producer_id="op-ids") as c1:
        c1.insert("c", rows, seq=5)
    for key in (keymod.wal_producer(meta.keys, p, "op-ids"), keymod.wal_producer_owner(meta.keys, "op-ids"),
                keymod.wal_producer_numbers(meta.keys, "op-ids")):
        meta.kv.delete(key)
    refused = None
    try:
        with WalClient(meta, store, settings, producer_id="op-ids") as c2:
            c2.insert("c", rows, seq=5)
    except SeglakeError as e:
        refused = e
    pks = inserted_pks(all_messages(meta, store, p, settings))
    assert refused is not None and sorted(pks) == [1, 2, 3, 4, 5], (
        f"caller seq 5 retried after its record expired: {'refused' if refused else 'ACCEPTED'}; pks {sorted(pks)}")
