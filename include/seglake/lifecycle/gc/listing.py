"""How a mark lists the store, cut into units the same way for both engines: the top
levels (walk_levels), then each prefix below them whole or, when large, cut by a
delimiter walk into units of child names (cut_prefix, split_units, name_groups), each
unit listed on its own (list_unit). The Spark mark spreads the units over its tasks
(dist.py); the inline mark lists them with the one inline runner (list_objects)."""

from __future__ import annotations

from itertools import islice
from typing import Iterator

from seglake import faults, runners
from seglake.storage.base import ObjectInfo

SPLIT_AT = 1_000              # a collection prefix with more objects is listed in several units
UNITS_PER_PREFIX = 16         # units a large prefix is cut into (about)
WALK_DEPTH = 3                # delimiter levels walked below a large prefix at most


def walk_levels(store, prefixes: list[str], levels: int) -> Iterator[tuple]:
    """The first `levels` delimiter levels under each prefix (a handful of delimiter
    listings): ("unit", prefix) for each prefix below them, ("obj", ObjectInfo) for each
    object found on the way. Units and objects cover the prefixes exactly."""
    todo = [(p, levels) for p in prefixes]
    while todo:
        p, left = todo.pop()
        if left == 0:
            yield ("unit", p)
            continue
        dirs, files = store.list_level(p, report_unreadable=True)
        for o in files:
            yield ("obj", o)
        todo += [(d, left - 1) for d in dirs]


def cut_prefix(store, prefix: str, split_at: int = SPLIT_AT, want: int = UNITS_PER_PREFIX,
               depth: int = WALK_DEPTH) -> Iterator[tuple]:
    """How to list one prefix: a probe lists at most `split_at` + 1 objects; when that
    is all of them they are the listing (("obj", ObjectInfo) each: no second listing),
    else the prefix is cut by a delimiter walk (`split_units`)."""
    probe = list(islice(store.list(prefix, report_unreadable=True), split_at + 1))
    if len(probe) <= split_at:
        for o in probe:
            yield ("obj", o)
    else:
        yield from split_units(store, prefix, want, depth)


def split_units(store, prefix: str, want: int, depth: int) -> Iterator[tuple]:
    """A delimiter walk of a large prefix: the objects directly in it (("obj",
    ObjectInfo)) and about `want` units (prefix, name start) that together list everything
    below its children once: a level with fewer than `want` children is walked one level
    deeper (at most `depth`), a level with enough is cut into groups of child names
    sharing a leading string (`name_groups`). No unit relies on listing order."""
    dirs, files = store.list_level(prefix, report_unreadable=True)
    for o in files:
        yield ("obj", o)
    if not dirs:
        return
    if len(dirs) < want and depth > 0:
        share = -(-want // len(dirs))
        for d in dirs:
            yield from split_units(store, d, share, depth - 1)
        return
    for start in name_groups([d[len(prefix):] for d in dirs], want):
        yield ("unit", (prefix, start))


def list_unit(store, unit: tuple[str, str | None]) -> Iterator[ObjectInfo]:
    """Every object of one listing unit (prefix, None: the whole prefix; prefix, start:
    its children whose names begin with `start`)."""
    faults.point("gc.mark.list")
    prefix, start = unit
    return store.list(prefix, report_unreadable=True) if start is None else \
        store.list_names(prefix, start, report_unreadable=True)


def name_groups(names: list[str], want: int) -> list[str]:
    """Leading strings that split `names` (distinct, each ending in '/') into groups of
    about len/want: every name begins with exactly one of them (a trie's leaves)."""
    target = max(1, -(-len(names) // max(1, want)))
    out: list[str] = []

    def split(q: str, group: list[str]) -> None:
        if len(group) <= target or all(len(n) == len(q) for n in group):
            out.append(q)
            return
        by_next: dict[str, list[str]] = {}
        for n in group:
            by_next.setdefault(n[len(q)], []).append(n)  # (a name equal to q ends in '/': a group of one)
        for c in sorted(by_next):
            split(q + c, by_next[c])

    split("", sorted(names))
    return out


def list_objects(store, prefixes: list[str], levels: int, workers: int, split_at: int | None = None,
                 want: int | None = None) -> Iterator[ObjectInfo]:
    """The inline mark's listing. One worker: each prefix listed whole, in order. More:
    `list_by_units` with that many threads."""
    if workers <= 1:
        for p in prefixes:
            yield from store.list(p, report_unreadable=True)
        return
    yield from list_by_units(store, prefixes, levels, workers, split_at, want)


def list_by_units(store, prefixes: list[str], levels: int, workers: int, split_at: int | None = None,
                  want: int | None = None) -> Iterator[ObjectInfo]:
    """The store cut into units exactly as the Spark mark cuts it (walk_levels ->
    cut_prefix -> list_unit) and listed by the one inline runner with `workers` threads:
    every object once, in no particular order. Any unit that fails fails the listing
    (fail closed)."""
    split_at = SPLIT_AT if split_at is None else split_at
    want = max(UNITS_PER_PREFIX, 4 * workers) if want is None else want
    top = []
    for kind, x in walk_levels(store, prefixes, levels):
        if kind == "obj":
            yield x
        else:
            top.append(x)
    units = []
    for cut in runners.run_inline(lambda p: list(cut_prefix(store, p, split_at, want)), top, workers=workers):
        for kind, x in cut:
            if kind == "obj":
                yield x
            else:
                units.append(x)
    for listed in runners.run_inline(lambda u: list(list_unit(store, u)), units, workers=workers):
        yield from listed
