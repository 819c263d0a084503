"""Capturing a real Milvus 2.3.5's collections into seglake bundles (issue 29 Deliver 2):
every Flushed segment's files, counts equal to Milvus's count(*) (deletes and upserts read
from the delete logs), verify, incremental (a second capture copies 0 bytes), a SIGKILLed
capture re-run converges, bad input refused with nothing written, and Milvus's etcd and
bucket byte-for-byte unchanged by a capture.

One Milvus of this module's own (its etcd root and bucket prefix on the session etcd and
SeaweedFS): the last test stops it to compare its etcd and bucket with nothing else writing.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.milvus.conftest import own_milvus

from seglake.errors import NotFound, SeglakeError
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import verify as verifies
from seglake.meta.kv import KV
from seglake.milvus import bundledoc, capture
from seglake.milvus.etcdmeta import MilvusMeta
from seglake.storage import layout
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]
REPO = Path(__file__).resolve().parents[2]
BUCKET = "milvus-capture"


class Settings:
    """The milvus_s3_* keys a capture reads (as Settings has them)."""

    def __init__(self, s3):
        self.milvus_s3_endpoint, self.milvus_s3_region = s3.endpoint, "us-east-1"
        self.milvus_s3_access_key, self.milvus_s3_secret_key = s3.access_key, s3.secret_key
        self.copy_threads = 4


@pytest.fixture(scope="module")
def msrv(milvus_python, etcd_server, s3_server, tmp_path_factory):
    yield from own_milvus(etcd_server, s3_server, tmp_path_factory, BUCKET, "cap")


@pytest.fixture(scope="module")
def source(msrv, milvus_python):
    """Two collections: `big` (2 shards; partitions p1, p2; inserts, a flush, deletes and
    upserts, a flush; an HNSW index built; loaded) and `small` (one partition, flushed)."""
    from tests.milvus.conftest import milvus_client

    big, small = f"big_{uuid.uuid4().hex[:6]}", f"small_{uuid.uuid4().hex[:6]}"
    run = lambda *ops: milvus_client(milvus_python, msrv.address, *ops, timeout=300)   # noqa: E731
    run({"op": "create", "name": big, "partitions": ["p1", "p2"], "shards": 2, "dim": 4},
        {"op": "insert", "name": big, "partition": "p1", "pks": list(range(0, 300))},
        {"op": "insert", "name": big, "partition": "p2", "pks": list(range(300, 450))},
        {"op": "flush", "name": big},
        {"op": "delete", "name": big, "pks": [1, 2, 3, 310, 311]},
        {"op": "upsert", "name": big, "partition": "p1", "pks": [10, 11, 12, 13]},
        {"op": "upsert", "name": big, "partition": "p2", "pks": [320, 321]},
        {"op": "insert", "name": big, "partition": "p2", "pks": list(range(450, 480))},
        {"op": "flush", "name": big},
        {"op": "index", "name": big},
        {"op": "create", "name": small, "shards": 1, "dim": 2},
        {"op": "insert", "name": small, "pks": list(range(0, 40))},
        {"op": "flush", "name": small})
    res = run({"op": "count", "name": big}, {"op": "pks", "name": big}, {"op": "count", "name": small},
              {"op": "pks", "name": small})
    return {"big": big, "small": small, "count": {big: res[0]["count"], small: res[2]["count"]},
            "pks": {big: res[1]["pks"], small: res[3]["pks"]}}


def _bucket(s3_server, msrv):
    return capture.open_bucket(Settings(s3_server), BUCKET, msrv.s3.root_path)


def _capture(msrv, s3_server, target, names, bundle, **kw):
    with KV(msrv.etcd_endpoint, timeout=10) as kv:
        return capture.capture(kv, _bucket(s3_server, msrv), target, msrv.etcd_root, names, bundle=bundle,
                               threads=4, source={"bucket": BUCKET, "root_path": msrv.s3.root_path}, say=print,
                               **kw)


def _flushed(msrv, name, revision=None):
    with KV(msrv.etcd_endpoint, timeout=10) as kv:
        meta = MilvusMeta(kv, msrv.etcd_root, revision)
        coll = meta.collection(name)
        return coll, [s for s in meta.segments(coll.id) if s.state_name == "Flushed"]


def test_capture_holds_every_flushed_segment_and_counts_match(msrv, source, s3_server, tmp_path):
    target = LocalStore(str(tmp_path / "target"))
    big, small = source["big"], source["small"]
    reports = _capture(msrv, s3_server, target, [big, small], "first")
    assert [r["collection"] for r in reports] == [big, small] and all(r["state"] == "committed" for r in reports)
    for name in (big, small):
        doc = bundles.read(target, "default", name, "first")
        coll, segs = _flushed(msrv, name, doc["source"]["etcd_revision"])   # Milvus's own view at that revision
        assert doc["kind"] == "milvus" and doc["source"]["milvus_version"].lstrip("v").startswith("2.3")
        mc = doc["snapshot"]["collection"]
        assert mc["collection_id"] == coll.id and mc["vchannels"] == list(coll.vchannels)
        assert mc["shards"] == (2 if name == big else 1)
        # every Flushed segment (Milvus's etcd read again here, at the capture's revision)
        assert {s["segment_id"] for s in doc["segments"]} == {s.id for s in segs}
        by_id = {s.id: s for s in segs}
        for e in doc["segments"]:
            s = by_id[e["segment_id"]]
            assert e["num_rows"] == s.rows and e["partition_id"] == s.partition_id
            assert {fl["field_id"] for fl in e["binlogs"]} == {0, 1, 100, 101, 102}
            for fl in e["binlogs"]:
                assert sum(x["entries"] for x in fl["logs"]) == e["num_rows"]
            for path in [x["path"] for fl in e["binlogs"] + e["deltalogs"] + e["statslogs"] for x in fl["logs"]] \
                    + [p for ix in e["indexes"] for p in ix["files"]]:
                f = doc["files"][path]
                with target.open_read(layout.bundle_blob(f["sha256"])) as fh:
                    assert hashlib.sha256(fh.read()).hexdigest() == f["sha256"]
        fields = {f["name"]: f for f in mc["schema"]["fields"]}
        assert fields["pk"]["is_primary_key"] and fields["pk"]["data_type_name"] == "Int64"
        assert fields["vec"]["data_type_name"] == "FloatVector"
        assert fields["vec"]["type_params"]["dim"] == ("4" if name == big else "2")
        # Milvus's count(*) and its visible pks == the bundle's rows, deletes read from its delete logs
        vis = bundledoc.visible_rows(target, doc)
        assert vis["visible"] == source["count"][name] and vis["pks"] == source["pks"][name]
        rep = verifies.verify(target, name, "first", say=print)
        assert rep["ok"], rep["problems"]
    doc = bundles.read(target, "default", big, "first")
    assert {p["name"] for p in doc["snapshot"]["collection"]["partitions"]} == {"_default", "p1", "p2"}
    assert doc["totals"]["deleted_entries"] >= 5 + 6       # 5 deletes, 6 upserts' deletes
    assert bundledoc.visible_rows(target, doc)["deleted"] == 11
    assert any(e["indexes"] for e in doc["segments"]), "the HNSW index's files are in the bundle"
    assert doc["snapshot"]["indexes"][0]["index_params"]["index_type"] == "HNSW"
    # a misspelt key in any section was read as absent (a capture's document accepted
    # 'num_row', 'is_primary', 'delta_logs' ...); each is refused naming the closest key
    seg = next(i for i, e in enumerate(doc["segments"]) if e["indexes"] and e["deltalogs"])
    for path, bad, near in [([], "uuid", "uid"), (["source"], "etcd_revison", "etcd_revision"),
                            (["snapshot", "collection"], "shard", "shards"),
                            (["snapshot", "collection", "schema"], "auto_ids", "auto_id"),
                            (["snapshot", "collection", "schema", "fields", 0], "is_primary", "is_primary_key"),
                            (["snapshot", "collection", "partitions", 0], "names", "name"),
                            (["snapshot", "indexes", 0], "index_nme", "index_name"),
                            (["segments", seg], "num_row", "num_rows"), (["segments", seg], "delta_logs", "deltalogs"),
                            (["segments", seg, "deltalogs", 0, "logs", 0], "ts_too", "ts_to"),
                            (["segments", seg, "indexes", 0], "file", "files")]:
        forged = json.loads(json.dumps(doc))
        at = forged
        for k in path:
            at = at[k]
        at[bad] = 1
        with pytest.raises(bundles.BundleError, match=f"unknown key {bad!r} \\(did you mean {near!r}"):
            bundledoc.check(forged, "bundle under test")
    assert bundledoc.check(json.loads(json.dumps(doc)), "bundle under test")["uid"] == doc["uid"]


def test_second_unchanged_capture_copies_nothing(msrv, source, s3_server, tmp_path, monkeypatch):
    target = LocalStore(str(tmp_path / "target"))
    monkeypatch.setattr(capture, "IN_MEMORY_MAX", 0)     # every file through a spool (a big file's path)
    first = _capture(msrv, s3_server, target, [source["big"]], "one")[0]
    assert first["copied_bytes"] > 0
    assert verifies.verify(target, source["big"], "one", say=print)["ok"]
    monkeypatch.undo()
    second = _capture(msrv, s3_server, target, [source["big"]], "two")[0]
    assert second["copied_bytes"] == 0 and second["read_bytes"] == 0 and second["copied_files"] == 0
    assert second["files"] == first["files"]
    again = _capture(msrv, s3_server, target, [source["big"]], "two")[0]
    assert again["already"] and again["copied_bytes"] == 0


def test_a_capture_is_not_imported_into_a_seglake_store(msrv, source, s3_server, meta, store, tmp_path):
    """A Milvus capture restores into Milvus: seglake's import of it is refused, nothing written."""
    from seglake.lifecycle.backup import imports

    target = LocalStore(str(tmp_path / "target"))
    _capture(msrv, s3_server, target, [source["small"]], "imp")
    before = {kv.key for kv in meta.kv.range(meta.keys.root + "/")}
    with pytest.raises(bundles.BundleError, match="is a capture of a milvus collection"):
        imports.import_bundle(meta, store, target, source["small"], "imp", say=print)
    assert {kv.key for kv in meta.kv.range(meta.keys.root + "/")} == before
    assert list(store.list("")) == []


