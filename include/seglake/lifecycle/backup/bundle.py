"""Backup bundles: the format of a backup target (docs/BUNDLE.md), opening a target, and
reading, listing and writing bundles.

A backup target is a store of its own (a local directory or s3://bucket/prefix with its
own credentials), never the store it backs up. Files are content-addressed:

    data/{sha256[:2]}/{sha256}                      one file's bytes, named by their SHA-256
    bundles/{db}/{collection}/{bundle}/bundle.json  the bundle: the snapshot's metadata, its
                                                    segments, and every file it references
                                                    (source key, size, sha256)
    bundles/{db}/{collection}/{bundle}/COMMITTED    {"sha256": of bundle.json, "size": ...}

A bundle exists only once COMMITTED names the SHA-256 of its bundle.json, and that is
written only after every data file the bundle lists is in the target, complete and
checked. A bundle alone (no etcd, no source store) is enough to restore.

One unit (~450 lines): the format, its checks and the content helpers that write and
read data files (hashed on the way) are one contract; export, import, verify and prune
all go through it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time

import msgspec
from typing import Callable, Iterator

from seglake import limits, manifest
from seglake.errors import ConfigError, Conflict, NotFound, SeglakeError, ValidationError
from seglake.lifecycle.backup import entries
from seglake.meta import codec
from seglake.meta.catalog import PCHANNEL_PREFIX
from seglake.names import validate_name
from seglake.storage import Store, layout

FORMAT = "seglake-bundle"
VERSION = 1
CHUNK = 4 << 20
SMALL = 4 << 20     # files up to this size are read once into memory (hash + write from the same bytes)
FILE_MAX = 1 << 40    # 1 TiB: no segment file is near this; a bigger size is forged


class BundleError(SeglakeError):
    """A bundle is missing, incomplete, altered or of an unknown format."""


# -- the target ---------------------------------------------------------------------------
def open_target(settings, uri: str | None = None) -> Store:
    """The backup target store: `uri` (default: config key backup_uri) with the
    backup_s3_* credentials. Refused when it is (or overlaps) the store itself."""
    uri = target_uri(settings, uri)
    if uri.startswith("s3://"):
        from seglake.storage.s3 import S3Store
        return S3Store(uri, endpoint=settings.backup_s3_endpoint, region=settings.backup_s3_region,
                       access_key=settings.backup_s3_access_key, secret_key=settings.backup_s3_secret_key,
                       max_pool=max(32, settings.copy_threads))
    from seglake.storage.local import LocalStore
    return LocalStore(uri[len("file://"):] if uri.startswith("file://") else uri)


def target_uri(settings, uri: str | None = None, key: str = "config key 'backup_uri'") -> str:
    """The backup target's location (`uri`, default: config key backup_uri), checked
    without opening it: ConfigError when there is none, it is not a location, or it is
    (or overlaps) the store itself. `key` names where `uri` came from in the refusal."""
    from seglake.config import _check_store_uri

    uri = settings.backup_uri if uri is None else uri
    if not uri:
        raise ConfigError("no backup target: set config key 'backup_uri' (a local directory or "
                          "s3://bucket/prefix) or pass one")
    _check_store_uri(uri, "backup_uri")
    if overlaps(settings.store_uri, uri, settings.s3_endpoint, settings.backup_s3_endpoint):
        raise ConfigError(f"{key}: {uri!r} is (or is inside, or holds) the store "
                          f"{settings.store_uri!r}; a backup must live in another store")
    return uri


def overlaps(store_uri: str, target_uri: str, store_endpoint: str = "", target_endpoint: str = "") -> bool:
    """True when one location is the other or holds it (same path tree, or the same
    bucket on the same endpoint with nested prefixes)."""
    import os

    def local(u: str) -> str:
        p = u[len("file://"):] if u.startswith("file://") else u
        return os.path.realpath(os.path.expanduser(p)).rstrip("/") + "/"

    a_s3, b_s3 = store_uri.startswith("s3://"), target_uri.startswith("s3://")
    if a_s3 != b_s3:
        return False
    if not a_s3:
        a, b = local(store_uri), local(target_uri)
        return a.startswith(b) or b.startswith(a)
    from seglake.storage.s3 import parse_s3_uri
    (ab, ap), (bb, bp) = parse_s3_uri(store_uri), parse_s3_uri(target_uri)
    if ab != bb or (store_endpoint or "").rstrip("/") != (target_endpoint or "").rstrip("/"):
        return False
    ap, bp = (ap.strip("/") + "/") if ap.strip("/") else "", (bp.strip("/") + "/") if bp.strip("/") else ""
    return ap.startswith(bp) or bp.startswith(ap)


# -- content --------------------------------------------------------------------------------
def sha256_of(store: Store, key: str, *, on_chunk: Callable[[int], None] | None = None) -> tuple[str, int]:
    """(SHA-256 hex, size) of an object, streamed."""
    h, n = hashlib.sha256(), 0
    with store.open_read(key) as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
            n += len(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
    return h.hexdigest(), n


def has_content(store: Store, key: str, sha256_hex: str, size: int, listed=None) -> bool:
    """`key` is in `store` with exactly this content: its size (from `listed`, the object
    as a listing showed it, else a head), then its SHA-256 (read in full)."""
    try:
        info = listed if listed is not None else store.head(key)
        return info.size == size and sha256_of(store, key)[0] == sha256_hex
    except NotFound:
        return False


def read_small(store: Store, key: str, size: int) -> bytes:
    """A small object's bytes, read once (at most size + 1: a file that grew is noticed)."""
    read_upto = getattr(store, "read_upto", None)   # a Store's; a reader with open_read alone reads through it
    if read_upto is not None:
        return read_upto(key, size + 1)
    with store.open_read(key) as f:
        return f.read(size + 1)


