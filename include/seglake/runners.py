"""Where a lifecycle's work runs -- in the task (inline) or on Spark -- decided in one
place (issue 18 item 2).

    engine = "auto" | "spark" | "inline"       the DAG param / CLI flag
    choose(kind, engine, size, settings)       auto: inline below the kind's threshold

A kind's work size and its threshold (config keys):

    copy           bytes a copy job copies          inline_threshold_bytes
    flush          bytes of WAL backlog             inline_threshold_bytes
    verify_bundle  bytes of a bundle's data         inline_threshold_bytes
    snapshot       segment records to write         snapshot_inline_max_segments
    gc             files the references hold        gc_inline_max_files
"""

from __future__ import annotations

from seglake.errors import ValidationError

ENGINES = ("auto", "spark", "inline")
THRESHOLDS = {"copy": "inline_threshold_bytes", "flush": "inline_threshold_bytes",
              "verify_bundle": "inline_threshold_bytes", "snapshot": "snapshot_inline_max_segments",
              "gc": "gc_inline_max_files"}


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValidationError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")
    return engine


def choose(kind: str, engine: str, size: int, settings) -> str:
    """'spark' or 'inline' for `size` units of `kind` work. auto: inline under the kind's
    threshold (THRESHOLDS), Spark from it."""
    if kind not in THRESHOLDS:
        raise ValueError(f"no engine threshold for work of kind {kind!r}; kinds: {', '.join(THRESHOLDS)}")
    if check_engine(engine) != "auto":
        return engine
    return "inline" if size < getattr(settings, THRESHOLDS[kind]) else "spark"
