"""Judging a rate-limited copy by its own run, not by seconds alone.

A limit's correctness is one-sided: the copy is never faster than the limit allows (a
slower machine only makes it slower, so that bound never flakes). "Not slower than it
needs to be" depends on the machine: it is judged against the same copy measured
unthrottled in the same test, so the bound grows with a loaded machine instead of
failing on it."""

from __future__ import annotations

import time


def timed(fn, *args, **kwargs):
    """(fn's result, seconds it took by time.monotonic)."""
    t = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - t


def assert_paced(took: float, want: float, unthrottled: float) -> None:
    """`took` seconds for a copy whose limit asks for `want` seconds (its bytes or
    requests over the rate, less the burst), which takes `unthrottled` seconds here
    without a limit: at least the limit's time (15% for the burst's rounding), and no
    more than the limit's time plus the work itself (the waits and the copying could
    at worst add up), with the same 15% and half a second of slack."""
    assert took >= want * 0.85, f"faster than the limit: {took:.2f} s for {want:.2f} s of budget"
    bound = (want + unthrottled) * 1.15 + 0.5
    assert took <= bound, (f"{took:.2f} s: more than the limit's {want:.2f} s plus the {unthrottled:.2f} s "
                           f"the copy takes unthrottled here (bound {bound:.2f} s)")
