"""A producer's identity on the WAL: its record, its holder, its call numbers (issue 26).

    call = a client call (insert, delete, ...); seq = call << CALL_BITS | append index
    record  {root}/wal_index/{pchannel}/producers/{id}   per pchannel; a named id's has no lease,
                                                         a fresh id's lives on its holder's lease
        calls: {call: {d: payload digest, done: [[lo, hi], ...] appends committed,
                       n: [first, last] log places, t0: an upsert's or a delete's one timestamp,
                       u: t0 is an upsert's, plan: an upsert's appends per pchannel}}
        floor: calls at or below it are no longer remembered (refused)
        tt: the last commit's tick; w: the retry window of the holder that wrote it
    claim   {root}/wal_producer_owners/{id}              a named id's newest holder, leased
    numbers {root}/wal_producer_numbers/{id}             the call numbers its holder may hand out (reserved
                                                         under the claim; a new holder numbers above them)

Rules (wal/writer.py enforces them in its commit transaction):
- an append is committed at most once: a retry is answered from the record, only when
  its payload digest is its call's (another payload under a used seq is refused);
- the record keeps the MAX_CALLS highest-numbered calls, whole: a call of any size and
  calls committed out of number order are remembered; a lower one is refused;
- one live holder per named id: the newest claim fences the older holder;
- a named id's records outlive every lease: they go only by wal.log.expire_producers,
  which judges a record idle (two windows since its last commit) by a linearizable TSO
  tick, so the TSO mark is past that instant BEFORE the record goes. A client-numbered
  call carries its time, and one older than the window that no record remembers is
  refused, judged at commit by the commit's own linearizable tick (WalWriter._refusal): once a record is
  gone, no clock (slow, set back, an idle store's) can make its calls young again. A
  record holding calls the caller numbered (below 2**40: they carry no time) is shrunk to
  its floor instead of removed. Claims (and a fresh id's records: known to one client,
  removed at its close) expire by themselves on the holder's lease.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

from seglake.errors import Conflict, SeglakeError, StateError
from seglake.meta import keys as keymod
from seglake.meta.codec import decode, encode
from seglake.meta.kv import KeyValue, Put, absent, unchanged

# A sequence number is (call << CALL_BITS) | index: the index-th append of a call. The
# producer record remembers whole calls (every append of them, however many), the
# MAX_CALLS highest-numbered ones; a lower call it no longer remembers is refused.
CALL_BITS = 20
INDEX_MASK = (1 << CALL_BITS) - 1
MAX_CALLS = 64
# Calls the client numbers itself carry their time: CLOCK_BASE + ms since CLOCK_EPOCH_MS
# by now_ms (below CLOCK_BASE: numbers a caller chose, e.g. its own op ids).
CLOCK_BASE = 1 << 40
CLOCK_EPOCH_MS = 1_577_836_800_000      # 2020-01-01T00:00:00Z
MAX_CALL = 1 << 42                       # a seq stays below 2**62
MAX_CALL_LEAD_MS = 10_000                # a call number runs at most this far ahead of its time
FRESH_WINDOW = 600.0      # retry window of a producer id no other process knows (a fresh one)


class ProducerFenced(StateError):
    """Another client claimed this producer id after this one: this client appends
    nothing more (what it had committed stays; retry the call from a new client)."""


def payload_digest(messages, bodies=None) -> str:
    """A digest of what an append writes (types, addresses, props, bodies), never of the
    ids a retry may draw afresh (txn ids): the same payload retried has the same digest."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for i, m in enumerate(messages):
        props = {k: v for k, v in sorted(m.props.items())}
        h.update(repr((m.type, m.vchannel, m.collection_id, m.partition_id, props)).encode())
        h.update(m.body_bytes() if bodies is None else bodies[i])
    return h.hexdigest()


def now_ms(tso, clock=time.time) -> int:
    """The time calls are numbered and judged by: the wall clock, or the TSO when ahead."""
    from seglake.meta.alloc import physical_ms
    return max(int(clock() * 1000), physical_ms(tso.now()))


def clock_call(tso, last: int = 0, clock=time.time) -> int:
    """A call number above `last` that carries its time (now_ms). Calls faster than one
    per ms run ahead of the clock, by at most MAX_CALL_LEAD_MS (beyond it this waits):
    the retry window, judged by the number, is never stretched by more."""
    while True:
        now = now_ms(tso, clock)
        call = max(last + 1, call_at(now))
        if call_ms(call) <= now + MAX_CALL_LEAD_MS:
            return call
        time.sleep(0.001)


