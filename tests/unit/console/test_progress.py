"""ProgressLog: the copy's progress line (counts, percent, rate of THIS run, ETA), at
most one per interval, driven by an injected clock (no sleeping)."""

import math

import pytest

from seglake.progress import ProgressLog, human_bytes, human_seconds


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_one_line_per_interval_with_counts_rate_and_eta():
    clock, out = Clock(), []
    p = ProgressLog("copy job 7", {"segments": 10, "files": 400, "bytes": 4 << 20}, interval=5,
                    clock=clock, emit=out.append)
    clock.t += 4.9
    assert p.update({"segments": 1, "files": 40, "bytes": 1 << 20}) is None   # not due yet
    clock.t += 0.1
    line = p.update({"segments": 3, "files": 120, "bytes": 1 << 20})
    assert line == "copy job 7: 3/10 segments, 120/400 files, 1.0 MiB/4.0 MiB (25.0%), 204.8 KiB/s, ETA 15 s"
    clock.t += 1
    assert p.update({"segments": 4, "files": 160, "bytes": 2 << 20}) is None   # 1 s after the last line
    final = p.update({"segments": 10, "files": 400, "bytes": 4 << 20}, final=True)
    assert final.endswith("4.0 MiB/4.0 MiB (100.0%), 682.7 KiB/s (done)") and "ETA" not in final
    assert out == [line, final]


def test_rate_counts_only_this_run_and_nothing_is_shown_before_a_byte_moved():
    clock, out = Clock(), []
    p = ProgressLog("j", {"segments": 2, "files": 2, "bytes": 1000}, interval=1, clock=clock,
                    emit=out.append, start={"bytes": 900})   # a resumed job: 900 bytes copied before
    clock.t += 1
    assert p.update({"segments": 1, "files": 1, "bytes": 900}) == "j: 1/2 segments, 1/2 files, 900 B/1000 B (90.0%)"
    clock.t += 1
    assert p.update({"bytes": 950}).endswith("950 B/1000 B (95.0%), 25 B/s, ETA 2 s")


def test_empty_totals_and_bad_intervals():
    p = ProgressLog("j", {}, interval=1, clock=Clock(), emit=lambda s: None)
    assert p.update({}, final=True) == "j: 0/0 segments, 0/0 files, 0 B/0 B (done)"
    for bad in (0, -1, math.nan, math.inf, "5"):
        with pytest.raises(ValueError):
            ProgressLog("j", {}, interval=bad)


def test_human_units():
    assert human_bytes(0) == "0 B" and human_bytes(1536) == "1.5 KiB" and human_bytes(5 << 40) == "5.0 TiB"
    assert human_seconds(59.4) == "59 s" and human_seconds(61) == "1 min 01 s" and human_seconds(7260) == "2 h 01 min"


def test_the_rate_is_the_recent_one_and_a_stall_is_named_not_timed_out():
    """Issue 27 item 2: a copy stuck at the same bytes says "stalled for N s" (no growing
    ETA); the rate is over the recent window; a count never goes back (a resume)."""
    from seglake.progress import RATE_WINDOW_S, STALL_AFTER_S

    clock, out = Clock(), []
    p = ProgressLog("j", {"segments": 4, "files": 40, "bytes": 100_000}, interval=1, clock=clock, emit=out.append)
    for _ in range(20):   # 100 B/s for 20 s
        clock.t += 1
        line = p.update({"segments": 1, "files": 10, "bytes": p.shown["bytes"] + 100})
    assert line.endswith("2.0 KiB/97.7 KiB (2.0%), 100 B/s, ETA 16 min 20 s"), line
    for _ in range(int(RATE_WINDOW_S)):   # then 1000 B/s: the window shows it at once, not the average
        clock.t += 1
        line = p.update({"bytes": p.shown["bytes"] + 1000})
    assert ", 1000 B/s, ETA " in line, line
    stuck = p.shown["bytes"]
    clock.t += STALL_AFTER_S - 1
    assert "stalled" not in p.update({"bytes": stuck})
    clock.t += 1
    assert p.update({"bytes": stuck}).endswith(f"stalled for {human_seconds(STALL_AFTER_S)}")
    clock.t += 40
    line = p.update({"bytes": stuck})
    assert line.endswith(f"stalled for {human_seconds(STALL_AFTER_S + 40)}") and "ETA" not in line, line
    # a resumed attempt recounts from less: the line does not go back
    clock.t += 1
    line = p.update({"segments": 0, "files": 2, "bytes": 1000})
    assert line.startswith(f"j: 1/4 segments, 10/40 files, {human_bytes(stuck)}/"), line
