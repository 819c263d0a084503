"""Id and timestamp allocation, both monotonic across restarts.

- IdAllocator: reserves blocks of ids with a compare-and-swap on `{root}/alloc/id`
  (value = the next unreserved id). A process hands out ids from its block; an unused
  remainder is simply skipped, never reissued.
- TSO: hybrid timestamps `physical_ms << 18 | logical` (compose_ts / physical_ms), from
  ONE global allocator state in etcd, `{root}/alloc/tso` (like Milvus's TSO, without a
  TSO server). The key holds the mark: the next unreserved timestamp, i.e. every
  timestamp ever reserved is below it. An allocator reserves a BATCH [lo, lo + n) by
  CAS, lo = max(mark, compose_ts(wall_ms), above + 1), new mark = lo + n, and hands the
  batch out locally (n = BATCH_SIZE, or more for a large reserve()).

  The mark advances by the counts actually reserved (whole batches, used or not), not
  by windows of wall time, so its physical part stays on the wall clock (the fastest
  one among the allocators): it runs ahead only while more than 2**18 timestamps are
  reserved per ms -- the logical part then carries into the next ms, the only way ahead
  of the clock -- or when a reserve(above=...) / advance_past(ts) asks for more. A wall
  clock set back stalls the physical part (the logical part counts on from the mark);
  set forward, the next batch follows it.

  Guarantee (BATCH_MAX_AGE = 0.05 s; a batch is used only while younger than that,
  age measured with time.monotonic from just before its CAS was sent, and only up to
  its size; then the next call reserves a new one):
  * every timestamp is issued once: batches never overlap, across processes, restarts
    and wall clocks set back or forward (the mark only grows);
  * a call (now / reserve) that begins more than BATCH_MAX_AGE after another call
    returned, in any process on any machine, returns larger timestamps than that call
    did (real time; each side measures only its own monotonic clock). Calls closer
    than that in two processes may come out in either order -- the price of not paying
    a round trip per timestamp. A caller that must come after what another process
    just wrote passes it as reserve(above=...) or takes the max with what it read;
  * within one process (per etcd endpoint list and key), timestamps strictly increase:
    a call that begins after another returned, in any thread and through any TSO
    object, returns larger ones; concurrent calls get distinct ones;
  * a new or restarted allocator's first batch is above everything reserved before;
  * a call that begins after advance_past(ts) returned, in any process, returns
    timestamps > ts.
  Timestamps from a batch may lag the wall clock by up to BATCH_MAX_AGE, never lead it
  by more than the carry above.

  The clock bound (max_clock_skew, config `max_clock_skew`, default 5 s): the mark
  follows the FASTEST clock that allocates, so one fast clock would drag every later
  timestamp ahead of real time, silently. No batch is reserved whose start
  (max(mark, wall, floor + 1)) leads this process's clock by more than max_clock_skew,
  and advance_past(ts) refuses a ts that does: ClockSkewError naming both times, raised
  before any CAS -- the mark is not moved and nothing is issued, so the guarantees above
  hold unchanged (a refusal only withholds timestamps). Hence every timestamp a process
  issues is within max_clock_skew of its own clock (plus the carry); a fast process
  still issues by its own clock, but every process with a right clock then refuses
  instead of following it (README: "When clocks disagree").
  ... and a fast clock is refused itself while the store is in use: every batch a clock
  reserves also puts `{key}.live` (in the mark's own CAS: no extra round trip), naming a
  lease of LIVE_TTL s the process grants anew at half its age (no key is attached to it:
  its running out writes nothing). While that lease is alive, some process reserved a
  batch by its clock within the last LIVE_GRACE s (a lease outlives its last grant by at
  most LIVE_TTL, and a new etcd leader renews every lease once more), so the mark is no
  older than that -- if that clock was right. A process whose clock leads the mark by
  more than max_clock_skew + LIVE_GRACE then finds it alive and is refused
  (ClockSkewError: this clock is fast); the mark is not moved. (Judged on a fresh read of the mark, and not
  when the key's last writer is this process's clock itself: it stepped forward, on a
  store no other clock reserved from since.) So one fast clock can drag the TSO at most
  max_clock_skew + LIVE_GRACE ahead of a store in use, and the right clocks wait at most
  that long. On a store idle for longer (the lease ran out) the first clock to allocate sets the
  mark: there is no other reference in etcd.

  In a process, TSO objects on the same etcd endpoints, key and clock share one batch
  (every Meta's: the clock is time.time); objects with other clocks (tests) have their
  own, ordered with the rest by a process-wide floor per key (a CAS whenever another
  went ahead). A forked child drops the batches it inherited.

  Format of the key: "v2:<decimal hybrid timestamp>" (the mark). The prefix makes an
  old allocator fail loudly on it rather than read a hybrid timestamp as milliseconds.
  The OLD format, a bare decimal physical-ms integer (e.g. "1763934000250": an upper
  bound on the physical part of every timestamp issued, exclusive), is read as
  compose_ts(value) -- above everything the old TSO issued -- and the next CAS writes
  the new format. Old and new allocators must not run side by side.
"""

