"""One Milvus collection's catalog, read from Milvus's etcd at one revision (range reads
only), in the shape a capture bundle records it (/work/reports/milvus-bundle-format.md,
docs/MILVUS_BUNDLE.md): the schema as Milvus gives it, partitions, shards and vchannels,
field indexes, and every Flushed segment with its insert / delta / stats logs and index
files, each by the object key (relative to Milvus's rootPath) its ids name.

Field numbers (milvus-io/milvus v2.3 internal/proto, public schema.proto / common.proto):
CollectionInfo 1 ID, 2 schema, 3 create_time, 7 vchannels, 8 pchannels, 10 shards_num,
12 consistency_level, 13 state, 14 properties; CollectionSchema 1 name, 2 description,
3 autoID, 5 enable_dynamic_field; FieldSchema 1 fieldID, 2 name, 3 is_primary_key,
4 description, 5 data_type, 6 type_params, 7 index_params, 8 autoID, 10 element_type,
12 is_dynamic, 13 is_partition_key; KeyValuePair 1 key, 2 value; PartitionInfo 1 id, 2 name,
3 created ts, 5 state; SegmentInfo 9 start_position, 10 dml_position (MsgPosition 4 timestamp);
FieldIndex 1 index_info (IndexInfo 1 collection, 2 field, 3 name, 4 id, 5 type_params,
6 index_params, 11 is_auto_index, 12 user_index_params), 2 deleted, 3 create_time;
SegmentIndex 1 collection, 2 partition, 3 segment, 4 num_rows, 5 index id, 6 build id,
8 index_version, 9 state (3 Finished), 11 index_file_keys, 12 deleted, 14 serialize_size;
DatabaseInfo 2 name, 3 id.
"""

from __future__ import annotations

import json

from seglake.errors import NotFound, ValidationError
from seglake.milvus.etcdmeta import MilvusMeta, named_records
from seglake.milvus.proto import fields, one, signed

DATA_TYPES = {1: "Bool", 2: "Int8", 3: "Int16", 4: "Int32", 5: "Int64", 10: "Float", 11: "Double",
              20: "String", 21: "VarChar", 22: "Array", 23: "JSON", 100: "BinaryVector",
              101: "FloatVector", 102: "Float16Vector", 103: "BFloat16Vector", 104: "SparseFloatVector"}
PK_TYPES = {5, 21}
FLUSHED = 4
FLUSHING = 5    # binlogs all saved, Flushed a moment later (a flush's or a compaction's output)
INDEX_FINISHED = 3
ROW_ID, TIMESTAMP = 0, 1       # Milvus's system fields
USER_FIELD_MIN = 100


def _kv_pairs(raw_list) -> dict[str, str]:
    out = {}
    for raw in raw_list or []:
        f = fields(raw)
        out[one(f, 1, b"").decode()] = one(f, 2, b"").decode()
    return out


def _ts_of(position: bytes | None) -> int:
    return one(fields(position), 4, 0) if position else 0


@named_records
def databases(meta: MilvusMeta) -> dict[int, str]:
    """{db id: name}; Milvus 2.3 may not store its default database (id 1): 'default'."""
    out = {1: "default"}
    for _, value in meta._range("root-coord/database/db-info/"):
        f = fields(value)
        out[signed(one(f, 3, 0))] = one(f, 2, b"").decode()
    return out


@named_records
def collection_infos(meta: MilvusMeta) -> list[dict]:
    """Every collection: {id, name, db_id, raw CollectionInfo fields}."""
    out = []
    for parts, value in meta._range("root-coord/database/collection-info/"):
        f = fields(value)
        out.append({"id": signed(one(f, 1, 0)), "name": one(fields(one(f, 2, b"")), 1, b"").decode(),
                    "db_id": int(parts[0]), "raw": f, "key": meta.at})
    return sorted(out, key=lambda c: c["id"])


def created(info: dict) -> bool:
    """A collection (collection_infos) in state Created: not being created nor dropped
    (etcdpb.CollectionState: 0 Created, 1 Creating, 2 Dropping, 3 Dropped)."""
    return one(info["raw"], 13, 0) == 0


def holder(infos: list[dict], db_of: dict[int, str], db: str, name: str) -> dict | None:
    """The collection (collection_infos) holding `db`.`name`: of those of that name, the
    newest in state Created, else the newest (a name dropped and made again: the one made;
    one being dropped only: that one, which read refuses). None when there is none."""
    found = [c for c in infos if c["name"] == name and db_of.get(c["db_id"]) == db]
    return max(found, key=lambda c: (created(c), c["id"]), default=None)


