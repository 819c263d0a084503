"""Object-store key layout: the only place that formats a key.

One file on purpose (~425 lines): it is the only place that formats or parses an
object key, so its size is the size of the layout.

    insert_log/{coll}/{part}/{seg}/{field}/{log_id}      Parquet, one column per field
    delta_log/{coll}/{part}/{seg}/{log_id}               Parquet: primary key + timestamp
    stats_log/{coll}/{part}/{seg}/{field}/{log_id}       JSON primary-key statistics
    index_files/{build_id}/{version}/{part}/{seg}/{file}
    snapshots/{coll}/metadata/{snapshot_id}.json
    snapshots/{coll}/manifests/{snapshot_id}/{n}.avro
    snapshots/{coll}/manifests/{snapshot_id}/{attempt}/{n}.avro   per write attempt (snap)
    snapshots/{coll}/metadata/{snapshot_id}/{attempt}.json        per write attempt (snap)
    wal/{pchannel}/...
    _reports/{kind}/{name}.json       run reports (verify, wal_flush)
    _gc/{run_id}/{summary,dropped,airflow}.json, _gc/{run_id}/{kind}/part-{n:05d}.parquet,
    _gc/latest.json                   GC runs (report parts, summary, the last run)

Keys are relative to the store root, use '/', never start or end with '/', and never
contain '.' or '..' components. Prefixes end with '/'.

`parse_key` is the only parser: a key is seglake's own file only if it parses AND the
builders above turn the parsed ids back into exactly the same key (canonical decimal
ids, no leading zeros, signs, spaces or non-ASCII digits). GC never considers anything
else.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterator

INSERT_LOG, DELTA_LOG, STATS_LOG, INDEX_FILES, SNAPSHOTS, WAL, REPORTS, GC_RUNS = (
    "insert_log", "delta_log", "stats_log", "index_files", "snapshots", "wal", "_reports", "_gc")
SEGMENT_ROOTS = (INSERT_LOG, DELTA_LOG, STATS_LOG, INDEX_FILES)
INTERNAL_ROOTS = (GC_RUNS, REPORTS)   # seglake's own run files: never GC candidates


def normalize_key(key: str) -> str:
    """Canonical form of a key (no leading/trailing '/'); rejects escapes from the root,
    backslashes and NUL. Never maps one stored name onto another: a listed key that is
    not already canonical must be refused (`check_key`), not normalised."""
    if not isinstance(key, str):
        raise ValueError(f"object key must be a string, got {key!r}")
    k = key.strip("/")
    parts = k.split("/")
    if not k or "\\" in k or "\0" in k or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid object key {key!r}")
    return k


def check_key(key: str) -> str:
    """`key` itself if it is canonical, else ValueError: for deletes, which must touch
    exactly the key that was listed, never a normalised neighbour."""
    try:
        if normalize_key(key) == key:
            return key
    except ValueError:
        pass
    raise ValueError(f"object key {display_key(key)!r} is not canonical")


def display_key(key: str) -> str:
    """A printable, UTF-8-safe form of any listed key (undecodable bytes of a local
    name as \\xNN), for reports only: never used to address an object."""
    try:
        key.encode("utf-8")
        return key
    except UnicodeEncodeError:
        return os.fsencode(key).decode("utf-8", "backslashreplace")


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


def snapshots_prefix(coll: int) -> str:
    return f"{SNAPSHOTS}/{coll}/"


def gc_run_prefix(run_id: str) -> str:
    """A GC run's directory (run ids are checked by lifecycle.gc.check_run_id)."""
    return f"{GC_RUNS}/{normalize_key(run_id)}/"


def gc_run_file(run_id: str, name: str) -> str:
    """summary.json, dropped.json, candidates.parquet (older runs), airflow.json."""
    return gc_run_prefix(run_id) + normalize_key(name)


def gc_part(run_id: str, kind: str, index: int) -> str:
    return f"{gc_run_prefix(run_id)}{normalize_key(kind)}/part-{index:05d}.parquet"