from __future__ import annotations

import math
import numbers
import os
import threading
import time
import weakref
from datetime import datetime, timezone

from seglake import limits
from seglake.errors import ClockSkewError, Conflict, SeglakeError, ValidationError
from seglake.meta.kv import KV, KeyValue, Put, absent, unchanged

LOGICAL_BITS = 18
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
BATCH_MAX_AGE = 0.05  # seconds a reserved batch may be used (time.monotonic); see the module doc
BATCH_SIZE = 4096     # timestamps per CAS by default (a 2**18 logical space per ms)
MAX_COUNT = 1 << LOGICAL_BITS  # the most timestamps one reserve() hands out
TS_LIMIT = 1 << 63    # timestamps are int64 downstream
MARK_PREFIX = "v2:"   # the current format of the TSO key's value
CAS_ATTEMPTS = 1000
LIVE_TTL = 5          # seconds: the lease `{key}.live` names (see the module doc); granted anew at half its age
LIVE_GRACE = 2 * LIVE_TTL  # the longest a live key outlives the last batch reserved by a clock
MAX_CLOCK_SKEW = 5.0  # seconds; the default of config.Settings.max_clock_skew (see the module doc)
_monotonic, _sleep = time.monotonic, time.sleep  # module-level: tests replace them
FIRST_ID = 1


def compose_ts(physical_ms: int, logical: int = 0) -> int:
    return (physical_ms << LOGICAL_BITS) | logical


def physical_ms(ts: int) -> int:
    return ts >> LOGICAL_BITS


def ts_seconds(ts: int) -> float:
    return physical_ms(ts) / 1000.0


def encode_mark(mark: int) -> str:
    """The TSO key's value in the current format: "v2:<decimal hybrid timestamp>"."""
    return f"{MARK_PREFIX}{mark}"


def decode_mark(value: bytes | str, key: str = "tso") -> int:
    """The mark (a hybrid timestamp) from either format: "v2:<hybrid>", or the old bare
    decimal physical-ms integer, read as compose_ts(value)."""
    s = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    body, old = (s[len(MARK_PREFIX):], False) if s.startswith(MARK_PREFIX) else (s, True)
    if not (body.isascii() and body.isdigit()):
        raise SeglakeError(f"{key}: unreadable TSO mark {s[:64]!r}")
    return compose_ts(int(body)) if old else int(body)


