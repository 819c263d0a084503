"""The restore tests' captures: made by the project's own capture (seglake.milvus.capture,
the engine of `seglake milvus backup`) from the test's Milvus, read back through the
bundle reader that `seglake backup verify` uses (every segment <-> file checked)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import boto3
from botocore.config import Config

from seglake.lifecycle.backup import bundle as bundles
from seglake.meta.kv import KV
from seglake.milvus import capture as captures


class MilvusS3Settings:
    """The milvus_s3_* keys a capture reads (as Settings has them)."""

    def __init__(self, s3_server):
        self.milvus_s3_endpoint, self.milvus_s3_region = s3_server.endpoint, "us-east-1"
        self.milvus_s3_access_key, self.milvus_s3_secret_key = s3_server.access_key, s3_server.secret_key
        self.copy_threads = 4


def s3_client(s3_server):
    return boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=s3_server.access_key,
                        aws_secret_access_key=s3_server.secret_key, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}))


def capture(milvus_server, s3_server, backup, name: str, bundle: str = "b1", db: str = "default") -> dict:
    """Capture collection `name` of the Milvus `milvus_server` as bundle `bundle` into
    `backup`; returns the committed bundle's document (checked)."""
    bucket = captures.open_bucket(MilvusS3Settings(s3_server), milvus_server.s3.bucket, milvus_server.s3.root_path)
    with KV(milvus_server.etcd_endpoint, timeout=10) as kv:
        reports = captures.capture(kv, bucket, backup, milvus_server.etcd_root, [name], bundle=bundle, db=db,
                                   threads=4, source={"bucket": milvus_server.s3.bucket,
                                                      "root_path": milvus_server.s3.root_path})
    assert len(reports) == 1, reports
    return bundles.read(backup, db, name, bundle)


# pymilvus code run in the Milvus venv (the tests' own client: building and reading Milvus
# collections as a user would)
PRELUDE = """
import json, sys
import numpy as np
from pymilvus import (Collection, CollectionSchema, DataType, FieldSchema, connections, utility, db,
                      Partition)
connections.connect(alias="default", uri="http://" + sys.argv[1], timeout=30)
OUT = {}
def rows_of(name, expr, fields, using_db=None):
    c = Collection(name)
    for f in c.schema.fields:
        if f.dtype in (DataType.FLOAT_VECTOR, DataType.BINARY_VECTOR) and not any(i.field_name == f.name for i in c.indexes):
            c.create_index(f.name, {"index_type": "FLAT", "metric_type": "L2", "params": {}} if f.dtype == DataType.FLOAT_VECTOR
                           else {"index_type": "BIN_FLAT", "metric_type": "HAMMING", "params": {}})
    c.load()
    # per partition: a pk may be visible in two partitions (an upsert without a partition
    # deletes in _default only), and which of the two a collection-wide query shows is Milvus's pick
    keyed = any(f.is_partition_key for f in c.schema.fields)     # Milvus refuses partition names there
    res = [dict(r, _partition=p.name if not keyed else "") for p in (c.partitions if not keyed else [None])
           for r in c.query(expr=expr, output_fields=fields, limit=16384, consistency_level="Strong",
                            partition_names=[p.name] if not keyed else None)]
    out = []
    for r in res:
        d = {}
        for k, v in dict(r).items():
            if isinstance(v, np.ndarray): v = v.tolist()
            elif isinstance(v, np.generic): v = v.item()
            elif isinstance(v, bytes): v = v.hex()
            elif isinstance(v, list): v = [x.hex() if isinstance(x, bytes) else (x.tolist() if hasattr(x, "tolist") else x) for x in v]
            d[k] = v
        out.append(d)
    return out
"""


def pyrun(python, address: str, code: str, timeout: float = 300):
    """Run pymilvus code in the Milvus venv; the code fills the dict OUT, returned."""
    src = PRELUDE + textwrap.dedent(code) + "\nprint('@@OUT@@' + json.dumps(OUT))\n"
    r = subprocess.run([str(python), "-c", src, address], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"pymilvus code failed: {r.stderr[-3000:]}")
    return json.loads(r.stdout.rsplit("@@OUT@@", 1)[1])
