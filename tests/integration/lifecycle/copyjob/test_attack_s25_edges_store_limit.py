"""atk-s25-edges F13: a typo in the store-wide copy limit (`seglake jobs limit
--max-mib-per-second 0.0000001`, in range: 0 .. 953674) blocked every copy job, export and
import of the store for good, even after the limit was corrected or removed and set again:
the first request at the tiny rate moved the shared clock in etcd ({root}/copy/store_throttle)
centuries ahead, and that clock stayed ("the store-wide clock stays"). A change of the
store's limit now starts its clock afresh (at most one BURST more), so a corrected limit
applies to the runs that start afterwards. Fake clock and sleep: no timing."""

from __future__ import annotations

from seglake.throttle import BURST, for_run, set_store_limit

MiB = 1 << 20
NOW = 1_800_000_000.0


def _run(meta, key: str, sleeps: list):
    return for_run(meta, key, 0, 0, clock=lambda: NOW, sleep=sleeps.append)


def test_a_corrected_store_limit_is_not_stuck_behind_the_typo(meta):
    set_store_limit(meta, 0.0000001 * MiB, 0)     # the typo: about 0.1 B/s
    typo: list = []
    _run(meta, "copy/throttle/typo", typo).acquire(64 * MiB)   # one segment file's request
    assert typo and typo[0] > 10 * 365 * 86400      # the shared clock is now years ahead
    set_store_limit(meta, 100 * MiB, 0)            # the operator corrects it
    fixed: list = []
    waited = _run(meta, "copy/throttle/next", fixed).acquire(1 * MiB)
    assert waited <= 1 * MiB / (100 * MiB) + BURST, fixed   # at the corrected rate, not years


def test_removing_and_setting_the_limit_again_starts_afresh(meta):
    set_store_limit(meta, 1, 0)                    # 1 B/s
    _run(meta, "copy/throttle/a", []).acquire(10 * MiB)
    set_store_limit(meta, 0, 0)                    # removed ...
    set_store_limit(meta, 50 * MiB, 0)             # ... and set again
    sleeps: list = []
    assert _run(meta, "copy/throttle/b", sleeps).acquire(MiB) <= 1 / 50 + BURST, sleeps


def test_an_unchanged_limit_keeps_its_clock(meta):
    """Setting the same limit again is no change: runs in flight keep their shared budget."""
    set_store_limit(meta, 1 * MiB, 0)
    _run(meta, "copy/throttle/c", []).acquire(10 * MiB)
    set_store_limit(meta, 1 * MiB, 0)
    sleeps: list = []
    assert _run(meta, "copy/throttle/d", sleeps).acquire(1 * MiB) >= 10 - BURST, sleeps
