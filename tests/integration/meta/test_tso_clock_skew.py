"""Issue 26 #8: one fast clock must not drag everyone's timestamps ahead of real time
silently. A producer whose clock ran 600 s fast pushed the one global TSO mark, and every
later timestamp, from every process, came out 599 s ahead of the wall clock.

The rule under test (seglake.meta.alloc, `max_clock_skew`): no process reserves a
timestamp whose physical part is more than max_clock_skew ahead of its own clock, and
advance_past refuses a timestamp beyond now + max_clock_skew. Real etcd."""

from __future__ import annotations

import time

import pytest

from seglake.errors import ClockSkewError
from seglake.meta import Meta
from seglake.meta.alloc import TSO, compose_ts, decode_mark, physical_ms
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows

from wal_helpers import make_collection
from etcd_root import root_state

pytestmark = pytest.mark.etcd

FAST = 600.0  # seconds: the fast producer


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_a_fast_producer_leaves_the_others_refusing_instead_of_following_it(meta, store, settings):
    """The issue's reproduction: a producer 600 s fast writes; a process with a right
    clock then refuses to issue a timestamp (naming both clocks) instead of issuing one
    599 s ahead of its wall clock."""
    with WalClient(meta, store, settings.replace(max_clock_skew=2 * FAST),
                   clock=lambda: time.time() + FAST) as fast:
        coll = make_collection(fast, "c", shards=1)
        fast.insert("c", synthetic_rows(coll, 10, 1))
    with Meta.from_settings(settings) as right:  # the default bound, a right clock
        with pytest.raises(ClockSkewError) as e:
            right.tso.now()
    msg = str(e.value)
    assert "ahead of this process's clock" in msg and "max_clock_skew" in msg, msg
    assert "599" in msg or "600" in msg, msg      # by how much, in seconds
    with WalClient(meta, store, settings) as right:  # a right-clock producer refuses too:
        # before numbering its call (ClockSkewError) or in its append (AppendIncomplete)
        with pytest.raises((AppendIncomplete, ClockSkewError)) as e:
            right.insert("c", synthetic_rows(coll, 1, 100))
    if isinstance(e.value, AppendIncomplete):
        assert [type(x) for x in e.value.failed.values()] == [ClockSkewError]
        assert not e.value.result.committed


def test_a_fast_tso_is_refused_past_the_bound_and_ordered_within_it(settings):
    """Within max_clock_skew, clocks that disagree still give one increasing sequence;
    past it, the slower process refuses and nothing it reserves reaches etcd."""
    skew = 5.0
    s = settings.replace(max_clock_skew=skew)
    with Meta.from_settings(s) as a, Meta.from_settings(s) as b:
        key = a.keys.alloc_tso()
        ahead = TSO(b.kv, key, clock=lambda: time.time() + skew / 2, max_clock_skew=skew)
        seen = [a.tso.now(), ahead.now(), a.tso.now()]
        assert seen == sorted(set(seen))
        far = TSO(b.kv, key, clock=lambda: time.time() + 3 * skew, max_clock_skew=4 * skew)
        far_ts = far.now()            # its own bound lets it: its clock is its truth
        mark = decode_mark(a.kv.get(key).value)
        with pytest.raises(ClockSkewError, match="max_clock_skew"):
            a.tso.reserve(1, linearizable=True)
        assert decode_mark(a.kv.get(key).value) == mark   # refused: no write
        assert physical_ms(far_ts) > _now_ms() + 2 * skew * 1000


def test_advance_past_refuses_a_timestamp_beyond_now_plus_the_bound(meta):
    """A bundle's max_ts (or any advance_past) cannot move the TSO further ahead of this
    clock than max_clock_skew: refused naming the value, the mark unchanged."""
    key = meta.keys.alloc_tso()
    meta.tso.now()
    mark = decode_mark(meta.kv.get(key).value)
    future = compose_ts(_now_ms() + int(FAST * 1000))
    with pytest.raises(ClockSkewError, match=str(future)):
        meta.tso.advance_past(future)
    assert decode_mark(meta.kv.get(key).value) == mark
    near = compose_ts(_now_ms() + 1000)   # within the bound: allowed, and honoured
    meta.tso.advance_past(near)
    assert meta.tso.now() > near


def test_a_forged_timestamp_near_2_63_cannot_stop_all_allocation(meta):
    """Issue 26 #5's forged bundle (max_ts = 2**63 - 3): advance_past moved the mark past
    it and no timestamp could be allocated in that etcd root again. Now it is refused
    (far beyond the clock + max_clock_skew) and allocation goes on."""
    before = meta.tso.now()
    with pytest.raises(ClockSkewError, match="advance_past"):
        meta.tso.advance_past(2**63 - 3)
    assert meta.tso.reserve(1, linearizable=True) > before


def test_a_fast_clock_joining_a_store_in_use_is_refused_and_moves_nothing(meta, settings, monkeypatch):
    """Issue 26 #8, the class: while the store is in use (a batch reserved by a clock within
    LIVE_GRACE s: the lease the live key names is alive), a clock leading the mark by more
    than max_clock_skew + LIVE_GRACE is refused itself -- the mark is not moved and every
    right clock goes on. Once the store is idle (the lease ran out, which writes nothing to
    etcd) there is no reference but the mark: the first clock sets it (the first test's
    case)."""

    key = meta.keys.alloc_tso()
    t = meta.tso.reserve(1, linearizable=True)      # a right clock: the store is in use
    assert meta.kv.get(f"{key}.live") is not None
    mark = decode_mark(meta.kv.get(key).value)
    fast = TSO(meta.kv, key, clock=lambda: time.time() + FAST)   # the default bound
    with pytest.raises(ClockSkewError, match="this clock is fast"):
        fast.now()
    assert decode_mark(meta.kv.get(key).value) == mark
    t2 = meta.tso.reserve(1, linearizable=True)
    assert t2 > t                                    # the right clock goes on
    slightly = TSO(meta.kv, key, clock=lambda: time.time() + 2.0)  # within max_clock_skew: ordered
    assert slightly.reserve(1, linearizable=True) > mark

    rev = root_state(meta)
    for b in (meta.tso._b, slightly._b):             # every live lease run out: the store is idle
        if b.live is not None:
            meta.kv.revoke_lease(b.live[0])
    assert root_state(meta) == rev                   # (no key is attached: running out writes nothing)
    assert physical_ms(fast.now()) > _now_ms() + (FAST - 5) * 1000   # idle: the first clock sets the mark
