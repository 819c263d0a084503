"""The visibility rule as data: seglake.visibility.apply_deletes over small arrays, and
dedupe_by_pk. Rows are (pk, ts, partition[, segment]); deletes (pk, ts, partition[, segment])."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from seglake.visibility import apply_deletes, dedupe_by_pk

P1, P2 = 11, 12
S1, S2 = 101, 102

# (case, rows [(pk, ts, partition, segment)], deletes [(pk, ts, partition, segment)], visible flags)
CASES = [
    ("no deletes", [(1, 10, P1, S1)], [], [True]),
    ("a delete hides an older row", [(1, 10, P1, S1)], [(1, 20, 0, 0)], [False]),
    ("equal ts keeps the row (upsert)", [(1, 20, P1, S1)], [(1, 20, 0, 0)], [True]),
    ("a delete never hides a newer row", [(1, 30, P1, S1)], [(1, 20, 0, 0)], [True]),
    ("a delete of another pk hides nothing", [(1, 10, P1, S1)], [(2, 20, 0, 0)], [True]),
    ("collection-wide: every partition", [(1, 10, P1, S1), (1, 10, P2, S2)], [(1, 20, 0, 0)], [False, False]),
    ("partition scope: that partition only", [(1, 10, P1, S1), (1, 10, P2, S2)], [(1, 20, P1, 0)], [False, True]),
    ("partition scope: the other partition only", [(1, 10, P1, S1), (1, 10, P2, S2)], [(1, 20, P2, 0)], [True, False]),
    ("partition scope, newer row in that partition survives", [(1, 10, P1, S1), (1, 30, P1, S1)],
     [(1, 20, P1, 0)], [False, True]),
    ("re-insert after delete: only the old row hidden", [(1, 10, P1, S1), (1, 30, P1, S2)], [(1, 20, 0, 0)],
     [False, True]),
    ("upsert: delete + insert at one ts", [(1, 10, P1, S1), (1, 20, P1, S2)], [(1, 20, 0, 0)], [False, True]),
    ("delete before the first insert of a pk, then insert", [(7, 50, P1, S1)], [(7, 40, 0, 0)], [True]),
    ("several deletes: the largest ts counts", [(1, 25, P1, S1)], [(1, 20, 0, 0), (1, 30, 0, 0), (1, 5, 0, 0)],
     [False]),
    ("several deletes below the row", [(1, 35, P1, S1)], [(1, 20, 0, 0), (1, 30, 0, 0)], [True]),
    ("duplicate inserts, neither deleted: both visible", [(3, 10, P1, S1), (3, 12, P1, S2)], [], [True, True]),
    ("duplicate inserts, a delete between them", [(3, 10, P1, S1), (3, 12, P1, S2)], [(3, 11, 0, 0)],
     [False, True]),
    ("mixed scopes: partition delete newer than the global one",
     [(1, 15, P1, S1), (1, 15, P2, S2)], [(1, 10, 0, 0), (1, 20, P2, 0)], [True, False]),
    ("legacy (own segment) delete hides its segment's rows only",
     [(1, 10, P1, S1), (1, 10, P1, S2)], [(1, 20, P1, S1)], [False, True]),
    ("legacy delete never hides a newer row of its segment", [(1, 30, P1, S1)], [(1, 20, P1, S1)], [True]),
    ("partition ids never seen in deletes", [(1, 10, 99, 999)], [(1, 20, P1, 0)], [True]),
]


@pytest.mark.parametrize("case,rows,deletes,want", CASES, ids=[c[0] for c in CASES])
def test_semantics(case, rows, deletes, want):
    r = np.array(rows, dtype=np.int64).reshape(-1, 4)
    d = np.array(deletes, dtype=np.int64).reshape(-1, 4)
    got = apply_deletes(r[:, 0], r[:, 1], r[:, 2], d[:, 0], d[:, 1], d[:, 2], segment_ids=r[:, 3], del_segs=d[:, 3])
    assert got.tolist() == want, case


def test_scalar_partition_and_empty_inputs():
    assert apply_deletes([1, 2], [5, 5], P1, [1], [9], [0]).tolist() == [False, True]
    assert apply_deletes([], [], P1, [1], [9], [0]).tolist() == []
    assert apply_deletes([1], [5], P1, [], [], []).tolist() == [True]


def test_segment_scoped_deletes_need_segment_ids():
    with pytest.raises(ValueError, match="segment_ids"):
        apply_deletes([1], [5], P1, [1], [9], [P1], del_segs=[S1])


def test_matches_a_brute_force_model_on_random_data():
    rng = np.random.default_rng(3)
    n, d = 3000, 800
    pks, ts = rng.integers(0, 400, n), rng.integers(0, 100, n)
    parts, segs = rng.choice([P1, P2], n), rng.choice([S1, S2], n)
    dp, dt = rng.integers(0, 400, d), rng.integers(0, 100, d)
    dparts = rng.choice([0, P1, P2], d)
    dsegs = np.where(rng.random(d) < 0.2, rng.choice([S1, S2], d), 0)
    got = apply_deletes(pks, ts, parts, dp, dt, dparts, segment_ids=segs, del_segs=dsegs)
    want = []
    for i in range(n):
        hit = any(dp[j] == pks[i] and dt[j] > ts[i] and (
            segs[i] == dsegs[j] if dsegs[j] else (dparts[j] == 0 or dparts[j] == parts[i])) for j in range(d))
        want.append(not hit)
    assert got.tolist() == want
    assert 0 < got.sum() < n


def test_dedupe_keeps_the_newest_row_per_pk_ties_by_row_id():
    t = pa.table({"pk": [5, 5, 7, 7, 9], "RowID": [1, 2, 3, 4, 5], "Timestamp": [20, 10, 30, 30, 1],
                  "partition_id": [P1] * 5, "segment_id": [S1] * 5, "price": [0.5, 1.5, 2.5, 3.5, 4.5]})
    out = dedupe_by_pk(t)
    assert out.column("pk").to_pylist() == [5, 7, 9]
    assert out.column("RowID").to_pylist() == [1, 4, 5]
    assert out.column("price").to_pylist() == [0.5, 3.5, 4.5]
    assert dedupe_by_pk(t.slice(0, 0)).num_rows == 0
