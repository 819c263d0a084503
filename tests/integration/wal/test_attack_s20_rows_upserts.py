"""Adversary s20 (issue 26): two upserts of one pk leave ONE row, whatever order their
appends commit in (Milvus: an upsert is a delete + an insert at ONE timestamp, so of two
upserts of a pk the one with the larger timestamp hides the other).

Here an upsert's delete is stamped with the call's timestamp (taken before its first
append) but its rows with their commit tick: an upsert U1 that took its timestamp, then
committed after another upsert U2 of the same pk was acknowledged, leaves both rows
visible (U1's delete is older than U2's row; U2's delete is older than U1's row).

Real etcd, real files."""

from __future__ import annotations

import threading

from seglake.visibility import visible_rows
from seglake.wal.client import WalClient

import numpy as np
import pyarrow as pa

from seglake.wal.client import synthetic_rows
from wal_helpers import make_collection, pchannels
from seglake.lifecycle.flush import flush_pchannel


SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "v", "dtype": "Float"},
          {"field_id": 102, "name": "vec", "dtype": "FloatVector", "dim": 2}]


def table(pks, v: float) -> pa.Table:
    pks = np.asarray(list(pks), np.int64)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(2 * len(pks), np.float32)), 2)
    return pa.table({"pk": pks, "v": pa.array(np.full(len(pks), v, np.float32)), "vec": vec})


class _Paused(WalClient):
    """A client whose call pauses after it took its timestamp, before its first append
    (a thread descheduled, a slow network: anything between the two)."""

    def __init__(self, *a, started, go, **kw):
        super().__init__(*a, **kw)
        self.started, self.go = started, go

    def _run(self, *a, **kw):
        self.started.set()
        assert self.go.wait(30)
        return super()._run(*a, **kw)


def _pk_rows(meta, store, name, pk):
    coll = meta.catalog.get_by_name(name)
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, meta_settings[0], flush_all=True)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    return sorted(v for k, v in zip(t.column("pk").to_pylist(), t.column("v").to_pylist()) if k == pk)


meta_settings: list = []


def test_two_overlapping_upserts_of_one_pk_leave_one_row(meta, store, settings):
    meta_settings[:] = [settings]
    with WalClient(meta, store, settings) as c:
        c.create_collection("ups", SCHEMA, shards=1)
        c.insert("ups", table([7], 0.0))
    started, go = threading.Event(), threading.Event()
    errors = []

    def slow():
        try:
            with _Paused(meta, store, settings, started=started, go=go) as c1:
                c1.upsert("ups", table([7], 1.0))     # U1: timestamp taken, then paused
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=slow)
    t.start()
    assert started.wait(30)
    with WalClient(meta, store, settings) as c2:
        c2.upsert("ups", table([7], 2.0))             # U2: acknowledged while U1 is paused
    go.set()
    t.join(60)
    assert not errors, errors
    got = _pk_rows(meta, store, "ups", 7)
    # Milvus: one row of pk 7 (the upsert with the larger timestamp wins); never two
    assert len(got) == 1, f"pk 7 after two acknowledged upserts: visible rows {got} (expected 1 row)"


def test_two_threads_upserting_the_same_pks_leave_one_row_each(meta, store, settings):
    """No hook: two clients upsert pks 0..59 side by side, one call per pk, in the same
    order (two writers of one key stream). After all 120 calls are acknowledged, Milvus
    shows one row per pk."""
    meta_settings[:] = [settings]
    with WalClient(meta, store, settings) as c:
        c.create_collection("ups2", SCHEMA, shards=1)
    errors = []
    barrier = threading.Barrier(2)

    def loop(k):
        try:
            with WalClient(meta, store, settings) as c:
                barrier.wait()
                for pk in range(60):
                    c.upsert("ups2", table([pk], float(k)))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=loop, args=(k,)) for k in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors, errors
    coll = meta.catalog.get_by_name("ups2")
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    t = visible_rows(meta, store, coll.collection_id, columns=["v"])
    from collections import Counter
    n = Counter(t.column("pk").to_pylist())
    twice = sorted(pk for pk, c in n.items() if c > 1)
    assert not twice and len(n) == 60, f"{len(twice)} of 60 pks visible twice after two upserts each: {twice[:10]}"


