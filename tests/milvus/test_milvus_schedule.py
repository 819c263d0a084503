"""The lifecycle of a Milvus collection (issue 29 Deliver 4), against a real Milvus 2.3.5,
real etcd and SeaweedFS: a registered Milvus source with a retention policy runs in the
snapshot_schedule DAG (dag.test): scheduled incremental captures (the second copies only
the files the writes and Flush between the runs made), verification of each new bundle,
GFS pruning of the schedule's captures (the right one pruned, a pinned one kept), a damaged
file found by verify; the operator page's data lists the source, its captures and what
was verified.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.milvus.conftest import own_milvus

from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import verify as verifies
from seglake.milvus import bundledoc, sources
from seglake.storage import layout
from seglake.storage.local import LocalStore

pytestmark = [pytest.mark.etcd, pytest.mark.s3, pytest.mark.milvus]
REPO = Path(__file__).resolve().parents[2]
BUCKET = "milvus-sched"


@pytest.fixture(scope="module")
def msrv(milvus_python, etcd_server, s3_server, tmp_path_factory):
    yield from own_milvus(etcd_server, s3_server, tmp_path_factory, BUCKET, "sch")


def _at(seconds_ago: float) -> datetime:
    t = int(time.time() - seconds_ago) // 60 * 60
    return datetime.fromtimestamp(t, tz=timezone.utc)


def _name(dt: datetime) -> str:
    return dt.strftime("sched_%Y%m%dT%H%MZ")


def test_scheduled_captures_verify_and_prune_through_the_dag(msrv, milvus_python, s3_server, airflow_env, meta,
                                                            tmp_path, monkeypatch, capfd):
    sys.path.insert(0, str(REPO / "tests" / "dags"))
    from dag_helpers import load_dag, task_states

    from seglake import console
    from tests.milvus.conftest import milvus_client

    coll = f"sch_{uuid.uuid4().hex[:6]}"
    run_ops = lambda *ops: milvus_client(milvus_python, msrv.address, *ops, timeout=300)   # noqa: E731
    run_ops({"op": "create", "name": coll, "shards": 1, "dim": 4},
            {"op": "insert", "name": coll, "pks": list(range(0, 100))},
            {"op": "flush", "name": coll})
    backup = tmp_path / "backup"
    monkeypatch.setenv("AIRFLOW_CONN_MILVUS_PROD", json.dumps(
        {"conn_type": "aws", "login": s3_server.access_key, "password": s3_server.secret_key,
         "extra": {"endpoint_url": s3_server.endpoint}}))
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(backup))
    rec = sources.set_source(meta, "prod", {
        "milvus_etcd": msrv.etcd_endpoint, "milvus_root": msrv.etcd_root, "bucket": BUCKET,
        "bucket_root": msrv.s3.root_path, "collections": [coll], "conn_id": "milvus_prod", "keep_last": 1})
    assert s3_server.secret_key not in json.dumps(rec)
    raw = meta.kv.get(meta.keys.milvus_source("prod")).value
    assert s3_server.secret_key.encode() not in raw and s3_server.access_key.encode() not in raw
    target = LocalStore(str(backup))
    dag = load_dag("snapshot_schedule")

    def scheduled(dt, retry=0):
        capfd.readouterr()
        at = dt + timedelta(seconds=retry)   # a retry: the same minute, so the same bundle name
        # every key given: a key of an earlier dag.test() conf stays in the same DAG object's params
        run = dag.test(run_after=at, logical_date=at, run_conf={"milvus_source": "prod", "dry_run": False})
        out, err = capfd.readouterr()
        assert run.state == "success", (task_states(run), out[-4000:])
        assert s3_server.secret_key not in out + err
        return out

    # run 1: the first capture of the collection copies everything, is verified
    t1, t2, t3 = _at(3 * 3600), _at(2 * 3600), _at(3600)
    # (a dry run first says what run 1 will do: capture, and keep it -- it said "keep 0")
    first = t1 - timedelta(minutes=30)
    capfd.readouterr()
    run = dag.test(run_after=first, logical_date=first, run_conf={"milvus_source": "prod", "dry_run": True})
    out, _ = capfd.readouterr()
    assert run.state == "success", task_states(run)
    assert f"would capture {_name(first)}; would prune nothing; keep 1" in out, out[-3000:]
    assert not backup.exists() or not any(p.is_file() and "_locks" not in p.parts for p in backup.rglob("*"))
    out = scheduled(t1)
    assert f"milvus prod default.{coll}: capture {_name(t1)}" in out, out[-3000:]
    doc1 = bundles.read(target, "default", coll, _name(t1))
    assert doc1["kind"] == "milvus" and doc1["made_by"] == "retention schedule"
    assert bundledoc.visible_rows(target, doc1)["visible"] == 100
    v1 = verifies.recorded(meta, "default", coll, _name(t1))
    assert v1["ok"] and v1["data_files"] == doc1["totals"]["unique_blobs"]
    cap1 = json.loads(meta.kv.get(meta.keys.milvus_capture("default", coll, _name(t1))).value)
    assert cap1["copied_files"] == doc1["totals"]["unique_blobs"] > 0
    sources.pin(meta, target, "default", coll, _name(t1), 3600, by="test")

    # writes and a Flush between the runs; run 2 copies only the files they made
    run_ops({"op": "insert", "name": coll, "pks": list(range(100, 160))},
            {"op": "delete", "name": coll, "pks": [0, 1]},
            {"op": "flush", "name": coll})
    out = scheduled(t2)
    doc2 = bundles.read(target, "default", coll, _name(t2))
    new = set(doc2["files"]) - set(doc1["files"])
    assert new and set(doc1["files"]) <= set(doc2["files"])   # no compaction: the first files are all still there
    cap2 = json.loads(meta.kv.get(meta.keys.milvus_capture("default", coll, _name(t2))).value)
    assert cap2["read_bytes"] == sum(doc2["files"][k]["size"] for k in new), (cap2, sorted(new))
    assert cap2["copied_files"] == len({doc2["files"][k]["sha256"] for k in new})
    assert cap2["reused_files"] == len(doc2["files"]) - cap2["copied_files"]
    assert bundledoc.visible_rows(target, doc2)["visible"] == 158
    assert verifies.recorded(meta, "default", coll, _name(t2))["ok"]
    # keep_last 1: the first bundle is pinned, so held (not pruned)
    assert f"{_name(t1)} held (pin by test" in out, out[-3000:]
    assert ("run note: snapshot_schedule: 0 retention policies run; Milvus: 1 of 1 collections captured "
            f"({cap2['copied_bytes']} bytes copied), 0 bundles pruned, 1 verified") in out, out[-3000:]
    assert bundles.existing(target, "default", coll, _name(t1)) is not None

    # a dry run at the third time: says what it would capture and prune, changes nothing
    def listing():
        return sorted((p.relative_to(backup).as_posix(), p.stat().st_mtime_ns) for p in backup.rglob("*")
                      if p.is_file() and "_locks" not in p.parts)
    before = listing()
    capfd.readouterr()
    dry = t3 - timedelta(minutes=30)
    run = dag.test(run_after=dry, logical_date=dry, run_conf={"milvus_source": "prod", "dry_run": True})
    out, _ = capfd.readouterr()
    assert run.state == "success", task_states(run)
    assert f"would capture {_name(dry)}; would prune {_name(t2)}; keep 1; {_name(t1)} held" in out, out[-3000:]
    assert listing() == before

    # run 3: keep_last 1 keeps it; the unpinned second is pruned, the pinned first kept
    out = scheduled(t3)
    assert f"; prune {_name(t2)}; keep 1" in out, out[-3000:]
    assert bundles.existing(target, "default", coll, _name(t2)) is None
    assert bundles.existing(target, "default", coll, _name(t1)) is not None
    doc3 = bundles.read(target, "default", coll, _name(t3))
    cap3 = json.loads(meta.kv.get(meta.keys.milvus_capture("default", coll, _name(t3))).value)
    assert cap3["copied_files"] == 0 and cap3["read_bytes"] == 0   # nothing written in Milvus since run 2
    assert meta.kv.get(meta.keys.milvus_capture("default", coll, _name(t2))) is None
    # the same time again (a retried run): nothing captured twice, nothing else pruned
    out = scheduled(t3, retry=30)
    assert f"{_name(t3)} already captured" in out
    assert sorted(b for _, _, b, done in bundles.find(target, "default", coll) if done) == [_name(t1), _name(t3)]

    # the operator page's data: the source, its captures (rows, bytes, verified, pinned)
    m = console.milvus(meta, time.time())
    assert [s["name"] for s in m["sources"]] == ["prod"] and m["sources"][0]["collections"] == [coll]
    caps = {c["bundle"]: c for c in m["captures"] if c["collection"] == coll}
    assert set(caps) == {_name(t1), _name(t3)}
    assert caps[_name(t3)]["source"] == "prod" and caps[_name(t3)]["rows"] == doc3["totals"]["rows"]
    assert caps[_name(t3)]["bytes"] == doc3["totals"]["bytes"] and caps[_name(t3)]["verified_ok"] is True
    assert caps[_name(t1)]["pinned_until"] is not None

    # verify finds a damaged data file (same size, one byte flipped), naming it
    key = sorted(new)[0]
    path = backup / layout.bundle_blob(doc3["files"][key]["sha256"])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    rep = verifies.verify(target, coll, _name(t3), meta=meta, say=print)
    assert not rep["ok"] and key in {p["file"] for p in rep["problems"]}, rep["problems"][:3]
    caps = {c["bundle"]: c for c in console.milvus(meta, time.time())["captures"] if c["collection"] == coll}
    assert caps[_name(t3)]["verified_ok"] is False


def test_a_source_is_checked_whole_before_anything_is_written(meta):
    from seglake.errors import ValidationError

    good = {"milvus_etcd": "127.0.0.1:2379", "bucket": "milvus-bucket", "collections": "a,b", "keep_daily": 7}
    for bad, why in (({**good, "colections": "a"}, "did you mean 'collections'"),
                     ({**good, "secret_key": "s3cr3t-value"}, "unknown key 'secret_key'"),
                     ({**good, "keep_daily": 0}, "every count is 0"),
                     ({**good, "keep_daily": 1.5}, "keep_daily"),
                     ({**good, "milvus_etcd": "http://h:1"}, "host:port"),
                     ({**good, "collections": "a b"}, "collection"),
                     ({**good, "conn_id": "x y"}, "conn_id"),
                     ({**good, "verify": "yes"}, "verify"),
                     ({**good, "max_mib_per_second": -1}, "max_mib_per_second"),
                     ({**good, "max_mib_per_second": float("nan")}, "max_mib_per_second"),
                     ({**good, "max_mib_per_second": True}, "max_mib_per_second")):
        with pytest.raises(ValidationError, match=why) as e:
            sources.set_source(meta, "src", bad)
        assert "s3cr3t-value" not in str(e.value)
    assert sources.list_sources(meta) == []
    with pytest.raises(ValidationError):
        sources.set_source(meta, "bad name", good)
    assert sources.set_source(meta, "src", good)["collections"] == ["a", "b"]
    assert [d["name"] for d in sources.list_sources(meta)] == ["src"]
    assert sources.clear_source(meta, "src") and not sources.clear_source(meta, "src")


def test_cli_source_set_and_run(msrv, milvus_python, s3_server, etcd_server, tmp_path, monkeypatch, capsys):
    """`seglake milvus source set` then `source run`: the bucket's credentials only in the
    environment (milvus_s3_* keys), never in argv or the source record; a second run in the
    same minute captures nothing twice."""
    from seglake.cli.entry import main
    from seglake.meta import Meta
    from seglake.config import Settings as Real
    from tests.milvus.conftest import milvus_client

    coll = f"cli_{uuid.uuid4().hex[:6]}"
    milvus_client(milvus_python, msrv.address, {"op": "create", "name": coll, "shards": 1, "dim": 2},
                  {"op": "insert", "name": coll, "pks": list(range(30))}, {"op": "flush", "name": coll}, timeout=300)
    backup = tmp_path / "backup"
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ENDPOINT", s3_server.endpoint)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ACCESS_KEY", s3_server.access_key)
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_SECRET_KEY", s3_server.secret_key)
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(backup))
    monkeypatch.setenv("SEGLAKE_STORE_URI", str(tmp_path / "store"))
    monkeypatch.setenv("SEGLAKE_ETCD_ENDPOINT", etcd_server.endpoint)
    monkeypatch.setenv("SEGLAKE_ETCD_ROOT", f"t{uuid.uuid4().hex[:10]}")
    argv = ["milvus", "source", "set", "local", "--milvus-etcd", msrv.etcd_endpoint, "--milvus-root", msrv.etcd_root,
            "--bucket", BUCKET, "--bucket-root", msrv.s3.root_path, "--collections", coll, "--keep-daily", "7",
            "--max-mib-per-second", "64", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["keep_daily"] == 7
    assert main(["milvus", "source", "run", "local", "--json"]) == 0
    (r,) = json.loads(capsys.readouterr().out)
    assert r["captured"]["copied_files"] > 0 and r["verify"]["ok"] and r["bundle"].startswith("sched_")
    thr = r["captured"]["throttle"]   # every byte read and written went through the source's rate
    assert thr["limit_bytes_per_second"] == 64 << 20 and thr["bytes"] >= r["captured"]["copied_bytes"] > 0, thr
    assert main(["milvus", "source", "run", "--json"]) == 0   # keep_daily: not due again today
    (r2,) = json.loads(capsys.readouterr().out)
    assert r2["captured"] is None and r2["kept"] == {r["bundle"]: ["daily", "newest"]}, r2
    with Meta.from_settings(Real.load()) as meta:
        raw = meta.kv.get(meta.keys.milvus_source("local")).value
    assert s3_server.secret_key.encode() not in raw and s3_server.secret_key not in " ".join(argv)
    assert [b for _, _, b, done in bundles.find(LocalStore(str(backup)), "default", coll) if done] == [r["bundle"]]
    # a collection Milvus does not have: reported, the run fails, the source's other collection is captured
    other = f"oth_{uuid.uuid4().hex[:6]}"
    milvus_client(milvus_python, msrv.address, {"op": "create", "name": other, "shards": 1, "dim": 2},
                  {"op": "insert", "name": other, "pks": list(range(10))}, {"op": "flush", "name": other}, timeout=300)
    assert main([*argv[:3], "two", *argv[4:13], f"gone_x,{other}", "--keep-last", "1", "--json"]) == 0
    capsys.readouterr()
    assert main(["milvus", "source", "run", "two", "--json"]) == 1
    got = {x["collection"]: x for x in json.loads(capsys.readouterr().out)}
    assert "no collection 'gone_x'" in got["gone_x"]["error"] and got["gone_x"]["captured"] is None
    assert got[other]["captured"]["rows"] == 10 and got[other]["verify"]["ok"] and "error" not in got[other]
