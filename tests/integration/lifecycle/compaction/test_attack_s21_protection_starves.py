"""Attack s21 (MEDIUM, liveness): a collection on an hourly snapshot schedule is never
compacted with the default compaction_protection.

`compaction_protection` (default 3600 s) skips a collection that has ANY snapshot taken
within that long (planning.protected). The retention DAG runs hourly by default
(retention_schedule @hourly) and takes a snapshot every run for a policy with keep_last,
or one per hour bucket with keep_hourly. So the newest snapshot is never older than the
protection: at every instant between two schedule runs the plan says "not compacted:
snapshot sched_... was taken ...s ago, within compaction_protection" -- the collection's
segments and deleted rows only grow, and GC gets nothing from it, for as long as the
schedule exists. Issue 28 item 3 asks that a FRESHLY snapshotted collection be kept out,
not every collection with a schedule.

Real etcd, real files; the default settings' protection; times past the snapshot given to
the plan (`now`)."""

from __future__ import annotations

import time

import pytest

from seglake.lifecycle import compaction, retention

from compaction_helpers import Writer

pytestmark = pytest.mark.etcd


@pytest.mark.parametrize("rule", [{"keep_hourly": 24}])
def test_an_hourly_retention_schedule_leaves_room_to_compact(meta, store, settings, rule):
    w = Writer(meta, store, settings)
    w.create("sched", ["_default"], shards=1)
    for i in range(4):                                  # four small segments and a delete: work to do
        w.insert("sched", range(10 * i, 10 * i + 10), "_default", float(i))
        w.flush("sched")
    w.delete("sched", [1, 2, 3])
    w.flush("sched")
    pol = compaction.Policy.from_settings(settings, {"min_segment_rows": 1000, "target_rows": 10_000})
    assert pol.protection == settings.compaction_protection == 3600.0          # the default
    t0 = time.time()
    assert compaction.plan(meta, store, "sched", pol, now=t0).units            # compactable before
    retention.set_policy(meta, "sched", rule)
    report = retention.run(meta, store, "sched", now=t0)                      # the hourly run at t0
    assert report["created"], report
    # the next run (t0 + 1 h) is due and takes the next snapshot: every instant in between
    assert retention.due(retention.parse_policy(rule), {report["created"]: retention.sched_time(report["created"])},
                         t0 + 3600 + 60)
    tried = {int(dt): compaction.plan(meta, store, "sched", pol, now=time.time() + dt).skipped
             for dt in (60, 900, 1800, 2700, 3500)}
    assert any(why is None for why in tried.values()), (
        f"between two hourly schedule runs the collection is never compacted: {tried}")
