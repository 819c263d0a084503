"""attack-s20: a snapshot begun while its collection was live and captured while the drop's
release was under way (a vchannel of more than RELEASE_BATCH segments is released in
several txns: the excess segments marked Dropped first, the checkpoint removed last) is
COMMITTED with the vchannel's checkpoint but without the segments already marked
Dropped; its positions' part_hw come from the captured segments only. An undrop starts
from the latest COMMITTED snapshot (planning.base_snapshot) and replays from that
checkpoint: the rows of the segments marked Dropped first are below the checkpoint, in
neither the snapshot nor the replay -- missing from the undropped collection."""

from __future__ import annotations

import pytest

from seglake.errors import SeglakeError
from seglake.lifecycle import drop, pitr, snapshot
from seglake.lifecycle.flush import flush_pchannel
from seglake.lifecycle.flush.flusher import RELEASE_BATCH
from seglake.meta.catalog import pchannel_of
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, copy_and_replay, flush_all, rows, visible_of


@pytest.mark.parametrize("point", ["release_batch", "drop_synced", "after_release"])
def test_undrop_from_a_snapshot_captured_between_the_release_batches_of_a_drop(meta, store, settings, point):
    settings = settings.replace(flush_seal_rows=2)
    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=1)
        pitr.set_window(meta, "src", "1h")
        model = Model(meta, store, "src")
        for i in range(RELEASE_BATCH + 20):
            model.record(c.insert("src", rows([2 * i + 1, 2 * i + 2], 1.0)), 1.0)
    flush_all(meta, store, settings, coll)
    assert len(list(meta.segments.list(coll.collection_id))) > RELEASE_BATCH
    before = model.visible(meta.tso.now())
    rec = snapshot.begin(meta, "src", "late")           # requested while the collection is live
    drop.begin_drop(meta, store, settings, "src")
    took = []

    def capture_mid_release(flusher, **kw):
        if not took:
            try:
                took.append(snapshot.write_all(meta, store, rec))
            except SeglakeError as e:   # refusing such a capture is a right answer too
                took.append(e)

    flush_pchannel(meta, store, pchannel_of(coll.vchannels[0]), settings, hooks={point: capture_mid_release})
    assert drop.finish_drop(meta, "src", collection_id=coll.collection_id)["state"] == "Dropped"
    assert took
    job = pitr.undrop(meta, store, "src", "back")
    back = copy_and_replay(meta, store, settings, job, "back")
    got = visible_of(meta, store, back)
    assert got == before, (f"undrop from snapshot {pitr.summary(meta, back)['snapshot']!r} "
                           f"(capture: {took[0]!r:.80}): "
                           f"{sum(got.values())} rows back of {sum(before.values())}; "
                           f"missing e.g. {sorted((before - got).elements())[:6]}")