def test_verify_finds_a_damaged_data_file(msrv, source, s3_server, tmp_path):
    target = LocalStore(str(tmp_path / "target"))
    _capture(msrv, s3_server, target, [source["small"]], "b")
    doc = bundles.read(target, "default", source["small"], "b")
    path = next(x["path"] for e in doc["segments"] for fl in e["binlogs"] if fl["field_id"] == 100
                for x in fl["logs"])
    blob = Path(tmp_path / "target" / layout.bundle_blob(doc["files"][path]["sha256"]))
    raw = bytearray(blob.read_bytes())
    raw[-20] ^= 0xFF
    blob.write_bytes(bytes(raw))
    rep = verifies.verify(target, source["small"], "b", say=print)
    assert not rep["ok"] and any(p["file"] == path for p in rep["problems"])


def test_milvus_serves_writes_and_reads_during_a_capture(msrv, source, s3_server, milvus_python, tmp_path):
    """While a capture runs, Milvus takes inserts, a flush and a count (another collection,
    so the captured one's view stays what the test knows); the capture holds the flushed
    view it read."""
    import threading

    from tests.milvus.conftest import milvus_client

    other = f"live_{uuid.uuid4().hex[:6]}"
    milvus_client(milvus_python, msrv.address, {"op": "create", "name": other, "shards": 1, "dim": 2})
    served: dict = {}

    def write_and_read():
        try:
            served["res"] = milvus_client(
                milvus_python, msrv.address,
                *[{"op": "insert", "name": other, "pks": list(range(i, i + 100))} for i in range(0, 1000, 100)],
                {"op": "flush", "name": other}, {"op": "count", "name": other}, timeout=300)
        except BaseException as e:   # noqa: BLE001 - reported below
            served["error"] = e

    t = threading.Thread(target=write_and_read)
    t.start()
    target = LocalStore(str(tmp_path / "target"))
    for i in range(3):
        (r,) = _capture(msrv, s3_server, target, [source["big"]], f"live{i}")
        assert r["state"] == "committed"
    t.join(300)
    assert "error" not in served, served.get("error")
    assert served["res"][-1]["count"] == 1000
    doc = bundles.read(target, "default", source["big"], "live2")
    assert bundledoc.visible_rows(target, doc)["visible"] == source["count"][source["big"]]


