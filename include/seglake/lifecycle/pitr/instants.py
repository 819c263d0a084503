"""An instant of a point-in-time restore (`as_of`): an ISO-8601 time WITH a time zone, or
a TSO timestamp (the one global clock, seglake.meta.alloc: physical ms << 18 | logical).

- ISO-8601 -> TSO: the last timestamp of that millisecond (compose_ts(ms, LOGICAL_MASK)),
  so "as of 12:00:00.250Z" includes every write stamped in that millisecond; finer digits
  are cut to the millisecond.
- TSO -> ISO-8601: `describe` (UTC, milliseconds, and the logical part).
- Refused, naming the input, before anything is read: a time without a time zone, NaN or
  any float, a bool, text that is neither, a year outside MIN_YEAR..MAX_YEAR, a TSO at or
  above 2**63. Whether the instant is in the future, before the collection existed or
  outside its window is judged by the plan (planning.py), which knows the clock."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from seglake.errors import ValidationError
from seglake.meta.alloc import LOGICAL_BITS, LOGICAL_MASK, TS_LIMIT, compose_ts, physical_ms

MIN_YEAR, MAX_YEAR = 2000, 2999     # no TSO of seglake is outside (1970 or 3000: a typo or an attack)
_TSO_RE = re.compile(r"[1-9][0-9]{0,18}", re.ASCII)
_ISO_RE = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})", re.ASCII)


def parse_as_of(value) -> int:
    """The TSO timestamp of `value` (an int TSO, its decimal text, or ISO-8601 with a zone)."""
    if isinstance(value, bool) or isinstance(value, float):
        raise ValidationError(f"as_of must be an ISO-8601 time with a time zone or a TSO integer, got {value!r}")
    if isinstance(value, int):
        return _check_tso(value, repr(value))
    if not isinstance(value, str) or len(value) > 64:
        raise ValidationError(f"as_of must be an ISO-8601 time with a time zone or a TSO integer, "
                              f"got {type(value).__name__}")
    text = value.strip().upper()   # RFC 3339 allows a lowercase t and z
    if _TSO_RE.fullmatch(text):
        return _check_tso(int(text), repr(value))
    if not _ISO_RE.fullmatch(text):
        zone = "" if re.search(r"(Z|[+-]\d{2}:?\d{2})$", text) else " (a time zone is required: Z or +hh:mm)"
        raise ValidationError(f"as_of {value!r} is neither an ISO-8601 time with a time zone nor a TSO "
                              f"integer{zone}, e.g. 2026-11-27T12:00:00Z")
    iso = re.sub(r"(\.\d{6})\d+", r"\1", text.replace(" ", "T", 1))   # fromisoformat: at most 6 digits
    off = re.search(r"([+-])(\d{2}):?(\d{2})$", iso)
    if off and (int(off.group(2)) > 23 or int(off.group(3)) > 59):   # (Python's own words name timedelta)
        raise ValidationError(f"as_of {value!r}: the time zone offset {off.group(0)} is out of range: "
                              f"allowed: -23:59 .. +23:59, e.g. 2026-11-27T12:00:00+02:00")
    try:
        t = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError as e:
        raise ValidationError(f"as_of {value!r} is not a valid time: {e}") from None
    if t.tzinfo is None:
        raise ValidationError(f"as_of {value!r} has no time zone: say Z or +hh:mm")
    _check_year(t.astimezone(timezone.utc).year, value)
    ms = (t - datetime(1970, 1, 1, tzinfo=timezone.utc)) // _MS
    return compose_ts(ms, LOGICAL_MASK)


_MS = datetime.resolution * 1000   # one millisecond (timedelta)


def _check_tso(ts: int, shown: str) -> int:
    if not 0 < ts < TS_LIMIT:
        raise ValidationError(f"as_of {shown} is not a TSO timestamp (0 < ts < 2**63)")
    try:
        _check_year(datetime.fromtimestamp(physical_ms(ts) / 1000, timezone.utc).year, shown)
    except ValidationError as e:
        lo, hi = (datetime(y, 1, 1, tzinfo=timezone.utc).timestamp() for y in (MIN_YEAR, MAX_YEAR + 1))
        unix = next((f"unix {unit} ({datetime.fromtimestamp(ts / per, timezone.utc):%Y-%m-%dT%H:%M:%SZ})"
                     for unit, per in (("seconds", 1), ("milliseconds", 1000)) if lo <= ts / per < hi), None)
        if unix is None:
            raise
        raise ValidationError(f"{e}; an integer as_of is a TSO timestamp, not {unix}: write the time in ISO-8601 "
                              f"with a time zone, e.g. 2026-11-27T12:00:00Z") from None
    return ts


def _check_year(year: int, shown) -> None:
    if not MIN_YEAR <= year <= MAX_YEAR:
        raise ValidationError(f"as_of {shown} is in the year {year}: not an instant seglake has written "
                              f"(years {MIN_YEAR}..{MAX_YEAR})")


def describe(ts: int) -> str:
    """A TSO timestamp as ISO-8601 UTC with milliseconds, and its logical part."""
    t = datetime.fromtimestamp(physical_ms(ts) / 1000, timezone.utc)
    return f"{t.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} (tso {ts}, logical {ts & LOGICAL_MASK})"


def seconds_of(ts: int) -> float:
    return (ts >> LOGICAL_BITS) / 1000.0
