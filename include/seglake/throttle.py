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

Two limits apply to every copy (`run_throttle`): the run's own (a copy job's, an
export's, an import's: `max_bytes_per_second` where asked) and the STORE's, one clock
`{root}/throttle/store/clock` shared by all copy work of the store at once, whatever
runs it, at the limits recorded in `{root}/throttle/store/limits` (`seglake throttle
set`; read when a run starts, so a new value applies to runs started after it). A copy
takes its slot on the run's clock, then on the store's.

Each Throttle measures what it did (bytes, requests, seconds waited, effective rate) for
the runner's log. 0 means unlimited; then acquire() touches nothing.
"""

from __future__ import annotations

import json
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
        self.shared = shared if shared is not None and shared.limited else None   # the store's limit
        self.bps, self.rps = check_rates(bytes_per_second, requests_per_second)
        self.clock, self.sleep = clock, sleep
        self._lock = threading.Lock()
        self._cur: KeyValue | None = None   # the clock as last seen here (optimistic CAS)
        self.bytes = self.requests = 0
        self.waited = 0.0
        self.started: float | None = None

    @property
    def limited(self) -> bool:
        return bool(self.bps or self.rps or self.shared)

    def acquire(self, nbytes: int, requests: int = 1) -> float:
        """Take the budget for `requests` requests moving `nbytes`, waiting as long as the
        run's rate says, then as long as the store's says. Returns the seconds waited."""
        if self.bps or self.rps:
            waited = self._acquire_own(nbytes, requests)
        else:
            waited = 0.0
            with self._lock:
                self.started = self.clock() if self.started is None else self.started
                self.bytes += nbytes
                self.requests += requests
        if self.shared is not None:
            w = self.shared.acquire(nbytes, requests)
            with self._lock:
                self.waited += w
            waited += w
        return waited

    def _acquire_own(self, nbytes: int, requests: int) -> float:
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
        wait = start + cost - BURST - self.clock()
        if wait > 0:
            self.sleep(wait)
            with self._lock:
                self.waited += wait
        return max(0.0, wait)

    def report(self) -> dict:
        """What this runner moved under the limit: bytes, requests, seconds waited, and
        its effective rates since its first acquire."""
        el = max(1e-9, self.clock() - self.started) if self.started is not None else 0.0
        shared = {"store_limit_bytes_per_second": self.shared.bps,
                  "store_limit_requests_per_second": self.shared.rps} if self.shared is not None else {}
        return {"limit_bytes_per_second": self.bps, "limit_requests_per_second": self.rps, **shared,
                "bytes": self.bytes, "requests": self.requests, "waited_s": round(self.waited, 3),
                "bytes_per_second": round(self.bytes / el, 1) if el else 0.0,
                "requests_per_second": round(self.requests / el, 2) if el else 0.0}


def store_limits(meta) -> tuple[float, float]:
    """(bytes/s, requests/s) every copy of this store shares; (0, 0) when none is set."""
    kv = meta.kv.get(meta.keys.store_throttle_limits())
    if kv is None:
        return 0.0, 0.0
    d = json.loads(kv.value)
    return check_rates(d.get("max_bytes_per_second", 0), d.get("max_requests_per_second", 0))


def set_store_limits(meta, max_bytes_per_second, max_requests_per_second) -> tuple[float, float]:
    """Record the store-wide limits (checked first; 0 = unlimited, both 0 removes them)."""
    bps, rps = check_rates(max_bytes_per_second, max_requests_per_second)
    key = meta.keys.store_throttle_limits()
    if bps or rps:
        meta.kv.put(key, json.dumps({"max_bytes_per_second": bps, "max_requests_per_second": rps}))
    else:
        meta.kv.delete(key)
    return bps, rps


def run_throttle(meta, key: str, bytes_per_second: float = 0.0, requests_per_second: float = 0.0) -> Throttle:
    """The throttle of one run (a copy job's runner, an export, an import): its own limit
    on its own clock `key`, and the store's shared limit on the store's clock."""
    sbps, srps = store_limits(meta)
    shared = Throttle(meta.kv, meta.keys.store_throttle(), sbps, srps) if (sbps or srps) else None
    return Throttle(meta.kv, key, bytes_per_second, requests_per_second, shared=shared)


def human_rate(value: float, unit: str) -> str:
    """'8.0 MiB/s', '20 req/s', 'unlimited' (0)."""
    if not value:
        return f"unlimited {unit}"
    if unit == "B/s":
        from seglake.progress import human_bytes
        return f"{human_bytes(value)}/s"
    return f"{value:g} {unit}"
