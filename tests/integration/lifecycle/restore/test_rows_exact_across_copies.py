"""Issue 26 item 1: rows exact across copies. A delta log is copied verbatim and holds the
partition ids of the collection that wrote it; every copy (restore, restore of a restore,
bundle export/import, any number of hops) must translate them by partition NAME, and an
id that cannot be translated is an error, never "every partition".

The semantics table (tests/data/milvus_semantics.json: the cases a real Milvus 2.3.5 was
asked, partition-scoped deletes and upserts included) is replayed into ONE collection
(each case on its own pk range), then carried through a restore chain of three hops and
a bundle round trip (a fresh etcd root and store), the visible rows of every copy
compared with the source's row by row: (pk, row id, timestamp, partition name, value).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from seglake.config import Settings
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta import Meta
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.storage import open_store
from seglake.storage.local import LocalStore
from seglake.visibility import PartitionUnmapped, visible_rows
from seglake.wal.client import WalClient

from bundle_restore_helpers import restore_bundle
from wal_helpers import pchannels

CASES = json.loads((Path(__file__).resolve().parents[3] / "data" / "milvus_semantics.json").read_text())["cases"]
SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "v", "dtype": "Float"},
          {"field_id": 102, "name": "vec", "dtype": "FloatVector", "dim": 2}]
SPAN = 1000          # case i holds pks i*SPAN + its own pks
quiet = dict(say=lambda line: None)


def _table(rows, base: int) -> pa.Table:
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2 * len(rows), np.float32)), 2)
    return pa.table({"pk": np.array([base + r[0] for r in rows], np.int64),
                     "v": pa.array([float(r[1]) for r in rows], pa.float32()), "vec": vec})


def _flush(meta, store, settings, coll):
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _replay_table(meta, store, settings, name: str):
    """Every case of the table into one collection `name`, case i on pks i*SPAN + pk."""
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(name, SCHEMA, shards=2, partitions=["_default", "p1"])
        for i, case in enumerate(CASES):
            base = (i + 1) * SPAN
            for op in case["ops"]:
                part = op.get("partition") or "_default"
                if op["op"] in ("insert", "upsert"):
                    c.insert(name, _table(op["rows"], base), partition=part, upsert=op["op"] == "upsert")
                elif op["op"] == "delete":
                    c.delete(name, [base + pk for pk in op["pks"]], partition=op.get("partition"))
                elif op["op"] == "flush":
                    _flush(meta, store, settings, coll)
                else:
                    raise AssertionError(f"unknown op {op}")
    _flush(meta, store, settings, coll)
    return coll


def rows_of(meta, store, name: str) -> Counter:
    """The visible rows as a multiset of (pk, row id, timestamp, partition NAME, v)."""
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    part = {p.partition_id: p.name for p in coll.partitions}
    cols = [t.column(c).to_pylist() for c in ("pk", "RowID", "Timestamp", "partition_id", "v")]
    return Counter((pk, rid, ts, part[p], round(v, 4)) for pk, rid, ts, p, v in zip(*cols))


def _restore(meta, store, source: str, target: str) -> None:
    snapshot.create(meta, store, source, "s")
    job_id = restore.restore(meta, store, source, "s", target, engine="inline")
    copyjob.plan(meta, job_id)
    copyjob.run_inline(meta, store, job_id)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    cmp = restore.compare_with_snapshot(meta, store, source, "s", target)
    assert not restore.compare_differs(cmp), restore.compare_table(cmp)


def _per_case_counts(rows: Counter) -> dict[str, int]:
    by_case = Counter()
    for (pk, *_), n in rows.items():
        by_case[CASES[pk // SPAN - 1]["name"]] += n
    return {c["name"]: by_case[c["name"]] for c in CASES}


@pytest.fixture
def table_rows(meta, store, settings):
    _replay_table(meta, store, settings, "src")
    want = rows_of(meta, store, "src")
    # what a real Milvus counted, case by case (the table's own check, on the merged collection)
    assert _per_case_counts(want) == {c["name"]: c["count_after_flush"] for c in CASES}
    return want


def test_a_restore_chain_of_three_hops_keeps_every_row(meta, store, table_rows):
    names = ["src", "hop1", "hop2", "hop3"]
    for a, b in zip(names, names[1:]):
        _restore(meta, store, a, b)
        assert rows_of(meta, store, b) == table_rows, f"{b} differs from the source"
    # every hop kept the names the flusher gave the ids it wrote (only those: the records
    # stay small whatever the partition count), in the ids of the collection that wrote them
    last = meta.catalog.get_by_name("hop3")
    src_parts = {p.partition_id: p.name for p in meta.catalog.get_by_name("src").partitions}
    segs = [s for s in meta.segments.list(last.collection_id) if s.deltalogs]
    assert segs and all(s.delta_partitions.items() <= src_parts.items() for s in segs)
    assert any(s.delta_partitions for s in segs), "the table has partition-scoped deletes"


def test_an_id_a_copy_cannot_translate_is_an_error_not_every_partition(meta, store, table_rows):
    """A restore of a restore whose segments lost their map (what main did before issue
    26: only a one-hop `source` record) is refused naming the id, instead of reading a
    partition-scoped delete as collection-wide (which hid rows of every partition)."""
    _restore(meta, store, "src", "hop1")
    _restore(meta, store, "hop1", "hop2")
    hop2 = meta.catalog.get_by_name("hop2")
    stripped = [s.replace(delta_partitions=None) for s in meta.segments.list(hop2.collection_id) if s.deltalogs]
    meta.segments.save(stripped)
    with pytest.raises(PartitionUnmapped, match="partition id"):
        visible_rows(meta, store, hop2.collection_id)


def test_a_bundle_round_trip_then_a_restore_of_the_import_keeps_every_row(meta, store, etcd_server, tmp_path,
                                                                           table_rows):
    _restore(meta, store, "src", "hop1")        # the bundle is of a copy: two hops before it
    snapshot.create(meta, store, "hop1", "b")
    backup = LocalStore(tmp_path / "backup")
    exports.export(meta, store, backup, "hop1", "b", **quiet)
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / "dr_store"), "etcd_timeout": 5})
    meta2, store2 = Meta.from_settings(s), open_store(s)
    try:
        # partition ids of the new root collide with nothing on purpose: ids are local
        restore_bundle(meta2, store2, backup, "hop1", "b", "back")
        assert rows_of(meta2, store2, "back") == table_rows
        _restore(meta2, store2, "back", "back_again")       # one more hop on the other side
        assert rows_of(meta2, store2, "back_again") == table_rows
    finally:
        meta2.close()
