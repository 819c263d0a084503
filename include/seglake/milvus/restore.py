"""Restore a Milvus capture (a seglake bundle of kind "milvus", docs: milvus-bundle-format),
or a seglake export converted to Milvus binlogs at staging (seglake.milvus.convert), into a
Milvus server, under a new collection name, through Milvus's public API and its bulk
insert of binlog files in backup mode (as milvus-backup does: core/restore/coll_task.go,
one ImportRequest per group of a partition's segments with files [insert dir, delta dir] of
the partition and option backup=true; Milvus 2.3 importutil/binlog_parser.go reads the
segment and field ids from the sub-directories).

    check -> plan -> run (create, stage + import each unit, wait) -> index, load -> verify

The restore's record ({root}/milvus/restores/{rid}, rid = hash of target address, bucket,
db and name) and one record per import unit ({root}/milvus/restore_segments/{rid}/{unit},
unit = its first segment id; see units()) live in seglake's etcd; every transition is one
compare-guarded write:

    restore:  checked -> creating -> created -> importing -> imported -> indexed -> loaded -> verified
    unit:     pending -> staged -> submitting -> importing(task id) -> imported
                                        ^                 |
                                        +--- failed <-----+   (Milvus failed it: resubmitted,
                                                                at most IMPORT_ATTEMPTS times)

Every step is idempotent; a killed run re-run with the same arguments resumes:
- `creating` without the collection id: the name is adopted only if its schema is the
  bundle's and no import ran into it (else Conflict: someone else's collection).
- `submitting` (the import may or may not have reached Milvus): Milvus's list of import
  tasks for the collection is searched for one whose files are this unit's staging dirs
  (unique per restore and unit); found -> adopted, else submitted again. A segment is
  never imported twice.
- staging copies only what is missing, each file checked by SHA-256 as it passes.
Nothing is written on either side before check() passes: the bucket and staging prefix
well-formed, Milvus reachable, the name free
(or this restore's own), the bundle's document and every data file checked by content,
the schema representable.

One unit (~540 lines): the document checks, the two records' state machine, the import loop
that resumes it and the verify that judges it share one contract (the staging layout, the
record fields); the binlog reading is binlog.py's, the Milvus calls client.py's.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from seglake import faults, runners
from seglake.errors import Conflict, CorruptRecord, SeglakeError, ValidationError
from seglake.lifecycle.backup import bundle as bundles
from seglake.meta import codec
from seglake.meta.kv import Put, absent, unchanged
from seglake.milvus import binlog, binlog_writer, convert, proto
from seglake.milvus.client import MilvusClient, MilvusError
from seglake.names import validate_name
from seglake.storage import layout

KIND = "milvus"
IMPORT_ATTEMPTS = 3
# One import task per partition's segments up to this many bytes of files (milvus-backup groups
# a partition's segments the same way). Milvus 2.3 runs one import task at a time per data
# node and frees it only once the task's segments are flushed (checked every 2 s): one task
# per segment cost a standalone ~2-4 s per segment. A restore records the bound it began with
# and keeps it (a run that plans other units is refused: see _same_units).
GROUP_BYTES = 1 << 30
RUN_LEASE_S = 6           # a killed run's claim on its restore lapses within this (see _one_run)
STAGING_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
# schemapb.DataType that a 2.3 bulk insert of binlogs restores (Float16/BFloat16/Sparse are 2.4+)
TYPES = {1: "Bool", 2: "Int8", 3: "Int16", 4: "Int32", 5: "Int64", 10: "Float", 11: "Double",
         21: "VarChar", 22: "Array", 23: "JSON", 100: "BinaryVector", 101: "FloatVector"}
VECTOR_TYPES = (100, 101)
TERMINAL_OK, TERMINAL_FAILED = {"Completed"}, {"Failed", "FailedAndCleaned"}
_INSERT_RE = re.compile(r"insert_log/(\d+)/(\d+)/(\d+)/(\d+)/(\d+)")
_DELTA_RE = re.compile(r"delta_log/(\d+)/(\d+)/(\d+)/(\d+)")


class MilvusRestoreError(SeglakeError):
    """The restore cannot go on (a refused bundle or schema, a failed import, a failed verify)."""


class UnreadBucket(MilvusRestoreError):
    """Milvus's import read none of the staged files: the target's bucket is not the one the
    target Milvus reads. The restore undoes what it made (_abandon) and says so."""


@dataclass(frozen=True)
class MilvusTarget:
    """A Milvus server and its bucket (what bulk insert reads). Secrets never in repr/logs."""

    address: str                                   # host:port of the proxy
    bucket: str
    s3_endpoint: str
    s3_access_key: str = field(default="", repr=False)
    s3_secret_key: str = field(default="", repr=False)
    s3_region: str = "us-east-1"
    user: str = ""
    password: str = field(default="", repr=False)
    staging: str = "seglake-restore"              # seglake's prefix in the bucket

    def client(self, timeout: float = 600.0) -> MilvusClient:
        return MilvusClient(self.address, user=self.user, password=self.password, timeout=timeout)

    def store(self):
        from seglake.storage.s3 import S3Store
        return S3Store(f"s3://{self.bucket}/{self.staging}", endpoint=self.s3_endpoint, region=self.s3_region,
                       access_key=self.s3_access_key, secret_key=self.s3_secret_key)

    def describe(self) -> dict:
        return {"address": self.address, "bucket": self.bucket, "staging": self.staging}

    def check(self) -> None:
        """The bucket and the staging prefix as S3 names them, the prefix one segment
        (STAGING_RE), an address and an endpoint given: before anything is written on either
        side (the staging store is opened only after the collection is created)."""
        from seglake.storage.s3 import parse_s3_uri

        if not isinstance(self.staging, str) or not STAGING_RE.fullmatch(self.staging):
            raise ValidationError(f"staging prefix {self.staging!r}: one path segment of letters, digits, '_' and '-' "
                                  f"(at most 63, starting with a letter or digit), e.g. 'seglake-restore'")
        try:
            parse_s3_uri(f"s3://{self.bucket}/{self.staging}")
        except ValueError as e:
            raise ValidationError(f"the target Milvus's bucket: {e}") from None
        for k in ("address", "s3_endpoint"):
            if not isinstance(getattr(self, k), str) or not getattr(self, k).strip():
                raise ValidationError(f"the target Milvus's {k} is empty")
        # full matches, before anything is written: an address is one host:port (names.parse_endpoints:
        # user info refused unechoed), the endpoint an http(s) URL without credentials, as config's
        from seglake.config import _is_endpoint
        from seglake.names import check_text, parse_endpoints

        if len(parse_endpoints("the target Milvus's address", self.address)) != 1:
            raise ValidationError("the target Milvus's address: one host:port (its proxy), not a list")
        if not _is_endpoint(self.s3_endpoint):
            shown = "(not shown: it holds '@', a credential?)" if "@" in self.s3_endpoint else repr(self.s3_endpoint)
            raise ValidationError(f"the target Milvus's s3_endpoint {shown} is not an http:// or https:// URL with "
                                  f"a host and no credentials (e.g. http://127.0.0.1:9000)")
        check_text("the target Milvus's s3_region", self.s3_region, 64)
        check_text("the target Milvus's user", self.user, 256)


@dataclass
class Request:
    db: str
    collection: str             # the captured collection (the bundle's path)
    bundle: str
    name: str                   # the new collection in Milvus
    sample: int = 100           # pks whose values verify compares
    import_timeout: float = 1800.0
    poll: float = 1.0
    threads: int = 4

    def check(self) -> None:
        bundles.check_names(self.db, self.collection, self.bundle)
        validate_name("collection", self.name)
        for k, lo, hi in (("sample", 0, 100_000), ("threads", 1, 64)):
            v = getattr(self, k)
            if type(v) is not int or not lo <= v <= hi:
                raise ValidationError(f"{k} must be an integer in {lo}..{hi}, got {v!r}")
        for k, lo, hi in (("import_timeout", 1, 86_400), ("poll", 0.05, 60)):
            v = getattr(self, k)
            if not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise ValidationError(f"{k} must be a number in {lo}..{hi}, got {v!r}")


def restore_id(target: MilvusTarget, req: Request) -> str:
    return hashlib.sha256(f"{target.address}|{target.bucket}|{req.db}|{req.name}".encode()).hexdigest()[:24]


# -- the bundle ---------------------------------------------------------------------------
def read_bundle(backup, req: Request) -> dict:
    """The capture's document: the commit marker's SHA-256, the format, the file entries
    (bundle.read), then what a restore into Milvus relies on: kind "milvus", the schema,
    partitions, and every segment log's path the key its ids name and listed in files."""
    doc = bundles.read(backup, req.db, req.collection, req.bundle, segments=False)
    where = f"bundle {req.db}.{req.collection}/{req.bundle}"
    if doc.get("kind") is None:      # a seglake export: converted (seglake.milvus.convert)
        full = bundles.seglake_only(bundles.read(backup, req.db, req.collection, req.bundle), where)
        try:
            return convert.as_milvus(full)
        except (KeyError, TypeError, ValueError) as e:
            raise MilvusRestoreError(f"{where}: the export document is incomplete ({type(e).__name__}: {e})") from None
    if doc.get("kind") != KIND:
        raise MilvusRestoreError(f"{where} is of kind {doc.get('kind')!r}: neither a Milvus capture nor a seglake export")
    try:
        coll = doc["snapshot"]["collection"]
        parts = {int(p["partition_id"]): p["name"] for p in coll["partitions"]}
        files = doc["files"]
        for e in doc["segments"]:
            sid, pid = int(e["segment_id"]), int(e["partition_id"])
            if pid not in parts:
                raise MilvusRestoreError(f"{where}: segment {sid} names partition {pid}, not one of the collection's")
            if sum(int(x["entries"]) for b in e["binlogs"] for x in b["logs"] if int(b["field_id"]) == 1) != int(e["num_rows"]):
                raise MilvusRestoreError(f"{where}: segment {sid}: its timestamp logs do not hold its {e['num_rows']} rows")
            for b in e["binlogs"]:
                for x in b["logs"]:
                    m = _INSERT_RE.fullmatch(x["path"])
                    if not m or (int(m[2]), int(m[3]), int(m[4])) != (pid, sid, int(b["field_id"])) or x["path"] not in files:
                        raise MilvusRestoreError(f"{where}: segment {sid} lists {x['path']!r}: not the key its ids name, "
                                                 f"or not a file of the bundle")
            for b in e.get("deltalogs", []):
                for x in b["logs"]:
                    m = _DELTA_RE.fullmatch(x["path"])
                    if not m or (int(m[2]), int(m[3])) != (pid, sid) or x["path"] not in files:
                        raise MilvusRestoreError(f"{where}: segment {sid} lists delete log {x['path']!r}: not the key "
                                                 f"its ids name, or not a file of the bundle")
    except (KeyError, TypeError, ValueError) as e:
        raise MilvusRestoreError(f"{where}: the capture document is incomplete ({type(e).__name__}: {e})") from None
    return doc


