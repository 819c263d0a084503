#!/usr/bin/env python3
"""Drives a Milvus server through pymilvus 2.3.5, IN the Milvus venv (the project venv cannot
import pymilvus). The test helpers (tests/milvus) run it as a subprocess.

Input: JSON on stdin {"address": "127.0.0.1:PORT", "ops": [...]}; output: JSON on stdout, one
result per op. Ops:
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


def main() -> int:
    req = json.load(sys.stdin)
    from pymilvus import (Collection, CollectionSchema, DataType, FieldSchema, connections,
                          utility)

    connections.connect(alias="default", uri=f"http://{req['address']}", timeout=30)
    out = []
    for op in req["ops"]:
        kind = op["op"]
        if kind == "version":
            out.append({"version": utility.get_server_version()})
            continue
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
            out.append({"created": name})
        elif kind == "insert":
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
            out.append({"insert_count": int(mr.insert_count)})
        elif kind == "delete":
            mr = Collection(name).delete(f"pk in [{', '.join(str(int(p)) for p in op['pks'])}]")
            out.append({"delete_count": int(mr.delete_count)})
        elif kind == "flush":
            Collection(name).flush()
            out.append({"flushed": name})
        elif kind == "count":
            coll = Collection(name)
            if not coll.has_index():
                coll.create_index("vec", {"index_type": "FLAT", "metric_type": "L2", "params": {}})
            coll.load()
            res = coll.query(expr="", output_fields=["count(*)"], consistency_level="Strong")
            out.append({"count": int(res[0]["count(*)"])})
        elif kind == "upsert":
            coll = Collection(name)
            pks = [int(p) for p in op["pks"]]
            dim = next(f.params["dim"] for f in coll.schema.fields if f.name == "vec")
            rows = [pks, [p / 10 + 1000 for p in pks], [[float(p) + 0.5] + [p / 10] * (dim - 1) for p in pks]]
            mr = coll.upsert(rows, partition_name=op.get("partition"))
            out.append({"upsert_count": int(mr.upsert_count)})
        elif kind == "index":
            coll = Collection(name)
            coll.create_index("vec", {"index_type": op.get("type", "HNSW"), "metric_type": "L2",
                                      "params": op.get("params", {"M": 8, "efConstruction": 64})})
            utility.wait_for_index_building_complete(name, timeout=120)
            out.append({"indexed": name})
        elif kind == "pks":      # every visible pk (Strong), sorted; the collection is loaded first
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
            out.append({"pks": pks})
        elif kind == "release":
            Collection(name).release()
            out.append({"released": name})
        elif kind == "describe":
            coll = Collection(name)
            desc = coll.describe()
            out.append({"id": int(desc["collection_id"]),
                         "partitions": [p.name for p in coll.partitions]})
        else:
            raise SystemExit(f"unknown op {kind!r}")
    json.dump(out, sys.stdout)
    connections.disconnect("default")
    return 0


if __name__ == "__main__":
    sys.exit(main())
