"""The document of a Milvus capture bundle (kind "milvus", docs/MILVUS_BUNDLE.md): its
checks (bundle.read() dispatches here on `kind`), its verification units and the check of
one unit (seglake.lifecycle.backup.verify dispatches here), and its visible rows.
"""

from __future__ import annotations

import re

from seglake.lifecycle.backup import bundle as bundles
from seglake.milvus import binlog
from seglake.milvus.catalog import DATA_TYPES, ROW_ID, TIMESTAMP
from seglake.names import validate_name
from seglake.errors import ValidationError
from seglake.storage import layout

I64 = (0, 2**63 - 1)


def _int(v, lo=I64[0], hi=I64[1]) -> bool:
    return type(v) is int and lo <= v <= hi


# the keys capture.document and catalog.read write (docs/MILVUS_BUNDLE.md); any other is
# refused naming the closest (a misspelt key would be read as absent). Maps of Milvus's own
# (type_params, index_params, user_index_params, properties, checkpoints, totals) are free.
DOC_KEYS = ("format", "version", "kind", "bundle", "uid", "created_at", "made_by", "source", "snapshot",
            "segments", "files", "totals")
SOURCE_KEYS = ("kind", "milvus_version", "etcd_root", "bucket", "root_path", "db", "db_id", "collection",
               "collection_id", "snapshot", "snapshot_id", "etcd_revision", "consistent_ts", "max_ts", "committed_at")
SNAPSHOT_KEYS = ("collection", "indexes", "checkpoints", "totals")
COLLECTION_KEYS = ("collection_id", "name", "db", "db_id", "description", "shards", "vchannels", "pchannels",
                   "consistency_level", "properties", "created_ts", "schema", "partitions")
SCHEMA_KEYS = ("name", "description", "auto_id", "enable_dynamic_field", "fields")
FIELD_KEYS = ("field_id", "name", "data_type", "data_type_name", "is_primary_key", "auto_id", "description",
              "type_params", "index_params", "element_type", "is_dynamic", "is_partition_key")
PARTITION_KEYS = ("partition_id", "name", "created_ts", "state")
INDEX_KEYS = ("index_id", "field_id", "index_name", "type_params", "index_params", "user_index_params",
              "is_auto_index", "create_time")
SEGMENT_KEYS = ("segment_id", "partition_id", "partition", "channel", "shard", "state", "num_rows", "start_ts",
                "dml_ts", "binlogs", "deltalogs", "statslogs", "indexes")
FIELD_LOGS_KEYS = ("field_id", "logs")
LOG_KEYS = ("log_id", "entries", "ts_from", "ts_to", "log_size", "path")
SEGMENT_INDEX_KEYS = ("build_id", "index_id", "field_id", "index_version", "num_rows", "serialized_size", "files")
FILE_KEYS = ("size", "sha256", "tag", "data_tag")


def _known_keys(doc: dict, where: str) -> None:
    """Every section of the document holds only its own keys (module constants)."""
    def known(at: str, d, valid) -> None:
        if isinstance(d, dict):   # (a section of another type is refused by check's own rules)
            bundles.refuse_unknown_keys(where, at, d, valid)

    def each(at: str, items, valid) -> list:
        items = items if isinstance(items, list) else []
        for i, d in enumerate(items):
            known(f"{at}[{i}]", d, valid)
        return [d for d in items if isinstance(d, dict)]

    known("the document", doc, DOC_KEYS)
    known("source", doc.get("source"), SOURCE_KEYS)
    snap = doc.get("snapshot") if isinstance(doc.get("snapshot"), dict) else {}
    known("snapshot", snap, SNAPSHOT_KEYS)
    coll = snap.get("collection") if isinstance(snap.get("collection"), dict) else {}
    known("snapshot.collection", coll, COLLECTION_KEYS)
    schema = coll.get("schema") if isinstance(coll.get("schema"), dict) else {}
    known("snapshot.collection.schema", schema, SCHEMA_KEYS)
    each("snapshot.collection.schema.fields", schema.get("fields"), FIELD_KEYS)
    each("snapshot.collection.partitions", coll.get("partitions"), PARTITION_KEYS)
    each("snapshot.indexes", snap.get("indexes"), INDEX_KEYS)
    for key, f in (doc.get("files") or {}).items() if isinstance(doc.get("files"), dict) else ():
        known(f"files[{key!r}]", f, FILE_KEYS)
    for i, s in enumerate(each("segments", doc.get("segments"), SEGMENT_KEYS)):
        for part in ("binlogs", "deltalogs", "statslogs"):
            for j, fl in enumerate(each(f"segments[{i}].{part}", s.get(part), FIELD_LOGS_KEYS)):
                each(f"segments[{i}].{part}[{j}].logs", fl.get("logs"), LOG_KEYS)
        each(f"segments[{i}].indexes", s.get("indexes"), SEGMENT_INDEX_KEYS)


