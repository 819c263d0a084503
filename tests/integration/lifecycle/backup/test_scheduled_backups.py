"""Scheduled backups (issue 19 item 5): a retention policy with `export: true` keeps its
schedule snapshots as bundles in the backup target, pruned there by the same policy.

Real etcd, real snapshot files, a local directory and SeaweedFS as the target."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from seglake.dev import demo
from seglake.errors import ConfigError, ValidationError
from seglake.lifecycle import retention, snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import scheduled
from seglake.storage.local import LocalStore

HOUR = 3600
quiet = dict(say=lambda line: None)


@pytest.fixture
def coll(meta, store):
    return demo.seed(meta, store, demo.SeedParams(name="sb", partitions=1, segments=2, rows=60, dim=4))[0]


def _t0(hours_back: int) -> float:
    """A whole hour `hours_back` hours ago (a run's time may not be ahead of the clock)."""
    return (int(time.time()) // HOUR - hours_back) * HOUR


def _store_scheds(meta, coll) -> set[str]:
    return {r.name for r in meta.snapshots.list(coll.collection_id) if retention.is_schedules(r)}


def _bundles(target, name="sb") -> set[str]:
    return {b for _, _, b, committed in bundles.find(target, "default", name) if committed}


def _run(meta, store, target, now, **kw):
    (rep,) = scheduled.run(meta, store, lambda: target, now=now, collection="sb", threads=2, **quiet, **kw)
    return rep


def test_hourly_runs_keep_the_same_snapshots_in_the_store_and_the_target(meta, store, coll, tmp_path):
    """30 hourly runs of keep_last 2 / keep_hourly 4 / keep_daily 2: after every run the
    target holds exactly the schedule's snapshots the store holds; an unchanged
    collection's later exports copy 0 bytes; a changed one copies only the new files."""
    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 2, "keep_hourly": 4, "keep_daily": 2, "export": True})
    t0 = _t0(30)
    times = {}
    for h in range(30):
        now = t0 + h * HOUR
        if h == 20:   # the collection changes once: that run copies only the new segment's files
            params = demo.SeedParams(name="sb", partitions=1, segments=1, rows=60, dim=4)
            meta.segments.save([demo._write_segment(meta, store, coll, coll.partitions[0].partition_id, 0, params,
                                                    np.random.default_rng(5))])
        rep = _run(meta, store, target, now)
        assert "error" not in rep, rep
        times[retention.sched_name(now)] = now
        exp = rep["export"]
        assert exp["exported"] == [retention.sched_name(now)], (h, exp)
        if h == 0:
            first_bytes = exp["copied_bytes"]
            assert first_bytes > 0
        elif h == 20:
            assert 0 < exp["copied_bytes"] < first_bytes
        else:
            assert exp["copied_bytes"] == 0, (h, exp)
        assert _bundles(target) == _store_scheds(meta, coll), h
    want = set(retention.keep_set(retention.parse_policy({"keep_last": 2, "keep_hourly": 4, "keep_daily": 2}),
                                  times))
    assert _bundles(target) == _store_scheds(meta, coll) == want
    # every kept bundle is whole: verify reads each file
    from seglake.lifecycle.backup import verify
    for b in want:
        assert verify.verify(target, "sb", b, threads=2, **quiet)["ok"], b


def test_a_dry_run_lists_the_export_and_the_prune_and_changes_nothing(meta, store, coll, tmp_path):
    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})
    t0 = _t0(5)
    _run(meta, store, target, t0)
    _run(meta, store, target, t0 + HOUR)
    before = sorted(o.key for o in target.list(""))
    rep = _run(meta, store, target, t0 + 2 * HOUR, dry_run=True)
    name = retention.sched_name(t0 + 2 * HOUR)
    assert rep["created"] == name
    assert rep["export"]["exported"] == [name] and rep["export"]["dry_run"]
    assert rep["export"]["pruned"] == [retention.sched_name(t0 + HOUR)]
    assert "would export" in scheduled.report_line(rep)
    assert sorted(o.key for o in target.list("")) == before
    assert _store_scheds(meta, coll) == {retention.sched_name(t0 + HOUR)}


def test_bundles_made_by_hand_are_never_pruned_by_the_schedule(meta, store, coll, tmp_path):
    """A hand export, and a hand export that only looks like the schedule's (a sched_
    name from a snapshot the schedule does not own), stay."""
    target = LocalStore(tmp_path / "backup")
    snapshot.create(meta, store, "sb", "by_hand")
    exports.export(meta, store, target, "sb", "by_hand", threads=2, **quiet)
    t0 = _t0(6)
    lookalike = retention.sched_name(t0 - HOUR)
    exports.export(meta, store, target, "sb", "by_hand", bundle=lookalike, threads=2, **quiet)
    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})
    for h in range(4):
        rep = _run(meta, store, target, t0 + h * HOUR)
        assert "error" not in rep, rep
    assert _bundles(target) == {"by_hand", lookalike, retention.sched_name(t0 + 3 * HOUR)}


