"""Object-store key layout: the only place that formats a key.

    insert_log/{coll}/{part}/{seg}/{field}/{log_id}      Parquet, one column per field
    delta_log/{coll}/{part}/{seg}/{log_id}               Parquet: primary key + timestamp
    stats_log/{coll}/{part}/{seg}/{field}/{log_id}       JSON primary-key statistics
    index_files/{build_id}/{version}/{part}/{seg}/{file}
    snapshots/{coll}/metadata/{snapshot_id}.json
    snapshots/{coll}/manifests/{snapshot_id}/{n}.avro
    snapshots/{coll}/manifests/{snapshot_id}/{attempt}/{n}.avro   per write attempt (snap)
    snapshots/{coll}/metadata/{snapshot_id}/{attempt}.json        per write attempt (snap)
    wal/{pchannel}/...
    _reports/{kind}/{name}.json       run reports (verify, gc)

Keys are relative to the store root, use '/', never start or end with '/', and never
contain '.' or '..' components. Prefixes end with '/'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

INSERT_LOG, DELTA_LOG, STATS_LOG, INDEX_FILES, SNAPSHOTS, WAL, REPORTS = (
    "insert_log", "delta_log", "stats_log", "index_files", "snapshots", "wal", "_reports")
SEGMENT_ROOTS = (INSERT_LOG, DELTA_LOG, STATS_LOG, INDEX_FILES)


def normalize_key(key: str) -> str:
    """Canonical form of a key (no leading/trailing '/'); rejects escapes from the root."""
    if not isinstance(key, str):
        raise ValueError(f"object key must be a string, got {key!r}")
    k = key.replace("\\", "/").strip("/")
    parts = k.split("/")
    if not k or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    return k


def normalize_prefix(prefix: str) -> str:
    """'' (the whole store) or a canonical key followed by exactly one '/'."""
    if prefix in ("", "/"):
        return ""
    return normalize_key(prefix) + "/"


def insert_log(coll: int, part: int, seg: int, field: int, log_id: int) -> str:
    return f"{INSERT_LOG}/{coll}/{part}/{seg}/{field}/{log_id}"


def delta_log(coll: int, part: int, seg: int, log_id: int) -> str:
    return f"{DELTA_LOG}/{coll}/{part}/{seg}/{log_id}"


def stats_log(coll: int, part: int, seg: int, field: int, log_id: int) -> str:
    return f"{STATS_LOG}/{coll}/{part}/{seg}/{field}/{log_id}"


def index_file(build_id: int, version: int, part: int, seg: int, name: str) -> str:
    return f"{index_dir(build_id, version, part, seg)}{_plain_name(name)}"


def index_dir(build_id: int, version: int, part: int, seg: int) -> str:
    return f"{INDEX_FILES}/{build_id}/{version}/{part}/{seg}/"


def segment_dirs(coll: int, part: int, seg: int) -> tuple[str, str, str]:
    """(insert, delta, stats) directories of a segment, for hot loops that append
    `{field}/{log_id}` or `{log_id}` themselves. Same keys as the builders above."""
    tail = f"{coll}/{part}/{seg}/"
    return f"{INSERT_LOG}/{tail}", f"{DELTA_LOG}/{tail}", f"{STATS_LOG}/{tail}"


def _plain_name(name: str) -> str:
    if name and "/" not in name and "\\" not in name and name not in (".", ".."):
        return name  # the common case, checked cheaply
    return normalize_key(name)


def collection_prefixes(coll: int) -> list[str]:
    """Prefixes holding a collection's log files (index files are keyed by build id)."""
    return [f"{INSERT_LOG}/{coll}/", f"{DELTA_LOG}/{coll}/", f"{STATS_LOG}/{coll}/"]


def snapshot_metadata(coll: int, snapshot_id: int) -> str:
    return f"{SNAPSHOTS}/{coll}/metadata/{snapshot_id}.json"


def snapshot_manifest(coll: int, snapshot_id: int, n: int) -> str:
    return f"{SNAPSHOTS}/{coll}/manifests/{snapshot_id}/{n}.avro"


def snapshot_manifests_prefix(coll: int, snapshot_id: int) -> str:
    return f"{SNAPSHOTS}/{coll}/manifests/{snapshot_id}/"


def snapshot_attempt_manifest(coll: int, snapshot_id: int, attempt: int, n: int) -> str:
    """Manifest `n` written by one write attempt (a racing attempt never shares a name)."""
    return f"{snapshot_attempt_prefix(coll, snapshot_id, attempt)}{n}.avro"


def snapshot_attempt_prefix(coll: int, snapshot_id: int, attempt: int) -> str:
    return f"{SNAPSHOTS}/{coll}/manifests/{snapshot_id}/{attempt}/"


def snapshot_attempt_metadata(coll: int, snapshot_id: int, attempt: int) -> str:
    """Metadata JSON of one write attempt; the committed record names the winner's."""
    return f"{snapshot_metadata_prefix(coll, snapshot_id)}{attempt}.json"


def snapshot_metadata_prefix(coll: int, snapshot_id: int) -> str:
    return f"{SNAPSHOTS}/{coll}/metadata/{snapshot_id}/"


def report(kind: str, name: str) -> str:
    return f"{REPORTS}/{normalize_key(kind)}/{normalize_key(name)}.json"


@dataclass(frozen=True)
class SegmentFile:
    kind: str            # insert | delta | stats | index
    key: str
    size: int
    entries: int | None  # rows for Parquet logs, None where rows do not apply
    field_id: int | None = None


def segment_files(seg, *, partition_id: int | None = None, segment_id: int | None = None,
                  collection_id: int | None = None) -> Iterator[SegmentFile]:
    """Every file a segment record references. The keyword overrides give the paths the
    same files take under another collection/partition/segment id (a copy target)."""
    c = seg.collection_id if collection_id is None else collection_id
    p = seg.partition_id if partition_id is None else partition_id
    s = seg.segment_id if segment_id is None else segment_id
    for field_id, logs in sorted(seg.binlogs.items()):
        for b in logs:
            yield SegmentFile("insert", insert_log(c, p, s, field_id, b.log_id), b.size, b.entries, field_id)
    for b in seg.deltalogs:
        yield SegmentFile("delta", delta_log(c, p, s, b.log_id), b.size, b.entries)
    for field_id, logs in sorted(seg.statslogs.items()):
        for b in logs:
            yield SegmentFile("stats", stats_log(c, p, s, field_id, b.log_id), b.size, None, field_id)
    for f in seg.index_files:
        yield SegmentFile("index", index_file(f.build_id, f.version, p, s, f.name), f.size, None)