def gc_parts_prefix(run_id: str, kind: str) -> str:
    return f"{gc_run_prefix(run_id)}{normalize_key(kind)}/"


GC_LATEST = f"{GC_RUNS}/latest.json"


def is_snapshot_file(coll: int, snapshot_id: int, key: str) -> bool:
    """`key` is one of snapshot `snapshot_id`'s own files (its metadata, a manifest, or a
    write attempt's), as the builders above name them."""
    if key == snapshot_metadata(coll, snapshot_id):
        return True
    for prefix, pattern, build in (
            (snapshot_manifests_prefix(coll, snapshot_id), rf"({_ID})/({_ID})\.avro",
             lambda a, n: snapshot_attempt_manifest(coll, snapshot_id, a, n)),
            (snapshot_manifests_prefix(coll, snapshot_id), rf"({_ID})\.avro",
             lambda n: snapshot_manifest(coll, snapshot_id, n)),
            (snapshot_metadata_prefix(coll, snapshot_id), rf"({_ID})\.json",
             lambda a: snapshot_attempt_metadata(coll, snapshot_id, a))):
        m = re.fullmatch(pattern, key[len(prefix):], re.ASCII) if key.startswith(prefix) else None
        if m and build(*map(int, m.groups())) == key:
            return True
    return False


# -- parsing: the one parser, checked against the builders --------------------------------
INSERT, DELTA, STATS, INDEX = "insert", "delta", "stats", "index"
SNAPSHOT_METADATA, SNAPSHOT_MANIFEST = "snapshot_metadata", "snapshot_manifest"
SNAPSHOT_ATTEMPT_METADATA, SNAPSHOT_ATTEMPT_MANIFEST = "snapshot_attempt_metadata", "snapshot_attempt_manifest"
MAX_ID = 2**63 - 1
_ID = r"(?:0|[1-9][0-9]{0,18})"
_NAME = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}"  # an index file name (never a dot file)


@dataclass(frozen=True)
class ParsedKey:
    """The ids a key of seglake's own layout encodes."""
    kind: str
    collection_id: int | None = None   # None for index files (keyed by build id)
    partition_id: int | None = None
    segment_id: int | None = None
    field_id: int | None = None
    log_id: int | None = None
    build_id: int | None = None
    version: int | None = None
    name: str | None = None
    snapshot_id: int | None = None
    attempt: int | None = None
    n: int | None = None

    def key(self) -> str:
        """The key the builders make from these ids."""
        return _BUILD[self.kind](self)


def _ids(*names: str) -> str:
    return "/".join(f"(?P<{n}>{_ID})" for n in names)


_PATTERNS = {kind: re.compile(rx, re.ASCII) for kind, rx in (
    (INSERT, rf"{INSERT_LOG}/{_ids('collection_id', 'partition_id', 'segment_id', 'field_id', 'log_id')}"),
    (DELTA, rf"{DELTA_LOG}/{_ids('collection_id', 'partition_id', 'segment_id', 'log_id')}"),
    (STATS, rf"{STATS_LOG}/{_ids('collection_id', 'partition_id', 'segment_id', 'field_id', 'log_id')}"),
    (INDEX, rf"{INDEX_FILES}/{_ids('build_id', 'version', 'partition_id', 'segment_id')}/(?P<name>{_NAME})"),
    (SNAPSHOT_METADATA, rf"{SNAPSHOTS}/(?P<collection_id>{_ID})/metadata/(?P<snapshot_id>{_ID})\.json"),
    (SNAPSHOT_MANIFEST, rf"{SNAPSHOTS}/(?P<collection_id>{_ID})/manifests/(?P<snapshot_id>{_ID})/(?P<n>{_ID})\.avro"),
    (SNAPSHOT_ATTEMPT_METADATA,
     rf"{SNAPSHOTS}/(?P<collection_id>{_ID})/metadata/(?P<snapshot_id>{_ID})/(?P<attempt>{_ID})\.json"),
    (SNAPSHOT_ATTEMPT_MANIFEST,
     rf"{SNAPSHOTS}/(?P<collection_id>{_ID})/manifests/(?P<snapshot_id>{_ID})/(?P<attempt>{_ID})/(?P<n>{_ID})\.avro"),
)}
_ROOT_KINDS = {INSERT_LOG: (INSERT,), DELTA_LOG: (DELTA,), STATS_LOG: (STATS,), INDEX_FILES: (INDEX,),
               SNAPSHOTS: (SNAPSHOT_METADATA, SNAPSHOT_MANIFEST, SNAPSHOT_ATTEMPT_METADATA,
                           SNAPSHOT_ATTEMPT_MANIFEST)}
