"""The range of every number that crosses an edge, declared once.

Config keys (file, Variable, SEGLAKE_* env), DAG conf keys (Param form, REST), CLI flags
and the engine entry points (gc.pause, snapshot ttl, restore timeout) all check their
numbers here: finite, of the right kind (an integer where an id or a count is meant) and
within [minimum, maximum], or a ValidationError naming the key, before any side effect.
NaN must be refused explicitly: it compares false with every bound, so `x < floor`
lets it through. A negative zero (-0.0, which passes `>= 0`) is refused too: no limit
here goes below 0, and a sign on a zero is a typo or an attack, never a value. Numbers
written as text (environment variables, CLI flags; `Limit.parse`) are plain decimal
only: no sign, exponent, leading zero, padding, '_' or non-ASCII digits. JSON numbers
keep JSON's syntax (1e3 is 1000), through the same check. Durations are in seconds; a
form in hours scales the same Limit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from seglake.errors import ValidationError

HOUR = 3600.0
DAY = 86400.0
YEAR = 365 * DAY
ID_MAX = 2**63 - 1  # ids are int64 in etcd records, Parquet columns and Spark rows


@dataclass(frozen=True)
class Limit:
    minimum: float
    maximum: float
    integer: bool = False
    exclusive_minimum: bool = False
    unit: str = ""

    def check(self, key: str, value: Any, scale: float = 1.0) -> int | float:
        """`value` (in units of `scale`, e.g. hours) as a checked number in base units
        (seconds): refused when not a number, NaN, infinite, fractional for an integer
        key, or out of range. The message names `key` and the bounds in `key`'s units."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            kind = "an integer" if self.integer else "a number"
            raise ValidationError(f"{key}: expected {kind}, got {_show(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValidationError(f"{key}: {value!r} is not a finite number")
        if isinstance(value, float) and value == 0 and math.copysign(1.0, value) < 0:
            raise ValidationError(f"{key}: -0.0 (a negative zero) is not a valid value; write 0")
        if self.integer:
            if isinstance(value, float) and not value.is_integer():
                raise ValidationError(f"{key}: expected an integer, got {value!r}")
            value = int(value)
        lo, hi = self.bounds(scale)
        low_ok = value > lo if self.exclusive_minimum else value >= lo
        if not low_ok or value > hi:
            raise ValidationError(f"{key}: {value!r} is out of range, must be {self.describe(scale)}")
        base = value if scale == 1.0 else value * scale
        return int(base) if self.integer else float(base)

    def parse(self, key: str, text: str, scale: float = 1.0) -> int | float:
        """A number written as text (an environment variable, a CLI flag), checked as
        above and returned as written (not scaled). Plain decimal only: ASCII digits,
        one optional fraction for a non-integer limit, nothing else: no sign ('+5',
        '-0'), exponent ('1e3'), leading zero ('010'), '_', spaces, 'nan' or 'inf'."""
        pattern = _INTEGER_TEXT if self.integer else _DECIMAL_TEXT
        if not isinstance(text, str) or not pattern.fullmatch(text):
            kind = "an integer" if self.integer else "a finite number"
            raise ValidationError(f"{key}: {_show(text)} is not {kind} written in plain decimal digits "
                                  f"(e.g. {'10' if self.integer else '1.5'})")
        value = int(text) if self.integer else float(text)
        self.check(key, value, scale)
        return value

    def bounds(self, scale: float = 1.0) -> tuple[int | float, int | float]:
        """(minimum, maximum) in units of `scale`; exact for integers (2**63 - 1 is not
        a float: dividing would round it up to 2**63 and let 2**63 through)."""
        if scale == 1.0:
            return self.minimum, self.maximum
        return _num(self.minimum / scale), _num(self.maximum / scale)

    def describe(self, scale: float = 1.0) -> str:
        lo, hi = self.bounds(scale)
        return (f"{'>' if self.exclusive_minimum else '>='} {self._bound(lo, self.minimum, scale)} and "
                f"<= {self._bound(hi, self.maximum, scale)}")

    def _bound(self, shown: int | float, base: int | float, scale: float) -> str:
        """A bound as typed in the key's units; one whose scaled value is no short decimal
        (1 s in hours: 0.0002777777777777778) rounded, with its exact value in base units."""
        text = str(shown)
        if scale == 1.0 or len(text) <= 10:
            return text
        return f"{shown:.3g} ({_num(base)} {self.unit or 'base units'})"

    def schema(self, scale: float = 1.0) -> dict[str, Any]:
        """JSON-schema bounds for a Param. The `not` clause refuses NaN up front (before
        a run exists): NaN passes `minimum` and `maximum` alike, a real number never
        passes both of an empty interval. Infinity fails `maximum`/`minimum` already."""
        lo, hi = self.bounds(scale)
        out: dict[str, Any] = {"maximum": hi, "exclusiveMinimum" if self.exclusive_minimum else "minimum": lo}
        out["not"] = {"type": "number", "minimum": 1, "maximum": 0}
        return out


_INTEGER_TEXT = re.compile(r"0|[1-9][0-9]*", re.ASCII)
_DECIMAL_TEXT = re.compile(r"(?:0|[1-9][0-9]*)(?:\.[0-9]+)?", re.ASCII)


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _seconds(maximum: float, *, positive: bool = False) -> Limit:
    return Limit(0, maximum, exclusive_minimum=positive, unit="s")


def _count(minimum: int, maximum: int) -> Limit:
    return Limit(minimum, maximum, integer=True)


LIMITS: dict[str, Limit] = {
    # -- config keys (seglake.config.Settings): one entry per numeric key ----------------
    "etcd_timeout": _seconds(HOUR, positive=True),
    "etcd_retries": _count(0, 100),
    "missing_tolerance": _seconds(10 * YEAR),
    "drop_tolerance": _seconds(10 * YEAR),
    "copy_job_retention": _seconds(10 * YEAR),
    "snapshot_pending_timeout": _seconds(30 * DAY, positive=True),
    "copy_job_timeout": _seconds(7 * DAY, positive=True),
    # the GC safety floor can be raised, never lowered below an hour (a write in flight is
    # not yet referenced): tolerances below it need an explicit force on the run itself
    "tolerance_floor": Limit(HOUR, 10 * YEAR, unit="s"),
    "max_segments_per_task": _count(1, 100_000),
    "inline_threshold_bytes": _count(0, 2**50),
    "snapshot_inline_max_segments": _count(0, 10**9),
    "segments_per_manifest": _count(1, 1_000_000),
    "gc_inline_max_files": _count(0, 10**10),
    "gc_list_threads": _count(1, 256),
    "id_block_size": _count(1, 10**7),
    # above BATCH_MAX_AGE and an NTP-kept clock's error; a day at most: a bound that
    # lets a timestamp lead its clock by more is no bound
    "max_clock_skew": Limit(1.0, DAY, unit="s"),
    "copy_threads": _count(1, 256),
    "milvus_restore_sample": _count(0, 100_000),
    "milvus_import_timeout": _seconds(DAY, positive=True),
    "wal_fragment_bytes": _count(1024, 1 << 30),
    "wal_fragment_records": _count(1, 1_000_000),
    "wal_batch_time": _seconds(10.0),
    "wal_txn_keepalive": Limit(1.0, 7 * DAY, unit="s"),
    "wal_producer_expiry": Limit(60.0, 365 * DAY, unit="s"),
    "wal_scanner_startup_delay": _seconds(DAY),
    "wal_pause_poll": Limit(0.01, 600.0, unit="s"),
    "flush_seal_rows": _count(1, 100_000_000),
    "flush_seal_bytes": _count(1024, 1 << 40),
    "flush_seal_age": _seconds(30 * DAY),
    "flush_seal_idle": _seconds(30 * DAY),
    "compaction_min_segment_rows": _count(1, 100_000_000),
    "compaction_target_rows": _count(1, 1_000_000_000),
    "compaction_delete_ratio": Limit(0.0, 1.0),
    "compaction_protection": _seconds(30 * DAY),
    "compaction_min_segment_bytes": _count(0, 2**50),
    "compaction_target_bytes": _count(1, 2**50),
    "compaction_l0_age": _seconds(365 * DAY),
    "compaction_history": _count(1, 1000),           # runs shown (CLI --last, the page)
    # -- engine entry points and the conf / CLI keys that feed them ----------------------
    "snapshot_ttl": _seconds(10 * YEAR),               # 0: no TTL
    "pin_ttl": Limit(1.0, 365 * DAY, unit="s"),
    "pin_id": _count(1, 2**63 - 1),
    "copy_max_bytes_per_second": Limit(0, 1e12, unit="B/s"),
    "copy_max_requests_per_second": Limit(0, 1e6, unit="req/s"),
    "retention_keep": _count(0, 100_000),
    # a backup prune's sweep keeps data files younger than this: never under an hour (a running
    # export's files are not referenced yet), so the CLI flag and the engine refuse the same values
    "bundle_min_age": Limit(HOUR, 10 * YEAR, unit="s"),
    "restore_timeout": _seconds(7 * DAY, positive=True),
    "pitr_window": Limit(60.0, YEAR, unit="s"),          # a point-in-time window: a minute .. a year
    "gc_pause_ttl": _seconds(YEAR, positive=True),
    "id": _count(1, ID_MAX),                           # job, collection, segment ids
    "poll_interval": _seconds(HOUR, positive=True),
    "flush_max_seconds": _seconds(DAY, positive=True),
    "archive_seconds": _seconds(DAY),                  # a continuous archive run's length (0: once)
    "flush_wait_timeout": _seconds(DAY, positive=True),
    "drop_timeout": _seconds(7 * DAY, positive=True),   # waiting for the flushers to release a drop
    # -- demo data (Milvus limits: 1024 partitions, 16 shards, dim 32768) ------------------
    "cluster_timeout": _seconds(HOUR, positive=True),  # seglake cluster up --timeout
    "cluster_workers": _count(1, 4),                   # seglake cluster up --workers
    "demo_partitions": _count(1, 1024),
    "demo_segments": _count(1, 10_000),
    "demo_rows": _count(1, 10_000_000),
    "demo_dim": _count(1, 32_768),
    "demo_shards": _count(1, 16),
    # -- seglake ingest (synthetic rows through the WAL) -----------------------------------
    "ingest_rows": _count(1, 100_000_000),
    "ingest_batch_rows": _count(1, 1_000_000),
    "ingest_seed": _count(0, 2**32 - 1),              # numpy's default_rng takes any non-negative int
}


def check(limit: str, key: str, value: Any, scale: float = 1.0) -> int | float:
    """LIMITS[limit].check(key, value, scale): the one call every edge makes."""
    return LIMITS[limit].check(key, value, scale)
