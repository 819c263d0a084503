"""Demo data: a collection with real segment files, registered as Flushed segments.

Files first, then the records that make them visible, so an interrupted seed leaves
only unreferenced files (GC reclaims them) and never a record pointing at nothing.

Segments are written in the row model (seglake.segfiles): fields 0 (row ids, from the id
allocator) and 1 (the segment's one TSO timestamp), a stats log with a bloom filter, and
a delta log deleting `delete_ratio` of the segment's pks (rounded up) at a later
timestamp (collection-wide). Segment n of a partition goes to vchannel n % shards and holds only
pks that the WAL routes to that vchannel (`seglake.wal.client.route`), so a later write
of one of its pks through the WAL lands on the same shard.

Seeded collections carry DEMO_PROPERTY in their catalog record. `purge` (the CLI's
`demo purge` and `demo seed --reset`) deletes only demo data -- a seeded collection, or
one restored from a snapshot of one -- and never while a snapshot of it exists or a copy
job still reads or writes it; everything else goes through its lifecycle.
`purge_collection` is the unchecked deletion underneath (tests and benches only).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from seglake.errors import NotFound, SeglakeError, StateError, ValidationError
from seglake.limits import LIMITS
from seglake.meta import Meta
from seglake.meta.catalog import DEFAULT_DB, Collection
from seglake.meta.segments import FLUSHED, IndexFile, Segment
from seglake.names import validate_name
from seglake.storage import Store, layout

PK, VEC, SCALAR = 100, 101, 102
DEMO_PROPERTY = "seglake_demo"


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
            LIMITS[f"demo_{k}"].check(f"demo seed: {k}", getattr(self, k))
        if not isinstance(self.delete_ratio, (int, float)) or not 0 <= self.delete_ratio < 1:
            raise ValidationError(f"demo seed: delete_ratio must be in [0, 1), got {self.delete_ratio!r}")
        return self


def is_demo(meta: Meta, coll: Collection) -> bool:
    """Seeded by `seed`, or restored from a snapshot of a collection that was."""
    if coll.properties.get(DEMO_PROPERTY) is True:
        return True
    source = (coll.properties.get("restored_from") or {}).get("collection")
    if not source or source == coll.name:
        return False
    try:
        return meta.catalog.get_by_name(source, coll.db).properties.get(DEMO_PROPERTY) is True
    except NotFound:
        return False


def check_purgeable(meta: Meta, coll: Collection) -> None:
    """StateError unless `coll` is demo data that no snapshot and no unfinished copy job
    uses. Reads only: nothing is deleted when this refuses."""
    from seglake.meta.copyjobs import JOB_TERMINAL

    what = f"collection {coll.name!r} (id {coll.collection_id})"
    if not is_demo(meta, coll):
        raise StateError(f"{what} was not created by `seglake demo seed`: demo purge and seed --reset delete "
                         "demo data only")
    snaps = sorted(r.name for r in meta.snapshots.list(coll.collection_id))
    if snaps:
        raise StateError(f"{what} has snapshots {', '.join(map(repr, snaps))}: drop them first "
                         f"(seglake snapshots drop {coll.name} NAME)")
    jobs = sorted(j.job_id for j in meta.copyjobs.list() if j.state not in JOB_TERMINAL
                  and coll.collection_id in (j.source_collection_id, j.target_collection_id))
    if jobs:
        raise StateError(f"{what} is used by unfinished copy jobs {jobs}")


def purge(meta: Meta, store: Store, name: str, db: str = DEFAULT_DB) -> tuple[Collection, int] | None:
    """Delete demo collection `name` (files and records) after check_purgeable; None
    when there is no such collection. Returns (collection, files deleted)."""
    validate_name("collection", name)
    validate_name("db", db)
    try:
        coll = meta.catalog.get_by_name(name, db)
    except NotFound:
        return None
    check_purgeable(meta, coll)
    return coll, purge_collection(meta, store, coll)


def purge_collection(meta: Meta, store: Store, coll: Collection) -> int:
    """Delete a collection's files and records, its snapshots included, with no check
    at all (tests and benches only; the CLI goes through `purge`)."""
    from seglake.lifecycle import snapshot

    for rec in list(meta.snapshots.list(coll.collection_id)):
        snapshot.purge(meta, store, rec)
    keys = [f.key for seg in meta.segments.list(coll.collection_id) for f in layout.segment_files(seg)]
    for prefix in layout.collection_prefixes(coll.collection_id):
        keys.extend(o.key for o in store.list(prefix))
    errors = store.delete_many(sorted(set(keys)))
    if errors:
        raise SeglakeError(f"could not delete {len(errors)} files, first: {errors[0]}")
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
        purge(meta, store, params.name, params.db)

    import numpy as np

    rng = np.random.default_rng(params.seed)
    parts = ["_default"] + [f"part_{i}" for i in range(1, params.partitions)]
    coll = meta.catalog.create(params.name, demo_schema(params.dim), db=params.db,
                               partitions=parts, shards=params.shards, properties={DEMO_PROPERTY: True})
    segments = []
    n = 0
    for part in coll.partitions:
        for _ in range(params.segments):
            segments.append(_write_segment(meta, store, coll, part.partition_id, n % len(coll.vchannels),
                                           params, rng))
            n += 1
    meta.segments.save(segments)
    return coll, True


def shard_pks(meta: Meta, shard: int, shards: int, n: int):
    """n fresh primary keys (ids from the allocator, ascending) that the WAL routes to
    vchannel `shard` of a collection with `shards` shards."""
    import numpy as np

    from seglake.wal.client import route

    out, need = [], n
    while need > 0:
        block = need * shards + 64        # ~1/shards of a block routes to each shard
        first = meta.ids.allocate(block)
        cand = np.arange(first, first + block, dtype=np.int64)
        hit = cand[route(cand, shards) == shard][:need]
        out.append(hit)
        need -= len(hit)
    return np.concatenate(out) if out else np.array([], dtype=np.int64)


def _write_segment(meta, store, coll, part_id, shard: int, p: SeedParams, rng) -> Segment:
    import numpy as np
    import pyarrow as pa

    from seglake.segfiles import log_ids_needed, write_segment_files
    from seglake.wal.message import arrow_schema

    c = coll.collection_id
    seg_id = meta.ids.allocate()
    pks = shard_pks(meta, shard, coll.shards, p.rows)
    row_ids = meta.ids.allocate(p.rows) + np.arange(p.rows, dtype=np.int64)
    ts = meta.tso.now()
    vectors = rng.standard_normal((p.rows, p.dim), dtype=np.float32)
    prices = rng.uniform(1, 1000, p.rows).astype(np.float32)
    flat = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), p.dim)
    table = pa.table({"pk": pks, "embedding": flat, "price": prices}, schema=arrow_schema(coll.schema))

    # rounded up: with a positive ratio every segment has a delete log (as before the row model)
    n_del = min(p.rows, math.ceil(p.rows * p.delete_ratio - 1e-9))
    deletes, dml_ts = None, ts
    if n_del:
        dml_ts = meta.tso.now()     # after the rows: the delete hides them
        deletes = (rng.choice(pks, size=n_del, replace=False), dml_ts, 0)
    first_log = meta.ids.allocate(log_ids_needed(coll.schema, bool(n_del), p.rows))
    build_id = meta.ids.allocate()
    files = write_segment_files(store, first_log, c, part_id, seg_id, coll.schema, table, row_ids,
                                np.full(p.rows, ts, dtype=np.int64), deletes=deletes)

    def put(key, data):
        return store.put(key, data).size

    k = min(16, p.rows)
    centroids = np.stack([chunk.mean(axis=0) for chunk in np.array_split(vectors, k)]).astype(np.float32)
    index_meta = json.dumps({"type": "IVF_FLAT", "metric": "L2", "nlist": k, "dim": p.dim}).encode()
    index_files = tuple(
        IndexFile(build_id, 1, name, put(layout.index_file(build_id, 1, part_id, seg_id, name), data))
        for name, data in (("centroids", centroids.tobytes()), ("index_meta.json", index_meta))
    )
    return Segment(
        segment_id=seg_id, collection_id=c, partition_id=part_id, channel=coll.vchannels[shard], state=FLUSHED,
        num_rows=p.rows, binlogs=files.binlogs, deltalogs=files.deltalogs, statslogs=files.statslogs,
        index_files=index_files, start_ts=ts, dml_ts=dml_ts, created_ts=ts,
    )