def test_capture_is_throttled_by_the_run_and_the_store_limit(msrv, source, s3_server, meta, tmp_path):
    """The run's rate limit and the store-wide one (seglake.throttle) pace every read and
    write of a capture: each request and byte is taken from both clocks; the run's clock
    is removed at the end."""
    from seglake import throttle

    throttle.set_store_limit(meta, 512 << 20, 5000)
    target = LocalStore(str(tmp_path / "target"))
    (r,) = _capture(msrv, s3_server, target, [source["small"]], "slow", meta=meta,
                    max_bytes_per_second=256 << 20, max_requests_per_second=2000)
    t = r["throttle"]
    assert t["limit_bytes_per_second"] == 256 << 20 and t["store_limit_bytes_per_second"] == 512 << 20
    # every byte read at Milvus and written to the target went through the limit
    assert t["bytes"] >= r["read_bytes"] + r["copied_bytes"] > 0 and t["requests"] >= r["files"]
    assert list(meta.kv.range(f"{meta.keys.root}/backup/throttle/")) == []
    with pytest.raises(Exception, match="rate limit needs seglake's etcd"):
        _capture(msrv, s3_server, target, [source["small"]], "slow2", max_bytes_per_second=1 << 20)


def test_bad_input_fails_clearly_with_nothing_written(msrv, source, s3_server, tmp_path):
    tdir = tmp_path / "target"
    target = LocalStore(str(tdir))
    with pytest.raises(NotFound, match="no collection 'nope'"):
        _capture(msrv, s3_server, target, [source["small"], "nope"], "x")
    # an unreachable etcd (a port nothing listens on)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(SeglakeError):
        with KV(f"127.0.0.1:{port}", timeout=2) as kv:
            capture.capture(kv, _bucket(s3_server, msrv), target, msrv.etcd_root, [source["small"]], bundle="x")
    # a bucket that is not Milvus's (empty) and credentials that cannot read it
    with KV(msrv.etcd_endpoint, timeout=10) as kv:
        with pytest.raises(capture.CaptureError, match="not in the bucket"):
            capture.capture(kv, capture.open_bucket(Settings(s3_server), BUCKET, "elsewhere"), target,
                            msrv.etcd_root, [source["small"]], bundle="x")
        bad = Settings(s3_server)
        bad.milvus_s3_secret_key = "wrong-secret"
        with pytest.raises(SeglakeError) as e:
            capture.capture(kv, capture.open_bucket(bad, BUCKET, msrv.s3.root_path), target, msrv.etcd_root,
                            [source["small"]], bundle="x")
        assert "wrong-secret" not in str(e.value)
    assert not tdir.exists() or not any(tdir.rglob("*")), "nothing written to the target"


