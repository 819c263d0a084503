"""Adversarial review of snapshot pins and retention schedules (h6-attack).

Tests marked `xfail(strict=True, reason="DEFECT ...")` reproduce a defect found in the
review: each FAILS against the product code as it is (run with `--runxfail` to see the
failure); strict, so a fix turns it into an XPASS error and the marker must go. The
unmarked tests are attacks that held.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest
from etcd_root import pin_leases_over, ttl_over

from seglake import cli
from seglake.dev import demo
from seglake.errors import Conflict, NotFound, SeglakeError, StateError, Unavailable, ValidationError
from seglake.lifecycle import retention, snapshot
from seglake.lifecycle.snapshot import creation as snapcreation
from etcd_root import root_state

SMALL = demo.SeedParams(partitions=1, segments=2, rows=40, dim=4)
T0 = datetime(2026, 3, 1, 0, 0, tzinfo=timezone.utc).timestamp()
HOUR = 3600


@pytest.fixture
def coll(meta, store):
    return demo.seed(meta, store, SMALL)[0]


def _names(meta, coll):
    return sorted(r.name for r in meta.snapshots.list(coll.collection_id))


# -- retention: names -------------------------------------------------------------------------
def test_hand_made_snapshot_named_like_the_schedule_is_never_pruned(meta, store, coll):
    # an operator makes a snapshot by hand; nothing stops them from naming it like the schedule does
    snapshot.create(meta, store, "demo", "sched_20260101T0000Z", "my own, keep it")
    retention.set_policy(meta, "demo", {"keep_last": 1})
    retention.run(meta, store, "demo", now=T0)
    retention.run(meta, store, "demo", now=T0 + HOUR)
    assert "sched_20260101T0000Z" in _names(meta, coll)   # 'never prune a hand-made snapshot'


def test_a_future_named_snapshot_does_not_starve_the_schedule(meta, store, coll):
    snapshot.create(meta, store, "demo", "sched_99991231T2359Z")
    retention.set_policy(meta, "demo", {"keep_last": 1})
    rep = retention.run(meta, store, "demo", now=T0)
    assert rep["created"] == "sched_20260301T0000Z"
    assert rep["created"] not in rep["pruned"]
    assert "sched_20260301T0000Z" in _names(meta, coll)


# -- retention: clock edges ------------------------------------------------------------------
def test_a_run_earlier_than_the_newest_schedule_snapshot_takes_no_snapshot(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 1})
    assert retention.run(meta, store, "demo", now=T0 + 2 * HOUR)["created"] == "sched_20260301T0200Z"
    rep = retention.run(meta, store, "demo", now=T0)   # out of order in time
    # either nothing is taken (the schedule is past that time) ...
    assert rep["created"] is None, rep
    # ... and certainly never a snapshot created and pruned by the same run
    assert not (set([rep["created"]]) & set(rep["pruned"]))


def test_a_run_time_ahead_of_the_clock_does_not_drop_a_pinned_snapshot(meta, store, coll):
    real = time.time()
    retention.set_policy(meta, "demo", {"keep_last": 1})
    first = retention.run(meta, store, "demo", now=real)["created"]
    p = snapshot.pin(meta, "demo", first, HOUR)             # pinned for an hour from now (real time)
    with pytest.raises(ValidationError, match="ahead of the clock"):   # refused: a run cannot be in the future
        retention.run(meta, store, "demo", now=real + 3 * HOUR)  # e.g. a host clock 3 h fast
    # GC with a `now` ahead of the clock does not end the pin either
    from seglake.lifecycle import gc
    gc.clean_records(meta, store, gc.GCOptions(), now=real + 3 * HOUR)
    assert first in _names(meta, coll), "a snapshot with a live pin was dropped"
    assert meta.snapshots.pin_record(p["pin_id"]) is not None


@pytest.mark.parametrize("a,b,unit,same", [
    ("2024-12-29T23:30", "2024-12-30T00:10", "weekly", False),   # Sun of 2024-W52 / Mon of 2025-W01
    ("2024-12-30T00:10", "2025-01-05T23:50", "weekly", True),    # both ISO 2025-W01 across the year
    ("2026-01-31T23:59", "2026-02-01T00:00", "monthly", False),
    ("2026-03-29T00:30", "2026-03-29T03:30", "daily", True),     # EU DST change day: UTC only, one day
    ("2026-12-31T23:00", "2027-01-01T00:00", "hourly", False),
])
def test_bucket_edges_hold(a, b, unit, same):
    ta, tb = (datetime.fromisoformat(x).replace(tzinfo=timezone.utc).timestamp() for x in (a, b))
    policy = retention.Policy(**{f"keep_{unit}": 3})
    assert retention.due(policy, {retention.sched_name(ta): ta}, tb) is (not same)


def test_retried_run_same_minute_at_different_seconds_takes_one_snapshot(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 5})
    a = retention.run(meta, store, "demo", now=T0 + 5)
    b = retention.run(meta, store, "demo", now=T0 + 50)
    assert a["created"] == "sched_20260301T0000Z" and b["created"] is None
    assert _names(meta, coll) == ["sched_20260301T0000Z"]


# -- retention: crashes and races -------------------------------------------------------------
def test_retry_after_a_crash_mid_create_resumes(meta, store, coll, monkeypatch):
    retention.set_policy(meta, "demo", {"keep_last": 3})
    real = snapcreation.write_all

    def crash(*a, **k):
        raise SeglakeError("worker killed while writing manifests")
    monkeypatch.setattr(snapcreation, "write_all", crash)
    with pytest.raises(SeglakeError, match="worker killed"):
        retention.run(meta, store, "demo", now=T0)
    monkeypatch.setattr(snapcreation, "write_all", real)
    rep = retention.run(meta, store, "demo", now=T0)   # the DAG's retry: same run time
    assert rep["created"] == "sched_20260301T0000Z"
    assert meta.snapshots.find(coll.collection_id, "sched_20260301T0000Z").state == "COMMITTED"


def test_two_runs_at_once_for_the_same_time_both_succeed_with_one_snapshot(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 3})
    barrier, out = threading.Barrier(2), []

    def go():
        barrier.wait()
        try:
            out.append(retention.run(meta, store, "demo", now=T0))
        except Exception as e:   # noqa: BLE001
            out.append(e)
    ts = [threading.Thread(target=go) for _ in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not [o for o in out if isinstance(o, Exception)], out
    assert _names(meta, coll) == ["sched_20260301T0000Z"]


def test_a_pin_made_while_a_run_prunes_wins_and_is_reported(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 1})
    first = retention.run(meta, store, "demo", now=T0)["created"]
    pins = []

    def drop(name):   # the run decided to prune `name`; an operator pins it just before the drop
        pins.append(snapshot.pin(meta, "demo", name, 10 * 86400, now=T0 + HOUR))
        return snapshot.drop_by_id(meta, store, coll.collection_id, name, now=T0 + HOUR)
    rep = retention.run(meta, store, "demo", now=T0 + HOUR, drop=drop)
    assert rep["pruned"] == [] and first in rep["held"] and "pinned" in rep["held"][first][0]
    assert first in _names(meta, coll)


def test_dry_run_changes_nothing_in_etcd(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 1})
    retention.run(meta, store, "demo", now=T0)
    retention.run(meta, store, "demo", now=T0 + HOUR)
    rev = root_state(meta)
    rep = retention.run(meta, store, "demo", now=T0 + 2 * HOUR, dry_run=True)
    assert rep["created"] and rep["pruned"]
    assert root_state(meta) == rev


# -- pins -----------------------------------------------------------------------------------------
def test_drop_and_pin_race_in_threads_lose_cleanly_one_way(meta, store, coll):
    for i in range(8):
        name = f"r{i}"
        snapshot.create(meta, store, "demo", name)
        barrier, res = threading.Barrier(2), {}

        def do_drop():
            barrier.wait()
            try:
                res["drop"] = snapshot.drop(meta, store, "demo", name)
            except (Conflict, NotFound, StateError) as e:
                res["drop"] = e

        def do_pin():
            barrier.wait()
            try:
                res["pin"] = snapshot.pin(meta, "demo", name, 600)
            except (Conflict, NotFound, StateError) as e:
                res["pin"] = e
        ts = [threading.Thread(target=do_drop), threading.Thread(target=do_pin)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        rec = meta.snapshots.find(coll.collection_id, name)
        pinned = isinstance(res["pin"], dict)
        dropped = isinstance(res["drop"], dict)
        assert pinned != dropped, res
        if pinned:
            assert rec is not None and rec.state == "COMMITTED" and rec.holds
            snapshot.unpin(meta, res["pin"]["pin_id"])
            snapshot.drop(meta, store, "demo", name)
        else:
            assert rec is None and meta.snapshots.pin_records() == []


def test_pin_of_an_already_expired_snapshot_is_refused(meta, store, coll):
    ttl_over(meta, snapshot.create(meta, store, "demo", "old", ttl=1))   # by the clock and etcd's lease
    with pytest.raises((StateError, NotFound)):
        snapshot.pin(meta, "demo", "old", HOUR)


def test_pin_with_a_huge_by_is_refused_before_any_change(meta, store, coll):
    snapshot.create(meta, store, "demo", "s1")
    with pytest.raises(ValidationError):
        snapshot.pin(meta, "demo", "s1", HOUR, by="x" * (2 << 20))
    assert meta.snapshots.pin_records() == []


def test_lost_answer_of_a_pin_leaves_an_orphan_the_caller_cannot_name(meta, store, coll, monkeypatch):
    """Not a correctness bug (the orphan expires), reported as LOW: a caller whose pin()
    answered Unavailable (applied) and who retries the whole call ends with TWO pins, and
    was never told the first one's id."""
    snapshot.create(meta, store, "demo", "s1")
    real, armed = meta.kv.txn, [True]

    def txn(compares, ops, *a, **k):
        rev = real(compares, ops, *a, **k)
        if armed[0] and any("/snapshot_pins/" in getattr(o, "key", "") for o in ops):
            armed[0] = False
            raise Unavailable("etcd: request timed out (it was applied)")
        return rev
    monkeypatch.setattr(meta.kv, "txn", txn)
    with pytest.raises(Unavailable):
        snapshot.pin(meta, "demo", "s1", HOUR)
    monkeypatch.undo()
    snapshot.pin(meta, "demo", "s1", HOUR)
    assert len(meta.snapshots.pin_records()) == 2   # documents the behaviour


