#!/usr/bin/env python3
"""Ground truth of a REAL Milvus 2.3.5 for seglake's row model, written as data.

Runs IN the separate Milvus venv (scripts/milvus_venv.sh creates it; pymilvus 2.3.5 pins grpcio
1.58 and needs marshmallow<4, which clash with the project venv):

    "$(scripts/milvus_venv.sh)" scripts/milvus_semantics.py [--out tests/data/milvus_semantics.json]

It starts a private stack on loopback: the Debian `etcd` (external, so the embedded etcd never
binds 2379/2380) and the PyPI `milvus` wheel's standalone server, both on free non-default ports,
with all data in a temp dir. Every `<role>.ip` is 127.0.0.1 and `common.gracefulStopTimeout` is 10.
Both processes are stopped (by their pids) at exit, also on an exception, SIGTERM, SIGINT or SIGHUP.

Each CASE runs on a fresh collection: `pk` INT64 primary key (auto_id off), `v` FLOAT, `vec`
FLOAT_VECTOR dim 2 (the row's vector is [pk, v], so a search distance tells the copies of a pk
apart), 2 shards, a FLAT index, loaded before the first op. After the ops it records, before and
after one more `flush()`:
  query  = query(expr="pk >= 0", output_fields=["pk","v"], consistency_level="Strong"), sorted
           (the first of 6 runs; "query_answers" holds the distinct answers of the 6)
  query_term = the same with expr="pk in [every pk the ops name]" (+ "query_term_answers")
  count  = query(expr="", output_fields=["count(*)"], consistency_level="Strong")
  count_filtered = the same count(*) with expr="pk >= 0"
  search = search([[0, 0]], L2, limit 16, Strong): [pk, v] of the hits in rank order

Op format (replayable; a row is [pk, v] and its vector is [pk, v]):
  {"op": "insert", "rows": [[pk, v], ...], "partition": null | "name"}
  {"op": "upsert", "rows": [[pk, v], ...], "partition": null | "name"}
  {"op": "delete", "pks": [pk, ...], "partition": null | "name"}   (expr "pk in [...]")
  {"op": "flush"}
A case's "partitions" lists the partitions created (besides _default) before the ops. An op that
fails records its error and the case goes on (the case's "error" is the first one).
"""
from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- cases
def ins(*rows, partition=None):
    return {"op": "insert", "rows": [list(r) for r in rows], "partition": partition}


def ups(*rows, partition=None):
    return {"op": "upsert", "rows": [list(r) for r in rows], "partition": partition}


def dele(*pks, partition=None):
    return {"op": "delete", "pks": list(pks), "partition": partition}


FLUSH = {"op": "flush"}


def r(pks, v):
    return [(p, v) for p in pks]