def check_schema(doc: dict) -> dict:
    """The schema as create_full takes it, or MilvusRestoreError naming the field that a
    restore through the public API cannot reproduce."""
    sch = doc["snapshot"]["collection"]["schema"]
    fields = sorted(sch["fields"], key=lambda f: int(f["field_id"]))
    if [int(f["field_id"]) for f in fields] != list(range(100, 100 + len(fields))):
        raise MilvusRestoreError(f"schema: field ids {[f['field_id'] for f in fields]} are not 100.. in order: a new "
                                 f"collection would number them otherwise, and bulk insert maps binlogs by field id")
    dyn = [f for f in fields if f.get("is_dynamic")]
    if dyn or sch.get("enable_dynamic_field"):
        # Milvus makes the dynamic field itself ($meta, JSON, the last field id) when a
        # collection enables it: it is never in the create call, but its binlogs map to it
        if len(dyn) != 1 or not sch.get("enable_dynamic_field") or dyn[0] is not fields[-1] \
                or int(dyn[0]["data_type"]) != 23:
            raise MilvusRestoreError(f"schema: dynamic field(s) {[f['name'] for f in dyn]} with "
                                     f"enable_dynamic_field={bool(sch.get('enable_dynamic_field'))}: not the one JSON "
                                     f"field, last, that Milvus makes for a collection with dynamic fields")
    pks = [f for f in fields if f.get("is_primary_key")]
    if len(pks) != 1:
        raise MilvusRestoreError(f"schema: {len(pks)} primary key fields (one is required)")
    for f in fields:
        if int(f["data_type"]) not in TYPES:
            raise MilvusRestoreError(f"schema: field {f['name']!r} has data type {f.get('data_type_name') or f['data_type']}, "
                                     f"which a restore into Milvus 2.3 does not support")
        if int(f["data_type"]) in VECTOR_TYPES and not str((f.get("type_params") or {}).get("dim", "")).isdigit():
            raise MilvusRestoreError(f"schema: vector field {f['name']!r} has no dim")
    keyed = [f for f in fields if f.get("is_partition_key")]
    if len(keyed) > 1 or (keyed and int(keyed[0]["data_type"]) not in (5, 21)):
        raise MilvusRestoreError(f"schema: partition key field(s) {[(f['name'], f.get('data_type_name')) for f in keyed]}: "
                                 f"Milvus takes one, Int64 or VarChar")
    return {"fields": fields, "auto_id": bool(sch.get("auto_id")), "description": sch.get("description", ""),
            "enable_dynamic_field": bool(sch.get("enable_dynamic_field"))}


def seg_files(e: dict) -> list[str]:
    return [x["path"] for b in e["binlogs"] for x in b["logs"]] + \
           [x["path"] for b in e.get("deltalogs", []) for x in b["logs"]]


def check_content(backup, doc: dict, threads: int) -> None:
    """Every data file the segments need is in the backup target with its SHA-256."""
    paths = convert.data_paths(doc) if doc.get("converted") else [p for e in doc["segments"] for p in seg_files(e)]
    need = {doc["files"][p]["sha256"]: doc["files"][p]["size"] for p in paths}
    listed = bundles.blobs(backup)

    def one(item):
        sha, size = item
        if listed.get(sha) != size or not bundles.has_content(backup, layout.bundle_blob(sha), sha, size):
            return sha
        return None

    bad = [s for s in runners.run_inline(one, sorted(need.items()), workers=threads) if s]
    if bad:
        names = sorted(p for p, f in doc["files"].items() if f["sha256"] in set(bad))
        raise MilvusRestoreError(f"{len(bad)} data file(s) of the bundle are missing or damaged in the backup target "
                                 f"(e.g. {names[0]}); nothing was written")


# -- etcd records -------------------------------------------------------------------------
class Records:
    def __init__(self, kv, keys, rid: str):
        self.kv, self.keys, self.rid = kv, keys, rid
        self.key = keys.milvus_restore(rid)

    def get(self):
        kv = self.kv.get(self.key)
        return (codec.loads(kv.value, kv.key), kv) if kv else (None, None)

    def create(self, rec: dict) -> None:
        try:
            self.kv.txn([absent(self.key)], [Put(self.key, json.dumps(rec))])
        except Conflict:
            raise Conflict(f"restore {self.rid}: its record was created concurrently") from None

    def move(self, to: str, **extra) -> dict:
        rec, kv = self.get()
        rec.update(state=to, **extra)
        self.kv.txn([unchanged(kv)], [Put(self.key, json.dumps(rec))])
        return rec

    def segments(self) -> dict[int, tuple[dict, object]]:
        out = {}
        for item in self.kv.range(self.keys.milvus_restore_segments_prefix(self.rid)):
            out[int(item.key.rsplit("/", 1)[1])] = (codec.loads(item.value, item.key), item)
        return out

    def seg_put(self, sid: int, rec: dict, prev) -> None:
        key = self.keys.milvus_restore_segment(self.rid, sid)
        self.kv.txn([unchanged(prev) if prev is not None else absent(key)], [Put(key, json.dumps(rec))])