def field_schema(f: dict) -> dict:
    dt = one(f, 5, 0)
    return {"field_id": signed(one(f, 1, 0)), "name": one(f, 2, b"").decode(), "data_type": dt,
            "data_type_name": DATA_TYPES.get(dt, f"unknown({dt})"), "is_primary_key": bool(one(f, 3, 0)),
            "auto_id": bool(one(f, 8, 0)), "description": one(f, 4, b"").decode(),
            "type_params": _kv_pairs(f.get(6)), "index_params": _kv_pairs(f.get(7)),
            "element_type": one(f, 10, 0), "is_dynamic": bool(one(f, 12, 0)),
            "is_partition_key": bool(one(f, 13, 0))}


@named_records
def read(meta: MilvusMeta, db: str, name: str, dbs: dict[int, str] | None = None,
         infos: list[dict] | None = None) -> dict:
    """{collection, indexes, segments, checkpoints} of collection `db`.`name` (NotFound
    when Milvus has no such collection; ValidationError when its schema holds what a
    capture cannot represent, naming the field)."""
    dbs = databases(meta) if dbs is None else dbs
    infos = collection_infos(meta) if infos is None else infos
    c = holder(infos, dbs, db, name)
    if c is None:
        known = sorted(c["name"] for c in infos if dbs.get(c["db_id"]) == db)
        root = meta.meta.removesuffix("/meta/")
        empty = "" if infos else (f"; no Milvus collection at all under etcd root {root!r}: is --milvus-root "
                                  f"Milvus's etcd.rootPath? (make milvus-up's Milvus: seglake-dev-milvus)")
        raise NotFound(f"Milvus has no collection {name!r} in database {db!r} (its collections there: "
                       f"{', '.join(known) or 'none'}){empty}")
    f = c["raw"]
    meta.at = c.get("key", "")
    if not created(c):   # etcdpb.CollectionState: 0 Created, 1 Creating, 2 Dropping, 3 Dropped
        raise NotFound(f"Milvus collection {db}.{name} is being created or dropped (state {one(f, 13, 0)})")
    schema = fields(one(f, 2, b""))
    cid = c["id"]
    flds = []
    for _, value in meta._range(f"root-coord/fields/{cid}/"):
        flds.append(field_schema(fields(value)))
    if not flds:   # older layouts keep the fields inside the schema
        flds = [field_schema(fields(raw)) for raw in schema.get(4, [])]
    flds.sort(key=lambda x: x["field_id"])
    user = [x for x in flds if x["field_id"] >= USER_FIELD_MIN]
    for x in user:
        if x["data_type"] not in DATA_TYPES:
            raise ValidationError(f"Milvus collection {db}.{name}: field {x['name']!r} (id {x['field_id']}) has "
                                  f"data type {x['data_type']}, which a capture cannot represent")
    pks = [x for x in user if x["is_primary_key"]]
    if len(pks) != 1 or pks[0]["data_type"] not in PK_TYPES:
        raise ValidationError(f"Milvus collection {db}.{name}: expected one Int64 or VarChar primary key field, "
                              f"found {[x['name'] for x in pks]}")
    vch = [v.decode() for v in f.get(7, [])]
    parts = []
    for _, value in meta._range(f"root-coord/partitions/{cid}/"):
        p = fields(value)
        parts.append({"partition_id": signed(one(p, 1, 0)), "name": one(p, 2, b"").decode(),
                      "created_ts": one(p, 3, 0), "state": one(p, 5, 0)})
    parts.sort(key=lambda p: p["partition_id"])
    # a partition Milvus is dropping (etcdpb.PartitionState 2; until its data is collected)
    # or creating is not the collection's: neither it nor its segments are captured
    leaving = {p["partition_id"] for p in parts if p["state"] != 0}
    parts = [p for p in parts if p["state"] == 0]
    collection = {
        "collection_id": cid, "name": name, "db": db, "db_id": c["db_id"],
        "description": one(schema, 2, b"").decode(), "shards": one(f, 10, 0) or len(vch),
        "vchannels": vch, "pchannels": [v.decode() for v in f.get(8, [])],
        "consistency_level": one(f, 12, 0), "properties": _kv_pairs(f.get(14)), "created_ts": one(f, 3, 0),
        "schema": {"name": one(schema, 1, b"").decode(), "description": one(schema, 2, b"").decode(),
                   "auto_id": pks[0]["auto_id"], "enable_dynamic_field": bool(one(schema, 5, 0)),
                   "fields": user},
        "partitions": parts,
    }
    indexes = []
    for _, value in meta._range(f"field-index/{cid}/"):
        fi = fields(value)
        if one(fi, 2, 0):
            continue
        ii = fields(one(fi, 1, b""))
        indexes.append({"index_id": signed(one(ii, 4, 0)), "field_id": signed(one(ii, 2, 0)),
                        "index_name": one(ii, 3, b"").decode(), "type_params": _kv_pairs(ii.get(5)),
                        "index_params": _kv_pairs(ii.get(6)), "user_index_params": _kv_pairs(ii.get(12)),
                        "is_auto_index": bool(one(ii, 11, 0)), "create_time": one(fi, 3, 0)})
    indexes.sort(key=lambda i: i["index_id"])
    live_index = {i["index_id"]: i for i in indexes}
    seg_index: dict[int, list[dict]] = {}
    for _, value in meta._range(f"segment-index/{cid}/"):
        si = fields(value)
        if one(si, 12, 0) or one(si, 9, 0) != INDEX_FINISHED or signed(one(si, 5, 0)) not in live_index:
            continue
        build, version = signed(one(si, 6, 0)), signed(one(si, 8, 0))
        pid, sid = signed(one(si, 2, 0)), signed(one(si, 3, 0))
        iid = signed(one(si, 5, 0))
        seg_index.setdefault(sid, []).append({
            "build_id": build, "index_id": iid, "field_id": live_index[iid]["field_id"],
            "index_version": version, "num_rows": signed(one(si, 4, 0)), "serialized_size": one(si, 14, 0),
            "files": [f"index_files/{build}/{version}/{pid}/{sid}/{k.decode()}" for k in si.get(11, [])]})
    # the segments: SegmentInfo for positions, the binlog lists from MilvusMeta
    positions = {}
    for _, value in meta._range(f"datacoord-meta/s/{cid}/"):
        s = fields(value)
        positions[signed(one(s, 1, 0))] = (_ts_of(one(s, 9)), _ts_of(one(s, 10)))
    part_names = {p["partition_id"]: p["name"] for p in parts}
    segments = []
    for s in meta.segments(cid):
        # Milvus's own recovery view (datacoord GetRecoveryInfo): Flushed and Flushing segments,
        # not a bulk insert's (is_importing) until its import is done. A compaction's output is
        # written Flushing in the txn that drops its inputs: reading state Flushed alone, a
        # capture at that revision lost every compacted row
        if s.state not in (FLUSHED, FLUSHING) or s.importing or s.partition_id in leaving:
            continue
        if s.partition_id not in part_names:
            raise ValidationError(f"Milvus collection {db}.{name}: Flushed segment {s.id} is in partition "
                                  f"{s.partition_id}, which the collection does not list")
        if s.channel not in vch:
            raise ValidationError(f"Milvus collection {db}.{name}: segment {s.id} is on channel {s.channel!r}, "
                                  f"not one of the collection's vchannels {vch}")
        base = f"{cid}/{s.partition_id}/{s.id}"

        def logs(items, prefix, fid=None):
            return [{"log_id": b.log_id, "entries": b.entries, "ts_from": b.ts_from, "ts_to": b.ts_to,
                     "log_size": b.log_size,
                     "path": f"{prefix}/{base}/{'' if fid is None else str(fid) + '/'}{b.log_id}"} for b in items]
        start_ts, dml_ts = positions.get(s.id, (0, 0))
        segments.append({
            "segment_id": s.id, "partition_id": s.partition_id, "partition": part_names[s.partition_id],
            "channel": s.channel, "shard": vch.index(s.channel), "state": "Flushed", "num_rows": s.rows,
            "start_ts": start_ts, "dml_ts": dml_ts,
            "binlogs": [{"field_id": fid, "logs": logs(items, "insert_log", fid)}
                        for fid, items in sorted(s.binlogs.items())],
            "deltalogs": [{"field_id": 0, "logs": logs(s.deltalogs, "delta_log")}] if s.deltalogs else [],
            "statslogs": [{"field_id": fid, "logs": logs(items, "stats_log", fid)}
                          for fid, items in sorted(s.statslogs.items())],
            "indexes": sorted(seg_index.get(s.id, []), key=lambda i: i["build_id"]),
        })
    checkpoints = {}
    for v in vch:
        meta.at = meta.meta + f"datacoord-meta/channel-cp/{v}"
        kv = meta.kv.get(meta.meta + f"datacoord-meta/channel-cp/{v}") if meta.revision is None else next(
            iter(meta.kv.range(meta.meta + f"datacoord-meta/channel-cp/{v}", revision=meta.revision,
                               end=meta.meta + f"datacoord-meta/channel-cp/{v}\0")), None)
        checkpoints[v] = _ts_of(kv.value) if kv is not None else 0
    return {"collection": collection, "indexes": indexes, "segments": segments, "checkpoints": checkpoints}


def milvus_version(kv, root: str, revision: int | None = None) -> str:
    """The version Milvus's components registered in their etcd sessions ('' if none says)."""
    for item in kv.range(root.rstrip("/") + "/meta/session/", revision=revision):
        try:
            v = json.loads(item.value).get("Version")
        except (ValueError, AttributeError):
            continue
        if isinstance(v, str) and v:
            return v
    return ""
