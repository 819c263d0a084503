"""What a GC run is asked to do (GCOptions), checked before any listing, and the GC
error (a refusal: fail closed)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from seglake import limits
from seglake.errors import SeglakeError, ValidationError
from seglake.meta.alloc import FIRST_ID
from seglake.storage import layout


class GCError(SeglakeError):
    """GC refused to delete (fail closed); the message says why."""


@dataclass
class GCOptions:
    missing_tolerance: float = 86400.0
    drop_tolerance: float = 10800.0
    snapshot_pending_timeout: float = 600.0
    copy_job_retention: float = 10800.0
    floor: float = 3600.0
    force: bool = False
    dry_run: bool = False
    collection_id: int | None = None   # scope: one collection, or all
    list_threads: int = 4              # parallel listings of the inline mark

    @classmethod
    def from_settings(cls, s, **overrides) -> "GCOptions":
        base = cls(missing_tolerance=s.missing_tolerance, drop_tolerance=s.drop_tolerance,
                   snapshot_pending_timeout=s.snapshot_pending_timeout,
                   copy_job_retention=s.copy_job_retention, floor=s.tolerance_floor,
                   # a local directory is listed by one thread: its listing is CPU-bound
                   # Python, measured 2.2x slower with 4 threads (bench/gc.py, 200k files)
                   list_threads=s.gc_list_threads if s.is_s3 else 1)
        for k, v in overrides.items():
            if v is not None:
                setattr(base, k, v)
        return base

    @classmethod
    def from_conf(cls, conf: dict, settings, collection_id: int | None) -> "GCOptions":
        """The options of a gc DAG run, from the conf its contract checked (tolerances in
        hours there, seconds here; null: the settings' value), checked."""
        hours = {k: None if conf[f"{k}_hours"] is None else float(conf[f"{k}_hours"]) * 3600
                 for k in ("missing_tolerance", "drop_tolerance")}
        return cls.from_settings(settings, force=conf["force"], dry_run=conf["dry_run"],
                                 collection_id=collection_id, **hours).check()

    def to_xcom(self) -> dict:
        """Every field, as the small JSON a DAG's first task hands to the later ones."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_xcom(cls, d: dict) -> "GCOptions":
        """The options `to_xcom` carried (other keys of the dict are ignored), checked again."""
        return cls(**{f.name: d[f.name] for f in fields(cls)}).check()

    def check(self) -> "GCOptions":
        """Refuse non-finite or negative durations, and tolerances below the floor unless
        forced -- before any listing."""
        for name in ("floor", "missing_tolerance", "drop_tolerance", "snapshot_pending_timeout",
                     "copy_job_retention"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValidationError(f"gc {name} must be a finite, non-negative number of seconds, got {v!r}")
        if not self.force:  # the floor has a floor of its own: only force goes below it
            limits.check("tolerance_floor", "gc floor (seconds)", self.floor)
        for name in ("missing_tolerance", "drop_tolerance"):
            v = limits.check(name, f"gc {name} (seconds)", getattr(self, name))  # finite, in range
            if v < self.floor and not self.force:
                raise ValidationError(f"gc {name} of {v:g}s ({v / 3600:g} h) is below the {self.floor:g}s floor "
                                      f"({self.floor / 3600:g} h); allowed: at least the floor, or force (CLI "
                                      "--force, DAG conf force: true) to go below it")
        limits.check("gc_list_threads", "gc list_threads", self.list_threads)
        c = self.collection_id
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or not FIRST_ID <= c <= layout.MAX_ID):
            raise ValidationError(f"gc collection_id must be a collection id ({FIRST_ID}..{layout.MAX_ID}) or None "
                                  f"(the whole store), got {c!r}")
        return self


def positive(name: str, value) -> int:
    """`value` if it is an int in 1..10**9 (a batch size, a part or task count), else
    ValidationError naming `name`: a zero or negative batch would sweep nothing and still
    remove the Dropped records whose files it never deleted."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**9:
        raise ValidationError(f"{name} must be an integer from 1 to 1000000000, got {value!r}")
    return value
