"""The TSO's batch logic against an in-memory stand-in for etcd (the CAS semantics of
KV.get / KV.txn): formats, validation, batch reuse and expiry, the logical carry. The
real-etcd cases are in tests/integration/meta/test_tso.py."""

from __future__ import annotations

import math

import pytest

from seglake.errors import ClockSkewError, Conflict, SeglakeError, ValidationError
from seglake.meta import alloc
from seglake.meta.alloc import (BATCH_SIZE, LOGICAL_BITS, TSO, compose_ts, decode_mark, encode_mark,
                                physical_ms)
from seglake.limits import DAY
from seglake.meta.kv import KeyValue

T0 = 1_763_934_000.0  # seconds


class _Store:
    def __init__(self):
        self.data: dict[str, KeyValue] = {}
        self.rev = 0


class FakeKV:
    """get / txn with etcd's compare semantics on version and mod_revision. `process()`:
    a client of the same store under another endpoint name, i.e. what another process
    sees (TSO objects share a batch per endpoints + key + clock)."""

    def __init__(self, store: _Store | None = None):
        self.s = store or _Store()
        self.data = self.s.data
        self.txns = self.gets = 0
        self.endpoints = [f"fake-{id(self)}"]

    def process(self) -> "FakeKV":
        return FakeKV(self.s)

    def get(self, key):
        self.gets += 1
        return self.data.get(key)

    def put_raw(self, key, value: str):
        self.s.rev += 1
        old = self.data.get(key)
        self.data[key] = KeyValue(key, value.encode(), self.s.rev, old.create_revision if old else self.s.rev,
                                  old.version + 1 if old else 1)

    def txn(self, compares, ops, reason=None):
        self.txns += 1
        for c in compares:
            cur = self.data.get(c.key)
            have = {"version": cur.version if cur else 0, "mod": cur.mod_revision if cur else 0}[c.target]
            if not {"==": have == c.value, ">": have > c.value}[c.op]:
                raise Conflict(reason or "concurrent change")
        for o in ops:
            self.put_raw(o.key, o.value if isinstance(o.value, str) else o.value.decode())
        return self.s.rev


