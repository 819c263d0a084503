"""Adversary s21 (issue 26): an upsert's rows are stamped with its CALL timestamp (taken
before its first append; the s20 F1 fix), so a row can commit after a delete with a
larger timestamp. L0 folding assumes the opposite ("every row written later has a larger
timestamp"): it drops a delete log once its ticks are below the checkpoint. A late upsert
committed after the fold is then visible in the source, while every copy that still holds
the delete -- a restore to a time from a snapshot taken before the fold, a restore of
that snapshot with the upsert replayed -- hides it. Same acknowledged calls, same rule,
two answers: the copy is not the source at the copy's instant.

The late upsert is a client that took its call timestamp, was descheduled (a GC pause, a
slow network) while a delete of the same pk was acknowledged, flushed and folded, then
appended."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pitr"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "wal"))

from seglake.lifecycle import compaction, pitr, snapshot
from seglake.wal.client import WalClient

from copy_model_helpers import Writer, rows, table
from pitr_model import copy_and_replay, drop_now

FOLD_NOW = compaction.Policy(min_segment_rows=1000, target_rows=1000, delete_ratio=0.0, protection=0.0, l0_age=0.0)


class LateClient(WalClient):
    """A client whose upsert call timestamp was taken earlier (`early`), as by a call
    descheduled between taking it and appending. (Since session 21 an upsert takes no
    timestamp before its first append -- its tick is the call's -- so this override no
    longer reaches an upsert: the scenarios below then hold as the writes' order says.)"""

    early = 0

    def _call_ts(self, coll, seq):
        return self.early


def _late_upsert(w: Writer, name: str, early: int, pks, v: float) -> None:
    with LateClient(w.meta, w.store, w.settings) as c:
        c.early = early
        c.insert(name, table(pks, v), upsert=True)


def _scenario(w: Writer, name: str, fold: bool) -> int:
    w.create(name, ["_default"], shards=1)
    pitr.set_window(w.meta, name, "1h")
    w.insert(name, [7, 8], v=1.0)
    w.flush(name)
    snapshot.create(w.meta, w.store, name, "base")
    early = w.meta.tso.reserve(1, linearizable=True)   # the late upsert takes its call ts here ...
    w.delete(name, [7])                                  # ... a delete of its pk is acknowledged
    w.flush(name)
    if fold:
        compaction.compact(w.meta, w.store, name, FOLD_NOW)
    _late_upsert(w, name, early, [7], 2.0)              # ... then the upsert appends
    w.flush(name)
    return early


def test_a_restore_to_now_equals_its_source_after_a_fold_and_a_late_upsert(meta, store, settings):
    w = Writer(meta, store, settings)
    _scenario(w, "src", fold=True)
    src = rows(meta, store, "src")
    t = meta.tso.now()
    copy_and_replay(meta, store, settings, pitr.restore_as_of(meta, store, "src", "at_now", t, engine="inline"),
                    "at_now")
    got = rows(meta, store, "at_now")
    assert got == src, ("source", sorted(src.items()), "restore to now", sorted(got.items()))


def test_a_fold_does_not_change_which_rows_are_visible(meta, store, settings):
    """The same calls on two collections, one compacted (folded) in between: the rule
    must give the same rows on both."""
    w = Writer(meta, store, settings)
    _scenario(w, "folded", fold=True)
    _scenario(w, "kept", fold=False)
    a, b = rows(meta, store, "folded"), rows(meta, store, "kept")
    assert a == b, ("folded", sorted(a.items()), "not folded", sorted(b.items()))


def test_two_overlapping_upserts_leave_one_row_also_when_the_later_ones_delete_was_folded(meta, store, settings):
    """s20 F1 (two upserts of one pk, the later call wins whatever order they commit in)
    again, with a fold between: U1 commits, is flushed and its delete folded; U0, which
    began first, appends after. Both rows stayed visible. (Since session 21 an upsert's
    timestamp is its first append's tick, so no call holds one older than the log: U0,
    committed last, is the later call and hides U1's row; one row, fold or not.)"""
    w = Writer(meta, store, settings)
    w.create("src", ["_default"], shards=1)
    w.insert("src", [7], v=1.0)
    w.flush("src")
    early = meta.tso.reserve(1, linearizable=True)          # U0 takes its call ts
    w.insert("src", [7], v=2.0, upsert=True)                # U1: acknowledged, flushed, folded
    w.flush("src")
    compaction.compact(meta, store, "src", FOLD_NOW)
    _late_upsert(w, "src", early, [7], 3.0)                 # U0 appends
    w.flush("src")
    got = rows(meta, store, "src")
    assert got == {(7, "_default", 3.0): 1}, sorted(got.items())


def test_an_upsert_retried_with_its_seq_after_a_delete_of_its_pk_was_folded(meta, store, settings, monkeypatch):
    """The README's retry path, no client override: U1 upserts a (pchannel A) and b
    (pchannel B); B fails (AppendIncomplete). Another client deletes b: acknowledged,
    flushed. U1 is retried with its seq (keeping its first timestamp): without a fold in
    between, the delete (the later call) hides U1's b; with a fold (l0_age passed) U1's b
    shows. Two stores that got the same calls answer differently; so do a restore to a
    time from a base taken before the fold and the source."""
    import pyarrow as pa

    from seglake.wal.client import synthetic_rows
    from test_wal_attack_producer import _flush, _incomplete, _rows
    from seglake.meta.catalog import pchannel_of
    from wal_helpers import make_collection

    out = {}
    for fold in (False, True):
        name = "c2" if fold else "c1"
        with WalClient(meta, store, settings, producer_id=f"ups-{fold}") as c:
            coll = make_collection(c, shards=2, name=name)
            pb = pchannel_of(coll.vchannels[1])         # b's pchannel
            a = int(synthetic_rows(coll, 1, 1, shard=0).column("pk")[0].as_py())
            b = int(synthetic_rows(coll, 1, 1, shard=1).column("pk")[0].as_py())

            def rows_of(pks, price):
                t = synthetic_rows(coll, len(pks), 1)
                return t.set_column(0, "pk", pa.array(pks, pa.int64())).set_column(
                    2, "price", pa.array([price] * len(pks), pa.float32()))
            c.insert(name, rows_of([a, b], 1.0))
            u1 = rows_of([a, b], 2.0)
            e = _incomplete(monkeypatch, pb, lambda: c.upsert(name, u1))
        with WalClient(meta, store, settings) as c2:
            c2.delete(name, [b])                        # acknowledged after U1's first try
        _flush(meta, store, settings, coll)
        if fold:
            compaction.compact(meta, store, name, FOLD_NOW)
        with WalClient(meta, store, settings, producer_id=f"ups-{fold}") as c3:
            c3.upsert(name, u1, seq=e.value.result.seq)  # U1 completed: acknowledged
        _flush(meta, store, settings, coll)
        out[fold] = [r for r in _rows(meta, store, coll) if r[0] == b]
    assert out[True] == out[False], f"pk b: without a fold {out[False]}, with a fold {out[True]}"


def test_an_undrop_brings_back_what_was_visible_before_the_drop_after_a_fold_and_a_late_upsert(meta, store,
                                                                                              settings):
    """The same calls, then a drop and an undrop (its base: the snapshot taken before the
    fold): the undropped collection must hold what was visible just before the drop."""
    w = Writer(meta, store, settings)
    _scenario(w, "src", fold=True)
    before = rows(meta, store, "src")
    drop_now(meta, store, settings, "src")
    copy_and_replay(meta, store, settings, pitr.undrop(meta, store, "src", "back"), "back")
    after = rows(meta, store, "back")
    assert after == before, ("before the drop", sorted(before.items()), "undropped", sorted(after.items()))