def test_unpin_after_lost_answer_says_not_found(meta, store, coll, monkeypatch):
    """LOW: unpin applied, answer lost; the retried unpin is NotFound (clear, but the caller
    cannot tell 'mine went through' from 'never existed')."""
    snapshot.create(meta, store, "demo", "s1")
    p = snapshot.pin(meta, "demo", "s1", HOUR)
    real, armed = meta.kv.txn, [True]

    def txn(compares, ops, *a, **k):
        rev = real(compares, ops, *a, **k)
        if armed[0]:
            armed[0] = False
            raise Unavailable("etcd: request timed out (it was applied)")
        return rev
    monkeypatch.setattr(meta.kv, "txn", txn)
    with pytest.raises(Unavailable):
        snapshot.unpin(meta, p["pin_id"])
    monkeypatch.undo()
    with pytest.raises(NotFound):
        snapshot.unpin(meta, p["pin_id"])
    snapshot.drop(meta, store, "demo", "s1")   # the hold went with the key: not stuck


def test_expired_pin_is_removed_by_gc_even_after_its_snapshot_was_dropped_and_renamed_twin_made(meta, store, coll):
    from seglake.lifecycle import gc
    snapshot.create(meta, store, "demo", "s1")
    snapshot.pin(meta, "demo", "s1", 1)
    time.sleep(1.1)   # pins are judged by the wall clock (a `now` ahead of it never ends one)
    pin_leases_over(meta)   # and by their etcd lease
    # expired: the drop goes through, the pin key stays until GC
    snapshot.drop_by_id(meta, store, coll.collection_id, "s1")
    snapshot.create(meta, store, "demo", "s1")   # a new snapshot with the same name
    assert gc.clean_records(meta, store, gc.GCOptions())["expired_pins_removed"] == 1
    rec = meta.snapshots.find(coll.collection_id, "s1")
    assert rec.state == "COMMITTED" and rec.holds == ()
    snapshot.drop(meta, store, "demo", "s1")


