"""The restore tests' captures: made by the project's own capture (seglake.milvus.capture,
the engine of `seglake milvus backup`) from the test's Milvus, read back through the
bundle reader that `seglake backup verify` uses (every segment <-> file checked)."""

from __future__ import annotations

import atexit
import json
import subprocess
import tempfile
import textwrap
import threading
from pathlib import Path

import boto3
from botocore.config import Config

from seglake.lifecycle.backup import bundle as bundles
from seglake.meta.kv import KV
from seglake.milvus import capture as captures

REPO = Path(__file__).resolve().parents[2]


# The test servers' settings: the query coordinator's loops run 5x as often as by default
# (a load, a handoff after a flush: seconds of waiting each); nothing that decides which rows
# are visible. Their stop gives up its graceful part after 1 s (GRACEFUL_S: throwaway servers;
# tests/milvus/test_milvus_server.py stops its own with the default).
TEST_CONFIG = {"queryCoord.checkInterval": "200", "queryCoord.distPullInterval": "100",
               "queryCoord.checkHandoffInterval": "1000"}
GRACEFUL_S = 1


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


# A pyrun session: PRELUDE run once (pymilvus imported, connected), then one line
# {"code"} in -> one line {"out"} or {"error"} back; each code runs in a fresh copy of the
# prelude's namespace, its prints go to stderr, and the database is "default" again after it.
PYRUN_SERVER = PRELUDE + """
import contextlib, traceback
BASE = dict(globals())
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    ns = dict(BASE, OUT={})
    try:
        with contextlib.redirect_stdout(sys.stderr):
            exec(json.loads(line)["code"], ns)
        reply = {"out": ns["OUT"]}
    except BaseException:
        reply = {"error": traceback.format_exc()[-3000:]}
    finally:
        db.using_database("default")
    print(json.dumps(reply), flush=True)
"""


def pyrun(python, address: str, code: str, timeout: float = 300):
    """Run pymilvus code in the Milvus venv (the worker's pyrun session for the address); the
    code fills the dict OUT, returned."""
    key = (str(python), address, "pyrun")
    if key not in _SESSIONS or not _SESSIONS[key].alive():
        _SESSIONS[key] = _Session([str(python), "-c", PYRUN_SERVER, address], None)
    out = _SESSIONS[key].exchange({"code": textwrap.dedent(code)}, timeout)
    if "error" in out:
        raise AssertionError(f"pymilvus code failed: {out['error']}")
    return out["out"]


# The tests' Milvus ops (scripts/milvus_client.py), one session per (venv, address) and worker
class _Session:
    """One client process kept for the worker: pymilvus imported and connected once (~1 s and
    ~0.9 CPU-s a call saved over a process per call). `hello`: the first line it is sent."""

    def __init__(self, argv: list[str], hello: dict | None):
        self.log = tempfile.TemporaryFile(mode="w+")   # a pipe nobody reads could fill and block it
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True)
        first = self.exchange(hello, 60) if hello else self.read(60)
        if "error" in first:
            raise AssertionError(f"Milvus client session failed to start: {first['error']}")

    def exchange(self, msg: dict, timeout: float):
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass            # read() reports the ended process
        return self.read(timeout)

    def read(self, timeout: float):
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            line = self.proc.stdout.readline()
        except OSError:
            line = ""
        finally:
            timer.cancel()
        if not line:
            self.close()
            self.log.seek(0)
            raise AssertionError(f"milvus_client session ended (killed after {timeout:.0f} s?): "
                                 f"{self.log.read()[-3000:]}")
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:   # a client of ours: 2 s to end by itself (pymilvus's threads can hold its exit), then killed
            self.proc.stdin.close()
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


_SESSIONS: dict[tuple, _Session] = {}


def close_sessions(address: str | None = None) -> None:
    """End the sessions with the Milvus at `address` (every one when None): a server stopped,
    another may come up on its port later and must get sessions of its own."""
    for key in [k for k in _SESSIONS if address is None or k[1] == address]:
        _SESSIONS.pop(key).close()


atexit.register(close_sessions)


def milvus_client(python, address: str, *ops: dict, timeout: float = 120) -> list:
    """Run ops (scripts/milvus_client.py) through pymilvus in the Milvus venv, in the worker's
    session for that address (a dead one is replaced; a failed op raises AssertionError and
    the session goes on)."""
    key = (str(python), address)
    if key not in _SESSIONS or not _SESSIONS[key].alive():
        _SESSIONS[key] = _Session([str(python), str(REPO / "scripts" / "milvus_client.py")],
                                  {"address": address, "session": True, "connect_timeout": 30})
    out = _SESSIONS[key].exchange({"ops": list(ops)}, timeout)
    if isinstance(out, dict) and "error" in out:
        raise AssertionError(f"milvus_client failed at op {out['op']} ({ops[out['op']]['op']}): {out['error']}")
    return out


class SessionClient:
    """What the tests read Milvus with: `one(op)` / `call(*ops)` as seglake.milvus.client's
    MilvusClient, through the worker's session for the address."""

    def __init__(self, address: str, python=None):
        from seglake.dev.milvus import milvus_python

        self.python, self.address = python or milvus_python(create=False), address

    def call(self, *ops: dict) -> list:
        return milvus_client(self.python, self.address, *ops, timeout=300)

    def one(self, op: dict):
        return self.call(op)[0]


# -- shared by the attack modules (s20, s23): a restore target on the worker's Milvus, a private
#    seglake etcd root and backup dir, a pymilvus runner, and the toy schema's helpers
def target_of(milvus_server, s3_server):
    from seglake.milvus import restore
    return restore.MilvusTarget(address=milvus_server.address, bucket=milvus_server.s3.bucket,
                                s3_endpoint=s3_server.endpoint, s3_access_key=s3_server.access_key,
                                s3_secret_key=s3_server.secret_key)


def attack_env(etcd_server, tmp_path):
    """(kv on a fresh root, its keys, a local backup target); the caller closes kv."""
    import uuid
    from seglake.storage.local import LocalStore
    kv = KV(etcd_server.endpoint, timeout=10, root=f"ms{uuid.uuid4().hex[:8]}")
    return kv, kv.marker_keys, LocalStore(str(tmp_path / "backup"))


TOY = """
def toy(name, parts=(), shards=1):
    c = Collection(name, CollectionSchema([FieldSchema("pk", DataType.INT64, is_primary=True),
                                           FieldSchema("v", DataType.VARCHAR, max_length=32),
                                           FieldSchema("vec", DataType.FLOAT_VECTOR, dim=2)]), shards_num=shards)
    for p in parts:
        c.create_partition(p)
    return c
def put(c, pks, tag, partition=None):
    c.insert([list(pks), [f"{tag}-{p}" for p in pks], [[float(p), float(len(tag))] for p in pks]], partition_name=partition)
def count(name):
    return Collection(name).query(expr="", output_fields=["count(*)"], consistency_level="Strong")[0]["count(*)"]
"""