# -- the lifecycle ------------------------------------------------------------------------
def check(kv, keys, backup, target: MilvusTarget, req: Request, client=None) -> dict:
    """Nothing written on either side before this passes. Returns the plan (small, serializable)."""
    req.check()
    target.check()
    doc = read_bundle(backup, req)
    schema = check_schema(doc)
    client = client or target.client(timeout=120)
    from seglake.milvus import check_version          # MilvusUnreachable when it is not there
    version = check_version(client.one({"op": "version"}).get("version", ""), target.address, "written")
    rid = restore_id(target, req)
    rec, _ = Records(kv, keys, rid).get()
    # a restore whose collection was dropped since (finished, or killed half-way and its half-made
    # collection dropped by the operator to start clean): the name is free again (its record is
    # replaced when the run begins, see _forget_dropped); it was resumed, and failed on the
    # missing collection, or refused another bundle for a name Milvus does not have
    replaces = not _running(kv, keys, rid) and _dropped_since(rec, client, req.name)
    if replaces:
        rec = None
    if rec is not None and rec["bundle_uid"] != doc["uid"]:
        raise Conflict(f"a restore of another bundle ({rec['bundle']}) into {req.name!r} at {target.address} is "
                       f"recorded (restore {rid})")
    same_staging(rec, target, rid)
    readable(target)
    if rec is None and client.one({"op": "has", "name": req.name})["exists"]:
        raise Conflict(f"collection {req.name!r} already exists in Milvus at {target.address}; restore under a new name")
    check_content(backup, doc, req.threads)
    if doc.get("converted"):
        convert.Converter(backup, doc).check_values()
    fixes = {} if doc.get("converted") or not filters_by_pk(version) else \
        pk_filter_fixes(backup, doc, f"Milvus {version} at {target.address}")
    coll = doc["snapshot"]["collection"]
    return {"rid": rid, "replaces": replaces, "delete_fixes": fixes, "uid": doc["uid"], "schema": schema, "converted": bool(doc.get("converted")), "shards": int(coll["shards"]),
            "consistency_level": int(coll.get("consistency_level", 0)),
            "properties": _properties(coll.get("properties")),
            "partitions": _partitions(coll, schema),
            "indexes": doc["snapshot"].get("indexes", [])}


def _dropped_since(rec: dict | None, client, name: str) -> bool:
    """A recorded restore whose name Milvus does not have: its collection dropped by its user
    since (verified, or a killed restore's half-made collection dropped to start clean), or
    never made (stopped before or at Milvus's create call, which Milvus may refuse): history,
    once no run of it is going on (the caller's claim, or _running). Refusing it for ever
    left a name free in Milvus that no restore could ever take again."""
    return rec is not None and not client.one({"op": "has", "name": name})["exists"]


def _running(kv, keys, rid: str) -> bool:
    """A run of restore `rid` holds its claim now (_one_run)."""
    return kv.get(keys.milvus_restore_run(rid)) is not None


def _forget_dropped(kv, keys, recs, client, name: str, target: MilvusTarget) -> None:
    """Under the run's claim: a recorded restore whose name Milvus does not have is history
    (_dropped_since); its staged files and records go, so this run restores into the free
    name from the start. The files first: Milvus's binlog import reads every segment folder
    under a unit's partition dir, and a folder the earlier run staged there for a segment this
    bundle does not have (a newer capture, that segment compacted away) would be imported too."""
    rec, _ = recs.get()
    if _dropped_since(rec, client, name):
        if (rec.get("target") or {}).get("staging", target.staging) == target.staging:
            store = target.store()
            store.delete_many([o.key for o in store.list(f"{recs.rid}/")])
        kv.delete_prefix(keys.milvus_restore_segments_prefix(recs.rid))
        kv.delete(recs.key)


def filters_by_pk(version: str) -> bool:
    """Milvus before 2.3.4 (and a Milvus that reports no version): its bulk insert of binlogs
    leaves out every row of a pk its segment's delete logs name, whatever the timestamps
    (milvus #29162, fixed in 2.3.4): an upsert's new row (its delete has the row's own
    timestamp, in the same segment) or a row inserted again after a delete would be lost."""
    m = re.match(r"v?2\.3\.(\d+)", version or "")
    return m is None or int(m.group(1)) < 4


def pk_filter_fixes(backup, doc: dict, where: str) -> dict[str, list]:
    """For a target that filters by pk alone (filters_by_pk): {segment id: {"drop_deletes":
    pks whose delete records are left out of its staged delete logs, "skip_rows": row indexes
    left out of its staged insert logs}} for each segment with a visible row of a pk its
    delete logs name (an upsert, a pk inserted again after a delete). Staged that way, the
    pk-only filter keeps exactly the visible rows: the hidden rows of those pks are not
    staged, and their deletes, hiding nothing else of the segment, are left out (a segment's
    delete logs reach no other segment through an import). Refused before anything is
    written if an insert log would be left with no row."""
    pk_f = next(int(f["field_id"]) for f in doc["snapshot"]["collection"]["schema"]["fields"] if f.get("is_primary_key"))
    out, empty = {}, []
    for e in doc["segments"]:
        deletes: dict = {}
        for b in e.get("deltalogs", []):
            for x in b["logs"]:
                for pk, ts in _dels(backup, doc, x["path"]):
                    deletes[pk] = max(deletes.get(pk, 0), ts)
        if not deletes:
            continue
        logs = {int(b["field_id"]): b["logs"] for b in e["binlogs"]}
        pks = [v for x in logs[pk_f] for v in _col(backup, doc, x["path"])]
        tss = [v for x in logs[1] for v in _col(backup, doc, x["path"])]
        shown, hidden = set(), set()
        for pk, ts in zip(pks, tss):
            if pk in deletes:
                (hidden if deletes[pk] > ts else shown).add(pk)
        if shown:
            both = shown & hidden
            skip = [i for i, (pk, ts) in enumerate(zip(pks, tss)) if pk in both and deletes[pk] > ts]
            offsets = [0]
            for x in logs[pk_f]:
                offsets.append(offsets[-1] + int(x["entries"]))
            for a, b in zip(offsets, offsets[1:]):
                if b > a and sum(1 for i in skip if a <= i < b) == b - a:
                    empty.append(f"segment {e['segment_id']}")     # a log would be left with no row
                    break
            out[str(e["segment_id"])] = {"drop_deletes": sorted(shown, key=str), "skip_rows": skip}
    if empty:
        raise MilvusRestoreError(
            f"{where} imports binlogs leaving out every row of a pk its segment's delete logs name (milvus #29162, "
            f"fixed in 2.3.4); seglake stages such a segment without the rows its deletes hide, but in "
            f"{', '.join(empty[:3])} an insert log would be left with no row: restore into Milvus 2.3.4 or later; "
            f"nothing written")
    return out


def same_staging(rec: dict | None, target: MilvusTarget, rid: str) -> None:
    """A restore resumes under the staging prefix it began with: its segments were staged
    and its imports submitted (and are found again on a re-run) by their files there."""
    was = ((rec or {}).get("target") or {}).get("staging", target.staging)
    if was != target.staging:
        raise Conflict(f"restore {rid} of {rec.get('name')!r} began with staging prefix {was!r}: its files are "
                       f"staged and its imports submitted under it; re-run with staging {was!r}, not "
                       f"{target.staging!r}")


def readable(target: MilvusTarget) -> None:
    """The target's bucket lists with the given credentials (one LIST of the staging
    prefix): a wrong key, a missing bucket or no permission is said before anything is
    written on either side, not after the collection is created."""
    try:
        next(iter(target.store().list("")), None)
    except SeglakeError as e:
        raise MilvusRestoreError(f"the target Milvus's bucket {target.bucket!r} at {target.s3_endpoint} cannot be "
                                 f"listed under {target.staging}/ ({e}); nothing was written") from None


def _partitions(coll: dict, schema: dict) -> list[str]:
    """The partitions by id. A partition-key collection's are Milvus's own, `_default_0` ..
    `_default_{n-1}` (made by the create call with num_partitions=n, the key hashed over
    them): the restore makes the same n, so each segment imports into the partition of its
    name and every row lands where the key's hash puts it (2.3.5 takes a backup import into
    a named partition of such a collection)."""
    names = [p["name"] for p in sorted(coll["partitions"], key=lambda p: int(p["partition_id"]))]
    if any(f.get("is_partition_key") for f in schema["fields"]):
        want = [f"_default_{i}" for i in range(len(names))]
        if sorted(names) != sorted(want) or not 1 <= len(names) <= 4096:
            raise MilvusRestoreError(f"schema: a partition-key collection whose partitions {names[:8]} are not "
                                     f"Milvus's _default_0.._default_{{n-1}}: a restore cannot remake them")
    return names


def partition_key(plan: dict) -> bool:
    return any(f.get("is_partition_key") for f in plan["schema"]["fields"])


def _properties(props) -> dict:
    """The collection's properties (e.g. collection.ttl.seconds), given to the create call
    itself (never altered afterwards: a refused property leaves no collection behind)."""
    props = props or {}
    if not isinstance(props, dict) or not all(isinstance(k, str) and isinstance(v, str) and len(k) <= 256
                                               and len(v) <= 65536 for k, v in props.items()):
        raise MilvusRestoreError(f"the collection's properties are not a map of strings: {str(props)[:200]}")
    return dict(sorted(props.items()))


