"""The producer record's pure rules (issue 26): whole calls remembered, evicted by number."""

from __future__ import annotations

from types import SimpleNamespace

from seglake.wal.producers import (CALL_BITS, CLOCK_BASE, MAX_CALLS, _add_to_ranges, _in_ranges, _record, _remember,
                                   call_ms)


def _req(call: int, idx: int, digest: str = "d", props: dict | None = None):
    return SimpleNamespace(seq=(call << CALL_BITS) | idx, digest=digest,
                           messages=[SimpleNamespace(props=props or {})])


def test_ranges_merge_and_hold_out_of_order_indexes():
    r: list = []
    for i in (0, 2, 1, 5, 4, 9):
        r = _add_to_ranges(r, i)
    assert r == [[0, 2], [4, 5], [9, 9]]
    assert _in_ranges(r, 1) and _in_ranges(r, 9) and not _in_ranges(r, 3)


def test_a_call_of_any_size_is_one_entry():
    prod = _record(None)
    for i in range(1000):
        prod = _remember(prod, [_req(7, i)], n=10 + i, name="x", tt=1)
    assert list(prod["calls"]) == ["7"]
    assert prod["calls"]["7"]["done"] == [[0, 999]] and prod["calls"]["7"]["n"] == [10, 1009]


def test_calls_are_evicted_by_number_never_by_arrival():
    prod = _record(None)
    prod = _remember(prod, [_req(1000, 0)], n=1, name="x", tt=1)        # a high call first
    for c in range(1, MAX_CALLS + 1):                                   # then MAX_CALLS lower ones
        prod = _remember(prod, [_req(c, 0)], n=1 + c, name="x", tt=1)
    assert "1000" in prod["calls"] and "1" not in prod["calls"]
    assert prod["floor"] == 1 and len(prod["calls"]) == MAX_CALLS


def test_an_upsert_call_keeps_its_first_timestamp():
    prod = _remember(_record(None), [_req(3, 0, props={"upsert_ts": 111})], n=1, name="x", tt=1)
    prod = _remember(prod, [_req(3, 1, props={"upsert_ts": 222})], n=2, name="x", tt=1)
    assert prod["calls"]["3"]["t0"] == 111


def test_clock_numbered_calls_carry_their_time_and_callers_numbers_do_not():
    assert call_ms(5) is None
    assert call_ms(CLOCK_BASE + 1000) == 1_577_836_801_000


def test_a_running_call_is_never_evicted():
    prod = _remember(_record(None), [_req(1, 0)], n=1, name="x", tt=1)
    for c in range(100, 100 + MAX_CALLS):
        prod = _remember(prod, [_req(c, 0)], n=c, name="x", tt=1, running=frozenset({1}))
    assert "1" in prod["calls"] and "100" not in prod["calls"] and prod["floor"] == 100
