"""The retention plan (lifecycle/retention.py), pure: a simulated clock over 90 days of
hourly runs keeps exactly what the GFS policy says, checked against an expectation
written out by hand with calendar arithmetic (not with the code under test)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from seglake.errors import ValidationError
from seglake.lifecycle import retention as R

START = datetime(2026, 1, 1, 0, 0, tzinfo=timezone.utc)   # a Thursday


def _simulate(policy: R.Policy, hours: int, step: timedelta = timedelta(hours=1)) -> set[datetime]:
    """Hourly runs: create when due, prune what is not kept (never the last)."""
    have: dict[str, float] = {}
    t = START
    end = START + timedelta(hours=hours)
    while t < end:
        now = t.timestamp()
        if R.due(policy, have, now):
            have[R.sched_name(now)] = now
        kept = R.keep_set(policy, have)
        for n in list(have):
            if n not in kept and len(have) > 1:
                del have[n]
        t += step
    return {datetime.fromtimestamp(x, tz=timezone.utc) for x in have.values()}


_KEY = {"hourly": "%Y-%m-%d %H", "daily": "%Y-%m-%d", "weekly": "%G-W%V", "monthly": "%Y-%m"}


def _expected(policy: R.Policy, hours: int) -> set[datetime]:
    """By hand: the runs that took a snapshot (every hour, or the first run of each
    bucket of the finest unit kept), then, over ALL of them at once, the newest
    `keep_last`, and for each unit the newest of each of the newest `keep_<unit>` groups
    (grouped by strftime keys)."""
    finest = next((u for u in ("hourly", "daily", "weekly", "monthly") if getattr(policy, f"keep_{u}")), "hourly")
    taken, seen = [], set()
    for h in range(hours):
        t = START + timedelta(hours=h)
        if t.strftime(_KEY[finest]) not in seen:
            seen.add(t.strftime(_KEY[finest]))
            taken.append(t)
    out = set(sorted(taken)[-policy.keep_last:]) if policy.keep_last else set()
    for unit, fmt in _KEY.items():
        groups: dict[str, datetime] = {}
        for t in taken:
            groups[t.strftime(fmt)] = max(groups.get(t.strftime(fmt), t), t)
        newest = sorted(groups.values())[::-1][:getattr(policy, f"keep_{unit}")]
        out |= set(newest)
    return out


@pytest.mark.parametrize("policy", [
    R.Policy(keep_hourly=24, keep_daily=7, keep_weekly=4, keep_monthly=3),
    R.Policy(keep_last=5),
    R.Policy(keep_daily=10),
    R.Policy(keep_last=2, keep_weekly=5, keep_monthly=12),
    R.Policy(keep_hourly=1, keep_monthly=2),
])
def test_ninety_days_of_hourly_runs_keep_exactly_what_the_policy_says(policy):
    hours = 90 * 24
    got = _simulate(policy, hours)
    want = _expected(policy, hours)
    assert got == want, sorted(got ^ want)[:6]
    assert len(got) <= policy.keep_last + policy.keep_hourly + policy.keep_daily + policy.keep_weekly \
        + policy.keep_monthly


def test_due_follows_the_finest_unit():
    daily = R.Policy(keep_daily=3)
    t0 = START.timestamp()
    have = {R.sched_name(t0): t0}
    assert not R.due(daily, have, t0 + 3600 * 5)          # same day
    assert R.due(daily, have, t0 + 86400)                 # next day
    assert R.due(R.Policy(keep_last=1), have, t0 + 60)     # keep_last only: every run
    assert not R.due(R.Policy(keep_hourly=2, keep_daily=5), have, t0 + 59 * 60)


def test_names_round_trip_and_other_names_are_not_the_schedules():
    t = datetime(2026, 11, 24, 3, 7, 42, tzinfo=timezone.utc).timestamp()
    assert R.sched_name(t) == "sched_20261124T0307Z"
    assert R.sched_time("sched_20261124T0307Z") == t - 42
    for other in ("nightly", "sched_20261124T0307", "sched_20261324T0307Z", "xsched_20261124T0307Z",
                  "sched_20261124T0307Z\n"):
        assert R.sched_time(other) is None


@pytest.mark.parametrize("doc, words", [
    ({"keep_daily": -1}, "keep_daily"),
    ({"keep_daily": math.nan}, "keep_daily"),
    ({"keep_daily": math.inf}, "keep_daily"),
    ({"keep_daily": 1.5}, "keep_daily"),
    ({"keep_daily": "7"}, "keep_daily"),
    ({"keep_daily": True}, "keep_daily"),
    ({"keep_daily": 10**9}, "keep_daily"),
    ({"keep_dayly": 7}, "did you mean 'keep_daily'?"),
    ({}, "every count is 0"),
    ({"keep_last": 0}, "every count is 0"),
    ([("keep_last", 1)], "is an object"),
])
def test_bad_policies_are_refused_naming_the_key(doc, words):
    with pytest.raises(ValidationError, match="retention policy") as e:
        R.parse_policy(doc)
    assert words in str(e.value)
