"""as_of at the edges of ISO-8601 / RFC 3339 and the TSO (issue 30 item 6, attack-pitr2):
each accepted form gives the last TSO of its millisecond in UTC; each refused one is a
ValidationError before anything is read."""

from __future__ import annotations

import pytest

from seglake.errors import ValidationError
from seglake.lifecycle.pitr.instants import parse_as_of
from seglake.meta.alloc import LOGICAL_MASK, compose_ts

MS = 1764290400123   # 2025-11-28T00:40:00.123Z


@pytest.mark.parametrize("text", ["2025-11-28T00:40:00.123Z", "2025-11-28T06:10:00.123+05:30",
                                  "2025-11-27T23:40:00.123-01:00", "2025-11-28T00:40:00.123-00:00",
                                  "2025-11-28T00:40:00.123456789Z", "2025-11-28T00:40:00.1239999Z",
                                  "2025-11-28 00:40:00.123Z", "2025-11-28t00:40:00.123z",
                                  "2025-11-28T00:40:00.123+0000", str(compose_ts(MS, LOGICAL_MASK))])
def test_the_same_millisecond_in_every_form(text):
    assert parse_as_of(text) == compose_ts(MS, LOGICAL_MASK)


@pytest.mark.parametrize("text", ["2025-11-28T24:00:00Z", "2025-11-28T00:40:60Z", "2025-02-29T00:00:00Z",
                                  "2025-11-28T00:40:00+24:00", "2025-11-28T00:40:00,5Z", "2025-11-28T00:40:00",
                                  "2000-01-01T00:00:00+01:00", "2999-12-31T23:30:00-01:00", "0470765050533511180",
                                  "nan", "NaN", "inf", "1970-01-01T00:00:00Z", "3000-01-01T00:00:00Z"])
def test_refused(text):
    with pytest.raises(ValidationError):
        parse_as_of(text)


@pytest.mark.parametrize("bad", ["2026-11-28T03:30:41+24:00", "2026-11-28T03:30:41-25:00", "2026-11-28T03:30:41+05:60",
                                 "2026-11-28T03:30:41+9959"])
def test_an_offset_out_of_range_is_named_without_python_internals(bad):
    """'+24:00' said: offset must be a timedelta strictly between -timedelta(hours=24) and
    timedelta(hours=24), not datetime.timedelta(days=1)."""
    with pytest.raises(ValidationError) as e:
        parse_as_of(bad)
    msg = str(e.value)
    assert "timedelta" not in msg and "time zone offset" in msg and "-23:59 .. +23:59" in msg and repr(bad) in msg


def test_the_largest_offsets_are_taken():
    assert parse_as_of("2026-11-28T03:30:41+23:59") < parse_as_of("2026-11-28T03:30:41-23:59")


@pytest.mark.parametrize("text, unit", [("1795836482", "unix seconds (2026-11-28T03:28:02Z)"),
                                        ("1795836482123", "unix milliseconds (2026-11-28T03:28:02Z)")])
def test_a_unix_time_is_said_to_be_one(text, unit):
    """`--as-of $(date +%s)` said only 'is in the year 1970': it reads as a TSO."""
    with pytest.raises(ValidationError) as e:
        parse_as_of(text)
    assert f"not {unit}" in str(e.value) and "ISO-8601" in str(e.value)


@pytest.mark.parametrize("text", ["5", "123456789012345", "99999999999999999"])
def test_other_small_integers_are_refused_as_before(text):
    with pytest.raises(ValidationError, match=r"is in the year 19\d\d: not an instant") as e:
        parse_as_of(text)
    assert "unix" not in str(e.value)
