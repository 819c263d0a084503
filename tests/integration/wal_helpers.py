"""Shared helpers of the WAL integration tests."""

from __future__ import annotations

import pytest

from seglake.meta.catalog import DEFAULT_PARTITION


def schema(dim: int = 8) -> list[dict]:
    return [
        {"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
        {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": dim},
        {"field_id": 102, "name": "price", "dtype": "Float"},
    ]


def make_collection(client, name: str = "c1", shards: int = 2, dim: int = 8):
    return client.create_collection(name, schema(dim), shards=shards)


def pchannels(coll) -> list[str]:
    from seglake.meta.catalog import pchannel_of
    return sorted({pchannel_of(v) for v in coll.vchannels})


def all_messages(meta, store, pchannel, settings):
    from seglake.wal.scanner import recovery_scanner
    return recovery_scanner(meta, store, pchannel, settings, follow=False).drain()


def inserted_pks(msgs) -> list[int]:
    from seglake.wal import message as M
    out = []
    for m in msgs:
        if m.type == M.INSERT:
            out.extend(m.body.column("pk").to_pylist())
    return out


__all__ = ["DEFAULT_PARTITION", "schema", "make_collection", "pchannels", "all_messages", "inserted_pks"]


def visible_pks(meta, store, collection_id) -> list[int]:
    """The pks of every visible row of the collection's Flushed segments (duplicates
    kept): a row is visible unless a delete of its pk with a larger timestamp exists
    (collection-wide, or in its partition when the delete names one)."""
    import numpy as np
    import pyarrow.parquet as pq
    from seglake.meta.segments import FLUSHED
    from seglake.storage import layout

    pk = meta.catalog.get(collection_id).schema.primary
    rows, dels = [], []
    for seg in meta.segments.list(collection_id, states=[FLUSHED]):
        c, p, s = seg.collection_id, seg.partition_id, seg.segment_id
        if pk.field_id in seg.binlogs:
            cols = []
            for fid in (pk.field_id, 1):
                (b,) = seg.binlogs[fid]
                with store.open_read(layout.insert_log(c, p, s, fid, b.log_id)) as f:
                    cols.append(pq.read_table(f).column(0).to_numpy())
            rows += [(int(a), int(t), p) for a, t in zip(*cols)]
        for b in seg.deltalogs:
            with store.open_read(layout.delta_log(c, p, s, b.log_id)) as f:
                t = pq.read_table(f)
            parts = t.column("partition").to_pylist() if "partition" in t.column_names else [0] * t.num_rows
            dels += list(zip(t.column("pk").to_pylist(), t.column("ts").to_pylist(), parts))
    return sorted(a for a, t, p in rows
                  if not any(d == a and dt > t and dp in (0, p) for d, dt, dp in dels))


def lose_reply_then_fail_gets(monkeypatch, kv, fail_at: set[int]):
    """etcd applies the next producer commit but its answer is lost; then the reads
    numbered in `fail_at` (1-based, counted from the lost answer) fail."""
    from seglake.errors import Unavailable

    real_txn, real_get = kv.txn, kv.get
    state = {"armed": True, "gets": None}

    def txn(compares, ops, *a, **k):
        rev = real_txn(compares, ops, *a, **k)
        if state["armed"] and any("/producers/" in getattr(o, "key", "") for o in ops):
            state["armed"], state["gets"] = False, 0
            raise Unavailable("etcd: request timed out (it was applied)")
        return rev

    def get(key, *a, **k):
        if state["gets"] is not None:
            state["gets"] += 1
            if state["gets"] in fail_at:
                raise Unavailable("etcd: no leader")
        return real_get(key, *a, **k)
    monkeypatch.setattr(kv, "txn", txn)
    monkeypatch.setattr(kv, "get", get)
    return state


def append_incomplete(monkeypatch, pchannel: str, call):
    """`call()` with every commit on `pchannel` refused ("etcd refused the write"): its
    AppendIncomplete (the pytest.raises info). Every monkeypatch of the test is undone after."""
    from seglake.errors import SeglakeError
    from seglake.wal import writer as W
    from seglake.wal.client import AppendIncomplete

    real = W.WalWriter._commit

    def fails(self, frag):
        if self.pchannel == pchannel:
            raise SeglakeError("etcd refused the write")
        return real(self, frag)
    monkeypatch.setattr(W.WalWriter, "_commit", fails)
    with pytest.raises(AppendIncomplete) as e:
        call()
    monkeypatch.undo()
    return e


# Fixtures of the tests that stand in for waiting out producer windows by running the TSO
# ahead (expire_producers(now_tt=...)): a 60 s window, and a clock bound wider than the
# jump so the right clocks' own calls after it are not refused as slow. Import both.
@pytest.fixture
def wide(settings):
    return settings.replace(wal_producer_expiry=60.0, max_clock_skew=3600.0)


@pytest.fixture(name="meta")
def wide_meta(wide):
    from seglake.meta import Meta

    m = Meta.from_settings(wide)
    yield m
    m.close()
