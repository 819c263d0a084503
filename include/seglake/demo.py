"""Demo data: a collection with real segment files, registered as Flushed segments.

Files first, then the records that make them visible, so an interrupted seed leaves
only unreferenced files (GC reclaims them) and never a record pointing at nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from seglake.errors import NotFound, ValidationError
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB, Collection
from seglake.meta.segments import FLUSHED, Binlog, IndexFile, Segment
from seglake.names import validate_name
from seglake.parquet import table_bytes
from seglake.storage import Store, layout

PK, VEC, SCALAR = 100, 101, 102


def demo_schema(dim: int) -> list[dict]:
    return [
        {"field_id": PK, "name": "pk", "dtype": "Int64", "is_primary": True},
        {"field_id": VEC, "name": "embedding", "dtype": "FloatVector", "dim": dim},
        {"field_id": SCALAR, "name": "price", "dtype": "Float"},
    ]


@dataclass(frozen=True)
class SeedParams:
    name: str = "demo"
    db: str = DEFAULT_DB
    partitions: int = 2
    segments: int = 4          # per partition
    rows: int = 1000           # per segment
    dim: int = 16
    shards: int = 2
    delete_ratio: float = 0.01
    seed: int = 0

    def validate(self) -> "SeedParams":
        validate_name("collection", self.name)
        validate_name("db", self.db)
        for k in ("partitions", "segments", "rows", "dim", "shards"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValidationError(f"demo seed: {k} must be a positive integer, got {v!r}")
        if not 0 <= self.delete_ratio < 1:
            raise ValidationError(f"demo seed: delete_ratio must be in [0, 1), got {self.delete_ratio!r}")
        return self


def purge_collection(meta: Meta, store: Store, coll: Collection) -> int:
    """Delete a collection's files and records, its snapshots included (demo reset and
    test cleanup only: this bypasses every lifecycle rule)."""
    from seglake.lifecycle import snapshot

    for rec in list(meta.snapshots.list(coll.collection_id)):
        snapshot.purge(meta, store, rec)
    keys = [f.key for seg in meta.segments.list(coll.collection_id) for f in layout.segment_files(seg)]
    for prefix in layout.collection_prefixes(coll.collection_id):
        keys.extend(o.key for o in store.list(prefix))
    errors = store.delete_many(sorted(set(keys)))
    if errors:
        raise RuntimeError(f"could not delete {len(errors)} files, first: {errors[0]}")
    meta.catalog.purge(coll.collection_id)
    return len(set(keys))


def seed(meta: Meta, store: Store, params: SeedParams = SeedParams(), *, reset: bool = False) -> tuple[Collection, bool]:
    """Create the demo collection. Returns (collection, created); an existing collection
    of that name is reused as is, or purged and rebuilt with reset=True."""
    params.validate()
    try:
        existing = meta.catalog.get_by_name(params.name, params.db)
    except NotFound:
        existing = None
    if existing is not None:
        if not reset:
            return existing, False
        purge_collection(meta, store, existing)

    import numpy as np

    rng = np.random.default_rng(params.seed)
    parts = ["_default"] + [f"part_{i}" for i in range(1, params.partitions)]
    coll = meta.catalog.create(params.name, demo_schema(params.dim), db=params.db,
                               partitions=parts, shards=params.shards)
    segments = []
    n = 0
    for part in coll.partitions:
        for _ in range(params.segments):
            channel = coll.vchannels[n % len(coll.vchannels)]
            segments.append(_write_segment(meta, store, coll, part.partition_id, channel, params, rng))
            n += 1
    meta.segments.save(segments)
    return coll, True


def _write_segment(meta, store, coll, part_id, channel, p: SeedParams, rng) -> Segment:
    import numpy as np
    import pyarrow as pa

    c = coll.collection_id
    seg_id = meta.ids.allocate()
    log_ids = meta.ids.allocate(5)
    build_id = meta.ids.allocate()
    pk_start = meta.ids.allocate(p.rows)
    ts_from = meta.tso.now()
    pks = np.arange(pk_start, pk_start + p.rows, dtype=np.int64)
    vectors = rng.standard_normal((p.rows, p.dim), dtype=np.float32)
    prices = rng.uniform(1, 1000, p.rows).astype(np.float32)
    ts_to = meta.tso.now()

    def put(key, data):
        return store.put(key, data).size

    flat = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), p.dim)
    columns = {PK: {"pk": pks}, VEC: {"embedding": flat}, SCALAR: {"price": prices}}
    binlogs = {}
    for i, (field_id, cols) in enumerate(columns.items()):
        size = put(layout.insert_log(c, part_id, seg_id, field_id, log_ids + i), table_bytes(cols))
        binlogs[field_id] = (Binlog(log_ids + i, size, p.rows, ts_from, ts_to),)

    n_del = int(p.rows * p.delete_ratio)
    deleted = rng.choice(pks, size=n_del, replace=False) if n_del else np.array([], dtype=np.int64)
    delta_id = log_ids + 3
    dsize = put(layout.delta_log(c, part_id, seg_id, delta_id),
                table_bytes({"pk": deleted, "ts": np.full(n_del, ts_to, dtype=np.uint64)}))
    stats = json.dumps({"field_id": PK, "min": int(pks[0]), "max": int(pks[-1]), "rows": p.rows}).encode()
    stats_id = log_ids + 4
    ssize = put(layout.stats_log(c, part_id, seg_id, PK, stats_id), stats)

    k = min(16, p.rows)
    centroids = np.stack([chunk.mean(axis=0) for chunk in np.array_split(vectors, k)]).astype(np.float32)
    index_meta = json.dumps({"type": "IVF_FLAT", "metric": "L2", "nlist": k, "dim": p.dim}).encode()
    index_files = tuple(
        IndexFile(build_id, 1, name, put(layout.index_file(build_id, 1, part_id, seg_id, name), data))
        for name, data in (("centroids", centroids.tobytes()), ("index_meta.json", index_meta))
    )
    return Segment(
        segment_id=seg_id, collection_id=c, partition_id=part_id, channel=channel, state=FLUSHED,
        num_rows=p.rows, binlogs=binlogs,
        deltalogs=(Binlog(delta_id, dsize, n_del, ts_to, ts_to),),
        statslogs={PK: (Binlog(stats_id, ssize, p.rows, ts_from, ts_to),)},
        index_files=index_files, start_ts=ts_from, dml_ts=ts_to, created_ts=ts_from,
    )
