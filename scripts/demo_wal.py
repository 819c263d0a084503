"""The WAL part of `make demo`: ingest into `demo_wal` through the write-ahead log, then
(after the `wal_flush` DAG) check that the Flushed segments hold exactly the committed
rows minus the deleted ones.

    python scripts/demo_wal.py ingest   # (re)create demo_wal and append through the WAL
    python scripts/demo_wal.py check    # read every Flushed binlog and delta log back
    python scripts/demo_wal.py restored-write   # deletes and upserts into demo_wal_restored
    python scripts/demo_wal.py restored-check   # ... applied where the restored rows are
    python scripts/demo_wal.py before-deletes   # the TSO just before the deletes (for --as-of)
    python scripts/demo_wal.py pitr-check       # demo_wal_before_deletes: the rows before the deletes
    python scripts/demo_wal.py undrop-check     # demo_wal_back: the rows demo_wal had when dropped
"""

from __future__ import annotations

import json
import os
import sys


from seglake.config import Settings
from seglake.errors import NotFound
from seglake.lifecycle import drop, flush
from seglake.meta import Meta
from seglake.meta.catalog import pchannel_of
from seglake.lifecycle.verify import segment_rows
from seglake.visibility import visible_rows
from seglake.meta.segments import FLUSHED
from seglake.storage import open_store
from seglake.wal import message as M
from seglake.wal.client import WalClient, shard_pks, synthetic_rows
from seglake.wal.message import Message

NAME = "demo_wal"
SCHEMA = [{"field_id": 100, "name": "pk", "dtype": "Int64", "is_primary": True},
          {"field_id": 101, "name": "embedding", "dtype": "FloatVector", "dim": 32},
          {"field_id": 102, "name": "price", "dtype": "Float"}]
INSERTED = list(range(1, 3001))           # three batches of 1,000
DELETED = list(range(100, 200))           # then deleted
COMMITTED_TXN = shard_pks(2, 200, 10001).tolist()  # a committed transaction (one vchannel: shard 0)
ROLLED_BACK = list(range(20001, 20201))    # a rolled-back transaction


BEFORE_DELETES = "demo_wal_before_deletes"   # restored to the instant before the deletes
BACK = "demo_wal_back"                        # demo_wal brought back after its drop (undrop)


def _mark_path():
    from seglake.config import DEFAULT_HOME
    return DEFAULT_HOME / "demo_wal.before_deletes"


def reset(meta, store, settings) -> None:
    """Drop a demo_wal (and its copies) left by an earlier run the whole way: begin, flush
    its pchannels (the flusher releases its vchannels), finish. Its copies were written
    through the WAL too (restored-write): a direct drop would leave them Dropping, their
    names taken, and the next run's restore refused."""
    for name in (NAME + "_restored", BEFORE_DELETES, BACK, NAME):
        try:
            coll = meta.catalog.get_by_name(name)
        except NotFound:
            continue
        if drop.begin_drop(meta, store, settings, name)["state"] == "Dropped":
            continue
        for p in sorted({pchannel_of(v) for v in coll.vchannels}):
            flush.flush_pchannel(meta, store, p, settings, flush_all=True)
        drop.finish_drop(meta, name, collection_id=coll.collection_id)


def ingest(meta, store, settings) -> None:
    reset(meta, store, settings)
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection(NAME, SCHEMA, shards=2)
        from seglake.lifecycle import pitr
        pitr.set_window(meta, NAME, "1d")   # restores to any instant of the last day, and an undrop
        for i in range(3):
            c.insert(NAME, synthetic_rows(coll, 1000, 1 + 1000 * i))
        _mark_path().parent.mkdir(parents=True, exist_ok=True)
        _mark_path().write_text(str(meta.tso.now()))   # every insert above is at or before it
        c.delete(NAME, DELETED)
        c.insert(NAME, synthetic_rows(coll, len(COMMITTED_TXN), COMMITTED_TXN[0], shard=0), txn=True)
        v = coll.vchannels[0]  # a transaction rolled back (by hand: the client only rolls back on error)
        w = c.writer(pchannel_of(v))
        batch = M.conform_batch(synthetic_rows(coll, len(ROLLED_BACK), ROLLED_BACK[0]).to_batches()[0], coll.schema)
        w.append(Message.begin_txn(v, 424242, 60000))
        w.append(Message.insert(v, coll.collection_id, coll.partitions[0].partition_id, batch, txn_id=424242))
        w.append(Message.rollback_txn(v, 424242))
    print(f"appended to {NAME!r}: {len(INSERTED)} rows, {len(DELETED)} deletes, a committed txn of "
          f"{len(COMMITTED_TXN)} rows, a rolled-back txn of {len(ROLLED_BACK)} rows "
          f"(on {', '.join(sorted({pchannel_of(v) for v in coll.vchannels}))})")