class Clock:
    def __init__(self, t=T0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture(autouse=True)
def fresh_floors(monkeypatch):
    """Each test its own process-wide floors: a FakeKV's floor is keyed by id(kv), and a
    collected FakeKV's id may be reused by the next test's (a far-future floor of one test
    then held up another's clock-follows check, now and then)."""
    monkeypatch.setattr(alloc, "_floors", {})


@pytest.fixture
def mono(monkeypatch):
    """A fake time.monotonic for the allocator (and a sleep that advances it)."""
    now = [1000.0]
    monkeypatch.setattr(alloc, "_monotonic", lambda: now[0])
    monkeypatch.setattr(alloc, "_sleep", lambda s: now.__setitem__(0, now[0] + max(s, 1e-6)))
    return now


def mark_of(kv, key="k"):
    return decode_mark(kv.data[key].value)


def test_mark_formats_old_and_new():
    assert encode_mark(12345) == "v2:12345" and decode_mark(b"v2:12345") == 12345
    assert decode_mark(b"1763934000250") == compose_ts(1763934000250)  # old: physical ms
    for bad in (b"", b"v2:", b"-5", b"v2:1e9", b"12x", "١٢".encode(), b"v3:1"):
        with pytest.raises(SeglakeError, match="unreadable TSO mark"):
            decode_mark(bad)


def test_one_cas_per_batch_and_the_mark_moves_by_counts_not_time(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock)
    seen = [tso.now() for _ in range(BATCH_SIZE)]
    assert kv.txns == 1 and seen == list(range(compose_ts(int(T0 * 1000)), seen[0] + BATCH_SIZE))
    assert mark_of(kv) == seen[-1] + 1  # the mark: next unreserved, advanced by the batch
    seen.append(tso.now())  # batch used up: a new one, right above
    assert kv.txns == 2 and seen[-1] == seen[-2] + 1


def test_a_batch_older_than_max_age_is_not_used(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock)
    a = tso.now()
    mono[0] += alloc.BATCH_MAX_AGE * 0.9
    b = tso.now()
    assert kv.txns == 1 and b == a + 1
    mono[0] += alloc.BATCH_MAX_AGE * 0.2  # 1.1 x max age since the CAS
    c = tso.now()
    assert kv.txns == 2 and c == a + BATCH_SIZE  # next batch starts at the mark


def test_another_process_reserving_is_seen_once_our_batch_expired(mono):
    kv, clock = FakeKV(), Clock()
    kv2 = kv.process()
    a, b = TSO(kv, "k", clock=clock), TSO(kv2, "k", clock=clock)
    a.now()
    tb = b.now()  # above a's batch
    assert tb >= a.now() + BATCH_SIZE - 1  # a's batch is still fresh: used, below b's
    mono[0] += alloc.BATCH_MAX_AGE
    ta = a.now()
    assert ta > tb
    assert kv.txns == 3 and kv2.txns == 2  # a stale guess of the key conflicts: re-read, CAS


def test_tso_objects_of_one_process_share_a_batch(mono):
    kv, clock = FakeKV(), Clock()
    kv2 = FakeKV(kv.s)
    kv2.endpoints = kv.endpoints  # another client of the same etcd, in this process
    a, b = TSO(kv, "k", clock=clock), TSO(kv2, "k", clock=clock)
    seen = [x for _ in range(100) for x in (a.now(), b.now())]
    assert seen == list(range(seen[0], seen[0] + 200)) and kv.txns + kv2.txns == 1


def test_logical_overflow_carries_into_the_next_ms_only(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock, batch_size=1 << 16)
    wall = compose_ts(int(T0 * 1000))
    seen = []
    for _ in range(6):  # 6 x 2**16 reserved with a frozen clock: 1.5 ms of logical space
        seen.append(tso.reserve(1 << 16))
        mono[0] += 1.0
    assert seen == [wall + i * (1 << 16) for i in range(6)]
    assert physical_ms(mark_of(kv)) == int(T0 * 1000) + 1  # ahead by the overflow only


def test_clock_back_stalls_and_forward_follows(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock, max_clock_skew=DAY)  # hour-sized steps: a bound that allows them
    seen = [tso.now()]
    for step in (-3600.0, 0.0, 3600.0, 3600.0, -7200.0):
        clock.t += step
        mono[0] += 1.0
        seen.append(tso.now())
        if step > 0:
            assert physical_ms(seen[-1]) == int(clock.t * 1000)
    assert all(x < y for x, y in zip(seen, seen[1:])), seen
    assert physical_ms(seen[1]) == physical_ms(seen[0])  # set back: same ms, logical counts on


def test_reserve_above_and_advance_past(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock, max_clock_skew=DAY)
    t = tso.now()
    assert tso.reserve(3, above=t + 10) == t + 11  # inside the held batch: skipped ahead
    far = compose_ts(int(T0 * 1000) + 10**7)  # 2.8 h ahead: within the bound
    lo = tso.reserve(5, above=far)
    assert lo == far + 1 and mark_of(kv) == lo + BATCH_SIZE
    start = mono[0]
    tso.advance_past(far + 10**6)
    assert mono[0] - start >= alloc.BATCH_MAX_AGE and mark_of(kv) == far + 10**6 + 1
    assert tso.now() > far + 10**6


def test_advance_past_below_the_mark_writes_nothing_but_still_waits(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock)
    t = tso.now()
    n, start = kv.txns, mono[0]
    tso.advance_past(t)
    assert kv.txns == n and mono[0] - start >= alloc.BATCH_MAX_AGE
    assert tso.now() > t


def test_old_format_value_is_read_and_rewritten(mono):
    kv, clock = FakeKV(), Clock(T0 - 3600)  # the old mark is an hour ahead of this clock
    kv.put_raw("k", "1763934000250")
    ts = TSO(kv, "k", clock=clock, max_clock_skew=DAY).now()
    assert ts == compose_ts(1763934000250)
    assert kv.data["k"].value == f"v2:{ts + BATCH_SIZE}".encode()


def test_process_floor_orders_tso_objects_with_different_clocks(mono):
    """Different clocks: separate batches, still ordered within the process (the
    process-wide floor), at the price of a CAS whenever the other one went ahead."""
    kv = FakeKV()
    a, b = TSO(kv, "k", clock=Clock()), TSO(kv, "k", clock=Clock(T0 - 3600), max_clock_skew=DAY)
    seen = []
    for _ in range(50):
        seen += [a.now(), b.now(), b.now(), a.now()]
    assert all(x < y for x, y in zip(seen, seen[1:]))


def test_a_clock_behind_the_mark_by_more_than_max_clock_skew_refuses_and_writes_nothing(mono):
    """Issue 26 #8: the mark is the fastest writer's clock; a process more than
    max_clock_skew behind it refuses (naming both clocks) instead of issuing timestamps
    that lead its clock by that much. Within the bound it stalls, logical counting on."""
    kv, clock = FakeKV(), Clock()
    fast = TSO(kv.process(), "k", clock=Clock(T0 + 600), max_clock_skew=700)
    fast.now()
    mark = mark_of(kv)
    tso = TSO(kv, "k", clock=clock, max_clock_skew=5)
    rev = kv.s.rev
    with pytest.raises(ClockSkewError, match=r"600\.0 s ahead of this process's clock .*max_clock_skew is 5 s"):
        tso.now()
    with pytest.raises(ClockSkewError, match="advance_past"):
        tso.advance_past(compose_ts(int((T0 + 6) * 1000)))
    assert kv.s.rev == rev and mark_of(kv) == mark   # nothing written
    clock.t += 596                    # 4 s behind the mark: within the bound
    mono[0] += 1.0
    assert physical_ms(tso.now()) == int((T0 + 600) * 1000)
    tso.advance_past(compose_ts(int((T0 + 600.5) * 1000)))  # 4.5 s ahead: allowed


@pytest.mark.parametrize("bad", [0.5, 0, -1, math.nan, math.inf, True, "5", 2 * DAY])
def test_max_clock_skew_is_range_checked(bad):
    kv = FakeKV()
    with pytest.raises(ValidationError, match="max_clock_skew"):
        TSO(kv, "k", clock=Clock(), max_clock_skew=bad)
    assert kv.txns == kv.gets == 0


def test_a_forked_child_drops_the_parents_batch(mono):
    kv, clock = FakeKV(), Clock()
    tso = TSO(kv, "k", clock=clock)
    first = tso.now()
    alloc._after_fork_in_child()  # what os.register_at_fork runs in a child
    n = kv.txns
    assert tso.now() >= first + BATCH_SIZE and kv.txns > n  # a batch of its own


@pytest.mark.parametrize("call", [
    lambda t: t.reserve(0), lambda t: t.reserve(-1), lambda t: t.reserve((1 << LOGICAL_BITS) + 1),
    lambda t: t.reserve(True), lambda t: t.reserve(2.0), lambda t: t.reserve(math.nan),
    lambda t: t.reserve("3"), lambda t: t.reserve(1, above=-1), lambda t: t.reserve(1, above=True),
    lambda t: t.reserve(1, above=1.5), lambda t: t.reserve(1, above=math.nan),
    lambda t: t.reserve(1, above=1 << 63), lambda t: t.advance_past(-1), lambda t: t.advance_past(False),
    lambda t: t.advance_past(math.inf), lambda t: t.advance_past(None), lambda t: t.advance_past(1 << 63),
])
def test_bad_arguments_are_refused_before_any_etcd_access(call, mono):
    kv = FakeKV()
    with pytest.raises(ValidationError):
        call(TSO(kv, "k", clock=Clock()))
    assert kv.txns == kv.gets == 0


def test_numpy_integers_are_accepted(mono):
    np = pytest.importorskip("numpy")
    tso = TSO(FakeKV(), "k", clock=Clock())
    assert tso.reserve(np.int64(3), above=np.uint32(7)) > 7