def test_an_upsert_retried_with_its_seq_after_another_upsert_of_its_pk_leaves_one_row(meta, store, settings,
                                                                                      monkeypatch):
    """The README's retry path: U1 upserts pks a (pchannel A) and b (pchannel B); B fails
    (AppendIncomplete, seq=N). U2 (another producer) upserts b: acknowledged. U1 is
    retried with seq=N (keeping its one timestamp, as the README says) and acknowledged.
    Milvus: one row of b (either upsert's); seglake: both."""
    from test_wal_attack_producer import _flush, _incomplete, _rows

    with WalClient(meta, store, settings, producer_id="ups-a") as c:
        coll = make_collection(c, shards=2)
        (_, pb) = pchannels(coll)
        a = int(synthetic_rows(coll, 1, 1, shard=0).column("pk")[0].as_py())
        b = int(synthetic_rows(coll, 1, 1, shard=1).column("pk")[0].as_py())

        def rows_of(pks, price):
            t = synthetic_rows(coll, len(pks), 1)
            return t.set_column(0, "pk", pa.array(pks, pa.int64())).set_column(
                2, "price", pa.array([price] * len(pks), pa.float32()))
        c.insert("c1", rows_of([a, b], 1.0))
        u1 = rows_of([a, b], 2.0)
        e = _incomplete(monkeypatch, pb, lambda: c.upsert("c1", u1))
    with WalClient(meta, store, settings) as c2:
        c2.upsert("c1", rows_of([b], 4.0))          # U2: acknowledged
    with WalClient(meta, store, settings, producer_id="ups-a") as c3:
        c3.upsert("c1", u1, seq=e.value.result.seq)  # U1 completed: acknowledged
    _flush(meta, store, settings, coll)
    got = [r for r in _rows(meta, store, coll) if r[0] == b]
    assert len(got) == 1, f"pk b after two acknowledged upserts (U1 retried with its seq): rows {got}"


def test_two_overlapping_txn_upserts_of_one_pk_leave_one_row(meta, store, settings):
    """The same in transactions: a txn's bodies take ticks of their own just below its
    commit (its order), so an upsert in a txn is stamped with its body's tick: of two
    txn upserts of a pk, the later committed wins."""
    meta_settings[:] = [settings]
    with WalClient(meta, store, settings) as c:
        c.create_collection("upt", SCHEMA, shards=1)
        c.insert("upt", table([7], 0.0))
    started, go = threading.Event(), threading.Event()
    errors = []

    def slow():
        try:
            with _Paused(meta, store, settings, started=started, go=go) as c1:
                c1.upsert("upt", table([7], 1.0), txn=True)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=slow)
    t.start()
    assert started.wait(30)
    with WalClient(meta, store, settings) as c2:
        c2.upsert("upt", table([7], 2.0), txn=True)
    go.set()
    t.join(60)
    assert not errors, errors
    assert _pk_rows(meta, store, "upt", 7) == [1.0]   # committed last


def test_a_txn_upsert_of_one_pk_twice_over_several_batches_keeps_both_copies(meta, store, settings):
    """Milvus keeps both copies of a pk upserted twice in one request (one timestamp). In a
    txn each append has its own tick: the call keeps a pk's rows in one append, so its
    later append never hides its own earlier copy, whatever batch_rows cuts."""
    meta_settings[:] = [settings]
    with WalClient(meta, store, settings, batch_rows=2) as c:
        c.create_collection("upt2", SCHEMA, shards=1)
        c.insert("upt2", table([7, 8], 0.0))
        rows = pa.table({"pk": pa.array([7, 1, 2, 7, 3], pa.int64()),
                         "v": pa.array([1.0, 1.0, 1.0, 2.0, 1.0], pa.float32()),
                         "vec": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(10, np.float32)), 2)})
        c.upsert("upt2", rows, txn=True)
        c.upsert("upt2", rows.slice(0, 4))   # not in a txn: one timestamp per call
    assert _pk_rows(meta, store, "upt2", 7) == [1.0, 2.0]
    assert _pk_rows(meta, store, "upt2", 8) == [0.0]
