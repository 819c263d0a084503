"""The global TSO (issue 8 item 9): timestamps are ordered across allocators and
processes, whatever their wall clocks say. Real etcd."""

import subprocess
import sys
import threading
import time

import pytest

from seglake.meta import Meta
from seglake.meta.alloc import TSO, physical_ms
from seglake.meta.kv import KV

pytestmark = pytest.mark.etcd

HOUR_BACK = lambda: time.time() - 3600  # noqa: E731 - a clock set back an hour


def test_two_metas_taking_turns_stay_ordered_with_one_clock_set_back(settings):
    with Meta.from_settings(settings) as a, Meta.from_settings(settings) as b:
        tb = TSO(b.kv, b.keys.alloc_tso(), clock=HOUR_BACK)
        a.tso.now(), tb.now()  # both hold a window before the interleaving starts
        seen = []
        for _ in range(20):
            seen += [a.tso.now(), tb.now(), a.tso.now(), a.tso.now(), tb.now()]
    assert all(x < y for x, y in zip(seen, seen[1:])), seen


def test_a_clock_going_back_mid_run_never_goes_back_in_ts(settings, root_prefix):
    t = [time.time()]
    with KV.from_settings(settings) as kv:
        tso = TSO(kv, f"{root_prefix}/alloc/tso", clock=lambda: t[0])
        seen = [tso.now()]
        for step in (-10.0, 0.0, 0.0, -3600.0, 0.5, 7200.0, -7200.0):
            t[0] += step
            seen.append(tso.now())
    assert all(x < y for x, y in zip(seen, seen[1:])), seen


def test_calls_that_do_not_overlap_are_ordered_across_threads_and_clocks(settings, root_prefix):
    """Linearizable: a call that starts after another returned gets a larger ts,
    even with four allocators whose clocks disagree by hours."""
    key, calls, errors = f"{root_prefix}/alloc/tso", [], []
    lock, ready = threading.Lock(), threading.Barrier(4)

    def worker(offset):
        try:
            with KV.from_settings(settings) as kv:
                tso = TSO(kv, key, clock=lambda: time.time() + offset)
                ready.wait(timeout=20)  # every allocator exists before anyone issues
                for _ in range(40):
                    time.sleep(0.001)  # let the others take turns
                    start = time.monotonic()
                    ts = tso.now()
                    end = time.monotonic()
                    with lock:
                        calls.append((start, end, ts))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(off,)) for off in (0, -3600, -60, -5)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len({ts for _, _, ts in calls}) == 160
    bad = [(x, y) for x in calls for y in calls if x[1] < y[0] and not x[2] < y[2]]
    assert not bad, bad[:3]


_CHILD = """
import sys, time
from seglake.meta.alloc import TSO
from seglake.meta.kv import KV
kv = KV(sys.argv[1], root=sys.argv[2])
tso = TSO(kv, sys.argv[2] + "/alloc/tso", clock=lambda: time.time() - 3600)
for line in sys.stdin:
    print(tso.now(), flush=True)
"""


def test_two_processes_taking_turns_stay_ordered(settings, root_prefix):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, settings.etcd_endpoint, root_prefix],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        with KV.from_settings(settings) as kv:
            mine = TSO(kv, f"{root_prefix}/alloc/tso")
            seen = []
            for _ in range(15):
                seen.append(mine.now())
                child.stdin.write("go\n")
                child.stdin.flush()
                seen.append(int(child.stdout.readline()))
    finally:
        child.stdin.close()
        child.wait(timeout=20)
    assert all(x < y for x, y in zip(seen, seen[1:])), seen


def test_turns_slower_than_the_window_stay_on_the_wall_clock(settings, root_prefix):
    """The mark moves ahead of the wall only by the window of the last reservation."""
    t = [time.time()]
    with KV.from_settings(settings) as kv:
        a, b = (TSO(kv, f"{root_prefix}/alloc/tso", clock=lambda: t[0]) for _ in range(2))
        for _ in range(20):
            t[0] += 1.0
            a.now()
            t[0] += 1.0
            ts = b.now()
            assert 0 <= physical_ms(ts) - int(t[0] * 1000) <= 1
        t[0] += 0.1
        assert physical_ms(b.now()) == int(t[0] * 1000)  # b's own window: no CAS, wall time