def _int_or(value: bytes | str, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _utc(ms: int) -> str:
    """A physical part (ms since the epoch) as an ISO UTC time, for messages."""
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms since the epoch"


def _check_int(name: str, v, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise ValidationError(f"{name} must be an integer, not {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValidationError(f"{name} must be in {lo}..{hi}, not {v}")
    return v


# -- per-process TSO state ---------------------------------------------------------------
class _Batch:
    """A process's batch on one (etcd endpoints, key, clock), shared by every TSO object
    built on them (every Meta on the same etcd: the default clock is time.time)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.next = self.end = 0         # the batch: [next, end)
        self.born = -math.inf            # time.monotonic() taken before its CAS was sent
        self.cur: KeyValue | None = None  # the key as last seen (read or written) here
        self.live: tuple[int, float] | None = None  # (lease of the live key, monotonic time granted)
        self.token = f"{os.getpid()}-{os.urandom(6).hex()}"   # this batch's (process and clock's) live key puts


_state_lock = threading.Lock()
_batches: "weakref.WeakValueDictionary[tuple, _Batch]" = weakref.WeakValueDictionary()
_floors: dict[tuple, int] = {}  # (endpoints, key) -> the largest timestamp issued in this process


def _batch_for(scope: tuple) -> _Batch:
    with _state_lock:
        b = _batches.get(scope)
        if b is None:
            b = _batches[scope] = _Batch()
        return b


def _floor(scope: tuple) -> int:
    with _state_lock:
        return _floors.get(scope, -1)


def _raise_floor(scope: tuple, ts: int) -> None:
    with _state_lock:
        if ts > _floors.get(scope, -1):
            _floors[scope] = ts


def _after_fork_in_child() -> None:
    """A forked child must not hand out its parent's batch (duplicates): drop every
    batch; locks are new (one may have been held by a parent thread at the fork)."""
    global _state_lock
    _state_lock = threading.Lock()
    for b in list(_batches.values()):
        b.lock = threading.Lock()
        b.reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _cas_advance(kv: KV, key: str, advance) -> tuple[int, int]:
    """Atomically replace integer value `cur` by `advance(cur)`; return (cur, new)."""
    for _ in range(100):
        cur_kv = kv.get(key)
        cur = int(cur_kv.value) if cur_kv else None
        new = advance(cur)
        guard = unchanged(cur_kv) if cur_kv else absent(key)
        try:
            kv.txn([guard], [Put(key, str(new))])
            return (cur if cur is not None else 0), new
        except Conflict:
            continue
    raise Conflict(f"could not advance {key} after 100 attempts")


class IdAllocator:
    def __init__(self, kv: KV, key: str, block_size: int = 10000):
        self.kv, self.key, self.block_size = kv, key, block_size
        self._next = self._end = 0
        self._lock = threading.Lock()

    def allocate(self, n: int = 1) -> int:
        """First id of a fresh contiguous range of `n` ids."""
        if n < 1:
            raise ValueError("allocate at least one id")
        with self._lock:
            if self._end - self._next < n:
                size = max(n, self.block_size)
                cur, new = _cas_advance(self.kv, self.key, lambda c: (c or FIRST_ID) + size)
                self._next, self._end = new - size, new
            first = self._next
            self._next += n
            return first


class TSO:
    """Hybrid timestamps from the one global mark at `key`; see the module doc.

    `clock` (seconds, like time.time) is the wall clock; tests inject a fake one. TSO
    objects of one process on the same etcd endpoints, key and clock share one batch
    (they differ only in the KV client they call etcd with). `batch_size`: timestamps
    reserved per etcd write (more when a reserve() asks for more); unused ones are
    skipped, never reissued."""

    def __init__(self, kv: KV, key: str, clock=time.time, batch_size: int = BATCH_SIZE,
                 max_clock_skew: float = MAX_CLOCK_SKEW):
        self.kv, self.key, self.clock = kv, key, clock
        self.batch_size = _check_int("batch_size", batch_size, 1, MAX_COUNT)
        self.max_clock_skew = float(limits.check("max_clock_skew", "max_clock_skew", max_clock_skew))
        eps = getattr(kv, "endpoints", None)
        self._scope = (tuple(eps) if eps else id(kv), key)
        self._b = _batch_for((*self._scope, clock, self.batch_size, self.max_clock_skew))

    # -- the API -------------------------------------------------------------------
    def now(self) -> int:
        """One timestamp (the guarantee: see the module doc)."""
        return self._issue(1, 0)

    def reserve(self, count: int, above: int = 0, *, linearizable: bool = False) -> int:
        """The first of `count` consecutive timestamps [lo, lo + count), all strictly
        greater than `above`, issued like `now()` (same ordering guarantee), as one unit.
        `count` is an int in 1..2**18, `above` an int >= 0; else ValidationError, before
        any etcd access.

        linearizable=True: also greater than every timestamp ANY call in any process
        returned before this one began, at the cost of one etcd read: the mark read now
        bounds every timestamp issued so far; this process's batch serves only while it
        is the newest one reserved (its end >= that mark), else a new batch is reserved
        above the mark. (The WAL's commits use it, so an append acknowledged before
        another began has the smaller tick, on any pchannel.)"""
        count = _check_int("count", count, 1, MAX_COUNT)
        above = _check_int("above", above, 0, TS_LIMIT - 1 - count)
        return self._issue(count, above, fresh=linearizable)

    def advance_past(self, ts: int) -> None:
        """Make every timestamp reserved after this call returns, by any allocator in any
        process, greater than `ts`: CAS the global mark to >= ts + 1 (no write when it is
        already there), then wait BATCH_MAX_AGE (time.monotonic) before returning, so every
        batch reserved before the mark passed `ts` -- by anyone -- has expired. Calls
        already under way when this one returns are not covered. `ts` is an int >= 0;
        else ValidationError, before any etcd access."""
        ts = _check_int("ts", ts, 0, TS_LIMIT - 2)
        self.check_ahead(ts, f"advance_past({ts}): the timestamp")
        b = self._b
        with b.lock:
            cur = b.cur
            for _ in range(CAS_ATTEMPTS):
                if cur is not None and decode_mark(cur.value, self.key) > ts:
                    break
                try:
                    self._put_mark(cur, ts + 1)
                    break
                except Conflict:
                    cur = self.kv.get(self.key)
            else:
                raise Conflict(f"could not advance {self.key} past {ts} after {CAS_ATTEMPTS} attempts")
            t0 = _monotonic()
            b.next = b.end = 0  # this process's own batch: dropped at once
            _raise_floor(self._scope, ts)
        while (left := BATCH_MAX_AGE - (_monotonic() - t0)) > 0:
            _sleep(left)

    # -- internals -----------------------------------------------------------------
    def _issue(self, count: int, above: int, fresh: bool = False) -> int:
        b = self._b
        seen = self.kv.get(self.key) if fresh else None   # read after the call began
        mark = decode_mark(seen.value, self.key) if seen is not None else 0
        with b.lock:
            if seen is not None and (b.cur is None or seen.mod_revision > b.cur.mod_revision):
                b.cur = seen   # the CAS below starts from what was just read
            t_call = _monotonic()  # taken once the call runs: a batch born BATCH_MAX_AGE
            for _ in range(CAS_ATTEMPTS):  # or more before it is not used
                floor = max(above, _floor(self._scope))
                first = max(b.next, floor + 1)
                if first + count <= b.end and b.born > t_call - BATCH_MAX_AGE and b.end >= mark:
                    b.next = first + count
                    _raise_floor(self._scope, first + count - 1)
                    return first
                self._reserve_batch(count, floor)  # born >= t_call: fresh for this call
            raise Conflict(f"could not issue a timestamp from {self.key} after {CAS_ATTEMPTS} attempts")

    def _reserve_batch(self, count: int, floor: int) -> None:
        """CAS a new batch [lo, lo + size) with lo = max(mark, wall, floor + 1); the mark
        becomes lo + size. Under the batch's lock."""
        b, size = self._b, max(count, self.batch_size)
        lease = self._live_lease()   # (a grant's round trip, if one is due, before the batch's age starts)
        born = _monotonic()  # before the CAS is sent: the batch's age is never understated
        cur = b.cur  # optimistic: usually still current when this process is alone
        for _ in range(CAS_ATTEMPTS):
            mark = decode_mark(cur.value, self.key) if cur is not None else 0
            wall_ms = int(self.clock() * 1000)
            lo = max(mark, compose_ts(wall_ms), floor + 1)
            self._check_skew(lo, wall_ms, "the TSO")
            if cur is not None and (wall_ms - physical_ms(mark)) / 1000 > self.max_clock_skew + LIVE_GRACE:
                fresh = self.kv.get(self.key)   # the mark last seen here may be old: judge the current one
                if fresh is not None and fresh.mod_revision != cur.mod_revision:
                    cur = fresh
                    continue
                self._check_not_fast(mark, wall_ms)
            if lo + size > TS_LIMIT:
                raise SeglakeError(f"{self.key}: timestamp {lo + size} would exceed 2**63")
            try:
                self._put_mark(cur, lo + size, live=(wall_ms, lease))
            except Conflict:  # another allocator reserved meanwhile: re-read, go above it
                cur = self.kv.get(self.key)
                continue
            b.next, b.end, b.born = lo, lo + size, born
            return
        raise Conflict(f"could not reserve timestamps on {self.key} after {CAS_ATTEMPTS} attempts")

    def vouch(self) -> tuple[float, float]:
        """(this process's clock, the store's clock as its mark last recorded it), in seconds,
        without issuing or writing anything (a job that judges or stamps times -- GC, a
        compaction commit -- must not move the mark: a fast clock on an idle store would then
        hold every right clock back). ClockSkewError when this clock leads the mark by more
        than max_clock_skew + LIVE_GRACE while the store is in use: what a reservation by it
        would refuse. One etcd read (two more only when it leads by that much)."""
        cur = self.kv.get(self.key)
        mark = decode_mark(cur.value, self.key) if cur is not None else 0
        wall_ms = int(self.clock() * 1000)
        if cur is not None and (wall_ms - physical_ms(mark)) / 1000 > self.max_clock_skew + LIVE_GRACE:
            self._check_not_fast(mark, wall_ms)
        return wall_ms / 1000, physical_ms(mark) / 1000

    def check_ahead(self, ts: int, what: str = "the timestamp") -> None:
        """ClockSkewError when `ts` leads this process's clock by more than max_clock_skew
        (what advance_past(ts) would refuse): for a caller that must refuse a value, e.g. a
        bundle's max_ts, before it writes anything. No etcd access."""
        self._check_skew(ts, int(self.clock() * 1000), what)

    def _check_skew(self, ts: int, wall_ms: int, what: str) -> None:
        """ClockSkewError when `ts` leads this process's clock (`wall_ms`) by more than
        max_clock_skew: this clock is slow, or another writer's fast clock (or a value from
        elsewhere) moved the TSO; either way, a timestamp issued now would not mean now."""
        ahead = (physical_ms(ts) - wall_ms) / 1000
        if ahead > self.max_clock_skew:
            raise ClockSkewError(
                f"{self.key}: {what} is at {_utc(physical_ms(ts))}, {ahead:.1f} s ahead of this process's "
                f"clock ({_utc(wall_ms)}); max_clock_skew is {self.max_clock_skew:g} s. Either this clock is "
                "slow or a writer with a fast clock moved the TSO: fix the clocks (NTP); nothing is issued "
                "until they agree within max_clock_skew")

    def _check_not_fast(self, mark: int, wall_ms: int) -> None:
        """ClockSkewError when the store is in use (the lease the live key names is alive: a
        batch was reserved by a clock within LIVE_GRACE s) while this clock leads the mark by
        more than max_clock_skew + LIVE_GRACE: this clock is fast (module doc). Two etcd
        reads, only when this clock leads the mark by that much."""
        live = self.kv.get(f"{self.key}.live")
        if live is None or not hasattr(self.kv, "lease_ttl"):
            return   # never in use by a clock since this rule: no reference but the mark
        writer_ms, writer, lease = (live.value.decode(errors="replace").split(" ") + ["", "", ""])[:3]
        if writer == self._b.token:
            return   # put last by this very clock: it stepped forward itself, nobody else's mark
        if _int_or(lease, 0) <= 0 or self.kv.lease_ttl(int(lease)) <= 0:
            return   # idle: the lease ran out (no reservation by a clock within LIVE_GRACE s)
        ahead = (wall_ms - physical_ms(mark)) / 1000
        raise ClockSkewError(
            f"{self.key}: this process's clock ({_utc(wall_ms)}) leads the TSO ({_utc(physical_ms(mark))}) by "
            f"{ahead:.1f} s while the store is in use (a timestamp was reserved within the last {LIVE_GRACE} s, "
            f"by a clock then at {_utc(_int_or(writer_ms, 0))}); max_clock_skew is {self.max_clock_skew:g} s "
            f"(+{LIVE_GRACE} s for the store's last reservation): this clock is fast, or the one keeping the store "
            "in use is slow. Fix the clocks (NTP); nothing is issued by this one, the TSO is not moved")

    def _live_lease(self) -> int | None:
        """This clock's live lease, granted anew at half its TTL (None: a KV without leases,
        e.g. a test's). No key is attached to it: its running out deletes nothing (no etcd
        revision), the live key only names it."""
        grant = getattr(self.kv, "grant_lease", None)
        if grant is None:
            return None
        b, now = self._b, _monotonic()
        if b.live is None or now - b.live[1] > LIVE_TTL / 2:
            b.live = (grant(LIVE_TTL), now)
        return b.live[0]

    def _put_mark(self, cur: KeyValue | None, mark: int, live: tuple[int, int | None] | None = None) -> None:
        """CAS the mark from `cur` (None: absent) to `mark`, in the current format; `live`
        (a batch reserved by this clock: its wall ms and its live lease): the live key too,
        "<wall ms> <clock token> <lease id>", in the same txn."""
        value = encode_mark(mark)
        ops = [Put(self.key, value)]
        if live is not None and live[1] is not None:
            ops.append(Put(f"{self.key}.live", f"{live[0]} {self._b.token} {live[1]}"))
        rev = self.kv.txn([unchanged(cur) if cur is not None else absent(self.key)], ops)
        self._b.cur = KeyValue(self.key, value.encode(), rev,
                               cur.create_revision if cur is not None else rev,
                               cur.version + 1 if cur is not None else 1)
