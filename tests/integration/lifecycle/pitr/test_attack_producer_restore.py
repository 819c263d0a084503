"""Issue 26 item 2 across a drop and an undrop (attack-producer): a call whose answer was
lost is retried with its seq after its collection was dropped and brought back under the
same name (a new collection id, other pchannels). Its rows came back with the undrop; the
retry must not append them again."""

from __future__ import annotations

import pytest

from seglake.errors import ValidationError
from seglake.lifecycle import copyjob, drop, pitr
from seglake.meta.catalog import pchannel_of
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, flush_all, rows, visible_of


def test_a_retry_after_its_collection_was_dropped_and_undropped_under_its_name(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
    data = rows(range(1, 13), 0.5)
    with WalClient(meta, store, settings, producer_id="job-7") as c:
        res = c.insert("src", data)       # its answer is lost (the process dies)
    flush_all(meta, store, settings, coll)
    drop.begin_drop(meta, store, settings, "src")
    flush_all(meta, store, settings, coll, flush_all=False)
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    job = pitr.undrop(meta, store, "src", "src")
    copyjob.plan(meta, job, 2)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    back = meta.catalog.get_by_name("src")
    pitr.replay(meta, store, settings, back.collection_id)
    back = meta.catalog.get_by_name("src")
    assert back.collection_id != coll.collection_id
    print("pchannels before", sorted({pchannel_of(v) for v in coll.vchannels}),
          "after", sorted({pchannel_of(v) for v in back.vchannels}))
    assert sum(visible_of(meta, store, back).values()) == 12
    with WalClient(meta, store, settings, producer_id="job-7") as c:   # the task's retry
        try:
            c.insert("src", data, seq=res.seq)
        except ValidationError as e:
            print("refused:", e)
    flush_all(meta, store, settings, meta.catalog.get_by_name("src"))
    assert sum(visible_of(meta, store, meta.catalog.get_by_name("src")).values()) == 12


@pytest.mark.parametrize("seed", [3, 11])
def test_a_random_workload_with_failed_appends_retried_around_other_writers_is_row_exact(meta, store, settings,
                                                                                       monkeypatch, seed):
    """Random inserts, upserts and deletes (scoped and not) of overlapping pks on 2
    pchannels by a named producer; a third of the calls lose one pchannel's commits
    (AppendIncomplete), another producer writes the same pks before the retry, and the
    retry (seq=err.result.seq) comes from the same client or a new one. The visible rows
    equal the model (every acknowledged call as logged, a delete and an upsert at their
    call's one timestamp) row by row, also in a restore to the end."""
    import random

    from seglake.errors import SeglakeError
    from seglake.wal import writer as W
    from seglake.wal.client import AppendIncomplete

    from pitr_model import Model, restore_to

    rng = random.Random(seed)
    real = W.WalWriter._commit
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2, partitions=["_default", "p1"])
        pitr.set_window(meta, "src", "1h")
    pchannels = sorted({pchannel_of(v) for v in coll.vchannels})
    model = Model(meta, store, "src")
    counts = {"calls": 0, "failed": 0, "between": 0}
    main = WalClient(meta, store, settings, producer_id="rand", batch_rows=3)
    other = WalClient(meta, store, settings, producer_id="other", batch_rows=3)
    try:
        for step in range(40):
            v = step + 0.5
            kind = rng.choice(["insert", "insert", "upsert", "delete"])
            pks = rng.sample(range(1, 25), rng.randint(1, 7))
            kw = {"partition": rng.choice(["_default", "p1"])} if kind != "delete" or rng.random() < 0.5 else {}
            data = pks if kind == "delete" else rows(pks, v)
            fail = rng.choice(pchannels) if rng.random() < 0.35 else None
            if fail:
                def failing(self, frag, _p=fail):
                    if self.pchannel == _p:
                        raise SeglakeError("etcd refused the write")
                    return real(self, frag)
                monkeypatch.setattr(W.WalWriter, "_commit", failing)
            try:
                res = getattr(main, kind)("src", data, **kw)
            except AppendIncomplete as e:
                monkeypatch.undo()
                counts["failed"] += 1
                for _ in range(rng.randint(0, 2)):   # another producer writes the same pks before the retry
                    ov = step + 0.75
                    model.record(other.insert("src", rows(rng.sample(pks, 1), ov)), ov)
                    counts["between"] += 1
                if rng.random() < 0.5:               # the retry from a new process
                    main.close()
                    main = WalClient(meta, store, settings, producer_id="rand", batch_rows=3)
                res = getattr(main, kind)("src", data, seq=e.result.seq, **kw)
            finally:
                monkeypatch.undo()
            model.record(res, v)
            counts["calls"] += 1
    finally:
        main.close()
        other.close()
    flush_all(meta, store, settings, coll)
    want = model.visible(meta.tso.now())
    got = visible_of(meta, store, coll)
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
    back = restore_to(meta, store, settings, "src", "end", meta.tso.now())
    assert visible_of(meta, store, back) == want
    print(f"random workload seed {seed}: {counts}, {sum(want.values())} rows compared twice")