def copy_verified(src: Store, src_key: str, dst: Store, dst_key: str, sha256_hex: str, size: int,
                  on_chunk: Callable[[int], None] | None = None):
    """Stream src_key into dst_key, hashing what passes; the object appears only when the
    bytes' SHA-256 and size are the expected ones (a mismatch raises before it is
    published: nothing is left under dst_key). Returns the written object's ObjectInfo."""
    def write(out) -> None:
        h, n = hashlib.sha256(), 0
        with src.open_read(src_key) as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
                n += len(chunk)
                out.write(chunk)
                if on_chunk is not None:
                    on_chunk(len(chunk))
        if n != size or h.hexdigest() != sha256_hex:
            raise BundleError(f"{src_key}: read {n} bytes with SHA-256 {h.hexdigest()[:16]}..., expected {size} "
                              f"bytes with {sha256_hex[:16]}...: the file changed or is damaged; nothing written "
                              f"to {dst_key}")
    if size <= SMALL:
        data = read_small(src, src_key, size)
        got = hashlib.sha256(data).hexdigest()
        if len(data) != size or got != sha256_hex:
            raise BundleError(f"{src_key}: read {len(data)} bytes with SHA-256 {got[:16]}..., expected {size} "
                              f"bytes with {sha256_hex[:16]}...: the file changed or is damaged; nothing written "
                              f"to {dst_key}")
        if on_chunk is not None:
            on_chunk(len(data))
        return dst.put(dst_key, data)
    return dst.put_writer(dst_key, write)


def spool_hashed(store: Store, key: str, *, on_chunk: Callable[[int], None] | None = None):
    """(spool, SHA-256 hex, size): the object streamed once, hashed on the way into a
    private temporary file (unlinked from the start: nothing is left behind by a kill),
    from which copy_verified_from writes it. The caller closes the spool."""
    import tempfile

    spool = tempfile.TemporaryFile()
    try:
        h, n = hashlib.sha256(), 0
        with store.open_read(key) as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
                spool.write(chunk)
                n += len(chunk)
                if on_chunk is not None:
                    on_chunk(len(chunk))
    except BaseException:
        spool.close()
        raise
    return spool, h.hexdigest(), n


def copy_verified_from(spool, src_key: str, dst: Store, dst_key: str, sha256_hex: str, size: int,
                       on_chunk: Callable[[int], None] | None = None):
    """copy_verified of src_key's bytes held in `spool` (spool_hashed): hashed again as
    they pass, the object appears only with that SHA-256 and size. Returns its ObjectInfo."""
    def write(out) -> None:
        spool.seek(0)
        h, n = hashlib.sha256(), 0
        for chunk in iter(lambda: spool.read(CHUNK), b""):
            h.update(chunk)
            n += len(chunk)
            out.write(chunk)
            if on_chunk is not None:
                on_chunk(len(chunk))
        if n != size or h.hexdigest() != sha256_hex:
            raise BundleError(f"{src_key}: spooled {n} bytes with SHA-256 {h.hexdigest()[:16]}..., expected {size} "
                              f"bytes with {sha256_hex[:16]}...; nothing written to {dst_key}")
    return dst.put_writer(dst_key, write)


def blobs(target: Store) -> dict[str, int]:
    """{sha256: size} of every data file in the target (one listing)."""
    out = {}
    for o in target.list(layout.BUNDLE_DATA):
        sha = layout.parse_bundle_blob(o.key)
        if sha is not None:
            out[sha] = o.size
    return out


