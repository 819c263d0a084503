"""A replay's live progress (issue 30 item 7, "its progress while it replays"): written to
etcd as the replay reads the log (messages, log bytes of the bytes planned, the vchannel
replaying now, its rate), read by pitr.progress (the page, REST, the replay task's lines);
observed mid-replay, never lower on a re-run after the replay died half-way, 100% at the end;
the restored rows still equal the model."""

from __future__ import annotations

import pytest

from seglake import faults
from seglake.lifecycle import copyjob, pitr
from seglake.lifecycle.pitr import replaying
from seglake.progress import watch_replay
from seglake.wal.client import WalClient

from pitr_model import rows, source_with_s1, visible_of


def _source(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        coll, model = source_with_s1(c, meta, store, settings)
        for i in range(25):   # many appends: many fragments to read after the snapshot
            base = 1000 + 20 * i
            model.record(c.insert("src", rows(range(base, base + 20), 2.0 + i)), 2.0 + i)
            if i % 5 == 4:
                model.record(c.delete("src", [base, base + 1]), 2.0 + i)
        t = meta.tso.now()
    return model, t


def _copied_target(meta, store, t: int) -> tuple[int, int]:
    """A restore of src to `t` into "back", its copy job run to Completed (the replay not yet
    run): (the job's id, the target's id)."""
    job = pitr.restore_as_of(meta, store, "src", "back", t)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    return job, meta.catalog.get_by_name("back").collection_id


def test_progress_is_seen_mid_replay_and_never_goes_back_on_a_rerun(meta, store, settings, monkeypatch):
    model, t = _source(meta, store, settings)
    job, tid = _copied_target(meta, store, t)
    before = pitr.progress(meta, tid)
    assert before["bytes"] == 0 and before["bytes_total"] > 0 and before["vchannel"] is None
    assert before["bytes_total"] == sum(meta.catalog.get(tid).properties["restored_from"]["replay"]
                                        ["vchannel_bytes"].values())
    seen = []
    real = replaying._Progress.update

    def observed(self, stats, out, *, force=False):
        real(self, stats, out, force=force)
        seen.append(pitr.progress(meta, tid))   # what the page / REST read at that moment

    monkeypatch.setattr(replaying, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr(replaying._Progress, "update", observed)
    with faults.inject("pitr.progress", at=60):   # the replay dies half-way (a kill, a lost worker)
        with pytest.raises(faults.InjectedFault):
            pitr.replay(meta, store, settings, tid)
    died = len(seen)
    mid = [p for p in seen if p["vchannel"] and 0 < p["bytes"] < p["bytes_total"]]
    assert mid, "no progress seen while replaying"
    assert all(p["state"] == "Importing" and p["rate_bps"] is not None for p in mid)
    assert meta.catalog.get(tid).state == "Importing"
    # the page shows it where it stopped; a run note of a run that died here says how far it got
    from seglake import console
    from seglake.runinfo import restore_note
    from seglake_airflow.ui.render import render_page

    data = console.overview(meta, store)
    (r,) = data["backup"]["rows"]["replays"]
    assert r["target"] == "back" and 0 < r["percent"] < 100 and r == pitr.progress(meta, tid)
    page = render_page(data)
    assert "Replays (restores to a time, undrops: their progress)" in page and f"{r['percent']:.1f}%" in page
    note = restore_note({"collection": "src", "snapshot": "as of t", "target": "back"}, None,
                        copyjob.describe_job(meta, job), r)
    assert note.startswith("FAILED") and "the replay stopped at" in note and f"({r['percent']:.1f}%)" in note
    lines = []
    with watch_replay(meta, tid, interval=3600, emit=lines.append):
        out = pitr.replay(meta, store, settings, tid)
    assert len(seen) > died
    for a, b in zip(seen, seen[1:]):   # across the death and the re-run: never lower
        assert b["bytes"] >= a["bytes"] and b["messages"] >= a["messages"] \
            and b["vchannels_done"] >= a["vchannels_done"], (a, b)
    end = pitr.progress(meta, tid)
    assert end["state"] == "Created" and end["percent"] == 100.0 and end["vchannel"] is None
    assert end["vchannels_done"] == end["vchannels"] == 2 and end["messages"] == out["messages"]
    assert lines[-1].endswith("(done)") and "100.0%" in lines[-1] and "2/2 vchannels done" in lines[-1]
    assert visible_of(meta, store, meta.catalog.get(tid)) == model.visible(t)
    assert pitr.replays(meta) == []


def test_the_replays_under_way_are_listed(meta, store, settings):
    model, t = _source(meta, store, settings)
    job = pitr.restore_as_of(meta, store, "src", "back", t)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    copyjob.finalize(meta, job)
    (r,) = pitr.replays(meta)
    assert r["target"] == "back" and r["source"] == "src" and r["percent"] == 0.0 and r["vchannels_done"] == 0


def test_a_dropped_restore_target_s_replay_markers_go_with_it(meta, store, settings):
    """A restore to a time leaves a replay marker per vchannel under pitr/replays/{target}/
    (exactly-once while the target exists); they stayed in etcd for good after the target
    was dropped and GC purged it."""
    import time

    from seglake.lifecycle import drop, gc

    model, t = _source(meta, store, settings)
    job, tid = _copied_target(meta, store, t)
    pitr.replay(meta, store, settings, tid)
    markers = meta.keys.pitr_replays_prefix(tid)
    assert meta.kv.count(markers) == 2
    drop.drop_collection(meta, store, settings, "back")
    time.sleep(0.05)
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0, force=True,
                                                   copy_job_retention=0.0))
    assert meta.kv.get(meta.keys.collection(tid)) is None
    assert meta.kv.count(markers) == 0
    assert meta.kv.count(meta.keys.pitr_replays_prefix(meta.catalog.get_by_name("src").collection_id)) == 0