def _seg_bytes(doc: dict, e: dict) -> int:
    paths = convert.data_paths({"segments": [e]}) if doc.get("converted") else seg_files(e)
    return sum(int(doc["files"][p]["size"]) for p in paths if p in doc["files"])


def units(doc: dict, plan: dict, group_bytes: int | None = None) -> list[dict]:
    """One unit per import task: a partition's segments in segment-id order, taken while
    their files add up to at most `group_bytes` (GROUP_BYTES; a larger segment alone), staged
    under {rid}/{first segment id}/ and imported with that partition's two dirs (Milvus 2.3's
    binlog import reads every segment folder under them, each segment's delete logs applied to
    its own rows). A pure function of the bundle: a re-run plans the same units. group_bytes 0:
    one unit per segment, with the segment's own dirs (a restore recorded before groups, v1)."""
    group_bytes = GROUP_BYTES if group_bytes is None else group_bytes
    parts = {int(p["partition_id"]): p["name"] for p in doc["snapshot"]["collection"]["partitions"]}
    groups: list[list[dict]] = []
    open_: dict[int, tuple[list, int]] = {}           # partition id -> (its group being filled, bytes)
    for e in sorted(doc["segments"], key=lambda e: int(e["segment_id"])):
        if doc.get("converted") and int(e["num_rows"]) == 0:
            continue                  # deletes only: they reach Milvus through the rows they hide
        p, size = int(e["partition_id"]), _seg_bytes(doc, e)
        g, filled = open_.get(p, (None, 0))
        if g is None or not group_bytes or filled + size > group_bytes:
            g, filled = [], 0
            groups.append(g)
        g.append(e)
        open_[p] = (g, filled + size)
    out = []
    for g in groups:
        first = g[0]
        uid, p = int(first["segment_id"]), int(first["partition_id"])
        c = int(first["collection_id"]) if doc.get("converted") else doc["source"]["collection_id"]
        base = f"{plan['rid']}/{uid}"
        segs = [{"segment_id": int(e["segment_id"]), "rows": int(e["num_rows"]),
                 **_fix_of(e, plan.get("delete_fixes", {}).get(str(e["segment_id"]))),
                 "files": [] if doc.get("converted") else
                          [(path, doc["files"][path]["sha256"], doc["files"][path]["size"]) for path in seg_files(e)]}
                for e in g]
        # always both dirs: 2.3 takes a binlog import only with two paths (an empty delta dir
        # is fine; milvus-backup passes "" there)
        tail = f"{c}/{p}/{uid}/" if not group_bytes else f"{c}/{p}/"
        out.append({"unit_id": uid, "partition": parts[p], "rows": sum(s["rows"] for s in segs),
                    "deletes": None if doc.get("converted") else
                    sum(int(x.get("entries", 1)) for e in g for b in e.get("deltalogs", []) for x in b.get("logs", [])),
                    "converted": bool(doc.get("converted")), "base": base, "segments": segs,
                    "dirs": [f"{base}/insert_log/{tail}", f"{base}/delta_log/{tail}"]})
    return out


def _fix_of(e: dict, fix: dict | None) -> dict:
    """A unit's part of pk_filter_fixes: the pks and rows left out, and each insert log's
    first row index and row count (a field's logs in order; every field's logs align)."""
    if not fix:
        return {}
    spans = {}
    for b in e["binlogs"]:
        at = 0
        for x in b["logs"]:
            spans[x["path"]] = (at, int(x["entries"]))
            at += int(x["entries"])
    return {"drop_deletes": fix["drop_deletes"], "skip_rows": fix["skip_rows"], "spans": spans}


def _create(recs: Records, client, target, req, plan) -> dict:
    rec, _ = recs.get()
    if rec is None:
        recs.create({"v": 2, "group_bytes": GROUP_BYTES, "state": "checked", "bundle_uid": plan["uid"], "bundle": f"{req.db}.{req.collection}/{req.bundle}",
                     "name": req.name, "target": target.describe(), "created_at": time.time()})
        _first_for_name(recs, target, req, client)
        rec, _ = recs.get()
    if rec["state"] == "checked":
        rec = recs.move("creating")
    if rec["state"] == "creating":
        if client.one({"op": "has", "name": req.name})["exists"]:
            _adopt(client, req.name, plan)               # created by the killed run, or Conflict
            if client.one({"op": "list_imports", "name": req.name}):
                raise Conflict(f"collection {req.name!r} appeared in Milvus while restore {plan['rid']} was creating "
                               f"it, and holds imports this restore did not make: not adopted")
        else:
            client.one({"op": "create_full", "name": req.name, "schema": plan["schema"], "shards": plan["shards"],
                        "partitions": [] if partition_key(plan) else [p for p in plan["partitions"] if p != "_default"],
                        **({"num_partitions": len(plan["partitions"])} if partition_key(plan) else {}),
                        "consistency_level": plan["consistency_level"], "properties": plan.get("properties", {})})
        got = _adopt(client, req.name, plan)
        rec = recs.move("created", collection_id=got["id"])
    return rec


def _first_for_name(recs: Records, target: MilvusTarget, req: Request, client) -> None:
    """The restore id hashes the bundle's database too: two restores of bundles of two
    databases into one new name have two ids, two claims. Both could pass check, one create
    the collection and the other adopt it (same schema, no import yet): both imported into it.
    Once its record exists, a restore yields to any other record of the same target and name
    written before it (etcd create revision) that is not history (verified, or, not being
    run, its name not in Milvus: _dropped_since); the loser's record goes, and it is refused
    before anything is written in Milvus."""
    mine = recs.kv.get(recs.key)
    for item in recs.kv.range(recs.keys.milvus_restores_prefix()):
        if item.key == recs.key or item.create_revision > mine.create_revision:
            continue
        other = _other_record(recs, item)
        t = other.get("target") or {}
        if other.get("name") == req.name and t.get("address") == target.address and \
                t.get("bucket") == target.bucket and other.get("state") != "verified" and \
                (_running(recs.kv, recs.keys, item.key.rsplit("/", 1)[-1]) or
                 not _dropped_since(other, client, req.name)):
            recs.kv.delete(recs.key)
            raise Conflict(f"restore {item.key.rsplit('/', 1)[-1]} of {other.get('bundle')} into {req.name!r} at "
                           f"{target.address} began first; restore under another name")


def _other_record(recs: Records, item) -> dict:
    """Another restore's record, for the rules that let one restore into a name: one that
    cannot be read may hold this very name, so this run yields (its record goes: it has
    imported nothing), naming it. It was skipped: two runs imported into one collection."""
    try:
        other = codec.loads(item.value, item.key)
        if not isinstance(other, dict) or not isinstance(other.get("target") or {}, dict):
            raise CorruptRecord(f"corrupt record at {item.key!r}: not a restore record")
        return other
    except ValueError as e:
        recs.kv.delete(recs.key)
        raise Conflict(f"{e}: whether that restore holds this name is unknown; nothing imported (repair or "
                       f"delete that record)") from None


def _sole_restore_of(recs: Records, target: MilvusTarget, req: Request, rec: dict) -> None:
    """Before its first import: no other restore record holds this collection (same bucket,
    name and Milvus collection id) ahead of this one. The first-for-name rule compares
    address strings, so the same restore run at once through two addresses of one Milvus
    (localhost:P and 127.0.0.1:P: two ids, two claims) could both pass it, one create the
    collection and the other adopt it: both imported into it (its rows twice, each run
    verified before the other's segments were loaded). Ahead: past `created` (it passed this
    check), or `created` at an earlier etcd revision (the move to `created` is its last write
    before this check). The run behind yields: its record goes (it imported nothing), Conflict."""
    mine = recs.kv.get(recs.key)
    for item in recs.kv.range(recs.keys.milvus_restores_prefix()):
        if item.key == recs.key:
            continue
        other = _other_record(recs, item)
        if other.get("collection_id") != rec["collection_id"] or other.get("name") != req.name or \
                (other.get("target") or {}).get("bucket") != target.bucket:
            continue
        if other.get("state") != "created" or item.mod_revision < mine.mod_revision:
            recs.kv.delete(recs.key)
            raise Conflict(f"collection {req.name!r} (id {rec['collection_id']}) is restore "
                           f"{item.key.rsplit('/', 1)[-1]}'s (of {other.get('bundle')}, through "
                           f"{(other.get('target') or {}).get('address')}): this run of the same name through "
                           f"{target.address} imports nothing into it")


