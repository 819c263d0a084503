"""Helpers of the compaction tests: the Writer/Model of the copy tests (writes through the
real WAL and flusher, mirrored into a model of what is visible) and row-exact views."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from copy_model_helpers import Model, Writer, rows, run_restore  # noqa: E402,F401

from seglake.lifecycle import compaction  # noqa: E402
from seglake.meta.segments import DROPPED, FLUSHED  # noqa: E402
from seglake.visibility import visible_rows  # noqa: E402

PARTS = ["_default", "p1", "p2"]


def policy(**kw) -> "compaction.Policy":
    """Small numbers: the tests' segments hold a few rows each; no snapshot protection."""
    return compaction.Policy(**{"min_segment_rows": 1000, "target_rows": 40, "delete_ratio": 0.1,
                                "protection": 0.0, **kw})


def exact(meta, store, name: str) -> Counter:
    """Visible rows, row-exact: (pk, row id, timestamp, partition NAME, v)."""
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    part = {p.partition_id: p.name for p in coll.partitions}
    cols = [t.column(c).to_pylist() for c in ("pk", "RowID", "Timestamp", "partition_id", "v")]
    return Counter((pk, rid, ts, part[p], round(v, 4)) for pk, rid, ts, p, v in zip(*cols))


def segments(meta, name: str, state: str = FLUSHED) -> list:
    coll = meta.catalog.get_by_name(name)
    return [s for s in meta.segments.list(coll.collection_id) if s.state == state]


def mixed_workload(w: Writer, name: str, step: int) -> None:
    """One step of a mixed workload (inserts in every partition, a partition-scoped delete,
    an upsert, a collection-wide delete), flushed: each step leaves small segments and
    delete logs."""
    base = step * 20
    for i, p in enumerate(PARTS):
        w.insert(name, range(base + 1, base + 13), p, float(step * 10 + i))
    w.flush(name)
    w.delete(name, [base + 1, base + 2, base - 5], partition="p1")            # scoped (and older rows)
    w.insert(name, [base + 3, base + 4, base - 7], "p2", float(step * 10 + 7), upsert=True)
    w.delete(name, [base + 5, base - 9])                                       # every partition
    w.flush(name)


def input_ids(units) -> set[int]:
    return {s for u in units for s in u.segment_ids}


__all__ = ["Model", "Writer", "rows", "run_restore", "policy", "exact", "segments", "mixed_workload", "input_ids",
           "DROPPED", "FLUSHED", "PARTS"]