# -- bundles ---------------------------------------------------------------------------------
def check_names(db: str, collection: str, bundle: str) -> None:
    validate_name("db", db)
    validate_name("collection", collection)
    validate_name("bundle", bundle)


def write_doc(target: Store, doc: dict) -> bytes:
    """bundle.json (not yet a bundle: the commit marker makes it one)."""
    src = doc["source"]
    raw = msgspec.json.encode(doc, order="sorted")
    target.put(layout.bundle_doc(src["db"], src["collection"], doc["bundle"]), raw)
    return raw


def write_marker(target: Store, doc: dict, raw: bytes) -> dict:
    """The commit marker naming bundle.json's SHA-256: the bundle exists from here on.
    Every data file it lists must be in the target (see export: checked right before)."""
    src = doc["source"]
    marker = {"format": FORMAT, "version": VERSION, "sha256": manifest.sha256(raw), "size": len(raw),
              "committed_at": time.time()}
    target.put(layout.bundle_commit(src["db"], src["collection"], doc["bundle"]),
               json.dumps(marker, separators=(",", ":")).encode())
    return marker


def write(target: Store, doc: dict) -> dict:
    """bundle.json, then the commit marker."""
    return write_marker(target, doc, write_doc(target, doc))


def read(target: Store, db: str, collection: str, bundle: str, *, segments: bool = True) -> dict:
    """A committed bundle's document, checked: the marker's SHA-256 and size, the format
    and version, and that every file each segment references is listed with its size.
    NotFound when there is no bundle (or only an uncommitted one); BundleError when it
    is damaged. segments=False: the segment entries are not checked (only the marker,
    format, version and file entries: check_files), for a reader of the files section
    alone (an incremental export's known files)."""
    check_names(db, collection, bundle)
    where = f"bundle {db}.{collection}/{bundle}"
    try:
        marker_raw = target.get(layout.bundle_commit(db, collection, bundle))
    except NotFound:
        raise NotFound(f"{where} not found in the backup target (no commit marker: never exported, or the "
                       f"export did not finish)") from None
    try:
        marker = codec.loads(marker_raw)
        want_sha, want_size = marker["sha256"], marker["size"]
    except (ValueError, KeyError, TypeError):
        raise BundleError(f"{where}: its commit marker is unreadable") from None
    try:
        raw = target.get(layout.bundle_doc(db, collection, bundle))
    except NotFound:
        raise BundleError(f"{where}: bundle.json is missing although the bundle was committed") from None
    if len(raw) != want_size or manifest.sha256(raw) != want_sha:
        raise BundleError(f"{where}: bundle.json ({len(raw)} bytes) does not match the SHA-256 its commit marker "
                          f"holds: altered or truncated")
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise BundleError(f"{where}: bundle.json is unreadable: {e}") from None
    doc = check(doc, where) if segments else check_files(doc, where)
    _check_place(doc, db, collection, bundle, where)
    return doc


def _check_place(doc: dict, db: str, collection: str, bundle: str, where: str) -> None:
    """The document names the place it was read from: an export (and a capture) writes
    bundle.json and its marker under the (db, collection, bundle) the document names
    (write_doc), so a document that names another place was copied there -- another
    bundle's (swapped between two bundles) or another collection's -- and reading it
    would import, restore or verify that bundle's rows under this one's name."""
    src = doc.get("source")
    named = (src.get("db"), src.get("collection"), doc.get("bundle")) if isinstance(src, dict) else None
    if named != (db, collection, bundle):
        shown = "no place" if named is None else f"{named[0]}.{named[1]}/{named[2]}"
        raise BundleError(f"{where}: its bundle.json names {shown}, not the place it was read from: a document "
                          f"copied from another bundle (or collection); refused before anything is read or written")