_BUILD = {
    INSERT: lambda p: insert_log(p.collection_id, p.partition_id, p.segment_id, p.field_id, p.log_id),
    DELTA: lambda p: delta_log(p.collection_id, p.partition_id, p.segment_id, p.log_id),
    STATS: lambda p: stats_log(p.collection_id, p.partition_id, p.segment_id, p.field_id, p.log_id),
    INDEX: lambda p: index_file(p.build_id, p.version, p.partition_id, p.segment_id, p.name),
    SNAPSHOT_METADATA: lambda p: snapshot_metadata(p.collection_id, p.snapshot_id),
    SNAPSHOT_MANIFEST: lambda p: snapshot_manifest(p.collection_id, p.snapshot_id, p.n),
    SNAPSHOT_ATTEMPT_METADATA: lambda p: snapshot_attempt_metadata(p.collection_id, p.snapshot_id, p.attempt),
    SNAPSHOT_ATTEMPT_MANIFEST: lambda p: snapshot_attempt_manifest(p.collection_id, p.snapshot_id, p.attempt, p.n),
}


def parse_key(key) -> ParsedKey | None:
    """The ids of a segment or snapshot file of seglake's layout, or None for anything
    else (other prefixes, odd names, non-canonical ids, '//', trailing '/', backslashes,
    undecodable names, ids past int64). Never raises; a result always round-trips:
    `parse_key(k).key() == k`."""
    if not isinstance(key, str):
        return None
    root = key.partition("/")[0]
    for kind in _ROOT_KINDS.get(root, ()):
        m = _PATTERNS[kind].fullmatch(key)
        if m is None:
            continue
        fields = {k: (v if k == "name" else int(v)) for k, v in m.groupdict().items()}
        if any(v > MAX_ID for k, v in fields.items() if k != "name"):
            return None
        parsed = ParsedKey(kind, **fields)
        return parsed if parsed.key() == key else None
    return None


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


# -- write-ahead log (wal helper; append-only section) ---------------------------------
# wal/{pchannel}/{hint:020d}-{token}.frag   immutable, checksummed; named by its producer
#     before it has a place in the log (hint: the position it expected, token: 12 hex
#     digits unique to the write); its place is the etcd fragment index (wal/log.py)
# wal/{pchannel}/{fragment:020d}.frag       a fragment of a log written before the index
#     (log format 1): its number is its place
FRAGMENT_SUFFIX = ".frag"
_FRAG_RE = re.compile(r"([0-9]{20})(?:-([0-9a-f]{12}))?", re.ASCII)


def wal_prefix(pchannel: str) -> str:
    return f"{WAL}/{_plain_name(pchannel)}/"


def wal_fragment(pchannel: str, fragment: int, token: str | None = None) -> str:
    """The key of a fragment: `token` given, a producer's uniquely named file (format 2);
    without, a format-1 fragment named by its number."""
    if isinstance(fragment, bool) or not isinstance(fragment, int) or fragment < 0 \
            or (token is None and fragment < 1):
        raise ValueError(f"fragment number must be a positive int, got {fragment!r}")
    if token is not None and not re.fullmatch(r"[0-9a-f]{12}", token, re.ASCII):
        raise ValueError(f"fragment token must be 12 lowercase hex digits, got {token!r}")
    stem = f"{fragment:020d}" if token is None else f"{fragment:020d}-{token}"
    return f"{wal_prefix(pchannel)}{stem}{FRAGMENT_SUFFIX}"


