"""Attack s20: row-exact over EVERY column (pk, RowID, Timestamp, partition, a nullable
VarChar with nulls and empty strings, a nullable Double with nulls, -0.0 and extremes,
a FloatVector) across compactions of every kind, repeated on their own outputs; duplicate
pks across segments and partitions; a delete whose ts equals a row's ts (an upsert)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.flush import flush_pchannel
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient

from wal_helpers import pchannels

pytestmark = pytest.mark.etcd

SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "s", "dtype": "VarChar"},
          {"field_id": 102, "name": "d", "dtype": "Double"},
          {"field_id": 103, "name": "vec", "dtype": "FloatVector", "dim": 3}]
COLS = ["s", "d", "vec"]


def _t(pks, seed):
    rng = np.random.default_rng(seed)
    n = len(pks)
    s = [None if i % 3 == 0 else ("" if i % 3 == 1 else f"x{seed}-{p}-é\u0000z") for i, p in enumerate(pks)]
    d = [None if i % 4 == 0 else [-0.0, 1.7976931348623157e308, 5e-324, float(seed)][i % 4] for i in range(n)]
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.standard_normal(3 * n).astype(np.float32)), 3)
    return pa.table({"pk": pa.array(pks, pa.int64()), "s": pa.array(s, pa.string()),
                     "d": pa.array(d, pa.float64()), "vec": vec})


def _exact(meta, store, cid) -> Counter:
    t = visible_rows(meta, store, cid, columns=COLS)
    out = Counter()
    for r in t.to_pylist():
        d = r["d"]
        out[(r["pk"], r["RowID"], r["Timestamp"], r["partition_id"], r["s"],
             None if d is None else (d, str(d)), tuple(r["vec"]))] += 1
    return out


def _flush(meta, store, settings, coll):
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)


POLICIES = [
    compaction.Policy(min_segment_rows=10**6, target_rows=3, delete_ratio=0.0, protection=0.0, l0_age=0.0),
    compaction.Policy(min_segment_rows=10**6, target_rows=10**6, delete_ratio=0.0, protection=0.0, l0_age=0.0),
    compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=0.0, protection=0.0, l0_age=0.0),
    compaction.Policy(min_segment_rows=5, target_rows=7, delete_ratio=0.5, protection=0.0, l0_age=1e6),
]


@pytest.mark.parametrize("shards", [1, 2])
def test_every_column_row_exact_across_repeated_compactions(meta, store, settings, shards):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("af", SCHEMA, shards=shards, partitions=["_default", "p1", "p2"])
    cid = coll.collection_id
    seed = 0
    kinds = Counter()

    def compact_all():
        nonlocal kinds
        for pol in POLICIES:
            before = _exact(meta, store, cid)
            s = compaction.compact(meta, store, "af", pol)
            assert all(r.status != compaction.LOST for r in s.results), s.to_json()
            kinds.update(u.kind for u in s.plan.units)
            after = _exact(meta, store, cid)
            assert after == before, (pol, before - after, after - before)

    with WalClient(meta, store, settings) as c:
        for step in range(4):
            seed += 1
            base = step * 10
            for p in ["_default", "p1", "p2"]:
                c.insert("af", _t(list(range(base, base + 8)) + [1, 2], seed), partition=p)   # dups across steps
            _flush(meta, store, settings, coll)
            compact_all()
            c.insert("af", _t([base + 1, base + 2, 1], seed + 100), partition="p1", upsert=True)
            c.delete("af", [base + 3, 2], partition="p2")
            c.delete("af", [base + 4])
            c.insert("af", _t([base + 4], seed + 200), partition="p2")        # re-insert after a wide delete
            _flush(meta, store, settings, coll)
            compact_all()
            c.delete("af", list(range(base, base + 8)))                      # every row of the step
            _flush(meta, store, settings, coll)
            compact_all()
    assert kinds[compaction.MERGE] and kinds[compaction.FOLD], kinds
