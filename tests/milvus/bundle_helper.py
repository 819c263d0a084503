"""A Milvus capture written by the test itself, following milvus-bundle-format.md (version 1):
the capture helper's code (seglake.milvus.capture) was not on main when the restore was built.
Read from the source Milvus's etcd (seglake.milvus.etcdmeta) and bucket, schema and index
through the public API (scripts/milvus_client.py), written with the bundle module's own
writer (data/{sha256}, bundle.json, COMMITTED)."""

from __future__ import annotations

import hashlib
import time
import uuid

import boto3
from botocore.config import Config

from seglake.lifecycle.backup import bundle as bundles
from seglake.meta.kv import KV
from seglake.milvus.client import MilvusClient
from seglake.milvus.etcdmeta import MilvusMeta
from seglake.storage import layout


def s3_client(s3_server):
    return boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=s3_server.access_key,
                        aws_secret_access_key=s3_server.secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def capture(milvus_server, s3_server, backup, name: str, bundle: str = "b1", db: str = "default") -> dict:
    client = MilvusClient(milvus_server.address)
    sch = client.one({"op": "schema", "name": name})
    s3 = s3_client(s3_server)
    root, bucket = milvus_server.s3.root_path, milvus_server.s3.bucket
    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        meta = MilvusMeta(kv, milvus_server.etcd_root)
        coll = meta.collection(name)
        parts = {p.id: p.name for p in meta.partitions(coll.id)}
        segs = [s for s in meta.segments(coll.id) if s.state_name == "Flushed"]
    files, entries = {}, []

    def put(rel: str) -> str:
        raw = s3.get_object(Bucket=bucket, Key=f"{root}/{rel}")["Body"].read()
        sha = hashlib.sha256(raw).hexdigest()
        backup.put(layout.bundle_blob(sha), raw)
        files[rel] = {"size": len(raw), "sha256": sha, "tag": "test", "data_tag": ""}
        return rel

    def log(b, rel):
        return {"log_id": b.log_id, "entries": b.entries, "ts_from": b.ts_from, "ts_to": b.ts_to,
                "log_size": b.log_size, "path": put(rel)}

    for s in segs:
        base = f"{coll.id}/{s.partition_id}/{s.id}"
        entries.append({
            "segment_id": s.id, "partition_id": s.partition_id, "partition": parts[s.partition_id],
            "channel": s.channel, "shard": coll.vchannels.index(s.channel), "state": "Flushed",
            "num_rows": s.rows, "level": 0, "start_ts": 0, "dml_ts": 0, "storage_version": 0,
            "binlogs": [{"field_id": f, "logs": [log(b, f"insert_log/{base}/{f}/{b.log_id}") for b in logs]}
                        for f, logs in sorted(s.binlogs.items())],
            "deltalogs": [{"field_id": 0, "logs": [log(b, f"delta_log/{base}/{b.log_id}") for b in s.deltalogs]}]
            if s.deltalogs else [],
            "statslogs": [], "indexes": []})
    fields = [{"field_id": f["field_id"], "name": f["name"], "data_type": f["data_type"],
               "is_primary_key": f["is_primary_key"], "auto_id": f["auto_id"], "description": "",
               "type_params": f["type_params"], "index_params": {}, "element_type": 0,
               "is_dynamic": False, "is_partition_key": False} for f in sch["fields"]]
    fid = {f["name"]: f["field_id"] for f in sch["fields"]}
    indexes = [{"index_id": i + 1, "field_id": fid[ix["field"]], "index_name": ix["index_name"],
                "type_params": {}, "index_params": ix["params"], "user_index_params": ix["params"],
                "is_auto_index": False, "create_time": 0} for i, ix in enumerate(sch["indexes"])]
    totals = {"segments": len(entries), "rows": sum(e["num_rows"] for e in entries), "files": len(files),
              "bytes": sum(f["size"] for f in files.values())}
    doc = {"format": bundles.FORMAT, "version": bundles.VERSION, "kind": "milvus", "bundle": bundle,
           "uid": uuid.uuid4().hex, "created_at": time.time(),
           "source": {"kind": "milvus", "milvus_version": "2.3.5", "etcd_root": milvus_server.etcd_root,
                      "bucket": bucket, "root_path": root, "db": db, "db_id": 1, "collection": name,
                      "collection_id": coll.id, "snapshot": None, "snapshot_id": None},
           "snapshot": {"collection": {"collection_id": coll.id, "name": name, "db": db, "db_id": 1,
                                       "shards": coll.shards, "vchannels": list(coll.vchannels),
                                       "consistency_level": 0, "properties": {},
                                       "schema": {"name": name, "description": "", "auto_id": False,
                                                  "enable_dynamic_field": False, "fields": fields},
                                       "partitions": [{"partition_id": p, "name": n} for p, n in parts.items()]},
                        "indexes": indexes, "totals": totals},
           "segments": entries, "files": files, "totals": totals}
    bundles.write(backup, doc)
    return doc
