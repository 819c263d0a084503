"""Helpers of the adversarial tests of issue 26 item 1 (partition identity across copies):
a model of every acknowledged operation (pk, partition NAME, value) and the collection's
visible rows in the same shape, so copies are compared with what was written, not only
with each other."""

from __future__ import annotations

import uuid
from collections import Counter

import numpy as np
import pyarrow as pa

from seglake.config import Settings
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta import Meta
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.storage import open_store
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient

from wal_helpers import pchannels

SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "v", "dtype": "Float"},
          {"field_id": 102, "name": "vec", "dtype": "FloatVector", "dim": 2}]


class Model:
    """Every acknowledged op, in order: rows (pk, partition, v) and the deletes that hide
    them (Milvus: a delete hides older rows of its pk in its partition, or everywhere)."""

    def __init__(self):
        self.rows: list[list] = []     # [pk, partition, v, alive]

    def insert(self, pks, partition: str, v: float):
        self.rows += [[int(pk), partition, float(v), True] for pk in pks]

    def delete(self, pks, partition: str | None):
        pks = set(int(p) for p in pks)
        for r in self.rows:
            if r[0] in pks and (partition is None or r[1] == partition):
                r[3] = False

    def upsert(self, pks, partition: str, v: float):
        self.delete(pks, partition)
        self.insert(pks, partition, v)

    def visible(self) -> Counter:
        return Counter((pk, part, round(v, 4)) for pk, part, v, alive in self.rows if alive)


def table(pks, v: float) -> pa.Table:
    pks = np.asarray(list(pks), np.int64)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2 * len(pks), np.float32)), 2)
    return pa.table({"pk": pks, "v": pa.array(np.full(len(pks), v, np.float32)), "vec": vec})


class Writer:
    """WalClient writes mirrored into a Model."""

    def __init__(self, meta, store, settings, model: Model | None = None):
        self.meta, self.store, self.settings = meta, store, settings
        self.model = model or Model()

    def create(self, name: str, partitions, shards: int = 2):
        with WalClient(self.meta, self.store, self.settings) as c:
            return c.create_collection(name, SCHEMA, shards=shards, partitions=list(partitions))

    def insert(self, name, pks, partition="_default", v=1.0, upsert=False):
        with WalClient(self.meta, self.store, self.settings) as c:
            c.insert(name, table(pks, v), partition=partition, upsert=upsert)
        (self.model.upsert if upsert else self.model.insert)(pks, partition, v)

    def delete(self, name, pks, partition=None):
        with WalClient(self.meta, self.store, self.settings) as c:
            c.delete(name, list(pks), partition=partition)
        self.model.delete(pks, partition)

    def flush(self, name):
        coll = self.meta.catalog.get_by_name(name)
        for p in pchannels(coll):
            flush_pchannel(self.meta, self.store, p, self.settings, flush_all=True)


def three_partitions_with_a_scoped_delete(w: "Writer", name: str = "src") -> None:
    """`name` with partitions _default, p1, p2 holding pks 1..5 each (v = 0, 1, 2),
    flushed, then a delete of pks 1, 2 scoped to p1 (not flushed yet)."""
    w.create(name, ["_default", "p1", "p2"])
    for i, p in enumerate(["_default", "p1", "p2"]):
        w.insert(name, range(1, 6), p, float(i))
    w.flush(name)
    w.delete(name, [1, 2], partition="p1")


def rows(meta, store, name: str) -> Counter:
    """The visible rows as a multiset of (pk, partition NAME, v)."""
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    part = {p.partition_id: p.name for p in coll.partitions}
    cols = [t.column(c).to_pylist() for c in ("pk", "partition_id", "v")]
    return Counter((pk, part[p], round(v, 4)) for pk, p, v in zip(*cols))


def run_restore(meta, store, source: str, snap: str, target: str, *, compare: bool = True):
    job_id = restore.restore(meta, store, source, snap, target, engine="inline")
    copyjob.plan(meta, job_id)
    copyjob.run_inline(meta, store, job_id)
    assert copyjob.finalize(meta, job_id).state == JOB_COMPLETED
    if compare:
        cmp = restore.compare_with_snapshot(meta, store, source, snap, target)
        assert not restore.compare_differs(cmp), restore.compare_table(cmp)


def snap_and_restore(meta, store, source: str, target: str, snap: str | None = None, **kw):
    snap = snap or f"s_{target}"
    snapshot.create(meta, store, source, snap)
    run_restore(meta, store, source, snap, target, **kw)


def other_root(etcd_server, tmp_path, tag: str = ""):
    """A Meta and Store on a fresh etcd root and store (another site)."""
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"dr{tag}{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / f"dr_store{tag}{uuid.uuid4().hex[:4]}"), "etcd_timeout": 5})
    return Meta.from_settings(s), open_store(s), s


quiet = dict(say=lambda line: None)
