"""Attack on the live replay progress (issue 30 item 7): after the snapshot one vchannel
got the writes before the instant, the other only writes AFTER it (and after the plan),
flushed before the replay runs: the bytes read may pass what was planned; the percent read
by the page / REST stays within 0..100, never goes down, ends at 100, rows exact."""

from __future__ import annotations

from seglake.lifecycle import copyjob, pitr
from seglake.lifecycle.pitr import replaying
from seglake.wal.client import WalClient

from pitr_model import flush_all, route0, rows, source_with_s1, visible_of


def test_progress_stays_within_100_when_the_log_grew_after_planning(meta, store, settings, monkeypatch):
    with WalClient(meta, store, settings) as c:
        coll, model = source_with_s1(c, meta, store, settings)
        model.record(c.insert("src", rows(route0(range(1000, 1200)), 2.0)), 2.0)   # vchannel 0 only
        t = meta.tso.now()
        job = pitr.restore_as_of(meta, store, "src", "back", t)
        tid = meta.catalog.get_by_name("back").collection_id
        planned = meta.catalog.get(tid).properties["restored_from"]["replay"]["vchannel_bytes"]
        assert planned[coll.vchannels[0]] > planned[coll.vchannels[1]] > 0
        for i in range(5):   # after the instant: the other vchannel's log grows
            c.insert("src", rows(range(5000 + 100 * i, 5100 + 100 * i), 9.0))
    flush_all(meta, store, settings, coll)
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    seen = []
    real = replaying._Progress.update

    def observed(self, stats, out, *, force=False):
        real(self, stats, out, force=force)
        seen.append(pitr.progress(meta, tid))

    monkeypatch.setattr(replaying, "PROGRESS_EVERY_S", 0.0)
    monkeypatch.setattr(replaying._Progress, "update", observed)
    pitr.replay(meta, store, settings, tid)
    seen.append(pitr.progress(meta, tid))
    assert seen
    for s in seen:
        assert 0 <= s["bytes"] <= s["bytes_total"], s
        assert s["percent"] is None or 0.0 <= s["percent"] <= 100.0, s
    assert [s["bytes"] for s in seen] == sorted(s["bytes"] for s in seen)
    assert seen[-1]["percent"] == 100.0
    assert visible_of(meta, store, meta.catalog.get(tid)) == model.visible(t)


def test_a_replay_whose_driver_died_is_said_stalled_not_replaying_at_its_last_rate(meta, store, settings,
                                                                                  monkeypatch):
    """Issue 27 ("a stall is a stall") for the replay of a restore to a time / undrop: its
    driver killed mid-vchannel (the task's worker lost, the run marked failed), the marker
    stays `replaying` with the last rate, and the page's replays table and
    GET /collections/{c}/replay kept showing "replaying now v, rate X/s" for ever. Once the
    bytes have not moved for STALL_AFTER_S it is `stalled` with the seconds, no rate; a live
    replay is not."""
    import pytest

    from seglake import faults

    with WalClient(meta, store, settings) as c:
        coll, model = source_with_s1(c, meta, store, settings)
        model.record(c.insert("src", rows(range(1000, 1400), 2.0)), 2.0)
        t = meta.tso.now()
    flush_all(meta, store, settings, coll)
    job = pitr.restore_as_of(meta, store, "src", "back", t)
    tid = meta.catalog.get_by_name("back").collection_id
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    assert copyjob.finalize(meta, job).state == "Completed"
    monkeypatch.setattr(replaying, "PROGRESS_EVERY_S", 0.0)
    with faults.inject("pitr.progress"), pytest.raises(Exception):
        pitr.replay(meta, store, settings, tid)   # dies right after its first progress write
    live = pitr.progress(meta, tid)
    current = live["vchannel"]
    assert current is not None and live["state"] == "Importing"
    at = live["per_vchannel"][current]["updated_at"]
    fresh = pitr.progress(meta, tid, now=at + 1.0)
    assert fresh["health"] == "replaying" and fresh["stalled_s"] is None
    later = pitr.progress(meta, tid, now=at + replaying.STALL_AFTER_S + 5)
    assert later["health"] == "stalled" and later["stalled_s"] == pytest.approx(replaying.STALL_AFTER_S + 5)
    assert later["rate_bps"] is None and later["bytes"] == fresh["bytes"]   # no rate, nothing lowered
    from seglake.metrics import render   # /metrics says it too (the copy job's series ended with its copy)
    text = render(meta, store, now=at + replaying.STALL_AFTER_S + 5)
    assert f'seglake_replay_stalled_seconds{{collection="back",db="default"}} {replaying.STALL_AFTER_S + 5:g}' in text
    assert 'seglake_replay_fraction{collection="back",db="default"} ' in text
    pitr.replay(meta, store, settings, tid)   # a re-run finishes it: done, not stalled
    done = pitr.progress(meta, tid, now=at + 10 * replaying.STALL_AFTER_S)
    assert done["state"] == "Created" and done["health"] == "done" and done["stalled_s"] is None


def test_a_replay_that_never_started_after_its_copy_is_said_stalled_not_waiting_for_ever(meta, store, settings):
    """The run stopped between the copy and the replay (marked failed, its worker lost):
    no vchannel was ever claimed, and the page / GET /collections/{c}/replay said `waiting`
    for ever. Waiting is true while the copy runs; once the copy is Completed and no replay
    has moved for STALL_AFTER_S, it is `stalled` (seconds since the copy ended, or since the
    last vchannel finished). A re-run's replay ends it: done."""
    import pytest

    with WalClient(meta, store, settings) as c:
        coll, model = source_with_s1(c, meta, store, settings)
        model.record(c.insert("src", rows(range(1000, 1400), 2.0)), 2.0)
        t = meta.tso.now()
    flush_all(meta, store, settings, coll)
    job = pitr.restore_as_of(meta, store, "src", "back", t)
    tid = meta.catalog.get_by_name("back").collection_id
    before = pitr.progress(meta, tid, now=meta.copyjobs.get(job)[0].created_at + 10 * replaying.STALL_AFTER_S)
    assert before["health"] == "waiting" and before["stalled_s"] is None   # the copy has not run: waiting is true
    copyjob.plan(meta, job, 3)
    copyjob.run_inline(meta, store, job, threads=2)
    done = copyjob.finalize(meta, job)
    assert done.state == "Completed"
    fresh = pitr.progress(meta, tid, now=done.finished_at + 1.0)
    assert fresh["health"] == "waiting" and fresh["stalled_s"] is None
    later = pitr.progress(meta, tid, now=done.finished_at + replaying.STALL_AFTER_S + 5)
    assert later["health"] == "stalled" and later["stalled_s"] == pytest.approx(replaying.STALL_AFTER_S + 5)
    assert later["rate_bps"] is None
    from seglake.metrics import render
    text = render(meta, store, now=done.finished_at + replaying.STALL_AFTER_S + 5)
    assert f'seglake_replay_stalled_seconds{{collection="back",db="default"}} {replaying.STALL_AFTER_S + 5:g}' in text
    pitr.replay(meta, store, settings, tid)
    assert pitr.progress(meta, tid, now=done.finished_at + 100 * replaying.STALL_AFTER_S)["health"] == "done"
