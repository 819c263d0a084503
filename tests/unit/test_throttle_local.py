"""Throttle.local(): a run's own limit paced in-process (no etcd at all), for the reads an
import makes before it may write anything (adversary s20 F9: each paced chunk of the
check was a guarded etcd txn, 67 revisions before a damaged bundle was refused)."""

from seglake.throttle import BURST, Throttle


class NoKV:
    def __getattr__(self, name):
        raise AssertionError(f"local() touched etcd: {name}")


def test_local_paces_at_the_runs_own_rate_without_etcd():
    t = [100.0]
    slept = []

    def sleep(s):
        slept.append(s)
        t[0] += s
    run = Throttle(NoKV(), "k", bytes_per_second=1000.0, clock=lambda: t[0], sleep=sleep)
    local = run.local()
    for _ in range(5):
        local.acquire(1000, 0)            # 5 s of budget at 1000 B/s
    assert abs(t[0] - (100.0 + 5.0 - BURST)) < 1e-6 and slept
    assert local.report()["bytes"] == 5000
    assert not Throttle(NoKV(), "k").local().limited   # no limit: nothing paced
    assert Throttle(NoKV(), "k").local().acquire(10**9) == 0.0
