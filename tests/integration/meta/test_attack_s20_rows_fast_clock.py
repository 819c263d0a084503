"""Adversary s20 (issue 26 #8 / deliver 6): "bound how far one process's clock can drag
the TSO ahead (refuse to allocate, or alarm, past max_clock_skew)".

A producer whose clock runs 600 s fast, with the DEFAULT settings every process has
(max_clock_skew 5 s), is accepted and drags the one global TSO mark 600 s ahead of real
time: the bound is checked against the allocating process's OWN clock, which is the
wrong one. Every right clock is then refused for ~600 s (no insert, no flush: the whole
store stops writing), while the fast producer goes on writing. Real etcd."""

from __future__ import annotations

import time

from seglake.meta.alloc import decode_mark, physical_ms
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows
from seglake.errors import ClockSkewError

from wal_helpers import make_collection

FAST = 600.0


def test_one_fast_clock_with_the_default_bound_does_not_drag_the_tso_nor_stop_every_right_writer(
        meta, store, settings):
    assert settings.max_clock_skew == 5.0
    with WalClient(meta, store, settings) as right:
        coll = make_collection(right, "c", shards=1)
        right.insert("c", synthetic_rows(coll, 10, 1))
    fast_ok = True
    try:
        with WalClient(meta, store, settings, clock=lambda: time.time() + FAST) as fast:
            fast.insert("c", synthetic_rows(coll, 10, 100))
    except (ClockSkewError, AppendIncomplete):
        fast_ok = False     # refused: what the issue asks (or an alarm)
    lead = (physical_ms(decode_mark(meta.kv.get(meta.keys.alloc_tso()).value)) - time.time() * 1000) / 1000
    right_ok = True
    try:
        with WalClient(meta, store, settings) as right:
            right.insert("c", synthetic_rows(coll, 1, 1000))
    except (ClockSkewError, AppendIncomplete) as e:
        right_ok = False
        why = str(e)[:160]
    assert lead <= settings.max_clock_skew and right_ok, (
        f"fast producer (+{FAST:g} s, max_clock_skew {settings.max_clock_skew:g} s) accepted: {fast_ok}; "
        f"TSO mark now leads real time by {lead:.0f} s; a right-clock insert afterwards "
        f"{'succeeded' if right_ok else 'was refused: ' + why}")
