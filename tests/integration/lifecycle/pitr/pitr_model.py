"""A producer of acknowledged operations and a model of what is visible at any instant,
for the point-in-time restore tests (real etcd, real files).

Every operation is recorded as the log acknowledged it: its messages (found through the
call's acknowledged positions) with their ticks. The model is deliberately naive: a row
(pk, v, ts, partition) is visible at instant t when it was written at or before t (a
transaction's rows when its CommitTxn was) and no delete applied at or before t of its pk
(in its partition, or in all) carries a timestamp above the row's."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from seglake.lifecycle import copyjob, pitr
from seglake.lifecycle.flush import flush_pchannel
from seglake.meta.catalog import pchannel_of
from seglake.visibility import visible_rows
from seglake.wal import message as M
from seglake.wal.log import WalLog
from seglake.wal.message import MessageId

SCHEMA = [
    {"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
    {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 2},
    {"field_id": 102, "name": "price", "dtype": "Float"},
]


def rows(pks, v: float) -> pa.Table:
    pks = [int(p) for p in pks]
    return pa.table({"pk": pa.array(pks, pa.int64()),
                     "embedding": pa.array([[float(p), float(v)] for p in pks], pa.list_(pa.float32(), 2)),
                     "price": pa.array([float(v)] * len(pks), pa.float32())})


@dataclass
class Model:
    meta: object
    store: object
    collection: str
    parts: dict = field(default_factory=dict)    # partition name -> id
    inserted: list = field(default_factory=list)   # (pk, v, row_ts, visible_from, partition_id)
    deletes: list = field(default_factory=list)    # (pk, ts, applied_at, partition scope 0 = all)

    def messages(self, res) -> list:
        """The messages of an acknowledged call, with their ticks, from its positions."""
        out = []
        for p, (first, last) in res.positions.items():
            lo, hi = MessageId.parse(first), MessageId.parse(last)
            for m in WalLog(self.meta, self.store, p).messages(lo):
                if hi < m.id:
                    break
                out.append(m)
        return out

    def record(self, res, v: float, *, txn: bool = False) -> None:
        msgs = self.messages(res)
        if txn:   # the call's own transaction only: another writer's messages may lie between its appends
            ids = {(m.producer, m.txn_id) for m in msgs if m.type == M.COMMIT_TXN}
            msgs = [m for m in msgs if (m.producer, m.txn_id) in ids]
        commit = {m.vchannel: m.time_tick for m in msgs if m.type == M.COMMIT_TXN}
        tick = {}   # a txn's bodies: the k ticks just below its commit's, in their order (wal/txn.py)
        for vch, c in commit.items():
            bodies = [m for m in msgs if m.vchannel == vch and m.type in (M.INSERT, M.DELETE)]
            tick.update({id(m): c - len(bodies) + i for i, m in enumerate(bodies)})
        for m in msgs:
            if m.type not in (M.INSERT, M.DELETE):
                continue
            at = commit[m.vchannel] if txn else m.time_tick          # when it applies
            t = tick[id(m)] if txn else m.time_tick                    # its own tick
            ts = min(m.props["upsert_ts"], t) if m.props.get("upsert_ts") else t   # the call's one ts
            pks = m.body.column("pk").to_pylist()
            if m.type == M.INSERT:
                upsert = bool(m.props.get("upsert"))   # rows and delete at the call's one timestamp
                self.inserted += [(pk, v, ts if upsert else t, at, m.partition_id) for pk in pks]
                if upsert:
                    self.deletes += [(pk, ts, at, m.partition_id) for pk in pks]
            else:
                self.deletes += [(pk, ts, at, m.partition_id) for pk in pks]

    def visible(self, t: int) -> Counter:
        dels = {}
        for pk, ts, at, scope in self.deletes:
            if at <= t:
                dels.setdefault(pk, []).append((ts, scope))
        out = Counter()
        for pk, v, ts, at, part in self.inserted:
            if at > t:
                continue
            if any(dts > ts and scope in (0, part) for dts, scope in dels.get(pk, ())):
                continue
            out[(pk, round(float(v), 3))] += 1
        return out

    def pks(self, t: int) -> list[int]:
        return sorted({pk for pk, _ in self.visible(t)})


def flush_all(meta, store, settings, coll, *, flush_all: bool = True) -> None:
    for p in sorted({pchannel_of(v) for v in coll.vchannels}):
        flush_pchannel(meta, store, p, settings, flush_all=flush_all)


def source_with_s1(c, meta, store, settings):
    """The start of a replay test, inside WalClient `c`: collection "src" (2 shards, a 1 h
    window), pks 1..39 inserted at v=1.0 and flushed, snapshot s1. Returns (coll, model)."""
    from seglake.lifecycle import snapshot

    coll = c.create_collection("src", SCHEMA, shards=2)
    pitr.set_window(meta, "src", "1h")
    model = Model(meta, store, "src")
    model.record(c.insert("src", rows(range(1, 40), 1.0)), 1.0)
    flush_all(meta, store, settings, coll)
    snapshot.create(meta, store, "src", "s1")
    return coll, model


def export_and_archive(meta, store, settings, target, coll, snap: str = "s1", keep_last: int = 1) -> None:
    """The start of an archive test: `coll` flushed, its snapshot `snap` exported to the backup
    target `target`, then its archive turned on (a retention policy keep_last + archive)."""
    from seglake.lifecycle import retention, snapshot
    from seglake.lifecycle.backup import export as exports

    flush_all(meta, store, settings, coll)
    snapshot.create(meta, store, coll.name, snap)
    exports.export(meta, store, target, coll.name, snap, say=lambda line: None)
    retention.set_policy(meta, coll.name, {"keep_last": keep_last, "archive": True})


def restore_to(meta, store, settings, source: str, target: str, as_of) -> object:
    return copy_and_replay(meta, store, settings, pitr.restore_as_of(meta, store, source, target, as_of), target)


def restore_from_target(meta, store, settings, backup, source: str, target: str, as_of, **kw) -> object:
    """The same from a backup target alone (its bundle and WAL archive)."""
    from seglake.lifecycle.pitr import from_target

    job = from_target.restore_as_of_from_target(meta, store, backup, source, target, as_of, **kw)
    return copy_and_replay(meta, store, settings, job, target)


def copy_and_replay(meta, store, settings, job, target: str) -> object:
    """A restore to a time set up as copy job `job` into `target`: copied inline, then its log
    replayed. Returns the target collection."""
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    tid = meta.catalog.get_by_name(target).collection_id
    pitr.replay(meta, store, settings, tid)
    return meta.catalog.get(tid)


def drop_now(meta, store, settings, name: str) -> None:
    """Drop collection `name` the whole way: begin (DropCollection messages), flush its
    pchannels (releasing its vchannels), finish (Dropped)."""
    from seglake.lifecycle import drop
    from seglake.lifecycle.flush import flush_pchannel
    from wal_helpers import pchannels

    coll = meta.catalog.get_by_name(name)
    drop.begin_drop(meta, store, settings, name)
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=False)
    assert drop.finish_drop(meta, name, collection_id=coll.collection_id)["state"] == "Dropped"


def database_with_b_dropped(meta, store, settings, *, after_t=None) -> tuple:
    """One database of two collections: "a" (a 1 h window, pks 1..4) and "b" (pks 1..4,
    flushed); t = an instant both hold; `after_t(c)` writes with the WalClient after t; then
    b dropped the whole way (drop_now). Returns (b, t)."""
    from seglake.wal.client import WalClient

    with WalClient(meta, store, settings) as c:
        c.create_collection("a", SCHEMA, shards=1)
        pitr.set_window(meta, "a", "1h")
        c.insert("a", rows(range(1, 5), 1.0))
        b = c.create_collection("b", SCHEMA, shards=1)
        c.insert("b", rows(range(1, 5), 1.0))
        flush_all(meta, store, settings, b)
        t = meta.tso.reserve(1, linearizable=True)
        if after_t is not None:
            after_t(c)
    drop_now(meta, store, settings, "b")
    return b, t


def visible_of(meta, store, coll) -> Counter:
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    return Counter(zip(t.column("pk").to_pylist(), (round(x, 3) for x in t.column("price").to_pylist())))


def route0(pks, shards: int = 2) -> np.ndarray:
    from seglake.wal.client import route
    pks = np.asarray(pks, dtype=np.int64)
    return pks[route(pks, shards) == 0]