def future_call(call: int, now: int, max_clock_skew: float) -> str:
    """Why `call` cannot be a call numbered by its time ('' if it can): a number at or
    above CLOCK_BASE reads as the time it was made, and one made ahead of `now` (unix
    ms) by more than a client's lead (MAX_CALL_LEAD_MS) and the clocks' bound
    (max_clock_skew) was never numbered by a client: it is a caller's own number (a
    unix time in ms, an op id) in the clock's range. Such a number would never grow
    older than the retry window, so once its record expired a retry of it would be
    appended again: it is refused at its first use."""
    made = call_ms(call)
    if made is None or made <= now + MAX_CALL_LEAD_MS + int(max_clock_skew * 1000):
        return ""
    import datetime as _dt

    at = _dt.datetime.fromtimestamp(made / 1000, _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") \
        if made < 253402300800000 else f"{made} ms after 1970"
    return (f"seq {call} reads as a call numbered at {at}, ahead of now: numbers from {CLOCK_BASE} (2**40) "
            f"on carry the time the client made them; choose your own below 2**40 (or let the client number "
            f"the call)")


def call_at(ms: int) -> int:
    """The clock-numbered call made at unix time `ms` (call_ms's inverse)."""
    return CLOCK_BASE + ms - CLOCK_EPOCH_MS


def call_ms(call: int) -> int | None:
    """The time (unix ms) a clock-numbered call was made; None for a caller's number."""
    return call - CLOCK_BASE + CLOCK_EPOCH_MS if call >= CLOCK_BASE else None


class Holder:
    """What one client holds for its producer id: the lease its producer records live on
    (they expire by themselves, `window` to 2 x `window` after the last commit), and,
    for a named id, the claim: `{root}/wal_producer_owners/{id}` written by the
    newest holder, compared by every commit, so an older holder is fenced (refused,
    never answered with another process's commits). A fresh (random) id is known to
    no other process: nothing to claim, and a short window."""

    def __init__(self, meta, producer_id: str, settings, *, named: bool, name: str = ""):
        self.meta, self.producer_id, self.named = meta, producer_id, named
        self.window = float(settings.wal_producer_expiry) if named else min(FRESH_WINDOW,
                                                                            settings.wal_producer_expiry)
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.key = keymod.wal_producer_owner(meta.keys, producer_id)
        self.token = uuid.uuid4().hex
        self.kv: KeyValue | None = None
        self.fenced: ProducerFenced | None = None
        self._lease: tuple[int, float] | None = None
        self._lock = threading.RLock()
        self._running: set[int] = set()   # calls of this holder's client still running
        if named:
            self._claim()

    def lease(self) -> int:
        """The lease (ttl 2 x window), refreshed when half a window old: a record put on
        it lives at least 1.5 x window after that commit."""
        with self._lock:
            now = time.monotonic()
            if self._lease is not None and now - self._lease[1] > self.window / 2:
                try:
                    self.meta.kv.refresh_lease(self._lease[0])
                    self._lease = (self._lease[0], now)
                except SeglakeError:
                    self._lease = None
            if self._lease is None:
                self._lease = (self.meta.kv.grant_lease(int(2 * self.window) + 1), now)
            return self._lease[0]

    def record_lease(self) -> int | None:
        """The lease a producer record is put on: none for a named id (its records outlive
        the holder and go by expire_producers, which moves the TSO past their age first:
        a lease ran out on etcd's clock, and a retry judged by a slow clock against an idle
        store's old mark was young again, appended twice); the holder's for a fresh one.
        (Called at every commit: the holder's lease, which its claim lives on, is refreshed
        here when half a window old either way.)"""
        lease = self.lease()
        return None if self.named else lease

    def running(self, call: int, on: bool) -> None:
        """A call of several appends starts (on) or ends: while it runs the producer
        record never evicts it (Holder.live())."""
        with self._lock:
            (self._running.add if on else self._running.discard)(call)

    def live(self) -> frozenset:
        with self._lock:
            return frozenset(self._running)

    def forget_lease(self) -> None:
        with self._lock:
            self._lease = None

    def guards(self) -> list:
        if not self.named:
            return []
        with self._lock:
            if self.fenced is not None:
                raise self.fenced
            return [unchanged(self.kv)]

    def _claim(self) -> None:
        """Put the claim: the newest holder wins, any older one is fenced at its next commit."""
        value = encode({"token": self.token, "name": self.name, "at": time.time()})
        lease = self.lease()
        rev = self.meta.kv.put(self.key, value, lease=lease)
        self.kv = KeyValue(self.key, value, rev, rev, 1, lease)

    def check(self) -> None:
        """After a lost compare: still the holder (the claim's lease ran out: claim again
        when no one else did), or fenced for good."""
        if not self.named:
            return
        with self._lock:
            if self.fenced is not None:
                raise self.fenced
            kv = self.meta.kv.get(self.key)
            if kv is not None and decode(kv.value, kv.key).get("token") == self.token:
                self.kv = kv
                return
            if kv is None:
                try:
                    self.meta.kv.txn([absent(self.key)], [Put(self.key, encode(
                        {"token": self.token, "name": self.name, "at": time.time()}), self.lease())])
                    self.kv = self.meta.kv.get(self.key)
                    return
                except Conflict:
                    kv = self.meta.kv.get(self.key)
            other = decode(kv.value, kv.key) if kv is not None else {}
            self.fenced = ProducerFenced(
                f"producer id {self.producer_id!r} was claimed by {other.get('name', '?')} after this client "
                f"({self.name}): this client is fenced and appends nothing more (a lost race is never "
                f"answered with another holder's commit); retry the call from a new client with "
                f"seq=err.result.seq (the error of a client call carries it)")
            raise self.fenced


def _record(kv: KeyValue | None) -> dict:
    """A producer record: {"calls": {call: {"d": payload digest, "done": [[lo, hi], ...]
    appends committed, "n": [first, last] log places}}, "floor": calls at or below it are
    no longer remembered, "seq", "name", "tt"}. A record of the older format (its last
    64 appends) is read as a floor above all its calls: their retries are refused."""
    if kv is None:
        return {"calls": {}, "floor": 0, "seq": 0}
    d = decode(kv.value, kv.key)
    if "calls" not in d:
        return {"calls": {}, "floor": d.get("seq", 0) >> CALL_BITS, "seq": d.get("seq", 0), "tt": d.get("tt")}
    return d


def _remember(prod: dict, reqs: list, n: int, name: str, tt: int, running: frozenset = frozenset(),
              window: float | None = None, first_ticks: dict | None = None) -> dict:
    """The record after `reqs` committed at log place n: each append's index in its
    call's ranges, the MAX_CALLS highest calls kept (the floor rises past the others:
    by number, never by arrival, so calls committed out of order are all remembered).
    Calls still running (`running`, and those of `reqs`) are never evicted: a call
    outnumbered while it runs goes on."""
    calls = {c: {**e, "done": [list(x) for x in e["done"]], "n": list(e["n"])} for c, e in prod["calls"].items()}
    for r in reqs:
        e = calls.setdefault(str(r.seq >> CALL_BITS), {"d": r.digest, "done": [], "n": [n, n]})
        e["done"] = _add_to_ranges(e["done"], r.seq & INDEX_MASK)
        t0 = next((m.props["upsert_ts"] for m in r.messages if m.props.get("upsert_ts")), None)
        if not t0 and first_ticks and any(m.props.get("plan") for m in r.messages):
            # an upsert's first append (wal/client.py: one message carrying the call's plan,
            # no timestamp given; a txn's upserts take their bodies' ticks and carry none):
            # its tick is the call's one timestamp, held by this record from this commit on
            t0 = first_ticks.get(r.seq)
        if t0 and "t0" not in e:   # an upsert's or a delete's one timestamp: its retries keep it
            e["t0"], e["u"] = t0, any(m.props.get("upsert") for m in r.messages)
        plan = next((m.props["plan"] for m in r.messages if m.props.get("plan")), None)
        if plan and "plan" not in e:   # an upsert's appends per pchannel (its first carries them)
            e["plan"] = plan
        e["n"] = [min(e["n"][0], n), max(e["n"][1], n)]
    floor = prod["floor"]
    keep = set(running) | {r.seq >> CALL_BITS for r in reqs}
    evictable = [c for c in sorted(calls, key=int) if int(c) not in keep]
    for c in evictable[:max(0, len(calls) - MAX_CALLS)]:
        floor = max(floor, int(c))
        del calls[c]
    out = {"calls": calls, "floor": floor, "seq": max(prod["seq"], *(r.seq for r in reqs)), "name": name, "tt": tt}
    if window is not None:
        out["w"] = max(float(window), float(prod.get("w") or 0))
    return out



def _in_ranges(ranges: list, i: int) -> bool:
    return any(lo <= i <= hi for lo, hi in ranges)


def _add_to_ranges(ranges: list, i: int) -> list:
    """Sorted disjoint [lo, hi] ranges with i added (adjacent ranges merged)."""
    out = sorted([*ranges, [i, i]])
    merged: list = []
    for lo, hi in out:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    return merged
