"""Issue 26 item 2 across a drop and an undrop (attack-producer): a call whose answer was
lost is retried with its seq after its collection was dropped and brought back under the
same name (a new collection id, other pchannels). Its rows came back with the undrop; the
retry must not append them again."""

from __future__ import annotations

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