def check(meta, store) -> int:
    """The visible rows (seglake.visibility: deletes hide strictly older rows of their pk;
    count(*) keeps duplicates) must be exactly the committed rows minus the deleted ones,
    each once; the binlogs must hold no row twice and none of the rolled-back txn."""
    coll = meta.catalog.get_by_name(NAME)
    segments = sum(1 for _ in meta.segments.list(coll.collection_id, states=[FLUSHED]))
    pks, deleted_pks = segment_rows(meta, store, coll.collection_id, [FLUSHED])
    deleted = set(deleted_pks)
    visible_list = visible_rows(meta, store, coll.collection_id).column("pk").to_pylist()
    visible = sorted(visible_list)
    expected = sorted(set(INSERTED + COMMITTED_TXN) - set(DELETED))
    ok = len(pks) == len(set(pks)) and visible == expected and not set(ROLLED_BACK) & set(pks)
    print(json.dumps({"collection": NAME, "flushed_segments": segments, "rows_in_binlogs": len(pks),
                      "deleted_in_delta_logs": len(deleted), "visible_rows": len(visible),
                      "expected_rows": len(expected), "rolled_back_rows_found": len(set(ROLLED_BACK) & set(pks)),
                      "spot_check": {str(pk): pk in visible for pk in (1, 150, 2999, 10001, 20001)},
                      "ok": ok}, indent=1))
    return 0 if ok else 1


RESTORED = "demo_wal_restored"
RESTORED_DELETED = list(range(1, 51))      # deleted through the WAL of the restored copy
RESTORED_UPSERTED = list(range(2001, 2011))  # upserted there (new values, older rows hidden)


def sample(meta, store, name: str, pks: list[int]) -> None:
    """A few visible rows with their system columns: row id (field 0), timestamp (field 1,
    from the one TSO: physical ms << 18 | logical) and the time it means."""
    import datetime

    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    rows = {pk: (rid, ts, price) for pk, rid, ts, price in zip(
        t.column("pk").to_pylist(), t.column("RowID").to_pylist(), t.column("Timestamp").to_pylist(),
        t.column("price").to_pylist())}
    print(f"{name}: pk, RowID (field 0), Timestamp (field 1) = time, price")
    for pk in pks:
        if pk in rows:
            rid, ts, price = rows[pk]
            when = datetime.datetime.fromtimestamp((ts >> 18) / 1000, datetime.timezone.utc)
            print(f"  {pk:>6} {rid:>12} {ts} = {when.isoformat(timespec='milliseconds')}  {price:.2f}")
        else:
            print(f"  {pk:>6} (not visible)")


def restored_write(meta, store, settings) -> None:
    coll = meta.catalog.get_by_name(RESTORED)
    with WalClient(meta, store, settings) as c:
        c.delete(RESTORED, RESTORED_DELETED)
        c.upsert(RESTORED, synthetic_rows(coll, len(RESTORED_UPSERTED), RESTORED_UPSERTED[0], seed=9))
    print(f"appended to {RESTORED!r}: deletes of {len(RESTORED_DELETED)} pks, upserts of "
          f"{len(RESTORED_UPSERTED)} (restore kept the shard mapping: each lands where its rows are)")


def restored_check(meta, store) -> int:
    coll = meta.catalog.get_by_name(RESTORED)
    visible = sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())
    expected = sorted(set(INSERTED + COMMITTED_TXN) - set(DELETED) - set(RESTORED_DELETED))
    ok = visible == expected
    print(json.dumps({"collection": RESTORED, "visible_rows": len(visible), "expected_rows": len(expected),
                      "deleted_still_visible": len(set(RESTORED_DELETED) & set(visible)), "ok": ok}, indent=1))
    sample(meta, store, RESTORED, [1, 2, 2001, 2002, 2999])
    return 0 if ok else 1


def rows_check(meta, store, name: str, expected: list[int]) -> int:
    coll = meta.catalog.get_by_name(name)
    visible = sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())
    ok = visible == sorted(expected)
    print(json.dumps({"collection": name, "visible_rows": len(visible), "expected_rows": len(expected),
                      "spot_check": {str(pk): pk in visible for pk in (1, 150, 2999, COMMITTED_TXN[0])},
                      "ok": ok}, indent=1))
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv == ["before-deletes"]:
        print(_mark_path().read_text())
        return 0
    if argv in (["pitr-check"], ["undrop-check"]):
        settings = Settings.load()
        with Meta.from_settings(settings) as meta:
            store = open_store(settings)
            if argv == ["pitr-check"]:   # as of just before the deletes: every inserted row, none deleted yet
                return rows_check(meta, store, BEFORE_DELETES, INSERTED)
            return rows_check(meta, store, BACK, sorted(set(INSERTED + COMMITTED_TXN) - set(DELETED)))
    if argv in (["restored-write"], ["restored-check"], ["sample"]):
        settings = Settings.load()
        with Meta.from_settings(settings) as meta:
            store = open_store(settings)
            if argv == ["restored-write"]:
                restored_write(meta, store, settings)
                return 0
            if argv == ["sample"]:
                sample(meta, store, NAME, [1, 150, 2999, COMMITTED_TXN[0]])
                return 0
            return restored_check(meta, store)
    if argv not in (["ingest"], ["check"]):
        print(__doc__, file=sys.stderr)
        return 2
    settings = Settings.load()
    with Meta.from_settings(settings) as meta:
        store = open_store(settings)
        if argv == ["ingest"]:
            ingest(meta, store, settings)
            return 0
        return check(meta, store)


if __name__ == "__main__":
    rc = main(sys.argv[1:])
    sys.stdout.flush()
    # grpc can abort in its own threads at interpreter teardown ("terminate called without an
    # active exception"): the work is done and etcd closed, so leave without the teardown
    os._exit(rc)
