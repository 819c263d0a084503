"""Attack s20: the fold's safety rule ("the carrier's newest delete tick is at or below its
vchannel's checkpoint, so every row it could hide is in a Flushed segment") must hold for
the segments the plan READ. plan() reads every segment record at one revision
(planning.read_segments), then reads all rows (seconds on a big collection), and only then
reads the checkpoints at the CURRENT revision (folding.checkpoint_ticks). One flusher run
that syncs twice -- a sealed segment carrying a delete, then (at its end) the older
growing rows the delete hides, with the checkpoint moved past the delete -- interleaved
with the plan: the carrier is foldable by the new checkpoint while its hits were
computed without the new segment. The fold drops the delete log; the deleted row comes back."""

from __future__ import annotations

import threading

import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.compaction import planning
from seglake.lifecycle.flush import flush_pchannel

from compaction_helpers import Writer, rows
from wal_helpers import pchannels

pytestmark = pytest.mark.etcd


def fold_policy(**kw):
    return compaction.Policy(**{"min_segment_rows": 1, "target_rows": 10**6, "delete_ratio": 1.0,
                                "protection": 0.0, "l0_age": 0.0, **kw})


def test_a_flush_between_the_plans_segment_read_and_its_checkpoint_read_resurrects_deleted_rows(
        meta, store, settings, monkeypatch):
    small = settings.replace(flush_seal_rows=10)      # p2's 20 rows seal; p1's 3 stay growing
    w = Writer(meta, store, small)
    w.create("r", ["_default", "p1", "p2"], shards=1)
    w.insert("r", range(100, 103), "p1", 1.0)         # growing in p1, below the seal
    w.delete("r", [100])                               # collection-wide
    w.insert("r", range(200, 220), "p2", 2.0)         # sealed: synced first, the delete riding on it
    coll = meta.catalog.get_by_name("r")
    (pch,) = pchannels(coll)

    read_done, flush_done = threading.Event(), threading.Event()
    real = planning.read_segments

    def read_then_wait(m, cid):
        out = real(m, cid)
        read_done.set()
        assert flush_done.wait(60)
        return out

    monkeypatch.setattr(planning, "read_segments", read_then_wait)
    box = {}

    def compact():
        try:
            box["s"] = compaction.compact(meta, store, "r", fold_policy())
        except BaseException as e:          # noqa: BLE001
            box["e"] = e
            read_done.set()

    commits = []

    def after_commit(f, segment_id):
        commits.append(segment_id)
        if len(commits) == 1:               # the carrier is Flushed, p1's rows are not yet
            t = threading.Thread(target=compact)
            box["t"] = t
            t.start()
            assert read_done.wait(60)

    flush_pchannel(meta, store, pch, small, flush_all=True, hooks={"after_commit": after_commit})
    flush_done.set()
    box["t"].join(120)
    monkeypatch.undo()
    assert "e" not in box, box.get("e")
    assert len(commits) >= 2, commits
    s = box["s"]
    got, want = rows(meta, store, "r"), w.model.visible()
    back = sorted(k for k in got if k not in want)
    assert got == want, (f"rows the delete hid are visible again after the fold: {back}; units "
                         f"{[(u.kind, u.segment_ids, u.hits, u.folded) for u in s.plan.units]}")
