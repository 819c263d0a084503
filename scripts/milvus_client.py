#!/usr/bin/env python3
"""Drives a Milvus server through pymilvus 2.3.5, IN the Milvus venv (the project venv cannot
import pymilvus). The test helpers (tests/milvus) run it as a subprocess.

Input: JSON on stdin {"address": "127.0.0.1:PORT", "ops": [...]}; output: JSON on stdout, one
result per op. Or a session: a first line {"address", "session": true, ...}, then one line
{"ops": [...]} per call, answered by one line each (every op below; serve()). Ops:
  {"op": "create", "name", "partitions": [..], "shards": 2, "dim": 2}
      pk INT64 primary (auto_id off), v FLOAT, vec FLOAT_VECTOR(dim)
  {"op": "insert", "name", "partition", "pks": [..]}        v = pk / 10, vec = [pk, v, ..]
      ("random_vectors": true: vec random, seeded by the first pk)
  {"op": "delete", "name", "pks": [..]}
  {"op": "flush", "name"}
  {"op": "count", "name"}   count(*) (Strong), after building a FLAT index and loading
  {"op": "describe", "name"} {"id", "partitions": {name: id}}
  {"op": "upsert", "name", "partition", "pks": [..]}        v = pk / 10 + 1000, vec = [pk + 0.5, v, ..]
  {"op": "index", "name", "type": "HNSW", "params": {..}}   built on vec, waited for
  {"op": "pks", "name"}      every visible pk (Strong, after a load), sorted
  {"op": "release", "name"}
  {"op": "version"}
"""
from __future__ import annotations

import json
import sys

# -- the restore's ops (seglake.milvus.client drives them; any schema) ------------------------
#   {"op": "has", "name"}                       {"exists": bool}
#   {"op": "schema", "name"}                    {"id", "shards", "auto_id", "fields": [{name, field_id,
#                                                data_type, is_primary_key, auto_id, type_params}],
#                                                "partitions": [names], "indexes": [{field, index_name, params}]}
#   {"op": "create_full", "name", "schema": {"fields": [...], "auto_id", "enable_dynamic_field",
#    "description"}, "shards", "partitions": [..], "consistency_level", "properties", "num_partitions" (a partition key)}   fields as in a Milvus
#                                                capture (field_id order is the creation order)
#   {"op": "import", "name", "partition", "files": [insert dir, delta dir], "options": {k: v}}
#       the ImportRequest built by hand: pymilvus 2.3.5's do_bulk_insert forwards only the
#       "bucket" option and would drop "backup"           {"task_id"}
#   {"op": "import_state", "task_id"}           {"state", "row_count", "failed_reason", "files", ...}
#   {"op": "list_imports", "name"}              [{"task_id", "state", "files", "partition"}]
#   {"op": "create_index", "name", "field", "index_name", "params": {index_type, metric_type, params}}
#   {"op": "load", "name"}  {"op": "drop", "name"}
#   {"op": "count_loaded", "name", "partitions"}  count(*) Strong (the collection must be loaded),
#                                               of the named partitions only when given
#   {"op": "query", "name", "expr", "output_fields", "limit", "partitions"}   rows (vectors as lists)
#   {"op": "search", "name", "field", "vectors", "metric", "limit", "params"}   [[ids], ...]
#   {"op": "upsert_by", "name", "partition", "pks", "add"}   the toy schema: v = pk / 10 + add
# Credentials: "user"/"password" of the request (stdin only). "errors_as_data": a failing op
# (or the connection) ends the run with exit 3 and {"error", "op": index, "done": [...]} on stdout.
RESTORE_OPS = frozenset({"has", "schema", "create_full", "import", "import_state", "list_imports", "create_index",
                         "load", "drop", "count_loaded", "query", "search", "upsert_by"})
STATE_NAMES = {0: "Pending", 1: "Failed", 2: "Started", 5: "Persisted", 6: "Completed",
               7: "FailedAndCleaned", 100: "Unknown"}


