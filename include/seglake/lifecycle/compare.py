"""After a restore: the target's visible rows side by side with its source's (a snapshot
of this store, or a bundle: lifecycle/backup/bundle_restore.py), each read through ITS OWN
collection's partitions, compared row by row; the restore DAGs' last step."""

from __future__ import annotations

from seglake.errors import SeglakeError
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB
from seglake.storage import Store


def compare_with_snapshot(meta: Meta, store: Store, collection: str, snapshot: str, target: str, *,
                          db: str = DEFAULT_DB, collection_id: int | None = None) -> dict[str, tuple[int, int]]:
    """{segments, rows, bytes, visible, visible_differing: (in the snapshot, in the restored
    target)}: the snapshot's Flushed segments against the target's, and the visible rows
    of each side by the one visibility rule, each read through ITS OWN collection's
    partitions (ids are local to a collection: one shared translation would make the
    same mistake on both sides and call them equal). visible_differing compares the rows
    themselves (pk, row id, timestamp, partition NAME): how many rows of each side the
    other side lacks. The source collection may be dropped meanwhile."""
    from seglake.lifecycle.snapshot import read_metadata, read_segments, resolve

    snap, _ = resolve(meta, collection, snapshot, db=db, collection_id=collection_id)
    source_segs = [s for s in read_segments(store, snap) if s.state != "Dropped"]
    src_parts = {p["partition_id"]: p["name"] for p in read_metadata(store, snap)["collection"]["partitions"]}
    return compare_target(meta, store, target, db, store, source_segs, src_parts,
                          counts=(snap.segments, snap.rows, snap.bytes))


def compare_target(meta: Meta, store: Store, target: str, db: str, source_store, source_segs: list,
                   src_parts: dict[int, str], counts: tuple[int, int, int] | None = None
                   ) -> dict[str, tuple[int, int]]:
    """compare_with_snapshot's answer for any source: its segment records (their files
    read from `source_store` by their own keys) and partitions {id: name}; `counts`:
    the source's (segments, rows, bytes) as recorded, else summed from the records."""
    from seglake.visibility import visible_rows, visible_rows_of

    tgt = meta.catalog.get_by_name(target, db)
    segs = [s for s in meta.segments.list(tgt.collection_id) if s.state == "Flushed"]
    if counts is None:
        counts = (len(source_segs), sum(s.num_rows for s in source_segs), sum(s.total_size() for s in source_segs))
    before = visible_rows_of(source_store, tgt.schema, source_segs, src_parts)
    after = visible_rows(meta, store, tgt.collection_id)
    only_src, only_tgt = rows_differing(before, src_parts, after, {p.partition_id: p.name for p in tgt.partitions})
    return {"segments": (counts[0], len(segs)), "rows": (counts[1], sum(s.num_rows for s in segs)),
            "bytes": (counts[2], sum(s.total_size() for s in segs)),
            "visible": (before.num_rows, after.num_rows), "visible_differing": (only_src, only_tgt)}


def rows_differing(a, a_parts: dict[int, str], b, b_parts: dict[int, str]) -> tuple[int, int]:
    """(rows of `a` that `b` lacks, rows of `b` that `a` lacks), rows compared as (pk, row
    id, timestamp, partition name) multisets; `a`/`b` as visibility.visible_rows returns
    them, each with its own collection's {partition id: name}. Vectorised: both sides'
    keys sorted together, each row weighing +1 (a) or -1 (b); a key's sum is how many
    more copies a holds than b (~1 s for 500k rows a side, ~40 bytes a row)."""
    import numpy as np

    from seglake.segfiles import ROW_ID, TIMESTAMP
    from seglake.visibility import PARTITION_ID, PK

    code = {n: i + 1 for i, n in enumerate(sorted(set(a_parts.values()) | set(b_parts.values())))}

    def keys(t, parts) -> list:
        pids = t.column(PARTITION_ID).to_numpy()
        u, inv = np.unique(pids, return_inverse=True)       # a few distinct ids
        named = np.array([code.get(parts.get(int(x)), 0) for x in u], dtype=np.int64)
        return [t.column(c).to_numpy().astype(np.int64, copy=False) for c in (PK, ROW_ID, TIMESTAMP)] + \
            [named[inv] if len(u) else np.zeros(0, np.int64)]

    ka, kb = keys(a, a_parts), keys(b, b_parts)
    cols = [np.concatenate([x, y]) for x, y in zip(ka, kb)]
    n = len(cols[0])
    if not n:
        return 0, 0
    weight = np.concatenate([np.ones(len(ka[0]), np.int64), -np.ones(len(kb[0]), np.int64)])
    order = np.lexsort(cols[::-1])
    cols = [c[order] for c in cols]
    starts = np.ones(n, dtype=bool)
    for c in cols:
        starts[1:] &= c[1:] == c[:-1]
    starts = ~starts
    starts[0] = True
    sums = np.bincount(np.cumsum(starts) - 1, weights=weight[order]).astype(np.int64)
    return int(sums[sums > 0].sum()), int(-sums[sums < 0].sum())


class RestoreDiffers(SeglakeError):
    """The restored collection does not show the snapshot's rows (compare_table says how)."""


def check_restored(meta: Meta, store: Store, collection: str, snapshot: str, target: str, *,
                   db: str = DEFAULT_DB, collection_id: int | None = None, say=print) -> dict[str, tuple[int, int]]:
    """compare_with_snapshot, printed as a table; RestoreDiffers if any line differs (the
    restore DAGs' last step, after verify)."""
    rows = compare_with_snapshot(meta, store, collection, snapshot, target, db=db, collection_id=collection_id)
    return judge(rows, f"snapshot {snapshot!r} of {collection!r}", target, say)


def judge(rows: dict[str, tuple[int, int]], source: str, target: str, say=print) -> dict[str, tuple[int, int]]:
    """A compare's answer printed as a table; RestoreDiffers naming the lines that differ."""
    say(compare_table(rows))
    bad = compare_differs(rows)
    if bad:
        raise RestoreDiffers(f"restored {target!r} differs from {source} in {', '.join(bad)}: {rows}")
    return rows


def compare_differs(rows: dict[str, tuple[int, int]]) -> list[str]:
    """The lines of compare_with_snapshot's answer that show a difference: a pair that
    differs, or any row one side lacks (visible_differing)."""
    return [k for k, (a, b) in rows.items() if (a or b if k == "visible_differing" else a != b)]


def compare_table(rows: dict[str, tuple[int, int]]) -> str:
    """compare_with_snapshot's answer as a small table; differing lines marked."""
    bad = set(compare_differs(rows))
    lines = [f"{'':18}{'source snapshot':>18}{'target':>18}"]
    lines += [f"{k:18}{a:>18}{b:>18}{'   <-- differs' if k in bad else ''}" for k, (a, b) in rows.items()]
    return "\n".join(lines)
