"""Attack s20: extreme and negative int64 primary keys (min, max, -1, 0, dense and sparse)
through inserts, duplicate inserts, scoped and wide deletes, upserts and compactions of
every kind: row-exact before/after, == Model at the end."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, policy, rows

pytestmark = pytest.mark.etcd

LO, HI = -2**63, 2**63 - 1
PKS = [LO, LO + 1, -2**40, -1, 0, 1, 2**40, HI - 1, HI]


def test_extreme_pks_row_exact(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("xp", ["_default", "p1"], shards=2)
    pols = [policy(target_rows=3, l0_age=0.0, delete_ratio=0.0), policy(target_rows=10**6, l0_age=0.0),
            policy(min_segment_rows=1, delete_ratio=0.0, l0_age=0.0)]

    def compact_all():
        for p in pols:
            before = exact(meta, store, "xp")
            s = compaction.compact(meta, store, "xp", p)
            assert all(r.status != compaction.LOST for r in s.results), s.to_json()
            assert exact(meta, store, "xp") == before

    w.insert("xp", PKS, "_default", 1.0)
    w.insert("xp", PKS, "p1", 2.0)
    w.flush("xp")
    compact_all()
    w.insert("xp", PKS[::2], "_default", 3.0)          # duplicates
    w.delete("xp", [LO, HI], partition="p1")
    w.flush("xp")
    compact_all()
    w.delete("xp", [-1, 0, 2**40])
    w.insert("xp", [HI, LO], "p1", 4.0, upsert=True)
    w.flush("xp")
    compact_all()
    assert rows(meta, store, "xp") == w.model.visible()