def _milvus_env(monkeypatch, s3_server, backup: Path) -> None:
    """The Milvus bucket's credentials and the target as every other S3 setting comes:
    SEGLAKE_* environment (never argv)."""
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_SECRET_KEY", s3_server.secret_key)
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(backup))


def test_cli_milvus_backup(msrv, source, s3_server, etcd_server, tmp_path, monkeypatch, capsys):
    from seglake.cli.entry import main

    backup = tmp_path / "backup"
    _milvus_env(monkeypatch, s3_server, backup)
    monkeypatch.setenv("SEGLAKE_STORE_URI", str(tmp_path / "store"))
    monkeypatch.setenv("SEGLAKE_ETCD_ENDPOINT", etcd_server.endpoint)     # seglake's own (verify records there)
    monkeypatch.setenv("SEGLAKE_ETCD_ROOT", f"t{uuid.uuid4().hex[:10]}")
    argv = ["milvus", "backup", "--milvus-etcd", msrv.etcd_endpoint, "--milvus-root", msrv.etcd_root,
            "--bucket", BUCKET, "--bucket-root", msrv.s3.root_path, "--bundle", "cli", source["small"], "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["collection"] for r in out] == [source["small"]] and out[0]["state"] == "committed"
    assert s3_server.secret_key not in " ".join(argv)
    assert main(["backup", "verify", source["small"], "cli", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    # the CLI's capture is recorded in seglake's etcd like the DAGs' (the page's Milvus section),
    # with or without a rate limit: it always runs under the store-wide limit kept there
    from seglake.config import Settings
    from seglake.meta import Meta
    with Meta.from_settings(Settings.load()) as meta:
        rec = meta.kv.get(meta.keys.milvus_capture("default", source["small"], "cli"))
        assert rec is not None and json.loads(rec.value)["bundle"] == "cli", rec
    # refused before anything is opened: a bad endpoint, no collection named, an unknown collection
    for bad in (["--milvus-etcd", "no port"], ["--milvus-etcd", msrv.etcd_endpoint, "--all", source["small"]]):
        rc = main(["milvus", "backup", *bad, "--bucket", BUCKET, "--bundle", "cli2"])
        assert rc != 0
    rc = main(["milvus", "backup", "--milvus-etcd", msrv.etcd_endpoint, "--milvus-root", msrv.etcd_root,
               "--bucket", BUCKET, "--bucket-root", msrv.s3.root_path, "--bundle", "cli3", "nope"])
    err = capsys.readouterr().err
    assert rc != 0 and "no collection 'nope'" in err and s3_server.secret_key not in err
    assert [b["bundle"] for b in bundles.list_bundles(LocalStore(str(backup)))] == ["cli"]


@pytest.mark.spark
def test_milvus_backup_dag(msrv, source, s3_server, airflow_env, tmp_path, monkeypatch, capfd):
    sys.path.insert(0, str(REPO / "tests" / "dags"))
    from dag_helpers import load_dag, task_states

    from seglake.contract import check_conf
    from seglake.errors import ValidationError

    backup = tmp_path / "backup"
    monkeypatch.setenv("AIRFLOW_CONN_SEGLAKE_MILVUS", json.dumps(
        {"conn_type": "aws", "login": s3_server.access_key, "password": s3_server.secret_key,
         "extra": {"endpoint_url": s3_server.endpoint}}))
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(backup))
    conf = {"collections": f"{source['big']},{source['small']}", "milvus_etcd": msrv.etcd_endpoint,
            "milvus_root": msrv.etcd_root, "bucket": BUCKET, "bucket_root": msrv.s3.root_path, "bundle": "dag1"}
    for bad, why in (({**conf, "colections": "x"}, "did you mean 'collections'"),
                     ({**conf, "milvus_etcd": "http://x:1"}, "host:port"),
                     ({**conf, "collections": "a b"}, "invalid collection name"),
                     ({**conf, "collections": ""}, "every collection"),
                     ({**conf, "max_mib_per_second": -1}, "max_mib_per_second")):
        with pytest.raises(ValidationError, match=why):
            check_conf("milvus_backup", bad)
    run = load_dag("milvus_backup").test(run_conf=conf)
    assert run.state == "success", task_states(run)
    out, _ = capfd.readouterr()
    assert "run note: milvus capture dag1: 2 collections captured" in out, out[-3000:]
    assert s3_server.secret_key not in out
    target = LocalStore(str(backup))
    for name in (source["big"], source["small"]):
        doc = bundles.read(target, "default", name, "dag1")
        assert bundledoc.visible_rows(target, doc)["visible"] == source["count"][name]
    run = load_dag("milvus_backup").test(run_conf={**conf, "collections": "nope"})
    assert run.state == "failed"
    assert not (backup / "bundles" / "default" / "nope").exists()
    # engine=spark: spark-submit of spark/jobs/milvus_capture.py (credentials in its environment)
    capfd.readouterr()
    run = load_dag("milvus_backup").test(run_conf={**conf, "collections": source["small"], "bundle": "dag2",
                                                   "engine": "spark"})
    states = task_states(run)
    assert run.state == "success", states
    assert states["capture_spark"] == "success" and states["capture_inline"] == "skipped", states
    out, err = capfd.readouterr()
    assert s3_server.secret_key not in out + err
    doc = bundles.read(target, "default", source["small"], "dag2")
    assert bundledoc.visible_rows(target, doc)["visible"] == source["count"][source["small"]]
    # both engines' captures are recorded in seglake's etcd: the operator page lists them
    from seglake.meta import Meta
    with Meta.from_settings(airflow_env) as meta:
        recorded = {(c["collection"], c["bundle"]): c for c in capture.list_captures(meta)}
    assert set(recorded) == {(source["big"], "dag1"), (source["small"], "dag1"), (source["small"], "dag2")}
    assert recorded[(source["small"], "dag2")]["rows"] == doc["totals"]["rows"]
    assert recorded[(source["big"], "dag1")]["copied_files"] is not None   # the inline run's own report


@pytest.mark.spark
def test_spark_engine_captures_the_same_bundle(msrv, source, s3_server, tmp_path, monkeypatch):
    """spark/jobs/milvus_capture.py's run() with a real Spark (local[2], in this process):
    the executors read, check and copy; the bundle lists the same files with the same
    content as an inline capture's, and verifies."""
    import importlib.util

    from pyspark.sql import SparkSession

    from seglake.config import Settings as Real

    backup = tmp_path / "backup"
    _milvus_env(monkeypatch, s3_server, backup)
    monkeypatch.setenv("SEGLAKE_STORE_URI", str(tmp_path / "store"))
    spec = importlib.util.spec_from_file_location("milvus_capture_job", REPO / "spark" / "jobs" / "milvus_capture.py")
    job = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(job)
    req = capture.check_request(msrv.etcd_endpoint, msrv.etcd_root, BUCKET, msrv.s3.root_path, [source["big"]],
                                "spark1")
    spark = (SparkSession.builder.master("local[2]").appName("test-milvus-capture")
             .config("spark.ui.enabled", "false").config("spark.task.maxFailures", "1").getOrCreate())
    try:
        (r,) = job.run(spark, Real.load(), req, None)
        # and the bundle verify job on the same executors (every binlog parsed there)
        spec = importlib.util.spec_from_file_location("verify_bundle_job", REPO / "spark" / "jobs" / "verify_bundle.py")
        vjob = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vjob)
        rep = vjob.run(spark, Real.load(), source["big"], "spark1", "default", None)
        assert rep["ok"] and rep["engine"] == "spark" and rep["data_files"] == r["unique_blobs"], rep
    finally:
        spark.stop()
    assert r["state"] == "committed" and r["copied_files"] == r["unique_blobs"] > 0
    target = LocalStore(str(backup))
    inline = LocalStore(str(tmp_path / "inline"))
    _capture(msrv, s3_server, inline, [source["big"]], "spark1")
    a, b = bundles.read(target, "default", source["big"], "spark1"), bundles.read(inline, "default", source["big"],
                                                                                   "spark1")
    assert {k: f["sha256"] for k, f in a["files"].items()} == {k: f["sha256"] for k, f in b["files"].items()}
    assert verifies.verify(target, source["big"], "spark1", say=print)["ok"]


def _snapshot(msrv, s3_server) -> tuple[dict, dict]:
    import boto3
    from botocore.config import Config

    with KV(msrv.etcd_endpoint, timeout=10) as kv:
        keys = {x.key: (x.value, x.mod_revision) for x in kv.range(msrv.etcd_root + "/")}
    s3 = boto3.client("s3", endpoint_url=s3_server.endpoint, aws_access_key_id=s3_server.access_key,
                      aws_secret_access_key=s3_server.secret_key, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "path"}))
    objs = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=msrv.s3.root_path + "/"):
        for o in page.get("Contents", []):
            body = s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            objs[o["Key"]] = (o["ETag"], o["LastModified"], hashlib.sha256(body).hexdigest())
    return keys, objs