def parse_wal_fragment(key: str) -> tuple[str, int] | None:
    """(pchannel, number or hint) of a fragment key, None when the key is not one."""
    parts = key.split("/")
    if len(parts) != 3 or parts[0] != WAL or not parts[2].endswith(FRAGMENT_SUFFIX):
        return None
    m = _FRAG_RE.fullmatch(parts[2][:-len(FRAGMENT_SUFFIX)])  # ASCII: '²'.isdigit() is True
    if m is None or (m.group(2) is None and int(m.group(1)) < 1):
        return None
    try:
        back = wal_fragment(parts[1], int(m.group(1)), m.group(2))
    except ValueError:
        return None
    return (parts[1], int(m.group(1))) if back == key else None


# -- backup target (lifecycle/backup; append-only section) -----------------------------
# A backup target is a store of its own (never the store it backs up):
#     data/{sha256[:2]}/{sha256}                      a file's content, named by its SHA-256
#     bundles/{db}/{collection}/{bundle}/bundle.json  what a bundle holds (docs/BUNDLE.md)
#     bundles/{db}/{collection}/{bundle}/COMMITTED    the commit marker: the SHA-256 of bundle.json
#     _locks/sweep/{token}.json                       a data sweep in progress (exports wait for it)
#     _locks/sweep-started.json                       the last sweep to start (written before it reads)
#     _locks/clock/{token}                            a probe of the target's own clock (written, read, deleted)
BUNDLE_DATA, BUNDLES, BUNDLE_LOCKS = "data", "bundles", "_locks"
BUNDLE_DOC, BUNDLE_COMMIT = "bundle.json", "COMMITTED"
SHA256_RE = re.compile(r"[0-9a-f]{64}", re.ASCII)


def bundle_blob(sha256_hex: str) -> str:
    if not isinstance(sha256_hex, str) or not SHA256_RE.fullmatch(sha256_hex):
        raise ValueError(f"not a SHA-256 hex digest: {sha256_hex!r}")
    return f"{BUNDLE_DATA}/{sha256_hex[:2]}/{sha256_hex}"


def parse_bundle_blob(key: str) -> str | None:
    """The SHA-256 a data key of a backup target names, None for any other key."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) == 3 and parts[0] == BUNDLE_DATA and SHA256_RE.fullmatch(parts[2]) and parts[1] == parts[2][:2]:
        return parts[2]
    return None


def bundles_prefix(db: str | None = None, collection: str | None = None) -> str:
    if db is None:
        return f"{BUNDLES}/"
    if collection is None:
        return f"{BUNDLES}/{_plain_name(db)}/"
    return f"{BUNDLES}/{_plain_name(db)}/{_plain_name(collection)}/"


def _bundle_path(db: str, collection: str, bundle: str) -> str:
    """`{db}/{collection}/{bundle}`: where a bundle's files, holds and prune intent live."""
    return f"{_plain_name(db)}/{_plain_name(collection)}/{_plain_name(bundle)}"


def bundle_prefix(db: str, collection: str, bundle: str) -> str:
    return f"{BUNDLES}/{_bundle_path(db, collection, bundle)}/"


def bundle_doc(db: str, collection: str, bundle: str) -> str:
    return f"{bundle_prefix(db, collection, bundle)}{BUNDLE_DOC}"


def bundle_commit(db: str, collection: str, bundle: str) -> str:
    return f"{bundle_prefix(db, collection, bundle)}{BUNDLE_COMMIT}"


