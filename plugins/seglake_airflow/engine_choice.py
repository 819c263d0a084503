"""engine=auto|spark|inline, decided in one place."""

from __future__ import annotations

from seglake.params import ENGINES  # the DAG conf contract declares them


def choose(engine: str, size: int, inline_below: int) -> str:
    """'spark' or 'inline'. auto: inline when the work (`size`) is under the threshold."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if engine != "auto":
        return engine
    return "inline" if size < inline_below else "spark"
