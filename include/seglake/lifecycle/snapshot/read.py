"""Address, list, describe and read a snapshot: the metadata checked against its record
and every manifest against the metadata (fail closed, naming it)."""

from __future__ import annotations

from typing import Iterator


from seglake.meta import codec
from seglake import manifest
from seglake.errors import Conflict, NotFound, StateError
from seglake.meta import Meta
from seglake.meta.catalog import CREATED, DEFAULT_DB
from seglake.meta.kv import KeyValue
from seglake.meta.segments import Segment
from seglake.meta.snapshots import COMMITTED, SnapshotRecord
from seglake.names import validate_name
from seglake.storage import Store, layout
from seglake.lifecycle.snapshot.common import METADATA_FORMAT


# -- list / describe / read -----------------------------------------------------------------
def info(rec: SnapshotRecord) -> dict:
    return {"name": rec.name, "collection": rec.collection_name, "collection_id": rec.collection_id,
            "db": rec.db, "snapshot_id": rec.snapshot_id, "state": rec.state,
            "created_at": rec.created_at, "committed_at": rec.committed_at, "expires_at": rec.expires_at,
            "segments": rec.segments, "rows": rec.rows, "bytes": rec.bytes, "files": rec.files,
            "partitions": rec.partitions, "location": rec.location, "consistent_ts": rec.consistent_ts,
            "description": rec.description, "pins": list(rec.pins),
            "holds": [{"pin_id": p, "expires_at": exp} for p, exp in rec.holds], "error": rec.error}


def resolve(meta: Meta, collection: str, name: str, *, db: str = DEFAULT_DB,
            collection_id: int | None = None) -> tuple[SnapshotRecord, KeyValue]:
    """The snapshot `name` of collection `collection`, also once that collection was
    dropped (its name freed or even taken again): the live collection's snapshot first,
    else the one snapshot record that names that collection. Several dropped
    collections with that name and snapshot: pass collection_id."""
    validate_name("collection", collection)
    validate_name("snapshot", name)
    validate_name("db", db)
    if collection_id is not None:
        rec, kv = meta.snapshots.get(collection_id, name)
        if (rec.collection_name, rec.db) != (collection, db):
            raise NotFound(f"snapshot {name!r} of collection id {collection_id} belongs to "
                           f"{rec.db}.{rec.collection_name}, not {db}.{collection}")
        return rec, kv
    try:
        coll = meta.catalog.get_by_name(collection, db)
        return meta.snapshots.get(coll.collection_id, name)
    except NotFound:
        pass
    ids = sorted({r.collection_id for r in meta.snapshots.list()
                  if (r.collection_name, r.db, r.name) == (collection, db, name)})
    if not ids:
        raise NotFound(f"snapshot {name!r} not found for collection {collection!r} in db {db!r}")
    if len(ids) > 1:
        raise Conflict(f"snapshot {name!r} exists for {len(ids)} dropped collections named {collection!r} "
                       f"(collection ids {', '.join(map(str, ids))}); pass the collection id")
    return meta.snapshots.get(ids[0], name)




def list_snapshots(meta: Meta, collection: str | None = None, *, db: str = DEFAULT_DB,
                   include_all: bool = False) -> list[dict]:
    """Usable (COMMITTED) snapshots, or every record with include_all; by collection
    name, including the snapshots of dropped collections of that name."""
    if collection is not None:
        validate_name("collection", collection)
        validate_name("db", db)
    return [info(r) for r in meta.snapshots.list()
            if (collection is None or (r.collection_name, r.db) == (collection, db))
            and (include_all or r.state == COMMITTED)]


