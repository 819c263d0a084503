"""Adversarial tests of GC's truncation floor for the WAL archive (attack-archive): GC must
never truncate a fragment of an archived collection the archive has not shipped. A failing
test here is a reproduced defect (see /work/reports/attack-archive.md)."""

from __future__ import annotations

import os

import pytest
import time

from seglake.lifecycle import gc, retention
from seglake.lifecycle.backup import archive
from seglake.lifecycle.flush import flush_pchannel
from seglake.storage import layout
from seglake.storage.local import LocalStore
from seglake.wal.checkpoints import truncated_before
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import WalLog

from wal_helpers import make_collection, pchannels

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


def _fragments(store, p):
    return {o.key for o in store.list(f"{layout.WAL}/{p}/")}


def _age(store, keys, seconds=3 * 86400):
    t = time.time() - seconds
    for k in keys:
        os.utime(store.root / k, (t, t))


def _ingest(meta, store, settings, name="c1", batches=4, first=1, create=False):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, name, shards=2) if create else meta.catalog.get_by_name(name)
        for i in range(batches):
            c.insert(name, synthetic_rows(coll, 20, first + 20 * i))
    return coll


def test_attack_archive_a_damaged_retention_policy_lets_gc_truncate_unshipped_wal(meta, store, settings, tmp_path):
    """An archived collection's policy record becomes unreadable (a damaged value in etcd).
    The archive's own state unreadable truncates nothing (fail closed); a policy unreadable
    is read by list_policies as a policy WITHOUT archive, and GC truncates fragments the
    archive never shipped."""
    coll = _ingest(meta, store, settings, create=True)
    ps = pchannels(coll)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    retention.set_policy(meta, "c1", {"keep_last": 1, "archive": True})
    for p in ps:
        _age(store, _fragments(store, p))
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert all(truncated_before(meta, p) == 1 for p in ps)        # nothing shipped: nothing truncated
    meta.kv.put(meta.keys.retention(coll.collection_id), "{damaged")
    gc.run(meta, store, gc.GCOptions(**OPTS))
    lost = {p: truncated_before(meta, p) - 1 for p in ps if truncated_before(meta, p) > 1}
    assert not lost, f"GC truncated fragments never shipped to the archive: {lost}"


def test_attack_archive_a_dropped_archived_collection_loses_its_unshipped_log(meta, store, settings, tmp_path):
    """archive: true, the archiver behind (acknowledged inserts not shipped yet), then the
    collection is dropped. GC removes the Dropped collection's record together with its
    retention policy (gc/records.py) without waiting for the archive; the pchannel is then
    no longer archived, the next GC truncates the unshipped fragments and the acknowledged
    inserts are in neither the log nor the archive."""
    from seglake.lifecycle.drop import drop_collection

    target = LocalStore(tmp_path / "backup")
    coll = _ingest(meta, store, settings, create=True, batches=2)
    ps = pchannels(coll)
    retention.set_policy(meta, "c1", {"keep_last": 1, "archive": True})
    site = archive.run(meta, store, target)["site"]
    shipped = {p: archive.read_cursor(meta, p).shipped for p in ps}
    _ingest(meta, store, settings, batches=3, first=1000)         # acknowledged, not shipped
    last = {p: WalLog(meta, store, p).state().last for p in ps}
    assert any(last[p] > shipped[p] for p in ps)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    drop_collection(meta, store, settings, "c1", clock=lambda: time.time() - 3 * 86400)
    for p in ps:                                                   # the flushers release the vchannels
        flush_pchannel(meta, store, p, settings, flush_all=True)
    rep = drop_collection(meta, store, settings, "c1", clock=lambda: time.time() - 3 * 86400)
    assert rep["state"] == "Dropped", rep
    from seglake.meta.codec import decode, encode
    for kv in meta.kv.range(meta.keys.segments_prefix(coll.collection_id)):   # dropped 3 days ago
        d = decode(kv.value, kv.key)
        if d.get("dropped_at"):
            d["dropped_at"] -= 3 * 86400
            meta.kv.put(kv.key, encode(d))
    with WalClient(meta, store, settings) as c:                 # a live collection on every pchannel
        other = make_collection(c, "c2", shards=16)
        c.insert("c2", synthetic_rows(other, 64, 50000))
    assert set(ps) <= set(pchannels(other))
    for _ in range(3):
        for p in ps:
            flush_pchannel(meta, store, p, settings, flush_all=True)
        for o in store.list(""):
            _age(store, [o.key])
        gc.run(meta, store, gc.GCOptions(**OPTS))
    assert retention.list_policies(meta) == []          # GC removed the record with its policy
    archive.run(meta, store, target)
    for p in ps:
        have = set(archive.ArchivedLog(target, site, p).numbers())
        first = WalLog(meta, store, p).state().first
        gone = [n for n in range(shipped[p] + 1, last[p] + 1) if n < first and n not in have]
        assert not gone, f"{p}: fragments {gone} truncated from the log and never archived"


