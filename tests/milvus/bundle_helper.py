"""The restore tests' captures: made by the project's own capture (seglake.milvus.capture,
the engine of `seglake milvus backup`) from the test's Milvus, read back through the
bundle reader that `seglake backup verify` uses (every segment <-> file checked)."""

from __future__ import annotations

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
