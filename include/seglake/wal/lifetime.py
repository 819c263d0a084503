"""The WAL lifetime of one pchannel on this process (wal_lifetime.go).

States are (term, available) pairs, totally ordered:

    (-1,false) -> (0,true) -> (1,true) -> (2,true) -> (3,false) -> (7,true) -> ...
    a before b  <=>  a.term < b.term  or  (same term and a available, b not)

- open(term) / remove(term) set the EXPECTED state; a state not after the current
  expectation is ignored with ExpiredTerm ("expired term"), nothing changes.
- One background thread moves the CURRENT state towards the expected one, serially:
  close the current writer first (always applied, even when the caller that asked has
  gone: its cancel only stops its own wait), then, if the expectation is available,
  open a writer at the expected term. A failed open sets (term, false, error): final
  for that term (a waiter of that term gets the error, a retry needs a newer term).
- A waiter returns when the current state is not before its expectation: the error of
  its term, ExpiredTerm if a newer term overtook it, or the writer.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from seglake.errors import SeglakeError


class ExpiredTerm(SeglakeError):
    """The requested term is older than what this lifetime already expects or holds."""


class Cancelled(SeglakeError):
    """The caller stopped waiting (its cancel event fired or its timeout passed)."""


@dataclass(frozen=True)
class State:
    term: int
    available: bool
    wal: Any = None
    error: BaseException | None = None

    def __str__(self) -> str:
        return f"({self.term},{str(self.available).lower()})"


INITIAL = State(-1, False)


def is_before(a: State, b: State) -> bool:
    return a.term < b.term or (a.term == b.term and a.available and not b.available)


class WalLifetime:
    def __init__(self, opener: Callable[[int], Any], channel: str):
        self.opener, self.channel = opener, channel
        self._cond = threading.Condition()
        self.expected = INITIAL
        self.current = INITIAL
        self._closing = False
        self.history: list[str] = []   # every current state reached, for tests and logs
        self._thread = threading.Thread(target=self._background, name=f"wal-lifetime-{channel}", daemon=True)
        self._thread.start()

    # -- requests --------------------------------------------------------------------------
    def open(self, term: int, *, timeout: float | None = None, cancel: threading.Event | None = None):
        """Expect (term, available); wait until reached. Returns the writer."""
        self._expect(State(term, True), f"channel {self.channel} with expired term {term}, cannot open")
        st = self._wait(State(term, True), timeout, cancel)
        return st.wal

    def remove(self, term: int, *, timeout: float | None = None, cancel: threading.Event | None = None) -> None:
        """Expect (term, unavailable); wait until reached."""
        self._expect(State(term, False), f"channel {self.channel}: expired term {term}, cannot remove")
        self._wait(State(term, False), timeout, cancel)

    def get_wal(self):
        with self._cond:
            return self.current.wal

    def close(self) -> None:
        """Stop the background thread, then close the current writer if any."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        wal = self.current.wal
        if wal is not None:
            wal.close()

    # -- state pair --------------------------------------------------------------------------
    def _expect(self, e: State, msg: str) -> None:
        with self._cond:
            if not is_before(self.expected, e):
                raise ExpiredTerm(f"{msg} (expected state already {self.expected})")
            self.expected = e
            self._cond.notify_all()

    def _set_current(self, s: State) -> None:
        with self._cond:
            if is_before(self.current, s):
                self.current = s
                self.history.append(str(s))
            self._cond.notify_all()

    def _wait(self, e: State, timeout: float | None, cancel: threading.Event | None) -> State:
        if cancel is not None and cancel.is_set():
            raise Cancelled(f"channel {self.channel}: request for {e} cancelled")
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while is_before(self.current, e):
                if cancel is not None and cancel.is_set():
                    raise Cancelled(f"channel {self.channel}: request for {e} cancelled")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise Cancelled(f"channel {self.channel}: {e} not reached in {timeout} s")
                self._cond.wait(0.05 if left is None else min(left, 0.05))
            cur = self.current
        if cur.term > e.term:
            raise ExpiredTerm(f"channel {self.channel}: request term {e.term} is expired, current term {cur.term}")
        if cur.error is not None:
            raise cur.error
        return cur

    # -- background ---------------------------------------------------------------------------
    def _background(self) -> None:
        seen = INITIAL
        while True:
            with self._cond:
                while (self.expected.term, self.expected.available) == (seen.term, seen.available) \
                        and not self._closing:
                    self._cond.wait()
                if self._closing:
                    return
                seen = self.expected
            self._step(seen)

    def _step(self, e: State) -> None:
        cur = self.current
        if not is_before(cur, e):
            return  # e.g. remove at a term whose open failed: nothing to do
        # close the current writer first; applied whatever happened to the requester
        if cur.wal is not None:
            try:
                cur.wal.close()
            finally:
                self._set_current(State(cur.term, False))
        if not e.available:
            self._set_current(State(e.term, False))
            return
        try:
            wal = self.opener(e.term)
        except BaseException as err:  # noqa: BLE001 - kept as the term's final state
            self._set_current(State(e.term, False, None, err))
            return
        self._set_current(State(e.term, True, wal))


def writer_opener(meta, store, pchannel: str, settings, **kw) -> Callable[[int], Any]:
    """An opener for WalLifetime that takes the pchannel at exactly the given term."""
    from seglake.wal.writer import WalWriter

    return lambda term: WalWriter.open(meta, store, pchannel, settings, term=term, **kw)
