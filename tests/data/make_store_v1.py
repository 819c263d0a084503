"""Build tests/data/store_v1: a store written by seglake BEFORE the row model (issue 17).

Run with the code of main at d95988c (the last commit before the row model):

    PYTHONPATH=include:plugins python tests/data/make_store_v1.py [OUT_DIR]

It starts a private etcd on free ports and a temporary local store, then
- `seglake.dev.demo.seed` a small demo collection (2 partitions, 2 shards, 2 segments per
  partition, 50 rows each, 10 % deleted): legacy binlogs (no fields 0/1), legacy delta
  logs (pk int64, ts uint64), legacy stats logs ({"field_id", "min", "max", "rows"});
- through the WAL (`WalClient`), collection `wal_v1` (2 shards):
  round 1: insert pks 1..200, delete 11..30, flush every pchannel (flush_all);
  round 2: insert 1001..1010 (opens a growing segment on each vchannel), delete 41..45
  (rows of round 1's Flushed segments: the old flusher adds a delta log to THOSE
  segments), insert 41..45 and 11 again (they land in round 2's segments, whose start
  tick is BELOW the delete's tick), flush every pchannel;
  then insert 2001..2030, NOT flushed (they stay in the WAL above the checkpoints).
- dumps every etcd key under the root (relative to it; leased write markers left out)
  to etcd.json and copies the store directory to store/;
- writes EXPECTED.json: the visible pks of each collection as the old code means them
  (a row is hidden exactly by its own segment's delta logs), cross-checked against a
  model of the operations in order; and the 30 unflushed pks separately.
"""

from __future__ import annotations

import base64
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = "v1"


def old_visible(meta, store, collection_id: int) -> tuple[list[int], int]:
    """(sorted visible pks, rows in binlogs) with the OLD meaning: a delta log hides the
    pks it lists among its own segment's rows, nothing else."""
    import pyarrow.parquet as pq

    from seglake.meta.segments import FLUSHED
    from seglake.storage import layout

    pk = meta.catalog.get(collection_id).schema.primary
    visible, rows = [], 0
    for seg in meta.segments.list(collection_id, states=[FLUSHED]):
        pks, dels = [], set()
        for b in seg.binlogs.get(pk.field_id, ()):
            with store.open_read(layout.insert_log(*seg.ref, pk.field_id, b.log_id)) as f:
                pks += pq.read_table(f, columns=[pk.name]).column(0).to_pylist()
        for b in seg.deltalogs:
            with store.open_read(layout.delta_log(*seg.ref, b.log_id)) as f:
                dels |= set(pq.read_table(f, columns=["pk"]).column(0).to_pylist())
        rows += len(pks)
        visible += [p for p in pks if p not in dels]
    return sorted(visible), rows


def build(out: Path) -> None:
    from seglake.dev import demo
    from seglake.config import Settings
    from seglake.dev.devstack import EtcdServer
    from seglake.lifecycle import flush
    from seglake.meta import Meta
    from seglake.meta.catalog import pchannel_of
    from seglake.storage import open_store
    from seglake.wal.client import WalClient, route, synthetic_rows

    tmp = Path(tempfile.mkdtemp(prefix="store_v1_"))
    etcd = EtcdServer(state_dir=tmp / "etcd").start(timeout=30)
    try:
        settings = Settings.from_dict({"etcd_endpoint": etcd.endpoint, "etcd_root": ROOT,
                                       "store_uri": str(tmp / "store"), "etcd_timeout": 5})
        meta, store = Meta.from_settings(settings), open_store(settings)
        try:
            seeded, _ = demo.seed(meta, store, demo.SeedParams(
                name="demo_v1", partitions=2, segments=2, rows=50, dim=4, shards=2, delete_ratio=0.1, seed=7))

            schema = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
                      {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 4},
                      {"field_id": 102, "name": "price", "dtype": "Float"}]
            model: list[tuple[str, list[int]]] = []
            with WalClient(meta, store, settings) as c:
                coll = c.create_collection("wal_v1", schema, shards=2)
                pchs = sorted({pchannel_of(v) for v in coll.vchannels})

                def ins(first: int, n: int, pks=None):
                    t = synthetic_rows(coll, n, first, seed=first)
                    if pks is not None:
                        import pyarrow as pa
                        t = t.set_column(0, "pk", pa.array(np.array(pks, dtype=np.int64)))
                    c.insert("wal_v1", t)
                    model.append(("insert", t.column("pk").to_pylist()))

                def dele(pks):
                    c.delete("wal_v1", pks)
                    model.append(("delete", list(pks)))

                def flush_all():
                    for p in pchs:
                        flush.flush_pchannel(meta, store, p, settings, flush_all=True)

                ins(1, 200)
                dele(list(range(11, 31)))
                flush_all()
                round2 = np.arange(1001, 1011, dtype=np.int64)
                assert set(route(round2, 2)) == {0, 1}, "round 2 must open a segment on each vchannel"
                ins(1001, 10)
                dele(list(range(41, 46)))
                ins(0, 6, pks=[41, 42, 43, 44, 45, 11])
                flush_all()
                unflushed = list(range(2001, 2031))
                c.insert("wal_v1", synthetic_rows(coll, 30, 2001, seed=2001))

            # the model: pks live after the operations in order (no pk is inserted twice while live)
            live: set[int] = set()
            for op, pks in model:
                live = live | set(pks) if op == "insert" else live - set(pks)
            expected = {}
            for cname, coll_id in (("demo_v1", seeded.collection_id), ("wal_v1", coll.collection_id)):
                vis, rows = old_visible(meta, store, coll_id)
                expected[cname] = {"collection_id": coll_id, "visible_pks": vis, "visible_rows": len(vis),
                                   "rows_in_binlogs": rows}
            assert expected["wal_v1"]["visible_pks"] == sorted(live), "old meaning disagrees with the model"
            expected["wal_v1"]["unflushed_pks"] = unflushed
            expected["wal_v1"]["note"] = (
                "41..45 and 11 were deleted, then inserted again into segments whose start tick is below "
                "the delete's tick: they are visible (the old delta logs applied to their own segment only)")
            expected["demo_v1"]["note"] = "every seeded pk minus the pks in the seeded delta logs"

            kvs = []
            for kv in meta.kv.range(meta.keys.prefix):
                rel = kv.key[len(meta.keys.prefix):]
                if rel.startswith("txn/"):
                    continue   # leased write markers: not state
                try:
                    kvs.append({"key": rel, "value": kv.value.decode()})
                except UnicodeDecodeError:
                    kvs.append({"key": rel, "value_b64": base64.b64encode(kv.value).decode()})
        finally:
            meta.close()

        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copytree(tmp / "store", out / "store")
        (out / "etcd.json").write_text(json.dumps({"root": ROOT, "kvs": kvs}, indent=0) + "\n")
        (out / "EXPECTED.json").write_text(json.dumps({
            "written_by": "seglake main d95988c (before the row model), tests/data/make_store_v1.py",
            "collections": expected}, indent=1) + "\n")
    finally:
        etcd.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "store_v1")
