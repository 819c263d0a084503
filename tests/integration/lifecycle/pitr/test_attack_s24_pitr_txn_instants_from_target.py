"""attack-s24-pitr: instants INSIDE transactions (at a BeginTxn's or a body's own tick, one
before the CommitTxn, at it), restored from this store and from the backup target alone
(bundle + WAL archive): a txn open at the instant is never applied, one committed at or
before it is applied whole; interleaved with another client's upserts and deletes of the
same pks, split over appends (batch_rows 3)."""

from __future__ import annotations

from seglake.lifecycle import pitr
from seglake.storage.local import LocalStore
from seglake.wal import message as M
from seglake.wal.client import WalClient
from seglake.wal.log import WalLog
from seglake.meta.catalog import pchannel_of
from seglake.lifecycle.backup import archive

from pitr_model import SCHEMA, Model, export_and_archive, restore_from_target, restore_to, rows, visible_of


def test_instants_inside_transactions_from_the_store_and_the_target(meta, store, settings, tmp_path):
    backup = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings, batch_rows=3) as c, WalClient(meta, store, settings, batch_rows=2) as d:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        model.record(c.insert("src", rows(range(1, 12), 1.0)), 1.0)
        export_and_archive(meta, store, settings, backup, coll)
        model.record(c.insert("src", rows(range(5, 14), 2.0), txn=True), 2.0, txn=True)
        model.record(d.insert("src", rows([5, 6, 7], 3.0), upsert=True), 3.0)
        model.record(c.delete("src", [1, 2, 3, 8, 9], txn=True), 4.0, txn=True)
        model.record(d.delete("src", [5, 10]), 5.0)
        model.record(c.insert("src", rows([1, 2, 20, 21, 22, 23], 6.0), upsert=True, txn=True), 6.0, txn=True)
        model.record(d.insert("src", rows([2, 30], 7.0)), 7.0)
    archive.run(meta, store, backup)
    msgs = list(WalLog(meta, store, pchannel_of(coll.vchannels[0])).messages())
    marks = sorted({t for m in msgs if m.type in (M.BEGIN_TXN, M.COMMIT_TXN, M.INSERT, M.DELETE)
                    and m.vchannel == coll.vchannels[0] for t in (m.time_tick, m.time_tick - 1)})
    txn_marks = [t for m in msgs if m.type in (M.BEGIN_TXN, M.COMMIT_TXN) for t in (m.time_tick - 1, m.time_tick)]
    base = meta.snapshots.get(coll.collection_id, "s1")[0].consistent_ts
    pick = [t for t in sorted(set(txn_marks) | set(marks[::max(1, len(marks) // 6)])) if t >= base]
    bad, n = {}, 0
    for i, t in enumerate(pick):
        want = model.visible(t)
        for where in ("here", "there"):
            r = (restore_to(meta, store, settings, "src", f"h{i}", t) if where == "here" else
                 restore_from_target(meta, store, settings, backup, "src", f"t{i}", t))
            got = visible_of(meta, store, r)
            n += sum(got.values())
            if got != want:
                bad[(where, t)] = (sorted((want - got).elements()), sorted((got - want).elements()))
    print("instants", len(pick), "rows compared", n)
    assert not bad, bad
