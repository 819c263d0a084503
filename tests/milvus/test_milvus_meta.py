"""What a Milvus writes, seen from seglake's side: its etcd keys read with seglake's own etcd
client (decoded with the small protobuf reader) and its binlog objects in the bucket."""

from __future__ import annotations

import uuid

import boto3
import pytest
from botocore.config import Config

from seglake.meta.kv import KV
from seglake.milvus.etcdmeta import MilvusMeta

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]


def test_collection_partitions_and_flushed_segments(milvus, milvus_server, s3_server):
    name = f"c_{uuid.uuid4().hex[:8]}"
    res = milvus(
        {"op": "create", "name": name, "partitions": ["p1", "p2"], "shards": 2},
        {"op": "insert", "name": name, "partition": "p1", "pks": list(range(0, 100))},
        {"op": "insert", "name": name, "partition": "p2", "pks": list(range(100, 150))},
        {"op": "delete", "name": name, "pks": [3, 4, 120]},
        {"op": "flush", "name": name},
        {"op": "count", "name": name},
        {"op": "describe", "name": name},
    )
    assert res[1]["insert_count"] == 100 and res[2]["insert_count"] == 50
    assert res[5]["count"] == 147
    coll_id = res[6]["id"]

    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        meta = MilvusMeta(kv, milvus_server.etcd_root)
        coll = meta.collection(name)
        assert coll is not None and coll.id == coll_id
        assert coll.shards == 2 and len(coll.vchannels) == 2
        parts = {p.name: p for p in meta.partitions(coll.id)}
        assert set(parts) == {"_default", "p1", "p2"}
        segs = [s for s in meta.segments(coll.id) if s.state_name == "Flushed"]
        print("\nsegments:", [(s.id, s.state_name, s.rows, s.partition_id) for s in segs])
        by_part = {}
        for s in segs:
            by_part[s.partition_id] = by_part.get(s.partition_id, 0) + s.rows
        # rows as inserted (a delete hides rows, it does not rewrite a segment)
        assert by_part == {parts["p1"].id: 100, parts["p2"].id: 50}
        for s in segs:
            assert s.collection_id == coll.id and s.channel in coll.vchannels
            # pk (100), v (101), vec (102), row ids (0), timestamps (1): one column each
            assert set(s.binlogs) == {0, 1, 100, 101, 102}
            assert all(sum(b.entries for b in logs) == s.rows for logs in s.binlogs.values())
        assert sum(len(s.deltalogs) for s in segs) >= 1   # the deletes, flushed
        assert sum(b.entries for s in segs for b in s.deltalogs) == 3
        # nothing of it under another Milvus's root
        assert meta.collection("nope") is None

    # the binlog objects, in the bucket under the server's rootPath
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=s3_server.access_key,
                      aws_secret_access_key=s3_server.secret_key, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    root = milvus_server.s3.root_path
    keys = set()
    for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=milvus_server.s3.bucket, Prefix=f"{root}/insert_log/{coll.id}/"):
        keys |= {o["Key"] for o in page.get("Contents", [])}
    expected = {k for s in segs for k in s.insert_log_keys(root)}
    assert expected and expected <= keys
    deltas = [o for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=milvus_server.s3.bucket, Prefix=f"{root}/delta_log/{coll.id}/")
        for o in page.get("Contents", [])]
    assert deltas
    head = s3.get_object(Bucket=milvus_server.s3.bucket, Key=sorted(expected)[0])["Body"].read(4)
    assert int.from_bytes(head, "little") == 0xFFFABC   # Milvus's binlog magic