def check(doc, where: str) -> dict:
    """The document's own consistency (format, version, segments <-> files). A Milvus
    capture (kind "milvus", docs/MILVUS_BUNDLE.md) is checked by its own rules."""
    check_files(doc, where)
    if doc.get("kind") is not None:
        if doc["kind"] != "milvus":
            raise BundleError(f"{where}: bundle kind {doc['kind']!r}; this seglake reads seglake exports and "
                              f"Milvus captures (kind 'milvus')")
        from seglake.milvus import bundledoc
        return bundledoc.check(doc, where)
    files, segments = doc["files"], doc["segments"]
    for i, e in enumerate(segments):
        if (bad := entries.problem(e)) is not None:
            raise BundleError(f"{where}: segment entry {i}: {bad}")
    _check_identity(doc, where)
    _check_sections(doc, where)
    _check_delta_partitions(doc, where)
    for e in segments:
        for fl in e["binlogs"]:   # each field's logs hold the segment's rows: no more, no less
            if sum(x["entries"] for x in fl["logs"]) != e["num_rows"]:
                raise BundleError(f"{where}: segment {e['segment_id']} has {e['num_rows']} rows, but the logs of its "
                                  f"field {fl['field_id']} give {sum(x['entries'] for x in fl['logs'])}")
        seg = manifest.entry_to_segment(e)
        try:
            built = {f.key for f in layout.segment_files(seg)}
        except ValueError as x:   # a name that makes no key of the layout (an index file's '../x')
            raise BundleError(f"{where}: segment {seg.segment_id}: {x}") from None
        for path, size in manifest.entry_files(e):
            f = files.get(path)
            if f is None or f["size"] != size:
                raise BundleError(f"{where}: segment {e.get('segment_id')} references {path} ({size} bytes), "
                                  f"which the bundle does not list with that size")
            if path not in built:
                raise BundleError(f"{where}: segment {seg.segment_id} references {path}, which is not the key its "
                                  f"ids name (an id or a path was altered)")
    return doc


def check_totals(doc: dict, where: str) -> None:
    """The totals a (checked, seglake) document states are those of its segments and files
    (what export computed): a verify report, a listing and the CLI show them, so a forged
    count (rows 9223372036854775807 for a bundle of 200) is refused, not reported as a
    verified bundle's. Called after the data files were checked (a file's own problem is
    named first): by an import and a restore before they write, by verify as a problem."""
    segments, files = doc["segments"], doc["files"]
    real = {"segments": len(segments), "rows": sum(e["num_rows"] for e in segments), "files": len(files),
            "bytes": sum(f["size"] for f in files.values()), "unique_blobs": len({f["sha256"] for f in files.values()})}
    for at, stated, keys in (("totals", doc.get("totals"), tuple(real)),
                             ("snapshot.totals", doc["snapshot"].get("totals"), ("segments", "rows"))):
        for k in keys:
            if isinstance(stated, dict) and k in stated and stated[k] != real[k]:
                raise BundleError(f"{where}: {at}.{k} is {stated[k]!r}, but its segments and files give {real[k]}: "
                                  f"an edited document")


