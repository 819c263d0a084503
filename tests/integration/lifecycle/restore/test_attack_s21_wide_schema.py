"""Adversary s21 (issue 26): every VALUE of every column survives every kind of copy.

The restore compare judges rows by (pk, row id, timestamp, partition name) only; the
chain tests carry one float. Here a wide schema (a primary not named pk and not first,
sparse field ids, two vector fields of different dims, VarChar with unicode and nulls,
Bool, Int8/Int16/Int32/Int64 extremes, Double extremes, Float nulls) goes through a
restore, a bundle export -> import into another root -> restore, an incremental bundle
after compaction restored from the bundle, and a restore to a time, and the visible rows
(every column) are compared with a model of every acknowledged write."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.lifecycle.flush import flush_pchannel
from seglake.storage.local import LocalStore
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import other_root, quiet, run_restore
from pitr_model import copy_and_replay
from wal_helpers import pchannels

SCHEMA = [
    {"field_id": 107, "name": "s", "dtype": "VarChar"},
    {"field_id": 131, "name": "vb", "dtype": "FloatVector", "dim": 3},
    {"field_id": 100, "name": "id", "dtype": "Int64", "is_primary": True},
    {"field_id": 102, "name": "b", "dtype": "Bool"},
    {"field_id": 103, "name": "i8", "dtype": "Int8"},
    {"field_id": 104, "name": "i16", "dtype": "Int16"},
    {"field_id": 105, "name": "i32", "dtype": "Int32"},
    {"field_id": 106, "name": "i64", "dtype": "Int64"},
    {"field_id": 110, "name": "d", "dtype": "Double"},
    {"field_id": 111, "name": "f", "dtype": "Float"},
    {"field_id": 120, "name": "va", "dtype": "FloatVector", "dim": 1},
]
COLS = ["s", "vb", "b", "i8", "i16", "i32", "i64", "d", "f", "va"]
PARTS = ["_default", "p1", "P1"]
TEXTS = ["", "\u00e9t\u00e9", "\U0001F600 x", "a\x00b", "\u202e\u05d0", None, "x" * 300]


def _table(pks, k: int) -> pa.Table:
    pks = [int(p) for p in pks]
    n = len(pks)
    i = np.arange(n) + k
    s = [TEXTS[(p + k) % len(TEXTS)] for p in pks]
    return pa.table({
        "s": pa.array(s, pa.string()),
        "vb": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(np.array(pks, np.float32), 3)
                                                         * np.float32(1e-3) + k, pa.float32()), 3),
        "id": pa.array(pks, pa.int64()),
        "b": pa.array([(p + k) % 3 == 0 if (p + k) % 5 else None for p in pks], pa.bool_()),
        "i8": pa.array([[-128, 127, 0, -1][(p + k) % 4] for p in pks], pa.int8()),
        "i16": pa.array([[-32768, 32767, 7][(p + k) % 3] for p in pks], pa.int16()),
        "i32": pa.array([[-2**31, 2**31 - 1, k][(p + k) % 3] for p in pks], pa.int32()),
        "i64": pa.array([[-2**63, 2**63 - 1, p * 1000 + k][(p + k) % 3] for p in pks], pa.int64()),
        "d": pa.array([[1.7976931348623157e308, -0.0, 5e-324, -2.5e-300][(p + k) % 4] for p in pks], pa.float64()),
        "f": pa.array([None if (p + k) % 7 == 0 else float(p) + k / 8 for p in pks], pa.float32()),
        "va": pa.FixedSizeListArray.from_arrays(pa.array(i.astype(np.float32) * -1.5, pa.float32()), 1),
    })


def _key(row: dict, part: str) -> tuple:
    out = [row["id"], part]
    for c in COLS:
        v = row[c]
        if isinstance(v, list):
            v = tuple(v)
        if isinstance(v, float) and v == 0.0:
            v = (v, str(v))   # -0.0 and 0.0 told apart
        out.append(v)
    return tuple(out)


class Model:
    def __init__(self):
        self.rows: list[list] = []   # [key, pk, part, alive]

    def insert(self, t: pa.Table, part: str, upsert: bool):
        if upsert:
            self.delete(t.column("id").to_pylist(), part)
        for r in t.to_pylist():
            self.rows.append([_key(r, part), r["id"], part, True])

    def delete(self, pks, part):
        pks = set(pks)
        for r in self.rows:
            if r[1] in pks and (part is None or r[2] == part):
                r[3] = False

    def visible(self) -> Counter:
        return Counter(r[0] for r in self.rows if r[3])


def _visible(meta, store, name) -> Counter:
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=COLS)
    part = {p.partition_id: p.name for p in coll.partitions}
    out = Counter()
    for r in t.to_pylist():
        r["id"] = r["pk"]
        out[_key(r, part[r["partition_id"]])] += 1
    return out


class W:
    def __init__(self, meta, store, settings, model):
        self.meta, self.store, self.settings, self.model = meta, store, settings, model

    def insert(self, name, pks, part, k, upsert=False):
        t = _table(pks, k)
        with WalClient(self.meta, self.store, self.settings) as c:
            c.insert(name, t, partition=part, upsert=upsert)
        self.model.insert(t, part, upsert)

    def delete(self, name, pks, part=None):
        with WalClient(self.meta, self.store, self.settings) as c:
            c.delete(name, list(pks), partition=part)
        self.model.delete(list(pks), part)

    def flush(self, name):
        coll = self.meta.catalog.get_by_name(name)
        for p in pchannels(coll):
            flush_pchannel(self.meta, self.store, p, self.settings, flush_all=True)

    def writes(self, name, k):
        b = 50 * k
        self.insert(name, range(b, b + 20), PARTS[k % 3], k)
        self.insert(name, range(b + 5, b + 12), PARTS[(k + 1) % 3], k + 1)
        self.flush(name)
        self.delete(name, range(b + 3, b + 9), PARTS[(k + 1) % 3])
        self.insert(name, range(b + 10, b + 14), PARTS[k % 3], k + 2, upsert=True)
        self.insert(name, range(max(0, b - 50), max(0, b - 45)), PARTS[(k + 2) % 3], k + 3, upsert=True)
        self.delete(name, [b + 1, b + 15], None)
        self.flush(name)


def _check(meta, store, name, model, where):
    got, want = _visible(meta, store, name), model.visible()
    assert got == want, (where, sum(got.values()), sum(want.values()),
                         sorted((got - want).items(), key=repr)[:3], sorted((want - got).items(), key=repr)[:3])


def test_every_value_of_a_wide_schema_through_every_kind_of_copy(meta, store, settings, etcd_server, tmp_path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "w")
    backup = LocalStore(tmp_path / "backup")
    model = Model()
    try:
        w = W(meta, store, settings, model)
        with WalClient(meta, store, settings) as c:
            c.create_collection("src", SCHEMA, shards=2, partitions=PARTS)
        w.writes("src", 1)
        _check(meta, store, "src", model, "src")
        # 1. a restore
        snapshot.create(meta, store, "src", "s1")
        run_restore(meta, store, "src", "s1", "r1")
        _check(meta, store, "r1", model, "restore")
        w.writes("r1", 2)
        # 2. bundle -> import into another root -> restore
        snapshot.create(meta, store, "r1", "s2")
        exports.export(meta, store, backup, "r1", "s2", **quiet)
        imports.import_bundle(meta2, store2, backup, "r1", "s2", as_collection="imp", **quiet)
        run_restore(meta2, store2, "imp", "s2", "r2", compare=False)
        _check(meta2, store2, "r2", model, "import+restore")
        w = W(meta2, store2, settings2, model)
        w.writes("r2", 3)
        # 3. compaction, then an incremental bundle restored from the bundle into root 1
        compaction.compact(meta2, store2, "r2", compaction.Policy(min_segment_rows=1000, target_rows=30,
                                                                  delete_ratio=0.0, protection=0.0, l0_age=0.0))
        _check(meta2, store2, "r2", model, "compacted")
        snapshot.create(meta2, store2, "r2", "s3a")
        exports.export(meta2, store2, backup, "r2", "s3a", **quiet)
        w.writes("r2", 4)
        snapshot.create(meta2, store2, "r2", "s3b")
        exports.export(meta2, store2, backup, "r2", "s3b", **quiet)
        restore_bundle(meta, store, backup, "r2", "s3b", "r3")
        _check(meta, store, "r3", model, "bundle restore")
        w = W(meta, store, settings, model)
        # 4. a restore to a time of the bundle-restored collection
        pitr.set_window(meta, "r3", "1h")
        w.writes("r3", 5)
        snapshot.create(meta, store, "r3", "s4")
        w.writes("r3", 6)
        at = meta.tso.now()
        job = pitr.restore_as_of(meta, store, "r3", "r4", at, engine="inline")
        copy_and_replay(meta, store, settings, job, "r4")
        _check(meta, store, "r4", model, "as_of")
    finally:
        meta2.close()