def _adopt(client, name: str, plan: dict) -> dict:
    got = client.one({"op": "schema", "name": name})
    want = [(f["name"], int(f["field_id"]), int(f["data_type"]), bool(f.get("is_primary_key")))
            for f in plan["schema"]["fields"] if not f.get("is_dynamic")]      # describe omits $meta
    have = [(f["name"], f["field_id"], f["data_type"], f["is_primary_key"]) for f in got["fields"]]
    if got.get("enable_dynamic_field", False) != plan["schema"]["enable_dynamic_field"]:
        have.append(("enable_dynamic_field", got.get("enable_dynamic_field")))
    parts = set(plan["partitions"]) | (set() if partition_key(plan) else {"_default"})
    if have != want or got["shards"] != plan["shards"] or set(got["partitions"]) != parts:
        raise Conflict(f"collection {name!r} in Milvus is not the one this restore creates (fields {have}, shards "
                       f"{got['shards']}, partitions {got['partitions']}): refusing to import into it")
    return got


def _stage(stage_store, backup, unit: dict, converter=None) -> None:
    """Copy the unit's segments' files under its staging base, each checked by SHA-256 on
    the way; a file already there with its content is not copied again. A converted segment
    (a seglake export): its Milvus binlogs written there (the same bytes on a re-run)."""
    base = unit["base"]
    for seg in unit["segments"]:
        sid = seg["segment_id"]
        if unit.get("converted"):
            for path, raw in converter.segment_files(sid).items():
                sha = hashlib.sha256(raw).hexdigest()
                if not bundles.has_content(stage_store, f"{base}/{path}", sha, len(raw)):
                    stage_store.put(f"{base}/{path}", raw)
            continue
        drop, skip = set(seg.get("drop_deletes", ())), set(seg.get("skip_rows", ()))
        for path, sha, size in seg["files"]:
            m = _INSERT_RE.fullmatch(path) or _DELTA_RE.fullmatch(path)
            key = f"{base}/{path}"
            if m is None:
                raise MilvusRestoreError(f"segment {sid}: {path!r} is not a Milvus log key")
            if drop and (m.re is _DELTA_RE or skip):   # a target filtering by pk alone: see pk_filter_fixes
                raw = bundles.read_small(backup, layout.bundle_blob(sha), size)
                if len(raw) != size or hashlib.sha256(raw).hexdigest() != sha:
                    raise MilvusRestoreError(f"segment {sid}: {path}: its data file in the backup target is damaged")
                if m.re is _DELTA_RE:
                    raw = binlog_writer.without_deletes(raw, drop)
                else:
                    at, n = seg["spans"][path]
                    raw = binlog_writer.without_rows(raw, [at + i not in skip for i in range(n)])
                if raw is not None and not bundles.has_content(stage_store, key, hashlib.sha256(raw).hexdigest(), len(raw)):
                    stage_store.put(key, raw)
                continue
            if not bundles.has_content(stage_store, key, sha, size):
                bundles.copy_verified(backup, layout.bundle_blob(sha), stage_store, key, sha, size)


def _import_all(recs: Records, client, stage_store, backup, target, req, todo: list[dict], converter=None,
                claimed=lambda: None, visible=lambda u: 1) -> None:
    """Stage, submit and wait for every unit; each transition recorded before the next;
    `claimed()` before each submit (raises once this run no longer holds the restore);
    `visible(u)`: the rows of unit u the bundle's deletes leave (asked only of a unit with
    deletes whose import completed with 0 rows)."""
    def staged(u):
        uid = u["unit_id"]
        rec, prev = recs.segments().get(uid, (None, None))
        if rec is None or rec["state"] == "pending":
            _stage(stage_store, backup, u, converter)
            recs.seg_put(uid, _unit_record(u, "staged"), prev)
            faults.point("milvus_restore.after_stage")
        elif rec["state"] == "staged":
            # staged by an earlier run, not submitted: its files may have gone since (the staging
            # prefix cleared after the failure, a lifecycle rule), and an import of absent
            # directories ends Completed with 0 rows. Checked by content, the missing copied
            # again (a unit submitting or failed is checked so right before it is submitted)
            _stage(stage_store, backup, u, converter)

    for _ in runners.run_inline(staged, todo, workers=req.threads):
        pass
    files_of = {u["unit_id"]: [f"{target.staging}/{d}" for d in u["dirs"]] for u in todo}
    by_uid = {u["unit_id"]: u for u in todo}
    deadline = time.monotonic() + req.import_timeout
    while True:
        recorded, listed = recs.segments(), None
        pending = []
        for uid, u in by_uid.items():
            rec, prev = recorded[uid]
            state = rec["state"]
            if state == "submitting":          # killed around the Import call: did it reach Milvus?
                if listed is None:
                    listed = client.one({"op": "list_imports", "name": req.name})
                found = [t for t in listed if t["files"] == files_of[uid] and t["state"] not in TERMINAL_FAILED]
                if found:
                    recs.seg_put(uid, dict(rec, state="importing", task_id=found[0]["task_id"]), prev)
                    pending.append(uid)
                    continue
                state = "staged"
            if state in ("staged", "failed"):
                if rec["attempts"] >= IMPORT_ATTEMPTS:
                    raise MilvusRestoreError(f"{_unit_name(u)}: Milvus failed its import {rec['attempts']} times "
                                             f"(last: {rec.get('reason', '?')}){_import_hint(client)}")
                if rec["state"] in ("failed", "submitting"):   # its files checked again before it is resubmitted
                    _stage(stage_store, backup, u, converter)
                claimed()
                rec = dict(rec, state="submitting", attempts=rec["attempts"] + 1, task_id=None)
                recs.seg_put(uid, rec, prev)
                rec, prev = recs.segments()[uid]
                t = client.one({"op": "import", "name": req.name, "partition": u["partition"],
                                "files": files_of[uid], "options": {"backup": "true"}})
                faults.point("milvus_restore.after_submit")      # in Milvus, not yet recorded
                recs.seg_put(uid, dict(rec, state="importing", task_id=t["task_id"]), prev)
                pending.append(uid)
            elif state == "importing":
                pending.append(uid)
        if not pending:
            return
        faults.point("milvus_restore.waiting")
        recorded = recs.segments()
        states = client.call(*[{"op": "import_state", "task_id": recorded[x][0]["task_id"]} for x in pending])
        for uid, st in zip(pending, states):
            rec, prev = recorded[uid]
            if st["state"] in TERMINAL_OK:
                u = by_uid[uid]
                if not u.get("converted") and u["rows"] and not st.get("row_count") and (
                        not u.get("deletes") or (st.get("row_count") == 0 and visible(u))):
                    # nothing hides all of its rows (no deletes, or Milvus said 0 rows and the
                    # bundle's deletes leave some visible): Milvus read none of the staged files,
                    # which are then not in the bucket it reads (a bulk insert of absent dirs ends
                    # Completed, 0 rows)
                    raise UnreadBucket(
                        f"{_unit_name(u)}: Milvus's import completed with 0 of its {u['rows']} rows ("
                        f"{'it has no deletes' if not u.get('deletes') else f'{visible(u)} of them visible'}): it "
                        f"did not find the files staged in bucket {target.bucket!r} under "
                        f"{target.staging}/{u['base']}/ -- is {target.bucket!r} the bucket the Milvus at "
                        f"{target.address} reads (its minio.bucketName)?")
                recs.seg_put(uid, dict(rec, state="imported", rows=st["row_count"]), prev)
            elif st["state"] in TERMINAL_FAILED:
                recs.seg_put(uid, dict(rec, state="failed", reason=st["failed_reason"][:500]), prev)
        if all(recs.segments()[x][0]["state"] == "imported" for x in by_uid):
            return
        if time.monotonic() > deadline:
            raise MilvusRestoreError(f"imports into {req.name!r} not finished within {req.import_timeout:.0f} s "
                                     f"(re-run to keep waiting: they are recorded)")
        time.sleep(req.poll)