def check(doc, where: str) -> dict:
    """A Milvus capture document, checked whole: format, version and files
    (bundle.check_files), no unknown key in any section, uid, source, collection (shards,
    vchannels, partitions, schema),
    and every segment: ids unique, its partition and channel the collection's, per field
    the logs' entries == num_rows (fields 0, 1 and every user field), every path the key
    its ids name and listed in `files`."""
    bundles.check_files(doc, where)

    def bad(why: str):
        return bundles.BundleError(f"{where}: {why}")

    if doc.get("kind") != "milvus":
        raise bad("not a Milvus capture")
    _known_keys(doc, where)
    if not (isinstance(doc.get("uid"), str) and re.fullmatch(r"[0-9a-f]{32}", doc["uid"])):
        raise bad("its uid is not 32 lowercase hex digits")
    src = doc.get("source")
    if not isinstance(src, dict) or src.get("kind") != "milvus" or not all(
            _int(src.get(k)) for k in ("collection_id", "consistent_ts", "max_ts", "etcd_revision")):
        raise bad("its source (kind, collection_id, timestamps, etcd_revision) is malformed")
    coll = doc["snapshot"].get("collection")
    try:
        validate_name("db", src.get("db"))
        validate_name("collection", src.get("collection"))
        if not isinstance(coll, dict) or coll.get("collection_id") != src["collection_id"] \
                or coll.get("name") != src["collection"]:
            raise ValidationError("its collection does not match its source")
        vch = coll.get("vchannels")
        if not _int(coll.get("shards"), 1, 256) or not isinstance(vch, list) or len(vch) != coll["shards"] \
                or not all(isinstance(v, str) and v for v in vch) or len(set(vch)) != len(vch):
            raise ValidationError("shards / vchannels malformed (one distinct vchannel per shard)")
        parts = coll.get("partitions")
        if not isinstance(parts, list) or not parts:
            raise ValidationError("no partitions")
        pids = {}
        for p in parts:
            if not isinstance(p, dict) or not _int(p.get("partition_id")) or p["partition_id"] in pids:
                raise ValidationError(f"partition {p!r} malformed or repeated")
            validate_name("partition", p.get("name"))
            pids[p["partition_id"]] = p["name"]
        if len(set(pids.values())) != len(pids):
            raise ValidationError("partition names repeat")
        schema = coll.get("schema")
        flds = schema.get("fields") if isinstance(schema, dict) else None
        if not isinstance(flds, list) or not flds:
            raise ValidationError("schema has no fields")
        fids = set()
        for f in flds:
            if not isinstance(f, dict) or not _int(f.get("field_id"), 100) or f["field_id"] in fids \
                    or f.get("data_type") not in DATA_TYPES or not isinstance(f.get("type_params"), dict):
                raise ValidationError(f"field {f!r} malformed (id >= 100, unique, a known data type)")
            if not (isinstance(f.get("name"), str) and 0 < len(f["name"]) <= 255):
                raise ValidationError(f"field {f.get('field_id')}: its name is not a string of 1..255 characters")
            fids.add(f["field_id"])
        if sum(bool(f.get("is_primary_key")) for f in flds) != 1:
            raise ValidationError("not exactly one primary key field")
    except (ValidationError, TypeError, AttributeError) as x:
        raise bad(f"its collection is malformed ({x})") from None
    files, seen = doc["files"], set()
    cid = src["collection_id"]
    need = {ROW_ID, TIMESTAMP} | fids
    for s in doc["segments"]:
        try:
            sid, pid, rows = s["segment_id"], s["partition_id"], s["num_rows"]
            if not (_int(sid) and _int(pid) and _int(rows)) or sid in seen:
                raise ValueError("ids/rows out of range or segment repeated")
            if pid not in pids or s.get("partition") != pids[pid]:
                raise ValueError(f"partition {pid} ({s.get('partition')!r}) is not the collection's")
            if s.get("channel") not in vch or s.get("shard") != vch.index(s["channel"]):
                raise ValueError(f"channel {s.get('channel')!r} / shard {s.get('shard')!r} is not the collection's")
            seen.add(sid)
            base = f"{cid}/{pid}/{sid}"
            have = set()
            for fl in s["binlogs"]:
                fid = fl["field_id"]
                have.add(fid)
                if sum(x["entries"] for x in fl["logs"]) != rows:
                    raise ValueError(f"field {fid}'s logs give {sum(x['entries'] for x in fl['logs'])} rows, "
                                     f"the segment {rows}")
                _paths(fl["logs"], f"insert_log/{base}/{fid}/", files)
            if not need <= have:
                raise ValueError(f"holds logs of fields {sorted(have)}; the schema needs {sorted(need)}")
            for fl in s["deltalogs"]:
                _paths(fl["logs"], f"delta_log/{base}/", files)
            for fl in s["statslogs"]:
                _paths(fl["logs"], f"stats_log/{base}/{fl['field_id']}/", files)
            for ix in s["indexes"]:
                pre = f"index_files/{ix['build_id']}/{ix['index_version']}/{pid}/{sid}/"
                for p in ix["files"]:
                    if not (isinstance(p, str) and p.startswith(pre) and "/" not in p[len(pre):] and p in files):
                        raise ValueError(f"index file {p!r} is not a key under {pre} listed in files")
        except (KeyError, TypeError, ValueError) as x:
            raise bad(f"segment {s.get('segment_id') if isinstance(s, dict) else s!r}: {x}") from None
    return doc


