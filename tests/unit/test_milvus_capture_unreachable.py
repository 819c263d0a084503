"""`seglake milvus backup` against a Milvus etcd that does not answer says it is Milvus's
etcd (seglake has its own: "etcd ... connection failed" alone reads as seglake's)."""

import pytest

from seglake.dev.devstack import free_port
from seglake.errors import Unavailable
from seglake.meta.kv import KV
from seglake.milvus import capture


def test_unreachable_milvus_etcd_is_named_as_milvus_s():
    with KV(f"127.0.0.1:{free_port()}", timeout=1.0) as kv:
        with pytest.raises(Unavailable, match=r"^Milvus's etcd is unreachable \(etcd revision failed on 127\.0\.0\.1:"):
            capture.plan(kv, None, "by-dev", ["coll_a"])