def _abandon(recs: Records, client, stage_store, doc: dict, plan: dict, req: Request, reason: str) -> None:
    """Undo a restore whose imports read nothing (UnreadBucket), in an order a re-run resumes
    (state `abandoning` is recorded first): the files it staged go, then the collection it
    created (only the one of its recorded id, and only while no import put a row in it), then
    its records, so the name is free. Raises UnreadBucket saying what was undone."""
    rec, _ = recs.get()
    staged = 0
    for u in units(doc, plan, group_bytes=0 if rec.get("v") == 1 else int(rec.get("group_bytes", 1 << 30))):
        keys = [o.key for o in stage_store.list(f"{u['base']}/")]
        stage_store.delete_many(keys)
        staged += len(keys)
    imported = sum(int(r.get("rows") or 0) for r, _ in recs.segments().values() if r.get("state") == "imported")
    left = ""
    if imported:
        left = (f"; collection {req.name!r} is kept: {imported} rows were imported into it, so Milvus reads the "
                f"bucket for some files (drop it before a re-run)")
    elif rec.get("collection_id") is not None and client.one({"op": "has", "name": req.name})["exists"]:
        if client.one({"op": "schema", "name": req.name})["id"] == rec["collection_id"]:
            client.one({"op": "drop", "name": req.name})
    recs.kv.delete_prefix(recs.keys.milvus_restore_segments_prefix(recs.rid))
    recs.kv.delete(recs.key)
    raise UnreadBucket(f"{reason} Undone: {staged} staged files removed"
                       + (left or f", the empty collection {req.name!r} this restore created dropped; nothing of "
                                  f"this restore is left: re-run with the bucket that Milvus reads"))


def _unit_record(u: dict, state: str) -> dict:
    """A unit's record before its first submit: which segments it holds (_same_units)."""
    return {"v": 1, "state": state, "attempts": 0, "segments": len(u["segments"]), "sids_sha": _sids_sha(u)}


def _sids_sha(u: dict) -> str:
    return hashlib.sha256(",".join(str(s["segment_id"]) for s in u["segments"]).encode()).hexdigest()[:16]


def _same_units(rid: str, recorded: dict, todo: list[dict]) -> None:
    """The recorded units are the planned ones (same first segment, same segments): a unit
    recorded for other segments would have its task read folders another unit imports too,
    or leave a segment out. Conflict naming the first that differs; nothing submitted."""
    planned = {u["unit_id"]: u for u in todo}
    for uid, (rec, _) in sorted(recorded.items()):
        u = planned.get(uid)
        if u is None or rec.get("sids_sha", _sids_sha(u)) != _sids_sha(u) or \
                rec.get("segments", len(u["segments"])) != len(u["segments"]):
            raise Conflict(f"restore {rid}: its recorded import unit {uid} is not one this run plans (another "
                           f"grouping of the bundle's segments): refusing to import any segment twice or not at "
                           f"all; finish it with the code that began it, or restore under a new name")


@contextmanager
def _one_run(kv, keys, rid: str, wait: float | None = None):
    """One run of a restore at a time: its claim {root}/milvus/restore_runs/{rid} is put if
    absent, on a lease kept alive while the run lasts (a killed run's lapses within
    RUN_LEASE_S, so a re-run waits at most that); a second run waits `wait` s (default
    enough for a killed run's claim to lapse) and is then refused. Two runs at once could
    each submit the same unit between one's submit and its record. Yields a check that
    raises Conflict once the claim is lost (its lease not kept alive: etcd out of reach)."""
    key = keys.milvus_restore_run(rid)
    wait = 2 * RUN_LEASE_S + 2 if wait is None else wait
    lease = kv.grant_lease(RUN_LEASE_S)
    deadline = time.monotonic() + wait
    while True:
        try:
            kv.txn([absent(key)], [Put(key, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                                        "since": time.time()}), lease)])
            break
        except Conflict:
            if time.monotonic() > deadline:
                _revoke(kv, lease)
                raise Conflict(f"restore {rid} is being run by another process (its claim "
                               f"{key.rsplit('/', 2)[-2]}/{rid} is held and kept alive): let it finish, or re-run "
                               f"once it has ended") from None
            time.sleep(min(0.5, RUN_LEASE_S / 4))
            kv.refresh_lease(lease)         # ours, while we wait: granted before the first try
    stop, lost = threading.Event(), threading.Event()

    def keep() -> None:
        while not stop.wait(RUN_LEASE_S / 3):
            try:
                kv.refresh_lease(lease)
            except Exception:   # noqa: BLE001 - said by claimed() before the next submit
                lost.set()

    def claimed() -> None:
        if lost.is_set() or kv.lease_ttl(lease) <= 0:
            raise Conflict(f"restore {rid}: this run's claim lapsed (etcd out of reach?): stopping before the next "
                           f"import; re-run to resume")

    t = threading.Thread(target=keep, name=f"milvus-restore-claim-{rid[:8]}", daemon=True)
    t.start()
    try:
        yield claimed
    finally:
        stop.set()
        t.join(timeout=5)
        _revoke(kv, lease)


def _revoke(kv, lease: int) -> None:
    try:
        kv.revoke_lease(lease)     # the claim goes with it
    except Exception:  # noqa: BLE001 - it lapses on its own within RUN_LEASE_S
        pass


def _unit_name(u: dict) -> str:
    sids = [s["segment_id"] for s in u["segments"]]
    return f"segment {sids[0]}" if len(sids) == 1 else \
        f"the import of {len(sids)} segments of partition {u['partition']!r} ({sids[0]}, ...)"


def _import_hint(client) -> str:
    """What to say of a target before 2.3.4 whose imports failed: its bulk insert fails some
    schemas seglake's captures hold (seen on 2.3.3: "fail to initialize in-memory segment
    data", its import util meeting an "InvalidType" field, for VarChar pk + JSON + Array or
    dynamic-field collections, in most runs; 2.3.4 and 2.3.5 import the same files)."""
    try:
        version = client.one({"op": "version"}).get("version", "")
    except Exception:   # noqa: BLE001 - only a hint
        return ""
    return (f"; Milvus {version} is older than 2.3.4, whose bulk insert of binlogs fails some schemas (VarChar pk "
            f"with JSON, Array or dynamic fields, seen on 2.3.3): restore into Milvus 2.3.4 or later"
            if version and filters_by_pk(version) else "")


def _index_params(ix: dict, scalar: bool = False) -> dict:
    """The create_index params of a captured index, as the user gave them: a scalar index
    (STL_SORT, Trie, ...) has no metric and no params, and gets none (an invented metric_type
    L2 would differ from the source's index). A scalar index the user made with no params
    at all (Milvus picks its type: user_index_params empty, index_params the type it picked)
    is made the same way: given the picked type, Milvus describes it with that type, not
    with the source's empty params."""
    if scalar and "user_index_params" in ix and not ix["user_index_params"]:
        return {}
    p = dict(ix.get("user_index_params") or ix.get("index_params") or {})
    out = {"index_type": p.pop("index_type", "FLAT")}
    if "metric_type" in p:
        out["metric_type"] = p.pop("metric_type")
    extra = p.pop("params", None)
    params = json.loads(extra) if isinstance(extra, str) and extra else dict(extra or {})
    params.update({k: (int(v) if str(v).isdigit() else v) for k, v in p.items() if k not in ("dim",)})
    if params or "metric_type" in out:
        out["params"] = params
    return out


def run(kv, keys, backup, target: MilvusTarget, req: Request, plan: dict | None = None) -> dict:
    """The whole restore, resumable: check (unless a plan is given), create, import, index,
    load, verify. Returns the report."""
    t0 = time.time()
    req.check()
    target.check()
    client = target.client()
    from seglake.lifecycle.backup import holds
    # the bundle held while it is read (as seglake's own restore and import hold theirs): a
    # retention prune keeps a held bundle; unheld, a prune dropped it mid-restore and its sweep
    # took the old data files (NotFound while staging, a half-made collection left)
    with client.session(), holds.held(backup, req.db, req.collection, req.bundle,
                                      by=f"milvus restore into {req.name} at {target.address}"):
        return _run(kv, keys, backup, target, req, plan, client, t0)


def _run(kv, keys, backup, target, req, plan, client, t0) -> dict:
    plan = plan or check(kv, keys, backup, target, req, client)
    with _one_run(kv, keys, plan["rid"]) as claimed:
        return _run_claimed(kv, keys, backup, target, req, plan, client, t0, claimed)


