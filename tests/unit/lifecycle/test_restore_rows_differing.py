"""restore.rows_differing (the restore's row-by-row compare, vectorised) against the
obvious model: multisets of (pk, row id, timestamp, partition NAME), each side read
through its own {partition id: name}."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa

from seglake.lifecycle.restore import rows_differing


def _table(rows) -> pa.Table:
    cols = list(zip(*rows)) if rows else [(), (), (), ()]
    names = ("pk", "RowID", "Timestamp", "partition_id")
    return pa.table({n: pa.array(c, pa.int64()) for n, c in zip(names, cols)})


def _model(a, a_parts, b, b_parts) -> tuple[int, int]:
    ka = Counter((pk, rid, ts, a_parts[p]) for pk, rid, ts, p in a)
    kb = Counter((pk, rid, ts, b_parts[p]) for pk, rid, ts, p in b)
    return sum((ka - kb).values()), sum((kb - ka).values())


def test_rows_differing_counts_what_each_side_lacks_by_partition_name():
    rnd = random.Random(26)
    a_parts, b_parts = {1: "_default", 2: "p1"}, {7: "_default", 9: "p1", 3: "p2"}
    to_b = {1: 7, 2: 9}
    for _ in range(300):
        a = [(rnd.randint(0, 5), rnd.randint(0, 3), rnd.randint(0, 2), rnd.choice([1, 2]))
             for _ in range(rnd.randint(0, 30))]
        b = [(pk, rid, ts, to_b[p]) for pk, rid, ts, p in a if rnd.random() < 0.8]
        b += [(rnd.randint(0, 5), 1, 1, rnd.choice([7, 9, 3])) for _ in range(rnd.randint(0, 5))]
        rnd.shuffle(b)
        assert rows_differing(_table(a), a_parts, _table(b), b_parts) == _model(a, a_parts, b, b_parts)


def test_the_same_ids_naming_other_partitions_differ():
    """Same numeric partition id on both sides, different names: not the same rows."""
    rows = [(1, 10, 100, 5), (2, 11, 100, 5)]
    assert rows_differing(_table(rows), {5: "p1"}, _table(rows), {5: "_default"}) == (2, 2)
    assert rows_differing(_table(rows), {5: "p1"}, _table(rows), {5: "p1"}) == (0, 0)