def test_cli_pin_ttl_below_one_second_is_refused_with_no_change(meta, store, settings, coll, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    snapshot.create(meta, store, "demo", "s1")
    for bad in ("0.0001", "0", "-1", "nan", "8761", "1e3"):
        with pytest.raises(SystemExit):
            cli.main(["snapshots", "pin", "demo", "s1", "--ttl-hours", bad])
    capsys.readouterr()
    assert meta.snapshots.pin_records() == []
    assert cli.main(["snapshots", "unpin", "99999999"]) != 0
    assert "not found" in capsys.readouterr().err


# -- a collection that goes away --------------------------------------------------------------
def test_the_policy_of_a_dropped_collection_can_be_cleared_and_does_not_fail_runs(meta, store, coll):
    retention.set_policy(meta, "demo", {"keep_last": 1})
    name = retention.run(meta, store, "demo", now=T0)["created"]
    meta.catalog.remove(coll.collection_id, reason="dropped by the user")
    assert [d["collection"] for d in retention.list_policies(meta)] == ["demo"]   # still listed
    # the schedule: dropped collection, nothing new, old ones pruned; then GC purges it all
    assert "error" not in retention.run_all(meta, store, now=T0 + HOUR)[0]
    snapshot.drop_by_id(meta, store, coll.collection_id, name)
    meta.catalog.purge(coll.collection_id)
    reports = retention.run_all(meta, store, now=T0 + 2 * HOUR)
    assert not [r for r in reports if "error" in r], reports
    assert "policy was removed" in reports[0]["note"] and retention.list_policies(meta) == []


def test_pins_of_a_dropped_collection_are_not_listed_under_a_new_one_with_its_name(meta, store, coll):
    snapshot.create(meta, store, "demo", "s1")
    snapshot.pin(meta, "demo", "s1", HOUR)
    meta.catalog.remove(coll.collection_id, reason="dropped")
    demo.seed(meta, store, SMALL)   # a new 'demo'
    assert snapshot.list_pins(meta, "demo") == []


def test_clear_the_policy_of_a_dropped_collection_by_name(meta, store, settings, coll, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    retention.set_policy(meta, "demo", {"keep_daily": 7})
    meta.catalog.remove(coll.collection_id, reason="dropped")
    rc = cli.main(["retention", "clear", "demo"])
    capsys.readouterr()
    assert rc == 0 and retention.list_policies(meta) == []


def test_a_pin_racing_gc_expiry_wins_without_failing_the_gc_pass(meta, store, coll, monkeypatch):
    from seglake.lifecycle import gc
    snapshot.create(meta, store, "demo", "short", ttl=5)
    now = time.time() + 30                      # GC's time: its TTL is over
    real_list, pins = meta.snapshots.list, []

    def list_then_pin(*a, **k):
        out = list(real_list(*a, **k))
        if a and not pins:   # clean_records' own listing (remove_expired_holds lists with no argument)
            pins.append(snapshot.pin(meta, "demo", "short", HOUR))   # not expired by the wall clock yet
        return iter(out)
    monkeypatch.setattr(meta.snapshots, "list", list_then_pin)
    res = gc.clean_records(meta, store, gc.GCOptions(), now=now)
    assert res.get("expired_snapshots", 0) == 0
    assert meta.snapshots.find(coll.collection_id, "short").state == "COMMITTED"


def test_pins_unpins_gc_and_drops_at_once_keep_keys_and_holds_consistent(meta, store, coll):
    """Threads pin (short TTLs), unpin, run GC's pin expiry and try to drop, on two
    snapshots, for a few seconds: afterwards every unexpired pin key has its hold and every
    unexpired hold its key; a snapshot that is gone took no unexpired pin with it."""
    import random
    from seglake.lifecycle import gc
    for n in ("a", "b"):
        snapshot.create(meta, store, "demo", n)
    stop, errors, made = time.monotonic() + 4, [], []

    def pinner(seed):
        rnd = random.Random(seed)
        while time.monotonic() < stop:
            try:
                made.append(snapshot.pin(meta, "demo", rnd.choice("ab"), rnd.choice([1, 2, 600]))["pin_id"])
            except (NotFound, StateError, Conflict):
                pass
            except Exception as e:   # noqa: BLE001
                errors.append(e)

    def unpinner(seed):
        rnd = random.Random(seed)
        while time.monotonic() < stop:
            if made:
                try:
                    snapshot.unpin(meta, rnd.choice(made))
                except NotFound:
                    pass
                except Exception as e:   # noqa: BLE001
                    errors.append(e)

    def gcer():
        while time.monotonic() < stop:
            try:
                meta.snapshots.remove_expired_holds(time.time())
            except Exception as e:   # noqa: BLE001
                errors.append(e)

    def dropper():
        while time.monotonic() < stop:
            for n in "ab":
                try:
                    snapshot.drop(meta, store, "demo", n)
                except (Conflict, NotFound, StateError):
                    pass
                except Exception as e:   # noqa: BLE001
                    errors.append(e)
            time.sleep(0.05)
    ts = [threading.Thread(target=f, args=a) for f, a in
          ((pinner, (1,)), (pinner, (2,)), (unpinner, (3,)), (gcer, ()), (dropper, ()))]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert not errors, errors[:3]
    now = time.time()
    keys = {d["pin_id"]: d for d in meta.snapshots.pin_records() if d["expires_at"] > now + 0.5}
    recs = {r.name: r for r in meta.snapshots.list(coll.collection_id)}
    holds = {p: (n, exp) for n, r in recs.items() for p, exp in r.holds if exp > now + 0.5}
    for pid, d in keys.items():
        assert pid in holds and holds[pid][0] == d["snapshot"], (pid, d, recs.get(d["snapshot"]))
        assert recs[d["snapshot"]].snapshot_id == d["snapshot_id"]
    for pid in holds:
        assert pid in keys


def test_a_malformed_policy_record_does_not_stop_the_other_collections(meta, store, coll):
    import json as _json
    retention.set_policy(meta, "demo", {"keep_last": 2})
    meta.kv.put(meta.keys.retention(987654), _json.dumps({"collection_id": 987654, "collection": "aaa",
                                                         "db": "default", "keep_last": 1}))
    reports = retention.run_all(meta, store, now=T0)   # did not raise
    assert [r["created"] for r in reports if r["collection"] == "demo"] == ["sched_20260301T0000Z"]
