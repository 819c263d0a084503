"""Session 23: the hosts sharing a backup target disagree about the time (a clock that jumped,
a host whose NTP is off). Locks, holds and prune intents in the target carry their writer's
clock (`at`); a judge whose clock runs ahead of the writer's by more than the TTL took a live
record for dead: an export went past a running sweep's lock (the sweep could then delete data
files the export's committed bundle references), a prune dropped a bundle under a restore's
hold, a sweep took a running export's fresh data files for old. Now a record is dead only
when it is old by the judge's clock AND by the target's own (the object's mtime against a
probe's), and a sweep ages files by the target's clock."""

from __future__ import annotations

import json
import os
import time

from fault_harness import seed_and_snapshot

from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import holds, prune
from seglake.storage import layout
from seglake.storage.local import LocalStore

HOUR = 3600.0
quiet = dict(say=lambda line: None)


def _target(meta, store, tmp_path) -> LocalStore:
    seed_and_snapshot(meta, store)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "demo", "s1", **quiet)
    return target


def _age(target: LocalStore, key: str, seconds: float) -> None:
    """As if `key` had last been written `seconds` ago by the target's clock."""
    t = time.time() - seconds
    os.utime(target.root / key, (t, t))


def test_a_live_sweep_lock_written_by_a_clock_two_hours_behind_is_live(meta, store, tmp_path):
    target = _target(meta, store, tmp_path)
    lock = layout.sweep_lock("other-site")
    target.put(lock, json.dumps({"at": time.time() - 2 * HOUR}).encode())    # its writer's clock: 2 h behind
    assert prune.sweep_running(target), "a sweep lock renewed a moment ago was taken for a dead sweep's"
    _age(target, lock, prune.LOCK_TTL + 60)                                   # dead by both clocks
    assert not prune.sweep_running(target)
    assert [o.key for o in target.list("_locks/clock/")] == []               # the probes are removed


def test_a_prune_keeps_a_bundle_whose_hold_was_written_by_a_clock_two_hours_behind(meta, store, tmp_path):
    from seglake.lifecycle import snapshot

    target = _target(meta, store, tmp_path)
    snapshot.create(meta, store, "demo", "s2")
    exports.export(meta, store, target, "demo", "s2", **quiet)
    hold = layout.bundle_hold("default", "demo", "s1", "reader")
    target.put(hold, json.dumps({"at": time.time() - 2 * HOUR, "by": "a restore on another site"}).encode())
    rep = prune.prune(target, "demo", {"keep_last": 1}, sweep=False, **quiet)
    assert rep["pruned"] == [] and "s1" in rep["held"], rep
    _age(target, hold, holds.HOLD_TTL + 60)
    rep = prune.prune(target, "demo", {"keep_last": 1}, sweep=False, **quiet)
    assert rep["pruned"] == ["s1"], rep


def test_a_sweep_on_a_host_two_days_ahead_keeps_young_unreferenced_files(meta, store, tmp_path, monkeypatch):
    target = _target(meta, store, tmp_path)
    young = layout.bundle_blob("ab" * 32)
    target.put(young, b"a running export's file, not yet in its bundle.json")
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 2 * 86400)
    rep = prune.sweep_data(target, min_age=86400.0, **quiet)
    monkeypatch.undo()
    assert target.exists(young) and rep["deleted"] == 0 and rep["kept_young"] == 1, rep