def _jsonable(v):
    try:
        import numpy as np
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, np.generic):
            return v.item()
    except ImportError:
        pass
    if isinstance(v, bytes):
        return {"hex": v.hex()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    return v


def _state(t) -> dict:
    infos = dict(t.infos)
    return {"task_id": int(t.task_id), "state": STATE_NAMES.get(int(t.state), str(t.state)),
            "row_count": int(t.row_count), "failed_reason": infos.get("failed_reason", ""),
            "files": [f for f in infos.get("files", "").split(",") if f],
            "collection": infos.get("collection", ""), "partition": infos.get("partition", ""),
            "progress": int(infos.get("progress_percent", "0") or 0)}


def restore_op(op: dict):
    from pymilvus import (Collection, CollectionSchema, DataType, FieldSchema, connections,
                          utility)

    kind = op["op"]
    if kind == "import_state":
        return _state(utility.get_bulk_insert_state(int(op["task_id"])))
    name = op["name"]
    if kind == "has":
        return {"exists": bool(utility.has_collection(name))}
    if kind == "upsert_by":
        coll = Collection(name)
        pks = [int(p) for p in op["pks"]]
        dim = next(f.params["dim"] for f in coll.schema.fields if f.name == "vec")
        add = float(op.get("add", 0.0))
        rows = [pks, [p / 10 + add for p in pks], [[float(p)] + [p / 10 + add] * (dim - 1) for p in pks]]
        return {"upsert_count": int(coll.upsert(rows, partition_name=op.get("partition")).upsert_count)}
    if kind == "count_loaded":
        res = Collection(name).query(expr="", output_fields=["count(*)"], consistency_level="Strong",
                                     partition_names=op.get("partitions"))
        return {"count": int(res[0]["count(*)"])}
    if kind == "schema":
        coll = Collection(name)
        desc = coll.describe()
        fields = [{"name": f["name"], "field_id": int(f["field_id"]), "data_type": int(f["type"]),
                   "is_primary_key": bool(f.get("is_primary", False)),
                   "auto_id": bool(f.get("auto_id", False)),
                   "type_params": {k: str(v) for k, v in (f.get("params") or {}).items()}}
                  for f in desc["fields"]]
        indexes = [{"field": i.field_name, "index_name": i.index_name, "params": _jsonable(i.params)}
                   for i in coll.indexes]
        return {"id": int(desc["collection_id"]), "shards": int(desc["num_shards"]),
                "auto_id": bool(desc.get("auto_id", False)), "fields": fields,
                "enable_dynamic_field": bool(coll.schema.enable_dynamic_field),
                "partitions": [p.name for p in coll.partitions], "indexes": indexes}
    if kind == "create_full":
        sch = op["schema"]
        fields = []
        for f in sorted(sch["fields"], key=lambda f: int(f["field_id"])):
            if f.get("is_dynamic"):       # $meta: Milvus adds it itself (enable_dynamic_field)
                continue
            kw = {k: int(v) for k, v in (f.get("type_params") or {}).items()
                  if k in ("dim", "max_length", "max_capacity")}
            if f.get("element_type"):
                kw["element_type"] = DataType(int(f["element_type"]))
            fields.append(FieldSchema(f["name"], DataType(int(f["data_type"])),
                                      description=f.get("description", ""),
                                      is_primary=bool(f.get("is_primary_key")),
                                      auto_id=bool(f.get("auto_id")),
                                      is_partition_key=bool(f.get("is_partition_key")), **kw))
        schema = CollectionSchema(fields, description=sch.get("description", ""),
                                  auto_id=bool(sch.get("auto_id")),
                                  enable_dynamic_field=bool(sch.get("enable_dynamic_field")))
        coll = Collection(name, schema, shards_num=int(op["shards"]),
                          consistency_level=int(op.get("consistency_level", 0)),
                          **({"properties": dict(op["properties"])} if op.get("properties") else {}),
                          **({"num_partitions": int(op["num_partitions"])} if op.get("num_partitions") else {}))
        for p in op.get("partitions", []):
            if not coll.has_partition(p):
                coll.create_partition(p)
        return {"id": int(coll.describe()["collection_id"])}
    if kind == "import":
        from pymilvus.grpc_gen import common_pb2, milvus_pb2
        handler = connections._fetch_handler("default")
        r = milvus_pb2.ImportRequest(collection_name=name, partition_name=op.get("partition") or "",
                                     files=list(op["files"]))
        for k, v in sorted((op.get("options") or {}).items()):
            r.options.append(common_pb2.KeyValuePair(key=str(k), value=str(v)))
        resp = handler._stub.Import(r, timeout=op.get("timeout", 60))
        if resp.status.error_code != 0 or not resp.tasks:
            raise RuntimeError(f"Import refused: {resp.status.reason or 'no task id'}")
        return {"task_id": int(resp.tasks[0])}
    if kind == "list_imports":
        return [_state(t) for t in utility.list_bulk_insert_tasks(limit=0, collection_name=name)]
    if kind == "create_index":
        coll = Collection(name)
        if not any(i.field_name == op["field"] for i in coll.indexes):
            coll.create_index(op["field"], op["params"], index_name=op.get("index_name") or "")
        utility.wait_for_index_building_complete(name, index_name=op.get("index_name") or "",
                                                 timeout=op.get("timeout", 300))
        return {"indexed": op["field"]}
    if kind == "load":
        Collection(name).load(timeout=op.get("timeout", 300))
        return {"loaded": name}
    if kind == "drop":
        if utility.has_collection(name):
            utility.drop_collection(name)
        return {"dropped": name}
    if kind == "query":
        res = Collection(name).query(expr=op["expr"], output_fields=op.get("output_fields", ["*"]),
                                     limit=op.get("limit", 16384), consistency_level="Strong",
                                     partition_names=op.get("partitions"))
        return [_jsonable(dict(r)) for r in res]
    if kind == "search":
        res = Collection(name).search(op["vectors"], op["field"],
                                      {"metric_type": op.get("metric", "L2"), "params": op.get("params", {})},
                                      limit=op.get("limit", 5), consistency_level="Strong")
        return [[int(i) for i in hits.ids] for hits in res]
    raise SystemExit(f"unknown op {kind!r}")




def main() -> int:
    first = sys.stdin.readline()
    try:
        req = json.loads(first)
    except ValueError:
        req = None
    if not isinstance(req, dict) or not req.get("session"):
        req = json.loads(first + sys.stdin.read())
    if req.get("session"):
        return serve(req)
    return run(req)


def serve(req: dict) -> int:
    """A session: connect once, then one line {"ops": [...]} in -> one JSON line out (a list
    of results, or {"error", "op"}), until stdin closes (seglake.milvus.client's session:
    saves pymilvus's import and the connect, ~1 s, on every call)."""
    from pymilvus import connections

    try:
        connections.connect(alias="default", uri=f"http://{req['address']}", timeout=req.get("connect_timeout", 30),
                            **({"user": req["user"], "password": req.get("password", "")} if req.get("user") else {}))
    except Exception as e:  # noqa: BLE001 - reported as MilvusUnreachable
        print(json.dumps({"error": f"cannot connect to Milvus at {req['address']}: {type(e).__name__}: "
                                   f"{str(e)[:500]}", "op": -1}), flush=True)
        return 3
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        ops = json.loads(line)["ops"]
        out = []
        try:
            for op in ops:
                out.append(one_op(op))
            print(json.dumps(out), flush=True)
        except BaseException as e:  # noqa: BLE001 - every failure is the caller's data
            print(json.dumps({"error": f"{type(e).__name__}: {str(e)[:1000]}", "op": len(out), "done": out}),
                  flush=True)
    connections.disconnect("default")
    return 0


def one_op(op: dict):
    """One op: a restore op, `version`, or one of the test helpers' toy-schema ops (all are
    served in a session and in a one-shot run alike)."""
    from pymilvus import utility

    if op["op"] in RESTORE_OPS:
        return restore_op(op)
    if op["op"] == "version":
        return {"version": utility.get_server_version()}
    return toy_op(op)


def toy_op(op: dict):
    """The toy schema's ops of the module docstring (test helpers and benchmarks)."""
    from pymilvus import Collection, CollectionSchema, DataType, FieldSchema, utility

    kind = op["op"]
    name = op["name"]
    if kind == "create":
        dim = op.get("dim", 2)
        schema = CollectionSchema([
            FieldSchema("pk", DataType.INT64, is_primary=True, auto_id=False),
            FieldSchema("v", DataType.FLOAT),
            FieldSchema("vec", DataType.FLOAT_VECTOR, dim=dim)])
        coll = Collection(name, schema, shards_num=op.get("shards", 2))
        for p in op.get("partitions", []):
            coll.create_partition(p)
        return {"created": name}
    if kind == "insert":
        coll = Collection(name)
        pks = [int(p) for p in op["pks"]]
        dim = next(f.params["dim"] for f in coll.schema.fields if f.name == "vec")
        if op.get("random_vectors"):   # incompressible vectors (benchmarks), seeded by the first pk
            import numpy as np
            vecs = np.random.default_rng(pks[0] if pks else 0).random((len(pks), dim), dtype=np.float32).tolist()
        else:
            vecs = [[float(p)] + [p / 10] * (dim - 1) for p in pks]
        rows = [pks, [p / 10 for p in pks], vecs]
        mr = coll.insert(rows, partition_name=op.get("partition"))
        return {"insert_count": int(mr.insert_count)}
    if kind == "delete":
        mr = Collection(name).delete(f"pk in [{', '.join(str(int(p)) for p in op['pks'])}]")
        return {"delete_count": int(mr.delete_count)}
    if kind == "flush":
        Collection(name).flush()
        return {"flushed": name}
    if kind == "count":
        coll = Collection(name)
        if not coll.has_index():
            coll.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
        coll.load()
        res = coll.query(expr="", output_fields=["count(*)"], consistency_level="Strong")
        return {"count": int(res[0]["count(*)"])}
    if kind == "upsert":
        coll = Collection(name)
        pks = [int(p) for p in op["pks"]]
        dim = next(f.params["dim"] for f in coll.schema.fields if f.name == "vec")
        rows = [pks, [p / 10 + 1000 for p in pks], [[float(p) + 0.5] + [p / 10] * (dim - 1) for p in pks]]
        mr = coll.upsert(rows, partition_name=op.get("partition"))
        return {"upsert_count": int(mr.upsert_count)}
    if kind == "index":
        coll = Collection(name)
        coll.create_index("vec", {"index_type": op.get("type", "HNSW"), "metric_type": "L2",
                                  "params": op.get("params", {"M": 8, "efConstruction": 64})})
        utility.wait_for_index_building_complete(name, timeout=120)
        return {"indexed": name}
    if kind == "pks":      # every visible pk (Strong), sorted; the collection is loaded first
        coll = Collection(name)
        coll.load()
        it, pks = 0, []
        while True:
            res = coll.query(expr=f"pk >= {it}", output_fields=["pk"], limit=16384, consistency_level="Strong")
            if not res:
                break
            got = sorted(int(r["pk"]) for r in res)
            pks.extend(got)
            it = got[-1] + 1
        return {"pks": pks}
    if kind == "release":
        Collection(name).release()
        return {"released": name}
    if kind == "describe":
        coll = Collection(name)
        desc = coll.describe()
        return {"id": int(desc["collection_id"]), "partitions": [p.name for p in coll.partitions]}
    raise SystemExit(f"unknown op {kind!r}")


def run(req: dict) -> int:
    from pymilvus import connections

    try:
        connections.connect(alias="default", uri=f"http://{req['address']}", timeout=req.get("connect_timeout", 30),
                            **({"user": req["user"], "password": req.get("password", "")} if req.get("user") else {}))
    except Exception as e:  # noqa: BLE001 - the restore reports it as MilvusUnreachable
        if not req.get("errors_as_data"):
            raise
        json.dump({"error": f"cannot connect to Milvus at {req['address']}: {type(e).__name__}: {str(e)[:500]}",
                   "op": -1}, sys.stdout)
        return 3
    out = []
    for op in req["ops"]:
        try:
            out.append(one_op(op))
        except Exception as e:  # noqa: BLE001
            if not req.get("errors_as_data"):
                raise
            json.dump({"error": f"{type(e).__name__}: {str(e)[:1000]}", "op": len(out), "done": out}, sys.stdout)
            return 3
    json.dump(out, sys.stdout)
    connections.disconnect("default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