def _run_claimed(kv, keys, backup, target, req, plan, client, t0, claimed) -> dict:
    doc = read_bundle(backup, req)
    recs = Records(kv, keys, plan["rid"])
    if plan.get("replaces"):
        _forget_dropped(kv, keys, recs, client, req.name, target)
    rec = recs.get()[0]
    if rec is not None and rec["bundle_uid"] != plan["uid"]:     # made by another run since check()
        raise Conflict(f"a restore of another bundle ({rec['bundle']}) into {req.name!r} at {target.address} is "
                       f"recorded (restore {plan['rid']})")
    same_staging(recs.get()[0], target, plan["rid"])
    stage_store = target.store()
    if (recs.get()[0] or {}).get("state") == "abandoning":        # killed while undoing: finish it
        _abandon(recs, client, stage_store, doc, plan, req, recs.get()[0].get("reason", ""))
    rec = _create(recs, client, target, req, plan)
    # the units as the restore began them: per segment for a v1 record, else its recorded bound
    todo = units(doc, plan, group_bytes=0 if rec.get("v") == 1 else int(rec.get("group_bytes", 1 << 30)))
    if not client.one({"op": "has", "name": req.name})["exists"]:
        raise Conflict(f"collection {req.name!r} that restore {plan['rid']} created (id {rec['collection_id']}) is no "
                       f"longer in Milvus at {target.address} (dropped while the restore was {rec['state']}): "
                       f"restore under a new name")
    got = client.one({"op": "schema", "name": req.name})
    if got["id"] != rec["collection_id"]:
        raise Conflict(f"collection {req.name!r} in Milvus is not the one restore {plan['rid']} created (id "
                       f"{got['id']}, recorded {rec['collection_id']}): dropped and made again by someone else?")
    if rec["state"] == "created":         # a state the per-segment code before v2 never acts on
        _sole_restore_of(recs, target, req, rec)
        rec = recs.move("importing")
    if rec["state"] == "importing":
        recorded = recs.segments()
        _same_units(plan["rid"], recorded, todo)
        for u in todo:
            if u["unit_id"] not in recorded:
                recs.seg_put(u["unit_id"], _unit_record(u, "pending"), None)
        try:
            _import_all(recs, client, stage_store, backup, target, req, todo,
                        convert.Converter(backup, doc) if doc.get("converted") else None, claimed,
                        lambda u: _unit_visible(backup, doc, u))
        except UnreadBucket as e:
            claimed()
            recs.move("abandoning", reason=str(e))
            _abandon(recs, client, stage_store, doc, plan, req, str(e))
        rec = recs.move("imported")
    if rec["state"] == "imported":
        fname = {int(f["field_id"]): f["name"] for f in plan["schema"]["fields"]}
        scalar = {int(f["field_id"]) for f in plan["schema"]["fields"] if int(f["data_type"]) not in VECTOR_TYPES}
        for ix in plan["indexes"]:
            client.one({"op": "create_index", "name": req.name, "field": fname[int(ix["field_id"])],
                        "index_name": ix.get("index_name", ""),
                        "params": _index_params(ix, scalar=int(ix["field_id"]) in scalar)})
        vec = [f for f in plan["schema"]["fields"] if int(f["data_type"]) in VECTOR_TYPES]
        have = {int(ix["field_id"]) for ix in plan["indexes"]}
        for f in vec:                     # Milvus 2.3 loads only a collection whose vectors are indexed
            if int(f["field_id"]) not in have:
                client.one({"op": "create_index", "name": req.name, "field": f["name"], "index_name": "",
                            "params": {"index_type": "FLAT" if int(f["data_type"]) == 101 else "BIN_FLAT",
                                       "metric_type": "L2" if int(f["data_type"]) == 101 else "HAMMING", "params": {}}})
        rec = recs.move("indexed")
    if rec["state"] == "indexed":
        client.one({"op": "load", "name": req.name})
        rec = recs.move("loaded")
    report = rec.get("report")
    if rec["state"] == "loaded":
        report = verify(client, backup, doc, plan, req)
        if not report["ok"]:
            recs.move("loaded", report=report)
            hint = "" if report["count"] or not report["visible_rows"] else (
                f"; Milvus imported no row at all: is {target.bucket!r} the bucket the Milvus at {target.address} "
                f"reads (its minio.bucketName)? Its imports read the staged files there; collection {req.name!r} "
                f"and the staged files under {target.bucket}/{target.staging}/{plan['rid']}/ are left as they are")
            raise MilvusRestoreError(f"verify of {req.name!r} failed: {report['problems'][:5]}{hint}")
        for u in todo:                    # the staged copies are Milvus's own segments now
            stage_store.delete_many([o.key for o in stage_store.list(f"{u['base']}/")] if u.get("converted") else
                                    [f"{u['base']}/{p}" for s in u["segments"] for p, _, _ in s["files"]])
        rec = recs.move("verified", report=report, verified_at=time.time())
    return {"restore_id": plan["rid"], "name": req.name, "state": rec["state"],
            "segments": sum(len(u["segments"]) for u in todo), "imports": len(todo),
            "seconds": round(time.time() - t0, 3), **(report or {})}


# -- verify -------------------------------------------------------------------------------
def bundle_rows(backup, doc: dict, hidden: set | None = None) -> tuple[dict, int]:
    """(visible rows {pk: [(segment entry, row index), ...]}, their count): a row (pk, ts)
    of a Flushed segment is visible unless a delete (pk, ts_d) with ts_d > ts is in THAT
    segment's delete logs (Milvus 2.3: a data node writes a delete into the delta log of each
    segment of the delete's partition(s) that may hold the pk, and a query node applies a
    sealed segment's delta logs to that segment only; an upsert without a partition deletes
    in `_default` only, so a row of the pk in another partition stays and count(*) counts
    it). A pk visible twice is counted twice, as Milvus's count(*) does. `hidden`, when
    given, gets the pk of every row a delete hides."""
    pk_f = next(int(f["field_id"]) for f in doc["snapshot"]["collection"]["schema"]["fields"] if f.get("is_primary_key"))
    visible: dict = {}
    n = 0
    for e in doc["segments"]:
        logs = {int(b["field_id"]): b["logs"] for b in e["binlogs"]}
        pks = [v for x in logs[pk_f] for v in _col(backup, doc, x["path"])]
        tss = [v for x in logs[1] for v in _col(backup, doc, x["path"])]
        deletes: dict = {}
        for b in e.get("deltalogs", []):
            for x in b["logs"]:
                for pk, ts in _dels(backup, doc, x["path"]):
                    deletes[pk] = max(deletes.get(pk, 0), ts)
        for i, (pk, ts) in enumerate(zip(pks, tss)):
            if deletes.get(pk, -1) > ts:
                if hidden is not None:
                    hidden.add(pk)
                continue
            visible.setdefault(pk, []).append((e, i))
            n += 1
    return visible, n


def _unit_visible(backup, doc: dict, u: dict) -> int:
    """The rows of an import unit's segments that the bundle's deletes leave visible."""
    sids = {int(e["segment_id"]) for e in u["segments"]}
    return bundle_rows(backup, {**doc, "segments": [e for e in doc["segments"] if int(e["segment_id"]) in sids]})[1]


def _blob(backup, doc, path):
    """(file object, size) of a bundle file's bytes, read once and checked by SHA-256 and
    size (check() checked them before; a file damaged since is refused, never read)."""
    f = doc["files"][path]
    raw = bundles.read_small(backup, layout.bundle_blob(f["sha256"]), f["size"])
    if len(raw) != f["size"] or hashlib.sha256(raw).hexdigest() != f["sha256"]:
        raise MilvusRestoreError(f"{path}: its data file in the backup target is damaged (not the SHA-256 or size "
                                 f"the bundle records)")
    return io.BytesIO(raw), len(raw)


def _dels(backup, doc, path):
    try:
        return binlog.deletes(*_blob(backup, doc, path))
    except (ValueError, KeyError, OSError) as e:     # BinlogError is a ValueError
        raise MilvusRestoreError(f"{path}: not a readable delete log ({e})") from None


def _col(backup, doc, path):
    try:
        return binlog.column(*_blob(backup, doc, path))
    except (binlog.BinlogError, OSError) as e:
        raise MilvusRestoreError(f"{path}: {e}") from None


