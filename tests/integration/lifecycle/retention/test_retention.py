"""Retention schedules against real etcd and real snapshot files: runs at simulated
times create the policy's snapshots and prune the rest, never a pinned one, one a copy
job reads, a hand-made one, or the last one; a dry run changes nothing; a retried run
takes no second snapshot; bad input is refused before any change."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from seglake import cli
from seglake.dev import demo
from seglake.errors import NotFound, ValidationError
from seglake.lifecycle import retention, snapshot
from etcd_root import root_state

SMALL = demo.SeedParams(partitions=1, segments=2, rows=40, dim=4)
T0 = datetime(2026, 3, 1, 0, 0, tzinfo=timezone.utc).timestamp()
HOUR = 3600


@pytest.fixture
def coll(meta, store):
    return demo.seed(meta, store, SMALL)[0]


def _names(meta, coll):
    return sorted(r.name for r in meta.snapshots.list(coll.collection_id))


def test_runs_over_three_days_keep_the_policy_and_respect_pins_and_hand_made_snapshots(meta, store, coll):
    """keep_daily is the finest unit: a snapshot at the first run of each day; keep_last 2
    and keep_daily 2 keep days 2 and 3; day 1's is pinned (held); by_hand is not the
    schedule's."""
    retention.set_policy(meta, "demo", {"keep_last": 2, "keep_daily": 2})
    snapshot.create(meta, store, "demo", "by_hand")
    created = []
    for h in range(0, 72, 6):   # a run every 6 hours for 3 days
        rep = retention.run(meta, store, "demo", now=T0 + h * HOUR)
        created += [rep["created"]] if rep["created"] else []
        if h == 0:
            pin = snapshot.pin(meta, "demo", rep["created"], 10 * 86400)   # (pins run on the wall clock)
    assert created == ["sched_20260301T0000Z", "sched_20260302T0000Z", "sched_20260303T0000Z"]
    assert rep["held"] == {"sched_20260301T0000Z": [f"pin {pin['pin_id']}"]}
    assert _names(meta, coll) == ["by_hand", *created]
    snapshot.unpin(meta, pin["pin_id"])
    rep = retention.run(meta, store, "demo", now=T0 + 72 * HOUR)
    assert rep["pruned"] == ["sched_20260301T0000Z", "sched_20260302T0000Z"]
    assert _names(meta, coll) == ["by_hand", "sched_20260303T0000Z", "sched_20260304T0000Z"]


def test_a_pinned_snapshot_is_held_and_pruned_once_unpinned(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 1})
    first = retention.run(meta, store, "demo", now=T0)["created"]
    p = snapshot.pin(meta, "demo", first, 86400)
    rep = retention.run(meta, store, "demo", now=T0 + HOUR)
    assert rep["held"] == {first: [f"pin {p['pin_id']}"]} and rep["pruned"] == []
    snapshot.unpin(meta, p["pin_id"])
    rep = retention.run(meta, store, "demo", now=T0 + 2 * HOUR)
    assert set(rep["pruned"]) == {first, retention.sched_name(T0 + HOUR)}
    assert _names(meta, coll) == [retention.sched_name(T0 + 2 * HOUR)]


def test_the_last_snapshot_is_never_pruned_and_a_restore_s_snapshot_is_held(meta, store, coll):
    from seglake.lifecycle import restore
    retention.set_policy(meta, "demo", {"keep_daily": 1})
    a = retention.run(meta, store, "demo", now=T0)["created"]
    job = restore.restore(meta, store, "demo", a, "copy_of_demo")   # a copy job pins the snapshot
    rep = retention.run(meta, store, "demo", now=T0 + 86400)
    assert rep["held"] == {a: [f"copy job {job}"]}
    # drop the collection: no new snapshot; the policy would prune a day later, but not the last one
    meta.catalog.get(coll.collection_id)
    meta.snapshots.unpin(coll.collection_id, a, job)
    b = rep["created"]
    snapshot.drop(meta, store, "demo", b)
    rep = retention.run(meta, store, "demo", now=T0 + 5 * 86400, dry_run=True)
    assert rep["created"] == retention.sched_name(T0 + 5 * 86400) and rep["pruned"] == [a]
    assert _names(meta, coll) == [a]   # the dry run changed nothing


def test_a_retried_run_takes_no_second_snapshot_and_a_dry_run_changes_nothing(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 3})
    before = root_state(meta) if hasattr(meta.kv, "revision") else None
    rep = retention.run(meta, store, "demo", now=T0, dry_run=True)
    assert rep["created"] == "sched_20260301T0000Z" and _names(meta, coll) == []
    if before is not None:
        assert root_state(meta) == before
    retention.run(meta, store, "demo", now=T0)
    retention.run(meta, store, "demo", now=T0 + 30)   # the same minute: a retry of that run
    assert _names(meta, coll) == ["sched_20260301T0000Z"]


def test_bad_input_is_refused_before_any_change(meta, store, coll):
    with pytest.raises(ValidationError, match="did you mean 'keep_daily'"):
        retention.set_policy(meta, "demo", {"keep_dayly": 3})
    with pytest.raises(ValidationError, match="keep_weekly"):
        retention.set_policy(meta, "demo", {"keep_weekly": float("nan")})
    with pytest.raises(NotFound, match="collection 'nope' not found"):
        retention.set_policy(meta, "nope", {"keep_last": 1})
    assert retention.list_policies(meta) == []
    with pytest.raises(NotFound, match="no retention policy"):
        retention.run(meta, store, "demo", now=T0)
    retention.set_policy(meta, "demo", {"keep_last": 1})
    for bad in (float("nan"), -1, 2**40, True):
        with pytest.raises(ValidationError, match="schedule time"):
            retention.run(meta, store, "demo", now=bad)
    assert _names(meta, coll) == []


def test_cli_set_show_list_run_clear(meta, store, settings, coll, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    assert cli.main(["retention", "set", "demo", "--keep-daily", "7", "--keep-weekly", "4"]) == 0
    assert "keep daily 7, weekly 4" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli.main(["retention", "set", "demo", "--keep-daily", "nan"])
    assert e.value.code == 2 and "--keep-daily" in capsys.readouterr().err
    assert cli.main(["retention", "list"]) == 0
    assert "daily 7, weekly 4" in capsys.readouterr().out
    assert cli.main(["retention", "run", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "demo: would create sched_" in out and _names(meta, coll) == []
    assert cli.main(["retention", "run", "--json"]) == 0
    (rep,) = json.loads(capsys.readouterr().out)
    assert _names(meta, coll) == [rep["created"]]
    assert cli.main(["retention", "clear", "demo"]) == 0
    assert cli.main(["retention", "show", "demo"]) == 2
    assert "has no retention policy" in capsys.readouterr().err


def test_a_purged_collection_s_policy_is_removed_by_a_run_but_not_by_a_dry_run(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 1})
    meta.kv.delete(meta.keys.collection(coll.collection_id))   # GC purged the collection for good
    (rep,) = retention.run_all(meta, store, now=T0, dry_run=True)
    assert "no longer exists" in rep["note"] and rep["dry_run"]
    assert meta.kv.get(meta.keys.retention(coll.collection_id)) is not None   # a dry run changes nothing
    (rep,) = retention.run_all(meta, store, now=T0)
    assert "was removed" in rep["note"]
    assert meta.kv.get(meta.keys.retention(coll.collection_id)) is None
