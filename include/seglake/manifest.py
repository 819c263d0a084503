"""Snapshot manifests: Avro files (fastavro, deflate) listing the segments a snapshot
captured, many segments per file, with every file path each segment references.

The schema is explicit and versioned (`seglake.manifest.v1`); fields added later must
carry defaults so old manifests stay readable. Paths are object keys relative to the
store root, normalized like every other key (storage.layout).

A manifest is trusted only as far as the snapshot metadata vouches for it: `read`
checks the bytes against the sha256 and the record count the metadata recorded at write
time, the version in the file header and the snapshot id, and raises ManifestError
naming the manifest otherwise (an Avro file cut at a block boundary decodes cleanly,
just short: only the checksum and the count catch it).
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import Iterable, Iterator

from seglake.errors import NotFound, SeglakeError
from seglake.storage import Store, layout

MANIFEST_VERSION = 1
SCHEMA_NAME = "seglake.manifest.v1.SegmentEntry"
BLOCK_BYTES = 16000  # fastavro's default sync interval; tests lower it to get many blocks

_LOG = {
    "type": "record", "name": "LogFile", "fields": [
        {"name": "log_id", "type": "long"}, {"name": "path", "type": "string"},
        {"name": "size", "type": "long"}, {"name": "entries", "type": "long"},
        {"name": "ts_from", "type": "long"}, {"name": "ts_to", "type": "long"},
    ]}
_FIELD_LOGS = {
    "type": "record", "name": "FieldLogs", "fields": [
        {"name": "field_id", "type": "long"}, {"name": "logs", "type": {"type": "array", "items": _LOG}},
    ]}
_INDEX = {
    "type": "record", "name": "IndexFileEntry", "fields": [
        {"name": "build_id", "type": "long"}, {"name": "version", "type": "long"},
        {"name": "name", "type": "string"}, {"name": "path", "type": "string"}, {"name": "size", "type": "long"},
    ]}
SCHEMA = {
    "type": "record", "name": "SegmentEntry", "namespace": "seglake.manifest.v1",
    "doc": "One captured segment of a seglake snapshot",
    "fields": [
        {"name": "segment_id", "type": "long"},
        {"name": "collection_id", "type": "long"},
        {"name": "partition_id", "type": "long"},
        {"name": "channel", "type": "string"},
        {"name": "level", "type": "string"},
        {"name": "state", "type": "string"},
        {"name": "num_rows", "type": "long"},
        {"name": "binlogs", "type": {"type": "array", "items": _FIELD_LOGS}},
        {"name": "deltalogs", "type": {"type": "array", "items": "LogFile"}},
        {"name": "statslogs", "type": {"type": "array", "items": "FieldLogs"}},
        {"name": "index_files", "type": {"type": "array", "items": _INDEX}},
        {"name": "start_ts", "type": "long"},
        {"name": "dml_ts", "type": "long"},
        {"name": "created_ts", "type": "long", "default": 0},
        # Segment.delta_partitions: the partition ids its delta logs hold -> their names
        # (null: not recorded, as in manifests written before it)
        {"name": "delta_partitions", "default": None, "type": ["null", {"type": "array", "items": {
            "type": "record", "name": "DeltaPartition",
            "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}}]},
    ],
}
_parsed = None


def parsed_schema():
    global _parsed
    if _parsed is None:
        import fastavro
        _parsed = fastavro.parse_schema(SCHEMA)
    return _parsed


def segment_entry(seg) -> dict:
    """A segment record as a manifest entry, paths resolved through the layout.
    (A hot loop of every snapshot: written for speed, tested against layout.segment_files.)"""
    c, p, s = seg.collection_id, seg.partition_id, seg.segment_id
    ins, dl, st = layout.segment_dirs(c, p, s)
    return {
        "segment_id": s, "collection_id": c, "partition_id": p, "channel": seg.channel,
        "level": seg.level, "state": seg.state, "num_rows": seg.num_rows,
        "binlogs": [{"field_id": f, "logs": [
            {"log_id": b.log_id, "path": f"{ins}{f}/{b.log_id}", "size": b.size, "entries": b.entries,
             "ts_from": b.ts_from, "ts_to": b.ts_to} for b in logs]} for f, logs in sorted(seg.binlogs.items())],
        "deltalogs": [{"log_id": b.log_id, "path": f"{dl}{b.log_id}", "size": b.size, "entries": b.entries,
                       "ts_from": b.ts_from, "ts_to": b.ts_to} for b in seg.deltalogs],
        "statslogs": [{"field_id": f, "logs": [
            {"log_id": b.log_id, "path": f"{st}{f}/{b.log_id}", "size": b.size, "entries": b.entries,
             "ts_from": b.ts_from, "ts_to": b.ts_to} for b in logs]} for f, logs in sorted(seg.statslogs.items())],
        "index_files": [{"build_id": x.build_id, "version": x.version, "name": x.name, "size": x.size,
                         "path": layout.index_file(x.build_id, x.version, p, s, x.name)} for x in seg.index_files],
        "start_ts": seg.start_ts, "dml_ts": seg.dml_ts, "created_ts": seg.created_ts,
        "delta_partitions": None if seg.delta_partitions is None else
        [{"id": i, "name": n} for i, n in sorted(seg.delta_partitions.items())],
    }


def entry_to_segment(e: dict):
    """The segment record a manifest entry was made from (restore reads this)."""
    from seglake.meta.segments import Binlog, IndexFile, Segment

    def logs(items):
        return tuple(Binlog(x["log_id"], x["size"], x["entries"], x["ts_from"], x["ts_to"]) for x in items)

    return Segment(
        segment_id=e["segment_id"], collection_id=e["collection_id"], partition_id=e["partition_id"],
        channel=e["channel"], state=e["state"], num_rows=e["num_rows"], level=e["level"],
        binlogs={x["field_id"]: logs(x["logs"]) for x in e["binlogs"]}, deltalogs=logs(e["deltalogs"]),
        statslogs={x["field_id"]: logs(x["logs"]) for x in e["statslogs"]},
        index_files=tuple(IndexFile(x["build_id"], x["version"], x["name"], x["size"]) for x in e["index_files"]),
        start_ts=e["start_ts"], dml_ts=e["dml_ts"], created_ts=e.get("created_ts", 0),
        delta_partitions=delta_partitions(e))


def delta_partitions(e: dict) -> dict[int, str] | None:
    """An entry's delta_partitions as the record holds it (None: not recorded, as in
    manifests before it); malformed (not [{id: int, name: str}], an id repeated) raises
    ValueError."""
    items = e.get("delta_partitions")
    if items is None:
        return None
    if not isinstance(items, list):
        raise ValueError(f"delta_partitions {items!r} is not a list")
    out: dict[int, str] = {}
    for x in items:
        i, n = x["id"], x["name"]
        if type(i) is not int or not isinstance(n, str) or i in out:
            raise ValueError(f"delta_partitions entry {x!r} is malformed or repeated")
        out[i] = n
    return out


def entry_files(e: dict) -> Iterator[tuple[str, int]]:
    """(path, size) of every file an entry references."""
    for fl in e["binlogs"]:
        for x in fl["logs"]:
            yield x["path"], x["size"]
    for x in e["deltalogs"]:
        yield x["path"], x["size"]
    for fl in e["statslogs"]:
        for x in fl["logs"]:
            yield x["path"], x["size"]
    for x in e["index_files"]:
        yield x["path"], x["size"]


def encode(entries: Iterable[dict], metadata: dict | None = None) -> bytes:
    import fastavro

    buf = io.BytesIO()
    meta = {"seglake.manifest.version": str(MANIFEST_VERSION), **(metadata or {})}
    fastavro.writer(buf, parsed_schema(), entries, codec="deflate", metadata=meta, sync_interval=BLOCK_BYTES)
    return buf.getvalue()


def sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


@dataclass(frozen=True)
class Written:
    key: str
    size: int
    records: int
    sha256: str


def write(store: Store, key: str, entries: list[dict], metadata: dict | None = None) -> Written:
    """Write one manifest file (atomic put); returns what the metadata must record of it."""
    raw = encode(entries, metadata)
    return Written(key, store.put(key, raw).size, len(entries), sha256(raw))


class ManifestError(SeglakeError):
    """A manifest (or the snapshot metadata) is missing, truncated, altered or of an
    unknown version: whoever reads it must fail closed."""


def read(store: Store, key: str, *, records: int, sha256_hex: str, snapshot_id: int) -> list[dict]:
    """The entries of one manifest, verified against what the snapshot metadata recorded
    (checksum, record count), its header version and its snapshot id."""
    import fastavro

    try:
        raw = store.get(key)
    except NotFound:
        raise ManifestError(f"manifest {key} is missing") from None
    if sha256(raw) != sha256_hex:
        raise ManifestError(f"manifest {key} is unreadable: it does not match the checksum the snapshot "
                            f"metadata recorded ({len(raw)} bytes): truncated or altered")
    try:
        reader = fastavro.reader(io.BytesIO(raw))
        version = reader.metadata.get("seglake.manifest.version")
        name = reader.writer_schema.get("name") if isinstance(reader.writer_schema, dict) else None
        if version != str(MANIFEST_VERSION) or name != SCHEMA_NAME:
            raise ManifestError(f"manifest {key} has unknown version {version!r} (schema {name!r}); "
                                f"this seglake reads version {MANIFEST_VERSION}")
        if reader.metadata.get("seglake.snapshot_id") != str(snapshot_id):
            raise ManifestError(f"manifest {key} belongs to snapshot "
                                f"{reader.metadata.get('seglake.snapshot_id')!r}, not {snapshot_id}")
        entries = list(reader)
    except ManifestError:
        raise
    except Exception as e:  # noqa: BLE001 - any decode error means unreadable
        raise ManifestError(f"manifest {key} is unreadable: {type(e).__name__}: {e}") from None
    if len(entries) != records:
        raise ManifestError(f"manifest {key} holds {len(entries)} segments, the snapshot metadata "
                            f"recorded {records}")
    return entries