def verify(client, backup, doc: dict, plan: dict, req: Request) -> dict:
    """Milvus's count(*) == the bundle's visible rows (duplicates counted), and a sample of
    pks with every field's value equal (for a pk visible more than once: to one of its rows)."""
    hidden: set = set()
    if doc.get("converted"):
        got = convert.Converter(backup, doc).visible()
        visible, n_visible, hidden, per = got["rows"], got["count"], got["hidden"], got["per_partition"]
    else:
        visible, n_visible = bundle_rows(backup, doc, hidden)
        names = {int(p["partition_id"]): p["name"] for p in doc["snapshot"]["collection"]["partitions"]}
        per = {p: 0 for p in names.values()}
        for rows in visible.values():
            for e, _ in rows:
                per[names[int(e["partition_id"])]] += 1
    problems = []
    count = client.one({"op": "count_loaded", "name": req.name})["count"]
    if count != n_visible:
        problems.append(f"count(*) is {count}, the bundle has {n_visible} visible rows")
    elif not partition_key(plan) and len(plan["partitions"]) > 1:
        # every row in its own partition: count(*) of each (a partition-key collection's are
        # Milvus's to choose, and it refuses partition names in its queries)
        per = {p: per.get(p, 0) for p in plan["partitions"]}
        got_per = client.call(*[{"op": "count_loaded", "name": req.name, "partitions": [p]} for p in per])
        problems.extend(f"partition {p!r}: count(*) is {g['count']}, the bundle has {per[p]} visible rows"
                        for p, g in zip(per, got_per) if g["count"] != per[p])
    fields = plan["schema"]["fields"]
    pk = next(f for f in fields if f.get("is_primary_key"))
    rnd = random.Random(plan["uid"])
    # Milvus 2.3.5 holds a row of pk 2**63-1 but no query by pk reaches it (`in`, `==`, ranges):
    # count(*) judges it, the sample does not ask for it
    askable = sorted((p for p in visible if p != INT64_MAX or isinstance(p, str)), key=str)
    sample = sorted(rnd.sample(askable, min(req.sample, len(askable))), key=str)
    checked, unnamed = 0, False
    if sample:
        cache: dict = {}

        def value(row, f):
            if doc.get("converted"):
                return row[f["name"]]
            e, i = row
            key = (int(e["segment_id"]), int(f["field_id"]))
            if key not in cache:
                logs = next(b["logs"] for b in e["binlogs"] if int(b["field_id"]) == int(f["field_id"]))
                cache[key] = [v for x in logs for v in _col(backup, doc, x["path"])]
            return cache[key][i]

        static = {f["name"] for f in fields if not f.get("is_dynamic")}

        def got_value(r, f):
            if f.get("is_dynamic"):       # Milvus returns the dynamic keys beside the fields
                return {k: v for k, v in r.items() if k not in static}
            return r.get(f["name"])

        def differ(row, r) -> list[str]:
            return [f"pk {r[pk['name']]}: field {f['name']!r} is {_norm(got_value(r, f), f)!r} in Milvus, "
                    f"{_norm(value(row, f), f)!r} in the bundle" for f in fields
                    if _norm(value(row, f), f) != _norm(got_value(r, f), f)]

        got: dict = {}           # a pk visible twice (inserted twice, never deleted): two rows
        try:
            rows = _query_pks(client, req.name, pk["name"], sample, [f["name"] for f in fields],
                              lambda p: len(visible[p]))
        except MilvusError as e:
            if "cannot parse expression" not in str(e):
                raise
            # a pk field named like a keyword of Milvus's expressions (`like`, `in`, `exists`,
            # `true`, ...: Milvus 2.3 takes such a name and has no quoting for it): no expression
            # can name the field, so the sample is the rows Milvus gives without a filter
            rows = client.one({"op": "query", "name": req.name, "expr": "",
                               "output_fields": [f["name"] for f in fields],
                               "limit": max(1, min(len(sample), QUERY_WINDOW))})
            sample, unnamed = sorted({r[pk["name"]] for r in rows}, key=str), True
        for r in rows:
            got.setdefault(r[pk["name"]], []).append(r)
        for p in sample:
            if p not in got:
                problems.append(f"pk {p} is missing in Milvus")
                continue
            if p not in visible:
                problems.append(f"pk {p} is in Milvus; the bundle has no visible row of it")
                continue
            left = list(visible[p])          # each row in Milvus is a distinct one of the bundle's
            for r in got[p]:
                j = next((j for j, row in enumerate(left) if not differ(row, r)), None)
                if j is None:
                    problems.extend(differ(left[0], r) if len(visible[p]) == 1 and left else
                                    [f"pk {p}: a row in Milvus is none of its {len(visible[p])} visible rows in the "
                                     f"bundle, or more rows than those"])
                    break
                left.pop(j)
            checked += 1
    # a pk every row of which the bundle's deletes hide is not in Milvus: a restore that lost
    # a delete passes count(*) when it lost a row too, and the sample never asks for that pk
    gone = sorted((p for p in hidden - set(visible) if p != INT64_MAX or isinstance(p, str)), key=str)
    gone = sorted(rnd.sample(gone, min(req.sample, len(gone))), key=str)
    if gone and not unnamed:        # a pk field no expression can name: count(*) judges these
        seen = sorted({r[pk["name"]] for r in _query_pks(client, req.name, pk["name"], gone, [pk["name"]],
                                                          lambda p: 1)}, key=str)
        problems.extend(f"pk {p} is visible in Milvus; the bundle's deletes hide every row of it" for p in seen)
    return {"ok": not problems, "count": count, "visible_rows": n_visible, "sampled": checked,
            "problems": problems[:50]}


INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1
# Milvus 2.3 refuses a query whose offset + limit exceeds quotaAndLimits.limits.maxQueryResultWindow
# (16384 by default): a verify of a pk inserted 170 times, or of a sample of 16500 pks, asked for more
QUERY_WINDOW = 16384


def _query_pks(client, name: str, pk_name: str, pks: list, output_fields: list, copies) -> list:
    """The rows of `pks` (a pk may have `copies(pk)` visible rows), in queries each within
    Milvus's query window: pks batched so a batch's rows + 1 fit, the limit at most the window."""
    out, batch, n = [], [], 0

    def ask():
        return client.one({"op": "query", "name": name, "expr": pk_expr(pk_name, batch),
                           "output_fields": output_fields, "limit": min(n + 1, QUERY_WINDOW)})

    for p in pks:
        c = max(1, int(copies(p)))
        if batch and n + c + 1 > QUERY_WINDOW:
            out.extend(ask())
            batch, n = [], 0
        batch.append(p)
        n += c
    if batch:
        out.extend(ask())
    return out


def pk_expr(name: str, pks: list) -> str:
    """`name in [...]` as Milvus's parser reads it. Its lexer reads "-9223372036854775808" as
    minus 9223372036854775808, which is out of range: -2**63, the smallest Int64 (a pk Milvus
    takes), is asked for as `name < -9223372036854775807` instead. A VarChar pk is written
    with its characters as they are (JSON's escapes only for a quote, a backslash and control
    characters): Milvus unquotes a literal as Go does, which refuses the surrogate-pair
    escapes json.dumps writes for a character past U+FFFF ("invalid syntax": an emoji pk made
    every verify of its restore fail)."""
    rest = [p for p in pks if p != INT64_MIN or isinstance(p, str)]
    parts = [f"{name} in [{', '.join(json.dumps(p, ensure_ascii=False) for p in rest)}]"] if rest else []
    if len(rest) != len(pks):
        parts.append(f"{name} < {INT64_MIN + 1}")
    return " or ".join(f"({x})" for x in parts) if len(parts) > 1 else parts[0]


def _norm(v, f: dict):
    """A value as verify compares it; a float NaN as the string 'NaN' (Milvus 2.3 takes NaN in
    Float / Double fields, and NaN != NaN made every such restore fail its verify)."""
    return _nan_free(_norm_value(v, f))


def _nan_free(v):
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, list):
        return [_nan_free(x) for x in v]
    return v


def _norm_value(v, f: dict):
    t = int(f["data_type"])
    if t == 23 and isinstance(v, (bytes, str)):
        return json.loads(v)
    if t == 23 and v is None and f.get("is_dynamic"):
        return {}
    if t == 22 and v is not None:     # an Array: its binlog holds a schemapb.ScalarField
        import numpy as np
        vals = proto.scalar_field(v) if isinstance(v, bytes) else list(v)
        return [np.float32(x).item() if int(f.get("element_type") or 0) == 10 else x for x in vals]
    if t in (10, 11, 101) and v is not None:
        import numpy as np
        if isinstance(v, bytes):      # a float vector as its binlog holds it: dim x float32 LE
            return np.frombuffer(v, dtype="<f4").tolist()
        return np.asarray(v, dtype="<f4" if t != 11 else "<f8").tolist()
    if t == 100 and isinstance(v, list) and len(v) == 1:   # pymilvus: a binary vector as [bytes]
        v = v[0]
    if isinstance(v, dict) and set(v) == {"hex"}:
        return bytes.fromhex(v["hex"])
    return v