def read_metadata(store: Store, rec: SnapshotRecord) -> dict:
    """The committed metadata JSON, checked against the record (sha256, format, snapshot
    id, segment count) and internally (manifests of the committed attempt only, record
    counts adding up). ManifestError naming the file otherwise."""
    if not rec.location:
        raise StateError(f"snapshot {rec.name!r} is {rec.state}; it has no metadata yet")
    loc = rec.location
    try:
        raw = store.get(loc)
    except NotFound:
        raise manifest.ManifestError(f"snapshot metadata {loc} is missing") from None
    if rec.metadata_sha256 is None or manifest.sha256(raw) != rec.metadata_sha256:
        raise manifest.ManifestError(f"snapshot metadata {loc} does not match the checksum its record holds "
                                     f"({len(raw)} bytes): truncated, altered or of an older format")
    try:
        doc = codec.loads(raw, loc)
    except ValueError as e:
        raise manifest.ManifestError(f"snapshot metadata {loc} is unreadable: {e}") from None
    return _check_metadata(doc, rec, loc)


def _check_metadata(doc, rec: SnapshotRecord, loc: str) -> dict:
    def bad(why: str):
        return manifest.ManifestError(f"snapshot metadata {loc} {why}")

    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt != METADATA_FORMAT:
        raise bad(f"has unknown format {fmt!r}; this seglake reads {METADATA_FORMAT}")
    if doc.get("snapshot_id") != rec.snapshot_id:
        raise bad(f"belongs to snapshot id {doc.get('snapshot_id')!r}, not {rec.snapshot_id}")
    ms, count, attempt = doc.get("manifests"), doc.get("segment_count"), doc.get("attempt")
    if not isinstance(ms, list) or not _is_count(count) or not _is_count(attempt):
        raise bad("has no valid manifest list, segment_count or attempt")
    if not ms:
        raise bad(f"lists no manifests, but the snapshot has {count} segments" if count else "lists no manifests")
    prefix = layout.snapshot_attempt_prefix(rec.collection_id, rec.snapshot_id, attempt)
    for m in ms:
        if not (isinstance(m, dict) and isinstance(m.get("key"), str) and m["key"].startswith(prefix)
                and _is_count(m.get("records")) and isinstance(m.get("sha256"), str)):
            raise bad(f"lists an invalid manifest entry {m!r} (attempt {attempt})")
    listed = sum(m["records"] for m in ms)
    if listed != count or (rec.state == COMMITTED and count != rec.segments):
        raise bad(f"lists manifests holding {listed} segments, but records {count} (etcd: {rec.segments})")
    return doc


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_entries(store: Store, rec: SnapshotRecord, doc: dict | None = None) -> Iterator[tuple[str, list[dict]]]:
    """(manifest key, verified entries) of every manifest of a COMMITTED snapshot."""
    doc = read_metadata(store, rec) if doc is None else doc
    for m in doc["manifests"]:
        yield m["key"], read_manifest(store, rec, m)


def read_manifest(store: Store, rec: SnapshotRecord, m: dict) -> list[dict]:
    """One manifest listed in the metadata, verified against what the metadata says."""
    return manifest.read(store, m["key"], records=m["records"], sha256_hex=m["sha256"],
                         snapshot_id=rec.snapshot_id)


def describe(meta: Meta, store: Store, collection: str, name: str, *, db: str = DEFAULT_DB,
             collection_id: int | None = None) -> dict:
    """The record, and for a COMMITTED snapshot its metadata with every manifest verified."""
    rec, _ = resolve(meta, collection, name, db=db, collection_id=collection_id)
    out = info(rec)
    if rec.state == COMMITTED:
        doc = read_metadata(store, rec)
        for _ in read_entries(store, rec, doc):
            pass
        out["partition_names"] = [p["name"] for p in doc["collection"]["partitions"]]
        out["manifests"] = doc["manifests"]
        out["index_build_ids"] = doc["index_build_ids"]
        out["collection_dropped"] = _collection_gone(meta, rec)
    return out


def _collection_gone(meta: Meta, rec: SnapshotRecord) -> bool:
    try:
        return meta.catalog.get(rec.collection_id).state != CREATED
    except NotFound:
        return True


def read_segments(store: Store, rec: SnapshotRecord) -> list[Segment]:
    """The segment records a COMMITTED snapshot captured (restore reads these), verified."""
    return [manifest.entry_to_segment(e) for _, entries in read_entries(store, rec) for e in entries]
