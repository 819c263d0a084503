"""Adversary s20 (issue 26 #1, databases): two collections named alike in two databases,
each with a partition-scoped delete, exported to ONE target, imported into another root
(where a third "bk" lives in the default db), restored into each db; every copy equals its
own source row by row."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

from seglake.lifecycle import copyjob, restore, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.storage.local import LocalStore
from seglake.visibility import visible_rows
from seglake.wal.client import WalClient

from copy_model_helpers import SCHEMA, other_root, quiet, table
from wal_helpers import pchannels


def _rows(meta, store, name, db):
    coll = meta.catalog.get_by_name(name, db)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    part = {p.partition_id: p.name for p in coll.partitions}
    return Counter((pk, part[p], round(v, 4)) for pk, p, v in
                   zip(t.column("pk").to_pylist(), t.column("partition_id").to_pylist(), t.column("v").to_pylist()))


def _fill(meta, store, settings, db, k):
    with WalClient(meta, store, settings) as c:
        c.create_collection("bk", SCHEMA, shards=2, partitions=["_default", "p1"], db=db)
        c.insert("bk", table(range(1, 21), float(k)), partition="_default", db=db)
        c.insert("bk", table(range(11, 31), float(k) + 0.5), partition="p1", db=db)
    coll = meta.catalog.get_by_name("bk", db)
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    with WalClient(meta, store, settings) as c:
        c.delete("bk", list(range(11 + k, 16 + k)), partition="p1", db=db)
        c.insert("bk", table(range(15, 18), float(k) + 0.25), partition="_default", db=db, upsert=True)
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def test_same_names_in_two_databases_cross_a_copy_each_to_its_own(meta, store, settings, etcd_server, tmp_path):
    for k, db in enumerate(["default", "x"]):
        if db != "default":
            try:
                meta.catalog.create_database(db)
            except AttributeError:
                pass
        _fill(meta, store, settings, db, k)
    target = LocalStore(tmp_path / "t")
    want = {}
    for db in ("default", "x"):
        snapshot.create(meta, store, "bk", "s1", db=db)
        exports.export(meta, store, target, "bk", "s1", db=db, **quiet)
        want[db] = _rows(meta, store, "bk", db)
    m2, s2, st2 = other_root(etcd_server, tmp_path, "db")
    try:
        with WalClient(m2, s2, st2) as c:
            c.create_collection("bk", SCHEMA, shards=1)
            c.insert("bk", table(range(1, 5), 9.0))
        for db in ("default", "x"):
            imports.import_bundle(m2, s2, target, "bk", "s1", db=db, as_collection="imp", **quiet)
            job = restore.restore(m2, s2, "imp", "s1", "back", db=db, engine="inline")
            copyjob.plan(m2, job)
            copyjob.run_inline(m2, s2, job)
            assert copyjob.finalize(m2, job).state == JOB_COMPLETED
            got = _rows(m2, s2, "back", db)
            assert got == want[db], (db, sorted((got - want[db]).items())[:5], sorted((want[db] - got).items())[:5])
    finally:
        m2.close()
