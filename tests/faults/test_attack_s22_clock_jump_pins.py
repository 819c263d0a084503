"""attack s22: the host clock of a schedule run jumps forward (an NTP step, a VM resumed
with a wrong clock) while a snapshot is pinned.

A pin is a wall-clock lease: `pin(ttl=1h)` writes `expires = time.time() + ttl`, and
retention / GC judge it by their own `time.time()`. A run on a host whose clock jumped
+2 h (its run time is its clock, so the "run time ahead of the clock" check passes)
finds the pin expired and DROPS the snapshot that is pinned for another hour in real
time (a reader -- a restore outside seglake, an auditor -- loses it under its pin). The
project bounds clock disagreement elsewhere (max_clock_skew, the TSO refusing a fast
clock while the store is in use); pins are not covered by that bound.
Expected: the pinned snapshot kept (or the run refused as a fast clock).
"""

import time

from fault_harness import seed_and_snapshot

from seglake.errors import SeglakeError
from seglake.lifecycle import retention, snapshot

HOUR = 3600.0


def test_a_forward_clock_jump_on_the_schedule_host_does_not_drop_a_pinned_snapshot(meta, store, monkeypatch):
    coll, _ = seed_and_snapshot(meta, store, snap=None)
    real = time.time()
    retention.set_policy(meta, "demo", {"keep_last": 1})
    first = retention.run(meta, store, "demo", now=real)["created"]
    p = snapshot.pin(meta, "demo", first, HOUR)            # pinned for an hour of real time
    jumped = real + 2 * HOUR
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 2 * HOUR)   # this host's clock jumped +2 h
    try:
        rep = retention.run(meta, store, "demo", now=jumped)
    except SeglakeError as e:                                # refused as a fast clock: fine
        rep = f"{type(e).__name__}: {e}"
    monkeypatch.undo()
    names = [r.name for r in meta.snapshots.list() if r.collection_id == coll.collection_id]
    assert first in names, (f"the snapshot pinned for another ~{(real + HOUR - time.time()) / 60:.0f} min of "
                            f"real time was dropped by a run on a host whose clock jumped +2 h: {rep}")
    assert meta.snapshots.pin_record(p["pin_id"]) is not None



def test_a_forward_clock_jump_on_the_gc_host_does_not_expire_a_snapshot_early(meta, store, monkeypatch):
    """The same jump for a snapshot's own TTL: GC on a host whose clock is +2 h ahead keeps a
    snapshot that has an hour to live (its TTL also lives on an etcd lease, timed by etcd's
    server), and still drops one whose TTL has truly passed."""
    from seglake.lifecycle import gc
    from seglake.lifecycle.gc.records import clean_records

    coll, _ = seed_and_snapshot(meta, store, snap=None)
    snapshot.create(meta, store, "demo", "hour", ttl=HOUR)
    brief = snapshot.create(meta, store, "demo", "brief", ttl=1)
    deadline = time.monotonic() + 15
    while meta.kv.get(meta.keys.snapshot_ttl_lease(brief.snapshot_id)) is not None:   # etcd ends the 1 s TTL
        assert time.monotonic() < deadline, "the 1 s TTL's lease never ended"
        time.sleep(0.1)
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 2 * HOUR)   # this host's clock jumped +2 h
    res = clean_records(meta, store, gc.GCOptions(), now=time.time())
    monkeypatch.undo()
    names = sorted(r.name for r in meta.snapshots.list() if r.collection_id == coll.collection_id)
    assert names == ["hour"], (names, dict(res))
    assert res["expired_snapshots"] == 1
    assert meta.kv.get(meta.keys.snapshot_ttl_lease(brief.snapshot_id)) is None


def test_a_forward_clock_jump_on_the_prune_host_does_not_end_a_milvus_bundle_pin(meta, store, tmp_path):
    """`seglake milvus pin` for an hour: a prune on a host +2 h ahead still sees the pin (it
    lives on an etcd lease of its TTL); a pin whose lease ran out holds nothing."""
    from seglake.lifecycle.backup import export as exports
    from seglake.milvus import sources
    from seglake.storage.local import LocalStore

    seed_and_snapshot(meta, store)
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "demo", "s1", say=lambda line: None)
    sources.pin(meta, target, "default", "demo", "s1", HOUR, by="audit")
    jumped = time.time() + 2 * HOUR
    assert sources.pinned_by(meta, "default", "demo", "s1", now=jumped), "a +2 h clock ended an hour's pin"
    assert [p["bundle"] for p in sources.list_pins(meta, now=jumped)] == ["s1"]
    sources.pin(meta, target, "default", "demo", "s1", 1, by="brief")      # the same bundle, 1 s
    deadline = time.monotonic() + 15
    while meta.kv.get(meta.keys.milvus_pin("default", "demo", "s1")) is not None:
        assert time.monotonic() < deadline, "the 1 s pin's lease never ended"
        time.sleep(0.1)
    assert sources.pinned_by(meta, "default", "demo", "s1") == []