CASES = [
    {"name": "a_insert_then_delete",
     "doc": "insert 1..5 v=1; delete 3",
     "ops": [ins(*r(range(1, 6), 1.0)), dele(3)]},
    {"name": "b_delete_reaches_flushed",
     "doc": "insert 1..5; flush; delete 2,4",
     "ops": [ins(*r(range(1, 6), 1.0)), FLUSH, dele(2, 4)]},
    {"name": "c_reinsert_after_delete",
     "doc": "insert 1..3 v=1; delete 2; insert 2 v=2",
     "ops": [ins(*r(range(1, 4), 1.0)), dele(2), ins((2, 2.0))]},
    {"name": "d_upsert_existing_and_new",
     "doc": "insert 1..3 v=1; upsert (2,v=2),(9,v=9)",
     "ops": [ins(*r(range(1, 4), 1.0)), ups((2, 2.0), (9, 9.0))]},
    {"name": "e_upsert_same_pk_twice_in_one_call",
     "doc": "upsert (1,v=1),(1,v=2) in one call",
     "ops": [ups((1, 1.0), (1, 2.0))]},
    {"name": "e2_upsert_same_pk_twice_over_existing",
     "doc": "insert 1 v=0; upsert (1,v=1),(1,v=2) in one call",
     "ops": [ins((1, 0.0)), ups((1, 1.0), (1, 2.0))]},
    {"name": "f_delete_before_insert",
     "doc": "delete 7 (never inserted); insert 7 v=7",
     "ops": [dele(7), ins((7, 7.0))]},
    {"name": "g_duplicate_insert_two_calls",
     "doc": "insert 1 v=1; insert 1 v=2 (two calls)",
     "ops": [ins((1, 1.0)), ins((1, 2.0))]},
    {"name": "g2_duplicate_insert_two_calls_reversed_values",
     "doc": "insert 1 v=2; insert 1 v=1 (two calls: the newer copy has the smaller v)",
     "ops": [ins((1, 2.0)), ins((1, 1.0))]},
    {"name": "g3_duplicate_insert_then_delete",
     "doc": "insert 1 v=1; insert 1 v=2; delete 1 (one delete hides both copies?)",
     "ops": [ins((1, 1.0)), ins((1, 2.0)), dele(1)]},
    {"name": "g4_duplicate_insert_then_upsert",
     "doc": "insert 1 v=1; insert 1 v=2; upsert 1 v=3",
     "ops": [ins((1, 1.0)), ins((1, 2.0)), ups((1, 3.0))]},
    {"name": "g5_three_copies_in_one_segment",
     "doc": "insert 1 v=3; insert 1 v=1; insert 1 v=2 (three calls)",
     "ops": [ins((1, 3.0)), ins((1, 1.0)), ins((1, 2.0))]},
    {"name": "h_duplicate_pk_in_one_insert",
     "doc": "insert (1,v=1),(1,v=2) in one call",
     "ops": [ins((1, 1.0), (1, 2.0))]},
    {"name": "h2_duplicate_pk_in_one_insert_reversed_values",
     "doc": "insert (1,v=2),(1,v=1) in one call",
     "ops": [ins((1, 2.0), (1, 1.0))]},
    {"name": "i_chain_across_flushes",
     "doc": "insert 1..3 v=1; flush; upsert 2 v=2; flush; delete 2; insert 2 v=3",
     "ops": [ins(*r(range(1, 4), 1.0)), FLUSH, ups((2, 2.0)), FLUSH, dele(2), ins((2, 3.0))]},
    {"name": "j_partitions_delete",
     "doc": "insert 1..4 into p1, 5..8 into _default; delete 1,5 (no partition); "
            "delete 6 with partition p1",
     "partitions": ["p1"],
     "ops": [ins(*r(range(1, 5), 1.0), partition="p1"), ins(*r(range(5, 9), 1.0)),
             dele(1, 5), dele(6, partition="p1")]},
    {"name": "k_duplicate_across_flush",
     "doc": "insert 1 v=1; flush; insert 1 v=2 (older copy sealed, newer growing)",
     "ops": [ins((1, 1.0)), FLUSH, ins((1, 2.0))]},
    {"name": "k2_duplicate_across_flush_reversed_values",
     "doc": "insert 1 v=2; flush; insert 1 v=1",
     "ops": [ins((1, 2.0)), FLUSH, ins((1, 1.0))]},
    {"name": "k3_duplicate_in_two_sealed_segments",
     "doc": "insert 1 v=1; flush; insert 1 v=2 (both copies sealed by the final flush)",
     "ops": [ins((1, 1.0)), FLUSH, ins((1, 2.0)), FLUSH]},
    {"name": "k4_duplicate_across_flush_then_delete",
     "doc": "insert 1 v=1; flush; insert 1 v=2; delete 1 "
            "(one delete hides copies in both segments)",
     "ops": [ins((1, 1.0)), FLUSH, ins((1, 2.0)), dele(1)]},
    {"name": "l_duplicate_across_partitions",
     "doc": "insert 1 v=1 into p1; insert 1 v=2 into _default",
     "partitions": ["p1"],
     "ops": [ins((1, 1.0), partition="p1"), ins((1, 2.0))]},
    {"name": "m_upsert_into_other_partition",
     "doc": "insert 1 v=1 into p1; upsert 1 v=2 into _default (does the upsert's delete reach p1?)",
     "partitions": ["p1"],
     "ops": [ins((1, 1.0), partition="p1"), ups((1, 2.0))]},
    {"name": "m2_upsert_into_same_partition",
     "doc": "insert 1 v=1 into p1; upsert 1 v=2 into p1",
     "partitions": ["p1"],
     "ops": [ins((1, 1.0), partition="p1"), ups((1, 2.0), partition="p1")]},
    {"name": "n_delete_twice_then_insert",
     "doc": "insert 1 v=1; delete 1; delete 1; insert 1 v=2; flush; delete 1",
     "ops": [ins((1, 1.0)), dele(1), dele(1), ins((1, 2.0)), FLUSH, dele(1)]},
]

