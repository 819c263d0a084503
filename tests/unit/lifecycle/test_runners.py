"""The one inline runner and the one engine choice (seglake.runners)."""

import operator
import os
import threading
import time

import pytest

from seglake import runners
from seglake.errors import ValidationError


class _S:
    inline_threshold_bytes = 100
    gc_inline_max_files = 10
    snapshot_inline_max_segments = 5


def test_choose_auto_goes_by_the_kinds_threshold_and_explicit_engines_win():
    assert runners.choose("copy", "auto", 99, _S) == "inline"
    assert runners.choose("copy", "auto", 100, _S) == "spark"
    assert runners.choose("gc", "auto", 9, _S) == "inline"
    assert runners.choose("gc", "spark", 0, _S) == "spark"
    assert runners.choose("gc", "inline", 10**9, _S) == "inline"
    with pytest.raises(ValidationError):
        runners.choose("gc", "Spark", 0, _S)
    with pytest.raises(ValueError):
        runners.choose("compact", "auto", 0, _S)


def test_threads_keep_unit_order_and_bound_the_pool():
    seen, lock, live = set(), threading.Lock(), [0, 0]

    def fn(u):
        with lock:
            live[0] += 1
            live[1] = max(live[1], live[0])
            seen.add(threading.get_ident())
        try:
            return u * 2
        finally:
            with lock:
                live[0] -= 1
    assert list(runners.run_inline(fn, range(50), workers=3)) == [u * 2 for u in range(50)]
    assert live[1] <= 3 and len(seen) <= 3


def test_one_worker_runs_serially_in_this_thread_with_the_check_before_each_unit():
    calls = []
    me = threading.get_ident()
    out = list(runners.run_inline(lambda u: (u, threading.get_ident() == me), [1, 2], workers=1,
                                  before_each=lambda: calls.append("check")))
    assert out == [(1, True), (2, True)] and calls == ["check", "check"]


def test_a_failing_unit_raises_at_its_turn():
    def fn(u):
        if u == 3:
            raise RuntimeError("unit 3")
        return u
    it = runners.run_inline(fn, range(6), workers=2)
    assert [next(it), next(it), next(it)] == [0, 1, 2]
    with pytest.raises(RuntimeError, match="unit 3"):
        next(it)


def test_process_pool_runs_units_in_other_processes():
    assert list(runners.run_inline(operator.neg, [1, 2, 3], workers=2, pool="process")) == [-1, -2, -3]
    pids = set(runners.run_inline(_pid, [0, 1, 2, 3], workers=2, pool="process"))
    assert os.getpid() not in pids
    with pytest.raises(ValueError):
        list(runners.run_inline(operator.neg, [1], workers=1, pool="fork"))


def _pid(_):
    return os.getpid()


def test_split_deals_round_robin_into_nonempty_shares():
    assert runners.split([1, 2, 3, 4, 5], 2) == [[1, 3, 5], [2, 4]]
    assert runners.split([1], 4) == [[1]]
    assert runners.split([], 3) == []


def test_a_slow_consumer_never_has_more_than_two_windows_of_units_in_flight():
    started, lock = [], threading.Lock()

    def fn(u):
        with lock:
            started.append(u)
        return u
    consumed = 0
    for r in runners.run_inline(fn, range(100), workers=3):
        consumed += 1
        time.sleep(0.002)   # the consumer is the slow side
        with lock:
            assert len(started) - consumed <= 2 * 3, (len(started), consumed)
    assert consumed == 100 and sorted(started) == list(range(100))


def test_copies_between_local_stores_get_at_most_a_thread_per_core(tmp_path, monkeypatch):
    """Local files are CPU- and kernel-bound: more threads than cores only contend (8
    threads exported 20,000 files in 5.5-6.1 s, 2 threads in 4.2-4.7 s on 2 cores); a
    remote store keeps its threads (each request waits on the network)."""
    from seglake.storage.local import LocalStore

    monkeypatch.setattr(runners.os, "cpu_count", lambda: 2)
    a, b = LocalStore(tmp_path / "a"), LocalStore(tmp_path / "b")
    assert runners.io_threads(8, a, b) == 2 and runners.io_threads(1, a, b) == 1
    remote = type("S3Like", (), {})()
    assert runners.io_threads(8, a, remote) == 8 and runners.io_threads(8) == 8