def _paths(logs, prefix: str, files: dict) -> None:
    for x in logs:
        if not (_int(x["log_id"]) and _int(x["entries"]) and x["path"] == f"{prefix}{x['log_id']}"):
            raise ValueError(f"log {x.get('path')!r} is not the key {prefix}{x.get('log_id')} its ids name")
        if x["path"] not in files:
            raise ValueError(f"log {x['path']} is not listed in files")


def units_of(doc: dict) -> list[dict]:
    """One verification unit per distinct data file: sha256, size, the keys naming it and,
    for insert / delete logs, what its content must say (ids, entries)."""
    cid = doc["source"]["collection_id"]
    logs: dict[str, dict] = {}
    types = binlog.field_types(doc["snapshot"]["collection"]["schema"]["fields"])
    for s in doc["segments"]:
        ids = {"collection_id": cid, "partition_id": s["partition_id"], "segment_id": s["segment_id"]}
        for fl in s["binlogs"]:
            for x in fl["logs"]:
                logs[x["path"]] = {"kind": "insert", "field_id": fl["field_id"], "entries": x["entries"], **ids,
                                   **types.get(fl["field_id"], {})}
        for fl in s["deltalogs"]:
            for x in fl["logs"]:
                logs[x["path"]] = {"kind": "delete", "field_id": None, "entries": x["entries"], **ids}
    by_sha: dict[str, list[str]] = {}
    for key, f in doc["files"].items():
        by_sha.setdefault(f["sha256"], []).append(key)
    return [{"sha": sha, "size": doc["files"][keys[0]]["size"], "keys": sorted(keys),
             "milvus": {k: logs[k] for k in keys if k in logs}} for sha, keys in sorted(by_sha.items())]


def check_unit(target, unit: dict, throttle=None) -> list[dict]:
    """One data file of a Milvus capture: present, its size and SHA-256 (read once into a
    private spool), and for each log it is, the binlog's content against its key and entries."""
    from seglake.errors import NotFound

    sha, size, keys = unit["sha"], unit["size"], unit["keys"]
    blob = layout.bundle_blob(sha)
    try:
        if throttle is not None:
            throttle.acquire(0, 1)
        spool, got, n = bundles.spool_hashed(target, blob, on_chunk=None if throttle is None else
                                             (lambda c: throttle.acquire(c, 0)))
    except NotFound:
        return [{"file": k, "data": blob, "problem": "missing from the backup target"} for k in keys]
    with spool:
        if n != size or got != sha:
            return [{"file": k, "data": blob, "problem": f"content differs: {n} bytes with SHA-256 {got[:16]}..., "
                                                          f"the bundle lists {size} bytes"} for k in keys]
        return [{"file": k, "data": blob, "problem": p} for k, want in unit["milvus"].items()
                for p in binlog.check(spool, n, **want)]


def visible_rows(target, doc: dict) -> dict:
    """The bundle's rows as Milvus shows them: {"rows": inserted, "deleted": hidden by a
    delete, "visible": rows - deleted, "pks": sorted visible pks}. A row (pk, ts) is hidden
    by a delete (pk, ts_d) with ts_d > ts in its own segment's delete logs (Milvus 2.3 routes
    a delete to every segment of its partition(s) that may hold the pk and applies a sealed
    segment's delta logs to it alone; an upsert without a partition deletes in `_default`
    only: a row of that pk in another partition stays visible, and count(*) counts it)."""
    import io

    pk_field = next(f["field_id"] for f in doc["snapshot"]["collection"]["schema"]["fields"] if f["is_primary_key"])

    def values(path: str) -> list:
        f = doc["files"][path]
        with target.open_read(layout.bundle_blob(f["sha256"])) as fh:
            data = fh.read()
        return binlog.column(io.BytesIO(data), len(data))

    def dels(path: str):
        f = doc["files"][path]
        with target.open_read(layout.bundle_blob(f["sha256"])) as fh:
            data = fh.read()
        return binlog.deletes(io.BytesIO(data), len(data))

    rows = []
    visible = []
    for s in doc["segments"]:
        by_field = {fl["field_id"]: fl["logs"] for fl in s["binlogs"]}
        pks = [v for x in by_field[pk_field] for v in values(x["path"])]
        tss = [v for x in by_field[TIMESTAMP] for v in values(x["path"])]
        if len(pks) != len(tss) or len(pks) != s["num_rows"]:
            raise bundles.BundleError(f"segment {s['segment_id']}: {len(pks)} pks, {len(tss)} timestamps, "
                                      f"{s['num_rows']} rows")
        rows.extend(zip(pks, tss))
        newest_delete: dict = {}
        for fl in s["deltalogs"]:
            for x in fl["logs"]:
                for pk, ts in dels(x["path"]):
                    newest_delete[pk] = max(ts, newest_delete.get(pk, 0))
        visible.extend(pk for pk, ts in zip(pks, tss) if newest_delete.get(pk, -1) <= ts)
    return {"rows": len(rows), "deleted": len(rows) - len(visible), "visible": len(visible),
            "pks": sorted(visible)}