# ---------------------------------------------------------------- the stack
def _port_free(port: int) -> bool:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def pick_ports(n: int, start: int) -> list[int]:
    out, p = [], start
    while len(out) < n:
        if p > 65000:
            raise RuntimeError("no free ports")
        if _port_free(p):
            out.append(p)
        p += 1
    return out


def _http_ok(url: str, needle: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return needle in resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ConnectionError):
        return False


def _stop_proc(proc: subprocess.Popen | None, name: str, grace: float) -> None:
    """SIGTERM to the process (its own session: we signal its pid, the group it leads), then
    SIGKILL after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        print(f"[stack] {name} pid {proc.pid} still up after {grace}s: SIGKILL", file=sys.stderr)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


class Stack:
    """External etcd + Milvus standalone on loopback, data in a temp dir."""

    def __init__(self, bin_dir: Path, work: Path, port_start: int):
        self.bin_dir, self.work, self.port_start = bin_dir, work, port_start
        self.etcd: subprocess.Popen | None = None
        self.milvus: subprocess.Popen | None = None
        self.proxy_port = 0
        self.stopped = False

    def start(self) -> None:
        import milvus  # the PyPI wheel: templating and the lzma-packed binaries

        ports = pick_ports(13, self.port_start)
        (etcd_client, etcd_peer, metrics, proxy, proxy_internal, root, qc, qn, ic, inode, dc,
         dn, _spare) = ports
        self.proxy_port, self.metrics_port = proxy, metrics
        logs = self.work / "logs"
        logs.mkdir(parents=True, exist_ok=True)

        # etcd: the Debian binary (3.4), client + peer on loopback
        etcd_bin = os.environ.get("ETCD_BIN") or shutil.which("etcd")
        if not etcd_bin and (ROOT / ".venv/bin/etcd").exists():
            etcd_bin = str(ROOT / ".venv/bin/etcd")
        if not etcd_bin:
            raise RuntimeError("no etcd binary ($ETCD_BIN, PATH or .venv/bin/etcd; Debian: "
                               "apt-get install etcd-server)")
        peer = f"http://127.0.0.1:{etcd_peer}"
        client = f"http://127.0.0.1:{etcd_client}"
        self.etcd = subprocess.Popen(
            [etcd_bin, "--name", "milvus-semantics", "--data-dir", str(self.work / "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"milvus-semantics={peer}", "--log-outputs", "stderr"],
            stdout=open(logs / "etcd.out", "w"), stderr=subprocess.STDOUT,
            start_new_session=True, cwd=self.work)
        self._wait(lambda: _http_ok(f"{client}/health", "true"), self.etcd, "etcd", 30)

        # Milvus: render the wheel's template with our ports and overrides
        cfg = milvus.MilvusServerConfig()
        for key, port in (("etcd_port", etcd_client), ("proxy_port", proxy),
                          ("proxy_internal_port", proxy_internal), ("root_coord_port", root),
                          ("query_coord_port", qc), ("query_node_port", qn),
                          ("index_coord_port", ic), ("index_node_port", inode),
                          ("data_coord_port", dc), ("data_node_port", dn)):
            cfg.configurable_items[key][1] = port
        data = self.work / "data"
        for key, val in (("etcd_log_path", str(logs / "etcd-embed.log")),
                         ("system_log_path", str(logs)),
                         ("etcd_data_dir", str(data / "etcd.data")),
                         ("local_storage_dir", str(data)),
                         ("rocksmq_data_dir", str(data / "rocksmq"))):
            cfg.configurable_items[key][1] = val
        extras = {
            "etcd.use.embed": "false",
            "etcd.endpoints": f"127.0.0.1:{etcd_client}",
            "common.gracefulStopTimeout": 10,
            "log.stdout": "false",
        }
        for role in ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord",
                     "dataNode"):
            extras[f"{role}.ip"] = "127.0.0.1"
        for k, v in extras.items():
            cfg.set(k, v)
        cfg.base_data_dir = str(self.work)
        (self.work / "configs").mkdir(exist_ok=True)
        cfg.write_config()
        rendered = (self.work / "configs" / "milvus.yaml").read_text()
        for needle in ("embed: false", f"endpoints: 127.0.0.1:{etcd_client}",
                       "gracefulStopTimeout: 10"):
            if needle not in rendered:
                raise RuntimeError(f"config override not applied: {needle!r}")

        # binaries: unpacked once into a cache dir (246 MB), shared by runs
        milvus._initialize_data_files(str(self.bin_dir.parent))
        exe = self.bin_dir / "milvus"
        env = dict(os.environ)
        env.update({
            "DEPLOY_MODE": "STANDALONE",
            "METRICS_PORT": str(metrics),
            "MILVUSCONF": str(self.work / "configs"),
            "MILVUS_RUN_DIR": str(self.work / "run"),
            "LD_LIBRARY_PATH": f"{self.bin_dir}:{os.environ.get('LD_LIBRARY_PATH', '')}",
        })
        self.milvus = subprocess.Popen(
            # --alias: Milvus 2.3.5 ignores MILVUS_RUN_DIR; its pid file is always in /run/milvus,
            # named standalone-<alias>.pid with an alias (else shared by every instance)
            [str(exe), "run", "standalone", f"--alias=semantics-{os.getpid()}"], env=env, cwd=self.work,
            stdout=open(logs / "milvus-stdout.log", "w"),
            stderr=open(logs / "milvus-stderr.log", "w"), start_new_session=True)
        print(f"[stack] etcd pid {self.etcd.pid} :{etcd_client}, milvus pid {self.milvus.pid} "
              f":{proxy} (metrics :{metrics}), dir {self.work}", file=sys.stderr)
        self._wait(lambda: _http_ok(f"http://127.0.0.1:{metrics}/healthz", "OK"), self.milvus,
                   "milvus", 180)

    def _wait(self, ok, proc, name, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode} while starting "
                                   f"(logs in {self.work / 'logs'})")
            if ok():
                print(f"[stack] {name} healthy in {time.time() - t0:.1f}s", file=sys.stderr)
                return
            time.sleep(0.2)
        raise TimeoutError(f"{name} not healthy in {timeout}s (logs in {self.work / 'logs'})")

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        t0 = time.time()
        _stop_proc(self.milvus, "milvus", 40)
        _stop_proc(self.etcd, "etcd", 10)
        rc = self.milvus.returncode if self.milvus else None
        print(f"[stack] stopped in {time.time() - t0:.1f}s (milvus rc {rc})", file=sys.stderr)


# ---------------------------------------------------------------- running cases
def _err(e: BaseException) -> str:
    msg = getattr(e, "message", None) or str(e)
    code = getattr(e, "code", None)
    return f"{type(e).__name__}(code={code}): {msg}" if code is not None else \
        f"{type(e).__name__}: {msg}"


def _rows(rows):
    return [[int(p) for p, _ in rows], [float(v) for _, v in rows],
            [[float(p), float(v)] for p, v in rows]]


def _fv(x) -> float:
    return round(float(x), 6)


def _query(coll, expr):
    res = coll.query(expr=expr, output_fields=["pk", "v"], consistency_level="Strong")
    return sorted([int(r["pk"]), _fv(r["v"])] for r in res)


REPEATS = 6


def _answers(coll, expr):
    """The query run REPEATS times: the first answer and the distinct answers seen (Milvus 2.3.5
    picks among copies of a pk in different segments by chance, so one answer is a sample)."""
    seen = []
    for _ in range(REPEATS):
        a = _query(coll, expr)
        if a not in seen:
            seen.append(a)
    return seen[0], sorted(seen)


def observe(coll, pks) -> dict:
    out = {}
    out["query"], out["query_answers"] = _answers(coll, "pk >= 0")
    out["query_deterministic"] = len(out["query_answers"]) == 1
    # a pk-term query (a different filter path: segment pruning by pk statistics)
    out["query_term"], out["query_term_answers"] = _answers(
        coll, f"pk in [{', '.join(str(p) for p in sorted(pks))}]")
    out["count"] = int(coll.query(expr="", output_fields=["count(*)"],
                                  consistency_level="Strong")[0]["count(*)"])
    out["count_filtered"] = int(coll.query(expr="pk >= 0", output_fields=["count(*)"],
                                           consistency_level="Strong")[0]["count(*)"])
    hits = coll.search([[0.0, 0.0]], "vec", {"metric_type": "L2", "params": {}}, limit=16,
                       output_fields=["v"], consistency_level="Strong")[0]
    out["search"] = [[int(h.id), _fv(h.entity.get("v"))] for h in hits]
    return out


def run_case(case: dict, idx: int) -> dict:
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, utility

    name = f"sem_{idx}_{int(time.time() * 1000) % 1_000_000}"
    schema = CollectionSchema([
        FieldSchema("pk", DataType.INT64, is_primary=True, auto_id=False),
        FieldSchema("v", DataType.FLOAT),
        FieldSchema("vec", DataType.FLOAT_VECTOR, dim=2),
    ])
    rec = {"name": case["name"], "doc": case.get("doc", ""),
           "partitions": case.get("partitions", []), "ops": case["ops"], "op_results": [],
           "error": None}
    t0 = time.time()
    coll = Collection(name, schema, shards_num=2, consistency_level="Strong")
    try:
        for p in case.get("partitions", []):
            coll.create_partition(p)
        coll.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
        coll.load()
        for op in case["ops"]:
            res: dict = {"ok": True}
            try:
                kind = op["op"]
                if kind in ("insert", "upsert"):
                    fn = coll.insert if kind == "insert" else coll.upsert
                    mr = fn(_rows(op["rows"]), partition_name=op.get("partition"))
                    res[f"{kind}_count"] = int(getattr(mr, f"{kind}_count"))
                elif kind == "delete":
                    expr = f"pk in [{', '.join(str(int(p)) for p in op['pks'])}]"
                    mr = coll.delete(expr, partition_name=op.get("partition"))
                    res["delete_count"] = int(mr.delete_count)
                elif kind == "flush":
                    coll.flush()
                else:
                    raise ValueError(f"unknown op {kind}")
            except Exception as e:  # noqa: BLE001 - the error is the datum
                if _SIGNALLED:
                    raise
                res = {"ok": False, "error": _err(e)}
                rec["error"] = rec["error"] or res["error"]
            rec["op_results"].append(res)
        pks = {int(row[0]) for op in case["ops"] for row in op.get("rows", [])} | \
            {int(p) for op in case["ops"] for p in op.get("pks", [])}
        before = observe(coll, pks)
        coll.flush()
        after = observe(coll, pks)
        rec.update(before)
        rec.update({f"{k}_after_flush": v for k, v in after.items()})
    finally:
        try:
            coll.release()
        except Exception:  # noqa: BLE001
            pass
        utility.drop_collection(name)
    rec["seconds"] = round(time.time() - t0, 1)
    return rec


# ---------------------------------------------------------------- main
def _answers_text(rec: dict, sfx: str = "") -> str:
    a = rec["query_answers" + sfx]
    return " or ".join(map(str, a)) if len(a) > 1 else str(a[0])


def _finish(stack: Stack, work: Path, args, rc: int) -> int:
    """Stop the stack (idempotent; signals ignored meanwhile) and drop the temp dir."""
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    stack.stop()
    if args.keep or rc == 1:
        if work.exists():
            print(f"[stack] kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return rc


class _Stop(Exception):
    pass


_SIGNALLED: list[int] = []


def _on_signal(signum, _frame):
    _SIGNALLED.append(signum)
    raise _Stop(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "tests/data/milvus_semantics.json"))
    ap.add_argument("--only", action="append", help="run only cases whose name starts so")
    ap.add_argument("--port-start", type=int, default=int(os.environ.get("MILVUS_PORT_START",
                                                                        "47300")))
    ap.add_argument("--bin-dir", default=str(ROOT / ".dev/milvus-bin/bin"),
                    help="where the wheel's binaries are unpacked (once)")
    ap.add_argument("--keep", action="store_true", help="keep the temp data dir")
    args = ap.parse_args()

    import milvus
    import pymilvus
    from pymilvus import connections

    cases = [c for c in CASES if not args.only or any(c["name"].startswith(o) for o in args.only)]
    work = Path(tempfile.mkdtemp(prefix="milvus-semantics-"))
    stack = Stack(Path(args.bin_dir), work, args.port_start)
    atexit.register(stack.stop)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, _on_signal)
    results, rc = [], 0
    try:
        stack.start()
        connections.connect("default", host="127.0.0.1", port=str(stack.proxy_port))
        server_version = pymilvus.utility.get_server_version()
        for i, case in enumerate(cases):
            print(f"[case] {case['name']} ...", file=sys.stderr, flush=True)
            rec = run_case(case, i)
            print(f"[case] {case['name']}: query {_answers_text(rec)} count {rec['count']} | after "
                  f"flush {_answers_text(rec, '_after_flush')} count {rec['count_after_flush']}"
                  + (f" | error {rec['error']}" if rec["error"] else "")
                  + f" ({rec['seconds']}s)", file=sys.stderr, flush=True)
            results.append(rec)
        connections.disconnect("default")
    except _Stop as e:
        print(f"[stack] stopping: {e}", file=sys.stderr)
        rc = 130
    except Exception as e:  # noqa: BLE001
        if _SIGNALLED:  # pymilvus wraps our _Stop into a MilvusException
            print(f"[stack] stopping: signal {_SIGNALLED[0]} ({_err(e)[:120]})", file=sys.stderr)
            rc = 130
        else:
            traceback.print_exc()
            logs = work / "logs"
            for f in sorted(logs.glob("*")) if logs.exists() else []:
                print(f"--- tail {f}", file=sys.stderr)
                print("\n".join(f.read_text(errors="replace").splitlines()[-15:]), file=sys.stderr)
            rc = 1
    finally:
        _finish(stack, work, args, rc)
    if rc:
        return rc
    doc = {
        "milvus": milvus.__version__,
        "server_version": server_version,
        "pymilvus": pymilvus.__version__,
        "generated": dt.date.today().isoformat(),
        "generator": "scripts/milvus_semantics.py",
        "setup": {
            "fields": [{"name": "pk", "type": "INT64", "primary": True, "auto_id": False},
                       {"name": "v", "type": "FLOAT"},
                       {"name": "vec", "type": "FLOAT_VECTOR", "dim": 2,
                        "value": "[pk, v] of the row"}],
            "shards": 2, "index": "FLAT L2", "loaded": "before the first op",
            "consistency_level": "Strong",
        },
        "op_format": {
            "insert": {"op": "insert", "rows": "[[pk, v], ...]", "partition": "null|name"},
            "upsert": {"op": "upsert", "rows": "[[pk, v], ...]", "partition": "null|name"},
            "delete": {"op": "delete", "pks": "[pk, ...]", "partition": "null|name",
                       "expr": "pk in [...]"},
            "flush": {"op": "flush"},
        },
        "observations": {
            "query": "query(expr='pk >= 0', output_fields=['pk','v'], Strong): [[pk, v], ...] "
                     "sorted",
            "query_answers": f"the distinct answers of that query run {REPEATS} times, sorted "
                             "(more than one: Milvus chose among copies of a pk by chance)",
            "query_deterministic": "len(query_answers) == 1",
            "query_term": "query(expr='pk in [every pk the ops name]', ...) sorted (first run)",
            "query_term_answers": "its distinct answers over the runs",
            "count": "query(expr='', output_fields=['count(*)'], Strong)",
            "count_filtered": "query(expr='pk >= 0', output_fields=['count(*)'], Strong)",
            "search": "search([[0,0]], 'vec', L2, limit=16, Strong): [[pk, v], ...] in rank order",
            "*_after_flush": "the same after one more collection.flush() at the end",
        },
        "cases": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out} ({len(results)} cases)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
