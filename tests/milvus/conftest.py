"""The Milvus layer: a real Milvus 2.3.5 standalone (seglake.dev.milvus.MilvusServer) per
pytest worker, against the worker's session etcd (its own rootPath) and SeaweedFS (its own
bucket prefix). pymilvus runs in the Milvus venv (`milvus_client`), never in this process.

Skipped, with the reason, only where the machine cannot run Milvus (no Milvus venv and
scripts/milvus_venv.sh cannot make one).
"""

from __future__ import annotations

import time
import uuid

import pytest
from bundle_helper import GRACEFUL_S, TEST_CONFIG, close_sessions, milvus_client  # noqa: F401

MILVUS_BUCKET = "milvus-test"


@pytest.fixture(scope="session")
def milvus_python():
    from seglake.dev.milvus import MilvusUnavailable, milvus_python as make

    try:
        return make()
    except MilvusUnavailable as e:
        pytest.skip(f"cannot run Milvus here: {e}")


def s3_target(s3_server, root_path: str):
    from seglake.dev.milvus import S3Target

    return S3Target(endpoint=s3_server.endpoint, bucket=MILVUS_BUCKET, root_path=root_path,
                    access_key=s3_server.access_key, secret_key=s3_server.secret_key)


@pytest.fixture(scope="session")
def milvus_server(milvus_python, etcd_server, s3_server, tmp_path_factory):
    """One Milvus per worker: ~2-10 s to healthy once the binaries are unpacked."""
    from seglake.dev.milvus import MilvusServer

    server = MilvusServer(state_dir=tmp_path_factory.mktemp("milvus"),
                          etcd_endpoint=etcd_server.endpoint,
                          etcd_root=f"milvus-{uuid.uuid4().hex[:8]}",
                          s3=s3_target(s3_server, f"files-{uuid.uuid4().hex[:8]}"), config=TEST_CONFIG,
                          graceful_stop=GRACEFUL_S)
    t0 = time.time()
    server.prepare()
    prepare_s = time.time() - t0
    server.start(timeout=120)
    print(f"\nMILVUS prepare {prepare_s:.1f}s, start-to-healthy {server.healthy_after:.1f}s, "
          f"rss {server.rss_bytes() / 2**20:.0f} MiB")
    yield server
    close_sessions(server.address)
    t0 = time.time()
    server.stop()
    print(f"\nMILVUS stop {time.time() - t0:.2f}s (rc via SIGTERM, gracefulStopTimeout "
          f"{server.graceful_stop}s)")


def own_milvus(etcd_server, s3_server, tmp_path_factory, bucket: str, tag: str, *, auto_compaction: bool = False,
               config: dict | None = None, start_timeout: float = 120, **server_kw):
    """A module's own Milvus (a generator for a module-scoped fixture: `yield from
    own_milvus(...)`), in `bucket` under a fresh root, with the test settings (TEST_CONFIG,
    then `config`) and auto-compaction off unless asked: its tests compare captures taken
    minutes apart, and a compaction in between would change files. `server_kw`: more
    MilvusServer fields (another version's venv and binaries)."""
    from seglake.dev.milvus import MilvusServer, S3Target

    root = f"{tag}-{uuid.uuid4().hex[:8]}"
    settings = {**TEST_CONFIG, **({} if auto_compaction else {"dataCoord.compaction.enableAutoCompaction": "false"}),
                **(config or {})}
    server = MilvusServer(state_dir=tmp_path_factory.mktemp(f"milvus-{tag}"), etcd_endpoint=etcd_server.endpoint,
                          etcd_root=f"milvus-{root}",
                          s3=S3Target(endpoint=s3_server.endpoint, bucket=bucket, root_path=f"files-{root}",
                                      access_key=s3_server.access_key, secret_key=s3_server.secret_key),
                          config=settings, graceful_stop=GRACEFUL_S, **server_kw)
    server.prepare()
    server.start(timeout=start_timeout)
    try:
        yield server
    finally:
        close_sessions(server.address)
        server.stop()


@pytest.fixture
def milvus_at(milvus_python):
    """A callable running ops against the Milvus at an address."""
    return lambda address, *ops, **kw: milvus_client(milvus_python, address, *ops, **kw)


@pytest.fixture
def milvus(milvus_server, milvus_python):
    """A callable running ops against the worker's Milvus."""
    return lambda *ops, **kw: milvus_client(milvus_python, milvus_server.address, *ops, **kw)