def test_without_export_nothing_goes_to_the_target_and_without_a_target_the_run_says_so(meta, store, coll,
                                                                                        tmp_path):
    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 1})
    rep = _run(meta, store, target, _t0(2))
    assert "export" not in rep and list(target.list("")) == []

    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})

    def no_target():
        raise ConfigError("no backup target: set config key 'backup_uri'")

    (rep,) = scheduled.run(meta, store, no_target, now=_t0(1), collection="sb", **quiet)
    assert "backup_uri" in rep["error"] and rep["created"] == retention.sched_name(_t0(1))
    assert "FAILED" in scheduled.report_line(rep)


@pytest.mark.parametrize("bad,why", [({"keep_last": 1, "export": "yes"}, "export: 'yes' is not allowed"),
                                     ({"keep_last": 1, "export": 1}, "export: 1 is not allowed"),
                                     ({"keep_last": 1, "exprot": True}, "did you mean 'export'")])
def test_a_bad_export_flag_is_refused_before_anything_is_written(meta, store, coll, bad, why):
    with pytest.raises(ValidationError, match=why):
        retention.set_policy(meta, "sb", bad)
    assert retention.get_policy(meta, "sb") is None


def test_cli_sets_an_exporting_policy_and_runs_it(meta, store, coll, settings, tmp_path, monkeypatch, capsys):
    from seglake import cli

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SEGLAKE_BACKUP_URI", str(tmp_path / "backup"))
    assert cli.main(["retention", "set", "sb", "--keep-last", "2", "--export"]) == 0
    assert "exported to the backup target" in capsys.readouterr().out
    assert retention.get_policy(meta, "sb")["export"] is True
    assert cli.main(["retention", "run", "--collection", "sb", "--json"]) == 0
    (rep,) = json.loads(capsys.readouterr().out)
    assert rep["export"]["exported"] == [rep["created"]]
    assert _bundles(LocalStore(tmp_path / "backup")) == {rep["created"]}
    assert cli.main(["retention", "set", "sb", "--keep-last", "2", "--no-export"]) == 0
    assert retention.get_policy(meta, "sb")["export"] is False


def test_scheduled_export_to_seaweedfs(meta, store, coll, s3_store):
    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})
    t0 = _t0(3)
    for h in range(3):
        rep = _run(meta, store, s3_store, t0 + h * HOUR)
        assert "error" not in rep, rep
    assert _bundles(s3_store) == _store_scheds(meta, coll) == {retention.sched_name(t0 + 2 * HOUR)}


def test_a_dropped_collection_s_policy_still_prunes_its_bundles_and_never_exports_a_namesake(meta, store, coll,
                                                                                            settings, tmp_path):
    """The collection is dropped (its name freed, then reused by a new collection with a
    policy of its own): the old policy goes on judging its own collection's bundles and
    never exports the new collection's snapshots (nor fails the run)."""
    from seglake.lifecycle import drop

    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})
    t0 = _t0(6)
    assert "error" not in _run(meta, store, target, t0)
    drop.begin_drop(meta, store, settings, "sb")
    drop.finish_drop(meta, "sb")
    (rep,) = scheduled.run(meta, store, lambda: target, now=t0 + HOUR, threads=2, **quiet)
    assert "error" not in rep, rep
    assert _bundles(target) == {retention.sched_name(t0)}
    new = demo.seed(meta, store, demo.SeedParams(name="sb", partitions=1, segments=1, rows=10, dim=4))[0]
    assert new.collection_id != coll.collection_id
    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})   # the new collection's own policy
    for h in (2, 3):
        reps = scheduled.run(meta, store, lambda: target, now=t0 + h * HOUR, threads=2, **quiet)
        assert len(reps) == 2 and all("error" not in r for r in reps), reps
        (old,) = [r for r in reps if r["collection_id"] == coll.collection_id]
        assert old["export"]["exported"] == [] and old["export"]["pruned"] == [], old
    # the old collection's last bundle stays; the new one's schedule keeps its newest
    assert _bundles(target) == {retention.sched_name(t0), retention.sched_name(t0 + 3 * HOUR)}