def test_attack_archive_a_target_change_while_the_old_run_goes_on(meta, store, settings, tmp_path, monkeypatch):
    """The operator moves the archive to a new target T2 (its first run is interrupted after
    one fragment) while the previous continuous run into T1 is still going (the wal_archive
    DAG's `seconds`): the old run takes the single cursor back to T1 and moves it to the
    log's end; GC truncates; the next T2 run restarts T2's archive from the log's first
    retained fragment. T2 -- the configured target, named by the cursor -- then misses
    fragments GC truncated, and no gap is reported (the restart hides it)."""
    t1, t2 = LocalStore(tmp_path / "t1"), LocalStore(tmp_path / "t2")
    coll = _ingest(meta, store, settings, create=True, batches=2)
    ps = pchannels(coll)
    retention.set_policy(meta, "c1", {"keep_last": 1, "archive": True})
    site = archive.run(meta, store, t1)["site"]
    _ingest(meta, store, settings, batches=3, first=1000)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    real, calls = archive.ship_fragment, [0]

    def dies_after_one(*a, **kw):
        calls[0] += 1
        if calls[0] > 1:
            raise RuntimeError("the T2 run is interrupted")
        return real(*a, **kw)
    monkeypatch.setattr(archive, "ship_fragment", dies_after_one)
    with pytest.raises(RuntimeError):
        archive.run(meta, store, t2)
    monkeypatch.setattr(archive, "ship_fragment", real)
    archive.run(meta, store, t1)                        # the old continuous run, still going
    for p in ps:
        _age(store, _fragments(store, p))
    gc.run(meta, store, gc.GCOptions(**OPTS))
    said = []
    archive.run(meta, store, t2, say=said.append)      # the configured target again
    for p in ps:
        cur = archive.read_cursor(meta, p)
        assert cur.target == t2.uri
        log = archive.ArchivedLog(t2, site, p)
        truncated = set(range(1, WalLog(meta, store, p).state().first))
        holes = log.gaps()
        assert not holes or any("truncated before they were archived" in s for s in said), \
            f"{p}: T2 holds {log.numbers()} (holes {holes}), GC truncated {sorted(truncated)}; said: {said}"


def test_attack_archive_two_archivers_one_target_while_writing(meta, store, settings, tmp_path):
    """Held check: two archivers into one target, concurrently with a producer; then GC.
    The target reads back exactly the log, the cursor reaches the end, nothing truncated
    that is not archived."""
    import threading
    target = LocalStore(tmp_path / "backup")
    coll = _ingest(meta, store, settings, create=True, batches=1)
    ps = pchannels(coll)
    retention.set_policy(meta, "c1", {"keep_last": 1, "archive": True})
    stop, errors = threading.Event(), []

    def archiver():
        try:
            while not stop.is_set():
                archive.run(meta, store, LocalStore(tmp_path / "backup"))
        except Exception as e:
            errors.append(e)
    ths = [threading.Thread(target=archiver) for _ in range(2)]
    for t in ths:
        t.start()
    try:
        _ingest(meta, store, settings, batches=40, first=1000)
    finally:
        stop.set()
        for t in ths:
            t.join()
    assert not errors, errors
    site = archive.run(meta, store, target)["site"]
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
        _age(store, _fragments(store, p))
    gc.run(meta, store, gc.GCOptions(**OPTS))
    for p in ps:
        log = archive.ArchivedLog(target, site, p)
        assert log.numbers() == list(range(1, WalLog(meta, store, p).state().last + 1))
        assert archive.read_cursor(meta, p).shipped == WalLog(meta, store, p).state().last
        n = sum(1 for _ in log.messages())
        assert n > 0