def parse_bundle_key(key: str) -> tuple[str, str, str, str] | None:
    """(db, collection, bundle, file name) of a bundle's file, None for anything else."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 5 or parts[0] != BUNDLES or parts[4] not in (BUNDLE_DOC, BUNDLE_COMMIT):
        return None
    try:
        back = f"{bundle_prefix(parts[1], parts[2], parts[3])}{parts[4]}"
    except ValueError:
        return None
    return (parts[1], parts[2], parts[3], parts[4]) if back == key else None


def sweep_lock(token: str) -> str:
    return f"{BUNDLE_LOCKS}/sweep/{_plain_name(token)}.json"


def sweep_locks_prefix() -> str:
    return f"{BUNDLE_LOCKS}/sweep/"


def sweep_started() -> str:
    return f"{BUNDLE_LOCKS}/sweep-started.json"


def clock_probe(token: str) -> str:
    return f"{BUNDLE_LOCKS}/clock/{_plain_name(token)}"


def bundle_hold(db: str, collection: str, bundle: str, token: str) -> str:
    """A reader's hold on a bundle (an import, a verify): the retention prune leaves it."""
    return f"{bundle_holds_prefix(db, collection, bundle)}{_plain_name(token)}.json"


def bundle_holds_prefix(db: str, collection: str, bundle: str) -> str:
    return f"{BUNDLE_LOCKS}/holds/{_bundle_path(db, collection, bundle)}/"


def bundle_pruning(db: str, collection: str, bundle: str) -> str:
    """A prune's intent to drop a bundle, written before it looks for holds."""
    return f"{BUNDLE_LOCKS}/pruning/{_bundle_path(db, collection, bundle)}.json"


# -- WAL archive in a backup target (lifecycle/backup/archive.py; append-only section) -----
#     archive/{site}/SITE.json                           the source: its etcd root, first archived
#     archive/{site}/{pchannel}/{n:020d}.frag            committed fragment n, as the log holds it
#     archive/{site}/{pchannel}/{n:020d}.json            its entry (index record + SHA-256), written
#                                                        after the fragment is durable and checked
#     archive/{site}/{pchannel}/COVERED.json             the whole log is here up to: fragment, tick
# `site`: the source's site id (32 hex digits, etcd `{root}/site`): two stores archiving
# into one target never share a key.
ARCHIVE = "archive"
SITE_RE = re.compile(r"[0-9a-f]{32}", re.ASCII)
_ARCHIVE_ENTRY = re.compile(r"([0-9]{20})\.(frag|json)", re.ASCII)


def _site(site: str) -> str:
    if not isinstance(site, str) or not SITE_RE.fullmatch(site):
        raise ValueError(f"not a site id (32 hex digits): {site!r}")
    return site


def archive_site(site: str) -> str:
    return f"{ARCHIVE}/{_site(site)}/SITE.json"


def archive_prefix(site: str, pchannel: str) -> str:
    return f"{ARCHIVE}/{_site(site)}/{_plain_name(pchannel)}/"


def archive_fragment(site: str, pchannel: str, n: int) -> str:
    return f"{archive_prefix(site, pchannel)}{_archive_n(n)}.frag"


def archive_entry(site: str, pchannel: str, n: int) -> str:
    return f"{archive_prefix(site, pchannel)}{_archive_n(n)}.json"


def archive_coverage(site: str, pchannel: str) -> str:
    """How far the archive holds the whole log (lifecycle/backup/archive.write_coverage)."""
    return f"{archive_prefix(site, pchannel)}COVERED.json"


def _archive_n(n: int) -> str:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"fragment number must be a positive int, got {n!r}")
    return f"{n:020d}"


def parse_archive_key(key: str) -> tuple[str, str, int, str] | None:
    """(site, pchannel, n, 'frag'|'json') of an archive file's key, None for any other."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 4 or parts[0] != ARCHIVE or not SITE_RE.fullmatch(parts[1]):
        return None
    m = _ARCHIVE_ENTRY.fullmatch(parts[3])
    if m is None or int(m.group(1)) < 1:
        return None
    return parts[1], parts[2], int(m.group(1)), m.group(2)
