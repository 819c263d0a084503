"""One rate limit shared by every runner of a copy job (issue 19 item 6): bytes per second
and requests per second, across threads, processes and Spark executors.

The limit is a virtual clock in etcd, `{root}/copy/throttle/{job_id}` (GCRA, the
"generic cell rate algorithm"): the time until which the job's budget is spent. A runner
about to copy `n` bytes in one request takes the slot [start, start + cost) with
start = max(clock, now) and cost = max(n / bytes_per_second, 1 / requests_per_second),
by one compare-and-swap of the clock, then waits until now >= start + cost - BURST. So
the job as a whole moves at most `bytes_per_second` (and `requests_per_second`) plus a
burst of BURST seconds' worth, whoever runs it, and a runner never waits for another's
slot. Runners' wall clocks should agree to well under a second (NTP).

Each Throttle measures what it did (bytes, requests, seconds waited, effective rate) for
the runner's log. 0 means unlimited; then acquire() touches nothing.

Besides a run's own limit, a store may have ONE limit shared by all its copy work (copy
jobs, exports, imports, every runner of each): `set_store_limit(meta, bps, rps)` records
it in etcd ({root}/copy/store_limit); `for_run(meta, key, bps, rps)` builds a run's
Throttle that also takes every request's cost from the store's clock
({root}/copy/store_throttle), so the store's copy traffic as a whole stays under it,
however many runs there are.
"""

from __future__ import annotations

import threading
import time

from seglake import limits
from seglake.errors import Conflict
from seglake.meta.kv import KeyValue, Put, absent, unchanged

BURST = 0.25          # seconds of budget a job may use at once (its first files start at once)
CAS_ATTEMPTS = 1000


def check_rates(max_bytes_per_second, max_requests_per_second) -> tuple[float, float]:
    """The two limits, checked (finite, 0..1e12 B/s and 0..1e6 req/s; 0 = unlimited)."""
    return (float(limits.check("copy_max_bytes_per_second", "max_bytes_per_second", max_bytes_per_second)),
            float(limits.check("copy_max_requests_per_second", "max_requests_per_second", max_requests_per_second)))


class Throttle:
    def __init__(self, kv, key: str, bytes_per_second: float = 0.0, requests_per_second: float = 0.0,
                 clock=time.time, sleep=time.sleep, shared: "Throttle | None" = None):
        self.kv, self.key = kv, key
        self.bps, self.rps = check_rates(bytes_per_second, requests_per_second)
        self.clock, self.sleep = clock, sleep
        self.shared = shared if shared is not None and shared.limited else None   # the store's limit
        self._lock = threading.Lock()
        self._cur: KeyValue | None = None   # the clock as last seen here (optimistic CAS)
        self.bytes = self.requests = 0
        self.waited = 0.0
        self.started: float | None = None

    @property
    def limited(self) -> bool:
        """This run's own limit is set (its etcd clock exists)."""
        return bool(self.bps or self.rps)

    @property
    def bounded(self) -> bool:
        """Any limit applies: this run's own, or the store's shared one."""
        return self.limited or self.shared is not None

    def acquire(self, nbytes: int, requests: int = 1) -> float:
        """Take the budget for `requests` requests moving `nbytes`, waiting as long as the
        job's rate says, then as long as the store's shared limit says. Returns the
        seconds waited."""
        waited = self._acquire(nbytes, requests)
        if self.shared is not None:
            waited += self.shared.acquire(nbytes, requests)
        return waited

    def _acquire(self, nbytes: int, requests: int) -> float:
        if not self.limited:
            if self.shared is not None:   # counted for the report (the store's limit paces it)
                with self._lock:
                    self.started = self.clock() if self.started is None else self.started
                    self.bytes += nbytes
                    self.requests += requests
            return 0.0
        cost = max(nbytes / self.bps if self.bps else 0.0, requests / self.rps if self.rps else 0.0)
        with self._lock:
            cur = self._cur
            for _ in range(CAS_ATTEMPTS):
                now = self.clock()
                spent = float(cur.value) if cur is not None else 0.0
                start = max(spent, now)
                new = f"{start + cost:.6f}"
                try:
                    rev = self.kv.txn([unchanged(cur) if cur is not None else absent(self.key)],
                                      [Put(self.key, new)])
                except Conflict:
                    cur = self.kv.get(self.key)
                    continue
                self._cur = KeyValue(self.key, new.encode(), rev, cur.create_revision if cur else rev,
                                     (cur.version if cur else 0) + 1)
                break
            else:
                raise Conflict(f"copy throttle {self.key}: {CAS_ATTEMPTS} lost races in a row")
            self.started = now if self.started is None else self.started
            self.bytes += nbytes
            self.requests += requests
        return self._wait_until(start + cost)

    def _wait_until(self, end: float) -> float:
        """Sleep until `end` less the burst allowance; the seconds waited (counted)."""
        wait = end - BURST - self.clock()
        if wait > 0:
            self.sleep(wait)
            with self._lock:
                self.waited += wait
        return max(0.0, wait)

    def report(self) -> dict:
        """What this runner moved under the limit: bytes, requests, seconds waited, and
        its effective rates since its first acquire."""
        el = max(1e-9, self.clock() - self.started) if self.started is not None else 0.0
        out = {"limit_bytes_per_second": self.bps, "limit_requests_per_second": self.rps,
               "bytes": self.bytes, "requests": self.requests, "waited_s": round(self.waited, 3),
               "bytes_per_second": round(self.bytes / el, 1) if el else 0.0,
               "requests_per_second": round(self.requests / el, 2) if el else 0.0}
        if self.shared is not None:
            out["store_limit_bytes_per_second"] = self.shared.bps
            out["store_limit_requests_per_second"] = self.shared.rps
            out["store_waited_s"] = round(self.shared.waited, 3)
        return out


    def local(self) -> "LocalThrottle":
        """This run's limits (the tighter of its own and the store's shared one) kept in
        this process: for what a run reads before it may write anything (an import's
        check of a bundle refuses with no etcd write, also when limited). Its bytes are
        not counted against the store's shared clock."""
        def tighter(a: float, b: float) -> float:
            return min(x for x in (a, b) if x) if (a or b) else 0.0
        sb, sr = (self.shared.bps, self.shared.rps) if self.shared is not None else (0.0, 0.0)
        return LocalThrottle(tighter(self.bps, sb), tighter(self.rps, sr), self.clock, self.sleep)