KILL_SCRIPT = r"""
import json, sys, time
from seglake.meta.kv import KV
from seglake.milvus import capture
from seglake.storage.local import LocalStore
a = json.loads(sys.stdin.read())
class S:
    milvus_s3_endpoint, milvus_s3_region = a["endpoint"], "us-east-1"
    milvus_s3_access_key, milvus_s3_secret_key = a["ak"], a["sk"]
    copy_threads = 1
bucket = capture.open_bucket(S, a["bucket"], a["root_path"])
def slowed(orig):
    def slow(*args):
        time.sleep(0.05)
        return orig(*args)
    return slow
bucket.open_read, bucket.read_upto = slowed(bucket.open_read), slowed(bucket.read_upto)
with KV(a["etcd"], timeout=10) as kv:
    capture.capture(kv, bucket, LocalStore(a["target"]), a["etcd_root"], a["names"], bundle="k", threads=1)
print("DONE")
"""


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
def test_sigkill_mid_capture_then_rerun_converges(msrv, source, s3_server, tmp_path, at):
    """SIGKILL once 10 / 50 / 90 % of the data files are in the target; the re-run commits
    the bundle exactly, reusing what the killed run wrote."""
    scratch = _capture(msrv, s3_server, LocalStore(str(tmp_path / "scratch")), [source["big"]], "k")[0]
    kill_at = max(1, int(at * scratch["unique_blobs"]))
    tdir = tmp_path / "target"
    arg = {"endpoint": s3_server.endpoint, "ak": s3_server.access_key, "sk": s3_server.secret_key,
           "bucket": BUCKET, "root_path": msrv.s3.root_path, "etcd": msrv.etcd_endpoint,
           "etcd_root": msrv.etcd_root, "target": str(tdir), "names": [source["big"]]}
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'include'}:{REPO}"}
    p = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    p.stdin.write(json.dumps(arg))
    p.stdin.close()
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:
        if (tdir / "data").exists() and sum(1 for _ in (tdir / "data").rglob("*") if _.is_file()) >= kill_at:
            break
        time.sleep(0.02)
    assert p.poll() is None, f"the capture ended before it could be killed: {p.stderr.read()[-2000:]}"
    p.send_signal(signal.SIGKILL)
    p.wait()
    target = LocalStore(str(tdir))
    with pytest.raises(NotFound):
        bundles.read(target, "default", source["big"], "k")     # not a bundle: never committed
    killed_blobs = sum(1 for _ in (tdir / "data").rglob("*") if _.is_file() and not _.name.startswith("."))
    assert killed_blobs >= kill_at - 1
    r = _capture(msrv, s3_server, target, [source["big"]], "k")[0]
    assert r["state"] == "committed" and not r["already"]
    assert r["copied_files"] <= r["unique_blobs"] - killed_blobs + 1    # the killed run's files reused
    doc = bundles.read(target, "default", source["big"], "k")
    assert bundledoc.visible_rows(target, doc)["visible"] == source["count"][source["big"]]
    assert verifies.verify(target, source["big"], "k", say=print)["ok"]
    blobs = {p.name for p in (tdir / "data").rglob("*") if p.is_file() and not p.name.startswith(".")}
    assert blobs == {f["sha256"] for f in doc["files"].values()}, "nothing left over, nothing missing"


def test_capture_leaves_milvus_etcd_and_bucket_byte_for_byte_unchanged(msrv, source, s3_server, tmp_path):
    """Last: Milvus is stopped (nothing else writes its etcd root or bucket prefix), then
    its etcd keys (value and mod revision) and objects (ETag, mtime, SHA-256) are compared
    before and after a capture of both collections."""
    msrv.stop()
    before = _snapshot(msrv, s3_server)
    for _ in range(30):          # session keys of the stopped server expire: wait for a still view
        time.sleep(1)
        now = _snapshot(msrv, s3_server)
        if now == before:
            break
        before = now
    target = LocalStore(str(tmp_path / "target"))
    reports = _capture(msrv, s3_server, target, [], "all")    # [] = every collection of the database
    assert {source["big"], source["small"]} <= {r["collection"] for r in reports}
    after = _snapshot(msrv, s3_server)
    assert after[0] == before[0], "Milvus's etcd changed"
    assert after[1] == before[1], "Milvus's bucket changed"
    assert len(before[1]) > 20 and len(before[0]) > 20
