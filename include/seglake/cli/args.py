"""Argument types: every flag checked before any command runs."""

from __future__ import annotations

import argparse



# -- argument types: every flag checked before any command runs ------------------------
def name_arg(kind: str):
    """argparse type: a name that full-matches the name pattern (no trailing newline)."""
    def parse(text: str) -> str:
        from seglake.errors import ValidationError
        from seglake.names import validate_name

        try:
            return validate_name(kind, text)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = f"{kind} name"
    return parse


def producer_id_arg(text: str) -> str:
    """argparse type: a WAL producer id (the engine's rule, seglake.wal.writer), checked
    before the command opens etcd."""
    from seglake.wal.writer import _valid_pid

    if not _valid_pid(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a producer id: 1..64 of A-Za-z0-9._-")
    return text


producer_id_arg.__name__ = "producer id"


def names_arg(kind: str):
    """argparse type: comma-separated names, each a valid name, none twice, at least one
    (an empty value is refused: it does not mean 'all')."""
    one = name_arg(kind)

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",")]
        if names == [""]:
            raise argparse.ArgumentTypeError(f"{text!r} names no {kind}: give comma-separated names "
                                             f"(e.g. demo,events), or leave the flag out for every {kind}")
        for i, n in enumerate(names):
            if not n:
                raise argparse.ArgumentTypeError(f"{text!r}: {kind} name {i + 1} is empty (a stray comma?)")
            one(n)
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise argparse.ArgumentTypeError(f"{text!r} names {', '.join(map(repr, twice))} twice")
        return names
    parse.__name__ = f"{kind} names"
    return parse


def number_arg(limit: str, scale: float = 1.0):
    """argparse type: a number checked against seglake.limits LIMITS[limit] (finite, in
    range, an integer where the limit says so), given in units of `scale` (HOUR: hours).
    Returns the number as typed (not scaled)."""
    from seglake.limits import LIMITS

    lim = LIMITS[limit]

    def parse(text: str) -> int | float:
        from seglake.errors import ValidationError

        try:  # plain decimal only: float() would take 'nan', '+5', '1e3', ' 5', '-0.0'
            return lim.parse("value", text, scale)
        except ValidationError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value: ")) from None
    parse.__name__ = "integer" if lim.integer else "number"
    return parse