class LocalThrottle(Throttle):
    """A Throttle whose clock is in this process (no etcd key, no etcd write)."""

    def __init__(self, bytes_per_second: float = 0.0, requests_per_second: float = 0.0, clock=time.time,
                 sleep=time.sleep):
        super().__init__(None, "", bytes_per_second, requests_per_second, clock, sleep)
        self._spent = 0.0

    def _acquire(self, nbytes: int, requests: int) -> float:
        if not self.limited:
            return 0.0
        cost = max(nbytes / self.bps if self.bps else 0.0, requests / self.rps if self.rps else 0.0)
        with self._lock:
            now = self.clock()
            start = max(self._spent, now)
            self._spent = start + cost
            self.started = now if self.started is None else self.started
            self.bytes += nbytes
            self.requests += requests
        return self._wait_until(start + cost)


# -- the store's shared limit ---------------------------------------------------------------
def store_limit(meta) -> tuple[float, float]:
    """(bytes/s, requests/s) of the store-wide copy limit; (0, 0): none."""
    kv = meta.kv.get(meta.keys.copy_store_limit())
    if kv is None:
        return 0.0, 0.0
    from seglake.meta import codec
    doc = codec.loads(kv.value, kv.key)
    return check_rates(doc.get("max_bytes_per_second", 0), doc.get("max_requests_per_second", 0))


def set_store_limit(meta, max_bytes_per_second, max_requests_per_second=0) -> tuple[float, float]:
    """Set (0, 0: remove) the limit shared by ALL copy work of this store, checked first.
    Runs that start afterwards obey it. A change starts the shared clock afresh, in the same
    transaction: a clock run ahead at the old rate (a typo, 0.0000001 MiB/s, put it years
    ahead) would otherwise hold every later run behind it whatever the new limit says."""
    import json

    from seglake.meta.kv import Delete

    bps, rps = check_rates(max_bytes_per_second, max_requests_per_second)
    ops = [Put(meta.keys.copy_store_limit(), json.dumps({"max_bytes_per_second": bps, "max_requests_per_second": rps}))
           if bps or rps else Delete(meta.keys.copy_store_limit())]
    if store_limit(meta) != (bps, rps):
        ops.append(Delete(meta.keys.copy_store_throttle()))
    meta.kv.txn([], ops)
    return bps, rps


def for_run(meta, key: str, bytes_per_second: float = 0.0, requests_per_second: float = 0.0,
            clock=time.time, sleep=time.sleep) -> Throttle:
    """A run's Throttle (its own limit, clock `key`), under the store's shared limit
    when one is set (read once, here)."""
    bps, rps = store_limit(meta)
    shared = Throttle(meta.kv, meta.keys.copy_store_throttle(), bps, rps, clock, sleep) if bps or rps else None
    return Throttle(meta.kv, key, bytes_per_second, requests_per_second, clock, sleep, shared=shared)


def human_rate(value: float, unit: str) -> str:
    """'8.0 MiB/s', '20 req/s', 'unlimited' (0)."""
    if not value:
        return f"unlimited {unit}"
    if unit == "B/s":
        from seglake.progress import human_bytes
        return f"{human_bytes(value)}/s"
    return f"{value:g} {unit}"


STALE_CLOCK = 3600.0   # a run's clock not advanced past now - this is no live run's (GC removes it)


def remove_stale_clocks(meta, now: float | None = None) -> int:
    """Delete the run clocks (copy jobs', exports', imports', captures') whose budget ran out
    over STALE_CLOCK seconds ago: their runs ended without deleting them (a SIGKILL). A run
    still using one meets the delete as a lost compare-and-swap and starts a fresh clock (at
    most one BURST more), so removing it is always safe. Each delete is guarded by the
    value read. The store-wide clock stays (set_store_limit starts it afresh when the limit
    changes). Returns how many were removed."""
    from seglake.meta.kv import Delete, unchanged

    now = time.time() if now is None else now
    removed = 0
    for prefix in meta.keys.run_throttle_prefixes():
        for kv in list(meta.kv.range(prefix)):
            try:
                spent = float(kv.value)
            except ValueError:
                spent = 0.0          # not a clock this module wrote: no run can be using it
            if spent < now - STALE_CLOCK:
                try:
                    meta.kv.txn([unchanged(kv)], [Delete(kv.key)])
                    removed += 1
                except Conflict:     # a run advanced it meanwhile: live
                    pass
    return removed