def check_files(doc, where: str) -> dict:
    """The format, the version, and every file entry (a size in range, a SHA-256, one
    size per SHA-256); the sections present. Not the segment entries (see check)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BundleError(f"{where}: not a {FORMAT} document")
    if type(doc.get("version")) is not int or doc["version"] != VERSION:
        raise BundleError(f"{where}: format version {doc.get('version')!r}; this seglake reads version {VERSION}")
    files, segments = doc.get("files"), doc.get("segments")
    if not isinstance(files, dict) or not isinstance(segments, list) or not isinstance(doc.get("snapshot"), dict):
        raise BundleError(f"{where}: has no files, segments or snapshot section")
    sha_ok = layout.SHA256_RE.fullmatch
    sizes: dict[str, int] = {}
    for key, f in files.items():
        if not (isinstance(f, dict) and type(f.get("size")) is int and 0 <= f["size"] <= FILE_MAX
                and isinstance(f.get("sha256"), str) and sha_ok(f["sha256"])):
            raise BundleError(f"{where}: file entry {key!r} is invalid (size 0..{FILE_MAX}, a SHA-256)")
        if sizes.setdefault(f["sha256"], f["size"]) != f["size"]:
            raise BundleError(f"{where}: file {key!r} lists SHA-256 {f['sha256'][:16]}... with {f['size']} bytes, "
                              f"another file lists it with {sizes[f['sha256']]}")
    return doc


def _check_identity(doc: dict, where: str) -> None:
    """What an import builds ids, keys and the TSO from, checked before it writes anything:
    the uid, the timestamps, the collection's shards and partitions, and every segment
    entry (decodable, ids unique, its partition listed, its channel a shard of it)."""
    from seglake.meta.catalog import shard_of

    def bad(why: str):
        return BundleError(f"{where}: {why}")

    def is_int(v, lo: int, hi: int) -> bool:
        return type(v) is int and lo <= v <= hi

    if not (isinstance(doc.get("uid"), str) and re.fullmatch(r"[0-9a-f]{32}", doc["uid"])):
        raise bad("its uid is not 32 lowercase hex digits")
    src = doc.get("source")
    if not isinstance(src, dict) or not all(is_int(src.get(k), 0, 2**63 - 1) for k in ("max_ts", "consistent_ts")):
        raise bad("its source timestamps (max_ts, consistent_ts) are not integers in range")
    coll = doc["snapshot"].get("collection")
    if not isinstance(coll, dict) or not is_int(coll.get("shards"), 1, 16) or not isinstance(coll.get("partitions"), list):
        raise bad("its collection (shards 1..16, partitions) is malformed")
    parts = [p.get("partition_id") if isinstance(p, dict) else None for p in coll["partitions"]]
    if not parts or not all(is_int(p, 0, 2**63 - 1) for p in parts) or len(set(parts)) != len(parts):
        raise bad("its partitions are missing, malformed or repeated")
    names = [p.get("name") for p in coll["partitions"]]
    try:
        for n in names:
            validate_name("partition", n)
        if len(set(names)) != len(names):
            raise ValidationError(f"partition names repeat: {sorted(names)}")
        from seglake.meta.catalog import Schema
        Schema.from_json(coll.get("schema")).validate()
    except (ValidationError, TypeError, ValueError, AttributeError) as x:
        raise bad(f"its collection's partitions or schema are invalid ({x})") from None
    seen = set()
    for e in doc["segments"]:
        try:
            seg = manifest.entry_to_segment(e)
            shard = shard_of(seg.channel)
        except (KeyError, TypeError, ValueError, AttributeError) as x:
            raise bad(f"a segment entry is malformed ({type(x).__name__}: {x})") from None
        if seg.segment_id in seen or seg.partition_id not in parts or shard >= coll["shards"]:
            raise bad(f"segment {seg.segment_id}: repeated, in an unlisted partition, or on a shard the "
                      f"collection does not have")
        seen.add(seg.segment_id)


TIME_MAX = 1e11        # seconds since the epoch (year 5138): a later time is forged
TEXT_MAX = 64 << 10    # characters of a free-text field (description, owner)
LEVELS = ("L0", "L1", "L2")
ENTRY_STATES = ("Flushed", "Dropped")
VCHANNEL_RE = re.compile(rf"{re.escape(PCHANNEL_PREFIX)}[0-9]{{1,6}}_[0-9]{{1,19}}v[0-9]{{1,2}}", re.ASCII)


# the keys of a seglake export's sections (export.py writes them; older exports a subset):
# any other key is refused naming the closest (segment entries: entries.problem)
DOC_KEYS = ("format", "version", "bundle", "uid", "created_at", "made_by", "source", "snapshot", "segments",
            "files", "totals")
SOURCE_KEYS = ("db", "collection", "collection_id", "snapshot", "snapshot_id", "owner", "consistent_ts",
               "committed_at", "description", "max_ts", "site", "positions")
SNAPSHOT_KEYS = ("collection", "partition_ids", "index_build_ids", "totals")
FILE_KEYS = ("size", "sha256", "tag", "data_tag")
# snapshot.write.collection_doc's keys, and Collection.to_json's (state, properties)
COLLECTION_KEYS = ("collection_id", "name", "db", "created_ts", "schema", "shards", "vchannels", "partitions",
                   "state", "properties")


def refuse_unknown_keys(where: str, at: str, d, valid) -> None:
    """BundleError naming the first key of section `d` (at `at`) that is not in `valid`,
    with the closest valid one (a misspelt key would be read as absent): seglake exports
    and Milvus captures (seglake.milvus.bundledoc)."""
    for k in d:
        if k not in valid:
            raise BundleError(f"{where}: {at} has an unknown key {k!r}{entries.closest(k, valid)}")


def _check_sections(doc: dict, where: str) -> None:
    """Every other value of the document has its type and range (an import copies them
    into records and reports, a restore to a time starts its replay from `positions`):
    names full-match their patterns, ids and timestamps are integers in 0..ID_MAX (never
    a bool), times finite, text a string; each segment's state and level is one seglake
    writes, its insert logs are the schema's fields plus the row id and timestamp columns
    (legacy segments: without them; an L0 delete segment: none), its stats logs of schema
    fields."""
    import math

    from seglake.meta.catalog import shard_of

    def bad(at: str, v, want: str):
        return BundleError(f"{where}: {at} is {v!r:.80}, not {want}")

    def need_int(at: str, v, lo: int = 0, hi: int = limits.ID_MAX):
        if type(v) is not int or not lo <= v <= hi:
            raise bad(at, v, f"an integer in {lo}..{hi}")

    def need_time(at: str, v, optional: bool = False):
        if v is None and optional:
            return
        if type(v) not in (int, float) or not math.isfinite(v) or not 0 <= v <= TIME_MAX:
            raise bad(at, v, f"a time in seconds in 0..{TIME_MAX:g}")

    def need_text(at: str, v, optional: bool = False):
        if v is None and optional:
            return
        if not isinstance(v, str) or len(v) > TEXT_MAX:
            raise bad(at, v, f"a string of at most {TEXT_MAX} characters")

    def need_name(kind: str, at: str, v):
        try:
            validate_name(kind, v)
        except ValidationError as e:
            raise BundleError(f"{where}: {at}: {e}") from None

    def need_counts(at: str, d):
        if not isinstance(d, dict) or not all(isinstance(k, str) for k in d):
            raise bad(at, d, "a map of counts")
        for k, v in d.items():
            need_int(f"{at}.{k}", v)

    def known_keys(at: str, d, valid):
        refuse_unknown_keys(where, at, d, valid)

    known_keys("the document", doc, DOC_KEYS)
    known_keys("source", doc["source"], SOURCE_KEYS)
    known_keys("snapshot", doc["snapshot"], SNAPSHOT_KEYS)
    known_keys("snapshot.collection", doc["snapshot"]["collection"], COLLECTION_KEYS)
    for i, part in enumerate(doc["snapshot"]["collection"]["partitions"]):
        known_keys(f"snapshot.collection.partitions[{i}]", part, ("partition_id", "name"))
    for v, pos in (doc["source"].get("positions") or {}).items():
        if isinstance(pos, dict):
            known_keys(f"source.positions[{v!r}]", pos, ("checkpoint", "part_hw", "del_hw"))
    for key, f in doc["files"].items():
        known_keys(f"files[{key!r}]", f, FILE_KEYS)
    need_name("bundle", "bundle", doc.get("bundle"))
    need_time("created_at", doc.get("created_at"))
    need_text("made_by", doc.get("made_by"), optional=True)
    need_counts("totals", doc.get("totals", {}))
    src = doc["source"]
    need_name("db", "source.db", src.get("db"))
    need_name("collection", "source.collection", src.get("collection"))
    need_name("snapshot", "source.snapshot", src.get("snapshot"))
    for k in ("collection_id", "snapshot_id"):
        need_int(f"source.{k}", src.get(k))
    need_time("source.committed_at", src.get("committed_at"), optional=True)
    need_text("source.description", src.get("description", ""))
    need_text("source.owner", src.get("owner", ""))
    site = src.get("site")
    if site is not None and not (isinstance(site, str) and re.fullmatch(r"[0-9a-f]{32}", site)):
        raise bad("source.site", site, "32 lowercase hex digits")
    snap, coll = doc["snapshot"], doc["snapshot"]["collection"]
    need_name("db", "snapshot.collection.db", coll.get("db"))
    need_name("collection", "snapshot.collection.name", coll.get("name"))
    need_int("snapshot.collection.collection_id", coll.get("collection_id"))
    if "created_ts" in coll:   # (bundles exported before it was recorded have none)
        need_int("snapshot.collection.created_ts", coll["created_ts"])
    vchannels = coll.get("vchannels")
    if not isinstance(vchannels, list) or len(vchannels) != coll["shards"] or len(set(map(str, vchannels))) != len(vchannels):
        raise bad("snapshot.collection.vchannels", vchannels, f"{coll['shards']} distinct vchannel names")
    for i, v in enumerate(vchannels):
        try:
            ok = isinstance(v, str) and VCHANNEL_RE.fullmatch(v) and shard_of(v) == i
        except ValueError:
            ok = False
        if not ok:
            raise bad(f"snapshot.collection.vchannels[{i}]", v, f"the name of shard {i}")
    for k in ("partition_ids", "index_build_ids"):
        ids = snap.get(k, [])
        if not isinstance(ids, list):
            raise bad(f"snapshot.{k}", ids, "a list of ids")
        for i, v in enumerate(ids):
            need_int(f"snapshot.{k}[{i}]", v)
    need_counts("snapshot.totals", snap.get("totals", {}))
    positions = src.get("positions")
    if positions is not None:
        if not isinstance(positions, dict) or set(positions) - set(vchannels):
            raise bad("source.positions", positions, "a map of the collection's vchannels")
        # a mark is what the bundle's own segments give (flush.state.fold_high_water takes it
        # from segment records): a replay from these positions skips every insert of a
        # partition at or below its mark and every delete at or below del_hw, so a mark
        # above them would drop rows of the log silently
        row_hw: dict[tuple[str, int], int] = {}
        del_top: dict[str, int] = {}
        for e in doc["segments"]:
            key = (e["channel"], e["partition_id"])
            row_hw[key] = max(row_hw.get(key, 0), e["dml_ts"])
            del_top[e["channel"]] = max([del_top.get(e["channel"], 0)] + [x["ts_to"] for x in e["deltalogs"]])
        for v, pos in positions.items():
            at = f"source.positions[{v!r}]"
            if not isinstance(pos, dict):
                raise bad(at, pos, "a position")
            cp = pos.get("checkpoint")
            if cp is not None:
                if not isinstance(cp, list) or len(cp) != 4:
                    raise bad(f"{at}.checkpoint", cp, "null or [term, fragment, offset, time tick]")
                for i, x in enumerate(cp):
                    need_int(f"{at}.checkpoint[{i}]", x)
                if cp[3] > src["consistent_ts"]:   # the checkpoint was read before consistent_ts was drawn
                    raise BundleError(f"{where}: {at}.checkpoint's time tick {cp[3]} is above the bundle's "
                                      f"consistent_ts {src['consistent_ts']}: a replay from it would skip the log "
                                      f"up to it")
            need_int(f"{at}.del_hw", pos.get("del_hw"))
            need_counts(f"{at}.part_hw", pos.get("part_hw"))
            for k in pos["part_hw"]:
                if not (k.isascii() and k.isdigit()):
                    raise bad(f"{at}.part_hw", k, "a partition id")
                top = row_hw.get((v, int(k)), 0)
                if pos["part_hw"][k] > top:
                    raise BundleError(f"{where}: {at}.part_hw[{k!r}] is {pos['part_hw'][k]}, above the newest row "
                                      f"tick ({top}) of the bundle's segments of that vchannel and partition: a "
                                      f"replay from it would skip the log's rows up to it")
            if pos["del_hw"] > del_top.get(v, 0):
                raise BundleError(f"{where}: {at}.del_hw is {pos['del_hw']}, above the newest delete tick "
                                  f"({del_top.get(v, 0)}) of the bundle's delta logs on that vchannel: a replay "
                                  f"from it would skip the log's deletes up to it")
    for key, f in doc["files"].items():
        for k in ("tag", "data_tag"):
            need_text(f"files[{key!r}].{k}", f.get(k, ""))
    fields = {f["field_id"] for f in coll["schema"]}          # checked by Schema.validate (_check_identity)
    stored = fields | {0, 1}                                  # + the row id and timestamp columns
    for e in doc["segments"]:
        at = f"segment {e['segment_id']}"
        if e["state"] not in ENTRY_STATES:
            raise bad(f"{at}: state", e["state"], f"one of {', '.join(ENTRY_STATES)}")
        if e["level"] not in LEVELS:
            raise bad(f"{at}: level", e["level"], f"one of {', '.join(LEVELS)}")
        logged = [fl["field_id"] for fl in e["binlogs"]]
        if len(set(logged)) != len(logged) or (logged and not fields <= set(logged) <= stored) \
                or (not logged and e["num_rows"]):
            raise BundleError(f"{where}: {at} has insert logs of fields {sorted(logged)}; the schema stores "
                              f"{sorted(fields)} (each once, with the row id 0 and the timestamp 1 but in "
                              f"segments written before the row model)")
        stats = {fl["field_id"] for fl in e["statslogs"]}
        if stats - fields:
            raise BundleError(f"{where}: {at} has stats logs of fields {sorted(stats - fields)} the schema lacks")


def _check_delta_partitions(doc: dict, where: str) -> None:
    """Every partition a segment's delta_partitions names is one of the bundle's (an
    import translates delete scopes by these names: visibility module doc)."""
    names = {p["name"] for p in doc["snapshot"]["collection"]["partitions"]}   # valid, unique: _check_identity
    for e in doc["segments"]:
        dp = manifest.delta_partitions(e) or {}
        unknown = sorted(set(dp.values()) - names - {""})    # "": a partition without rows (visibility)
        if unknown:
            raise BundleError(f"{where}: segment {e.get('segment_id')}: its delta logs name partitions "
                              f"{unknown} that the bundle's collection does not have")


def find(target: Store, db: str | None = None, collection: str | None = None) -> Iterator[tuple[str, str, str, bool]]:
    """(db, collection, bundle, committed) of every bundle directory in the target."""
    seen: dict[tuple[str, str, str], bool] = {}
    for o in target.list(layout.bundles_prefix(db, collection) if db else layout.bundles_prefix()):
        parsed = layout.parse_bundle_key(o.key)
        if parsed is None:
            continue
        d, c, b, name = parsed
        seen[(d, c, b)] = seen.get((d, c, b), False) or name == layout.BUNDLE_COMMIT
    for (d, c, b), committed in sorted(seen.items()):
        yield d, c, b, committed


def summary(doc: dict) -> dict:
    src = doc["source"]
    return {"bundle": doc["bundle"], "uid": doc["uid"], "db": src["db"], "collection": src["collection"],
            "snapshot": src["snapshot"], "snapshot_id": src["snapshot_id"], "created_at": doc["created_at"],
            "consistent_ts": src["consistent_ts"], "site": src.get("site"), **doc["totals"]}


def list_bundles(target: Store, db: str | None = None, collection: str | None = None) -> list[dict]:
    """Every bundle in the target: its summary, or its state (incomplete, damaged)."""
    out = []
    for d, c, b, committed in find(target, db, collection):
        if not committed:
            out.append({"db": d, "collection": c, "bundle": b, "state": "incomplete"})
            continue
        try:
            out.append({**summary(read(target, d, c, b)), "state": "committed"})
        except (BundleError, NotFound, ValidationError) as e:
            out.append({"db": d, "collection": c, "bundle": b, "state": "damaged", "error": str(e)})
    return out


def data_tag(o) -> str:
    """What identifies one version of a data file in the target cheaply (a listing tells
    it): its size and S3 ETag, else its size, mtime and (local) inode change time. Any
    rewrite changes it, also one that puts the mtime back."""
    etag = getattr(o, "etag", "")
    if etag:
        return f"{o.size}:etag:{etag}"
    ctime = getattr(o, "ctime_ns", 0)   # (local: an mtime put back after a rewrite leaves it changed)
    return f"{o.size}:mtime:{o.mtime:.6f}" + (f":ctime:{ctime}" if ctime else "")


def blob_tags(target: Store) -> dict[str, tuple[int, str]]:
    """{sha256: (size, data tag)} of every data file in the target (one listing)."""
    out = {}
    for o in target.list_described(layout.BUNDLE_DATA):
        sha = layout.parse_bundle_blob(o.key)
        if sha is not None:
            out[sha] = (o.size, data_tag(o))
    return out


def known_files(target: Store, db: str, collection: str) -> dict[tuple[str, int, str], tuple[str, str]]:
    """{(source key, size, source tag): (sha256, data tag)} from the newest committed bundle
    of a collection that reads back whole: what an incremental export need not read again
    at the source, and the tag its data file had when that export last checked or wrote
    its content ('' if none recorded). One bundle, not all: the cost stays that of one
    bundle however many there are."""
    found = []
    for d, c, b, committed in find(target, db, collection):
        if committed:
            try:
                key = layout.bundle_commit(d, c, b)
                at = codec.moment(codec.loads(target.get(key), key), "committed_at", key)
            except (NotFound, ValueError):
                continue
            found.append((at, d, c, b))
    for _, d, c, b in sorted(found, reverse=True):
        try:   # the files section is all this reads (each data file is checked in the target anyway)
            doc = read(target, d, c, b, segments=False)
        except (BundleError, NotFound):
            continue   # a damaged bundle vouches for nothing: try the next newest
        return {(key, f["size"], f["tag"]): (f["sha256"], f.get("data_tag", "")) for key, f in doc["files"].items()
                if f.get("tag")}
    return {}


def seglake_only(doc: dict, where: str) -> dict:
    """`doc`, refused when it is not a seglake export (a Milvus capture is restored into
    Milvus, not into this store)."""
    if doc.get("kind") is not None:
        raise BundleError(f"{where} is a capture of a {doc['kind']} collection; it restores into {doc['kind']}, "
                          f"not into a seglake store")
    return doc


def existing(target: Store, db: str, collection: str, bundle: str) -> dict | None:
    try:
        return read(target, db, collection, bundle)
    except NotFound:
        return None


def same_snapshot(doc: dict, snapshot_id: int, collection_id: int, site: str | None = None) -> bool:
    """The bundle `doc` is of this snapshot. Ids are local to one etcd root: two sites
    (roots) that back up to one target allocate the same ids for the same history, so the
    bundle's `source.site` must be this root's (`site`: archive.site_id) when it names one
    (a bundle exported before sites were recorded names none: its ids alone decide)."""
    src = doc["source"]
    if src.get("snapshot_id") != snapshot_id or src.get("collection_id") != collection_id:
        return False
    return site is None or src.get("site") in (None, site)


def refuse_other(doc: dict, db: str, collection: str, bundle: str) -> None:
    src = doc["source"]
    raise Conflict(f"bundle {db}.{collection}/{bundle} already exists in the backup target for snapshot "
                   f"{src['snapshot']!r} (id {src['snapshot_id']}"
                   f"{', site ' + str(src['site']) if src.get('site') else ''}); choose another bundle name")