def test_a_hand_export_of_a_schedule_snapshot_is_not_pruned_by_the_schedule(meta, store, coll, tmp_path):
    """An operator exports one of the schedule's snapshots by hand (under its own name, the
    default) to keep it: the bundle is theirs, the schedule never prunes it."""
    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 1})     # no export yet
    t0 = _t0(6)
    first = retention.run(meta, store, "sb", now=t0)["created"]
    exports.export(meta, store, target, "sb", first, threads=2, **quiet)   # by hand
    retention.set_policy(meta, "sb", {"keep_last": 1, "export": True})
    for h in range(1, 4):
        rep = _run(meta, store, target, t0 + h * HOUR)
        assert "error" not in rep, rep
        assert first not in rep["export"]["pruned"], rep["export"]
    assert _bundles(target) == {first, retention.sched_name(t0 + 3 * HOUR)}


def test_a_damaged_bundle_of_a_kept_snapshot_is_reported_not_counted_as_exported(meta, store, coll, tmp_path):
    """The target holds the schedule's bundle of a kept snapshot, but its bundle.json was
    altered: the run must not count it as backed up (it says so, and fails), and the
    other exports and the prune still happen."""
    from seglake.storage import layout

    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 2, "export": True})
    t0 = _t0(6)
    for h in range(2):
        assert "error" not in _run(meta, store, target, t0 + h * HOUR)
    damaged = retention.sched_name(t0 + HOUR)
    key = layout.bundle_doc("default", "sb", damaged)
    target.put(key, target.get(key).replace(b'"retention schedule"', b'"retention scheduke"'))
    rep = _run(meta, store, target, t0 + 2 * HOUR)
    assert damaged not in rep["export"]["already"], rep["export"]
    assert rep["export"]["exported"] == [retention.sched_name(t0 + 2 * HOUR)]
    assert "error" in rep and damaged in rep["error"], rep


def test_a_hand_bundle_under_the_name_of_a_kept_schedule_snapshot_is_not_its_backup(meta, store, coll, tmp_path):
    """A bundle made by hand from another snapshot, under the name the schedule's snapshot
    gets later: the schedule's snapshot is not backed up by it (the run says so)."""
    target = LocalStore(tmp_path / "backup")
    snapshot.create(meta, store, "sb", "by_hand")
    t0 = _t0(3)
    exports.export(meta, store, target, "sb", "by_hand", bundle=retention.sched_name(t0), threads=2, **quiet)
    retention.set_policy(meta, "sb", {"keep_last": 2, "export": True})
    rep = _run(meta, store, target, t0)
    assert rep["created"] == retention.sched_name(t0)
    assert retention.sched_name(t0) not in rep.get("export", {}).get("already", []), rep
    assert "error" in rep and retention.sched_name(t0) in rep["error"], rep


def test_one_kept_snapshot_that_cannot_be_exported_does_not_stop_the_newer_ones(meta, store, coll, tmp_path,
                                                                                  monkeypatch):
    """The oldest kept snapshot cannot be exported (say its metadata in the store is
    damaged): the run fails naming it, but the newer kept snapshots are still exported
    -- the newest backup matters most."""
    from seglake.errors import SeglakeError

    target = LocalStore(tmp_path / "backup")
    retention.set_policy(meta, "sb", {"keep_last": 3})
    t0 = _t0(6)
    for h in range(2):
        retention.run(meta, store, "sb", now=t0 + h * HOUR)
    retention.set_policy(meta, "sb", {"keep_last": 3, "export": True})
    bad = retention.sched_name(t0)
    real = exports.export

    def export(meta_, store_, target_, collection, snap, **kw):
        if snap == bad:
            raise SeglakeError(f"snapshot {bad!r}: its metadata is damaged")
        return real(meta_, store_, target_, collection, snap, **kw)

    monkeypatch.setattr(exports, "export", export)
    rep = _run(meta, store, target, t0 + 2 * HOUR)
    assert "error" in rep and bad in rep["error"], rep
    assert _bundles(target) == {retention.sched_name(t0 + HOUR), retention.sched_name(t0 + 2 * HOUR)}


def test_a_run_sweeps_the_target_once_however_many_collections_export(meta, store, coll, tmp_path, monkeypatch):
    """A sweep reads every bundle.json in the target (twice): once per run, not once per
    exporting collection (N collections would read the whole target 2N times an hour)."""
    from seglake.lifecycle.backup import prune

    demo.seed(meta, store, demo.SeedParams(name="sb2", partitions=1, segments=1, rows=10, dim=4))
    target = LocalStore(tmp_path / "backup")
    for name in ("sb", "sb2"):
        retention.set_policy(meta, name, {"keep_last": 1, "export": True})
    real, calls = prune.sweep_data, []

    def sweep_data(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(prune, "sweep_data", sweep_data)
    reps = scheduled.run(meta, store, lambda: target, now=_t0(1), threads=2, **quiet)
    assert len(reps) == 2 and all("error" not in r and r["export"]["exported"] for r in reps), reps
    assert len(calls) == 1
    assert all(r["export"]["sweep"]["dry_run"] is False for r in reps)
