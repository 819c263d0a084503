"""Attack s21 (HIGH): an L0 fold forgets a delete that still hides a row not yet in the WAL.

The fold's premise (folding.py): "every row written later has a larger timestamp (the
TSO): the delete can never hide it". An upsert's rows are stamped with its CALL's
timestamp (M.CALL_TS, taken before its first append, kept by its retries), not their
append tick. So an upsert U of pk X that took its timestamp Tc, then appended only after
a delete D of X (ts Td > Tc) was flushed, checkpointed and folded, writes a row (X, Tc)
that D hides -- and D is gone. Without the fold X stays hidden (D's ts > the row's); with
it X is visible: the same acknowledged writes give different rows depending on whether
a compaction ran in between.

Two collections, the same writes; only one is folded between D and U's append.
Real etcd, real files, rows through the real WAL and flusher."""

from __future__ import annotations

import threading
import time

import pytest

from seglake.lifecycle import compaction
from seglake.wal.client import WalClient

from compaction_helpers import Writer, exact
from copy_model_helpers import table

pytestmark = pytest.mark.etcd


class _Paused(WalClient):
    """A client whose call pauses after it took its timestamp, before its first append."""

    def __init__(self, *a, started, go, **kw):
        super().__init__(*a, **kw)
        self.started, self.go = started, go

    def _run(self, *a, **kw):
        self.started.set()
        assert self.go.wait(30)
        return super()._run(*a, **kw)


def _fold_policy():
    return compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)


def _scenario(meta, store, settings, name: str, fold: bool):
    w = Writer(meta, store, settings)
    w.create(name, ["_default"], shards=1)
    w.insert(name, [7, 8], "_default", 1.0)
    w.flush(name)
    started, go = threading.Event(), threading.Event()
    errors = []

    def slow_upsert():
        try:
            with _Paused(meta, store, settings, started=started, go=go) as c:
                c.upsert(name, table([7], 2.0))       # U: its timestamp taken, then paused
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=slow_upsert)
    t.start()
    try:
        assert started.wait(30)
        w.delete(name, [7])                           # D: acknowledged, ts above U's
        w.flush(name)                                 # D in a 0-row L0 segment, checkpoint past it
        if fold:
            s = compaction.compact(meta, store, name, _fold_policy(), now=time.time() + 5)
            assert [u.kind for u in s.plan.units] == [compaction.FOLD], s.to_json()
            assert s.counts()["committed"] == 1, s.to_json()
    finally:
        go.set()
        t.join(60)
    assert not errors, errors
    w.flush(name)
    return {(pk, v) for pk, _, _, _, v in exact(meta, store, name)}


def test_a_fold_never_forgets_a_delete_an_upsert_in_flight_is_older_than(meta, store, settings):
    unfolded = _scenario(meta, store, settings, "plain", fold=False)
    folded = _scenario(meta, store, settings, "folded", fold=True)
    assert folded == unfolded, (f"the same writes, visible rows without the fold {sorted(unfolded)}, with a fold "
                                f"between the delete and the upsert's append {sorted(folded)}")


def _retry_scenario(meta, store, settings, monkeypatch, name: str, fold: bool):
    """The README's retry path, no thread: U upserts pks a (shard 0) and b (shard 1); its
    append on b's pchannel fails (AppendIncomplete, seq N). D deletes b: acknowledged,
    flushed. (Fold.) U retried with seq N keeps its one timestamp (below D's)."""
    import numpy as np

    from seglake.wal.client import route
    from wal_helpers import append_incomplete as _incomplete, pchannels

    w = Writer(meta, store, settings)
    coll = w.create(name, ["_default"], shards=2)
    a, b = (next(int(k) for k in range(1, 1000) if route(np.array([k], np.int64), 2)[0] == s) for s in (0, 1))
    w.insert(name, [a, b], "_default", 1.0)
    w.flush(name)
    pb = pchannels(coll)[1]
    with WalClient(meta, store, settings, producer_id=f"u-{name}") as c:
        e = _incomplete(monkeypatch, pb, lambda: c.upsert(name, table([a, b], 2.0)))
    w.delete(name, [b])
    w.flush(name)
    if fold:
        s = compaction.compact(meta, store, name, _fold_policy(), now=time.time() + 5)
        assert compaction.FOLD in [u.kind for u in s.plan.units] and s.counts()["committed"], s.to_json()
    with WalClient(meta, store, settings, producer_id=f"u-{name}") as c:
        c.upsert(name, table([a, b], 2.0), seq=e.value.result.seq)     # U completed: acknowledged
    w.flush(name)
    return {(pk, v) for pk, _, _, _, v in exact(meta, store, name)}


def test_a_fold_never_forgets_a_delete_a_retried_upsert_is_older_than(meta, store, settings, monkeypatch):
    unfolded = _retry_scenario(meta, store, settings, monkeypatch, "plain", fold=False)
    folded = _retry_scenario(meta, store, settings, monkeypatch, "folded", fold=True)
    assert folded == unfolded, (f"the same writes, visible rows without the fold {sorted(unfolded)}, with a fold "
                                f"before the upsert's retry {sorted(folded)}")
