"""Continuous backup (issue 30 item 3): the WAL of archived collections shipped to a
backup target, read back from the target alone, kept by GC until shipped; against real
etcd and real files."""

from __future__ import annotations

import json
import os
import time

import pytest

from seglake import cli
from seglake.errors import ValidationError
from seglake.lifecycle import gc, retention
from seglake.lifecycle.backup import archive
from seglake.lifecycle.flush import flush_pchannel
from seglake.storage import layout
from seglake.storage.local import LocalStore
from seglake.wal.checkpoints import truncated_before
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.log import CorruptFragment, WalLog

from wal_helpers import make_collection, pchannels

OPTS = dict(missing_tolerance=3600, drop_tolerance=3600)


@pytest.fixture
def target(tmp_path):
    return LocalStore(tmp_path / "backup")


def _ingest(meta, store, settings, name="c1", batches=4, first=1, create=False):
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, name, shards=2) if create else meta.catalog.get_by_name(name)
        for i in range(batches):
            c.insert(name, synthetic_rows(coll, 20, first + 20 * i))
        c.delete(name, [first, first + 1])
    return coll


def _archived(meta, name="c1", on=True):
    retention.set_policy(meta, name, {"keep_last": 1, "archive": on})


def _same_log(meta, store, target, site, p):
    """Every committed message of the log, read from the target alone, equals the log's."""
    def key(m):
        return (m.id, m.type, m.time_tick, m.producer, m.body.num_rows if hasattr(m.body, "num_rows") else None)
    live = [key(m) for m in WalLog(meta, store, p).messages()]
    arch = [key(m) for m in archive.ArchivedLog(target, site, p).messages()]
    assert live and arch == live


def test_the_archive_holds_every_committed_fragment_and_reads_back_the_same_log(meta, store, settings, target):
    coll = _ingest(meta, store, settings, create=True)
    _archived(meta)
    r = archive.run(meta, store, target)
    ps = pchannels(coll)
    assert set(r["pchannels"]) == set(ps)
    for p in ps:
        st = WalLog(meta, store, p).state()
        assert r["pchannels"][p]["shipped"] == st.last and r["pchannels"][p]["cursor"] == st.last
        _same_log(meta, store, target, r["site"], p)
        assert archive.ArchivedLog(target, r["site"], p).gaps() == []
    site_doc = json.loads(target.get(layout.archive_site(r["site"])))
    assert site_doc["etcd_root"] == meta.keys.root
    # idempotent: nothing new, nothing shipped; new writes: only they are shipped
    assert archive.run(meta, store, target)["fragments"] == 0
    _ingest(meta, store, settings, batches=2, first=1000)
    again = archive.run(meta, store, target)
    assert 0 < again["fragments"] <= 2 * len(ps) + len(ps)
    for p in ps:
        _same_log(meta, store, target, r["site"], p)
    assert all(s["behind"] == 0 and s["lag_s"] == 0 for s in archive.status(meta))


def test_a_scanner_reads_the_archive_like_the_log(meta, store, settings, target):
    """What a replay from the target alone rests on: wal.scanner.Scanner over an
    ArchivedLog delivers exactly what it delivers over the log (txns, reorder, deletes)."""
    from seglake.wal.scanner import recovery_scanner

    coll = _ingest(meta, store, settings, create=True)
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(coll, 1, 5000), txn=True)    # one row: one vchannel
    _archived(meta)
    site = archive.run(meta, store, target)["site"]
    for p in pchannels(coll):
        def key(m):
            return m.id, m.type, m.time_tick, m.vchannel, m.rows
        live = [key(m) for m in recovery_scanner(meta, store, p, settings, follow=False).drain()]
        arch = [key(m) for m in recovery_scanner(meta, None, p, settings, follow=False,
                                                 log=archive.ArchivedLog(target, site, p)).drain()]
        assert live and arch == live


def test_only_archived_collections_are_shipped_and_status_shows_the_lag(meta, store, settings, target):
    _ingest(meta, store, settings, create=True)
    assert archive.run(meta, store, target)["pchannels"] == {}      # no policy says archive
    retention.set_policy(meta, "c1", {"keep_last": 1})
    assert archive.archived_pchannels(meta) == {}
    _archived(meta)
    time.sleep(0.05)
    st = archive.status(meta)
    assert st and all(s["behind"] > 0 and s["shipped"] == 0 and s["lag_s"] > 0 for s in st)
    archive.run(meta, store, target)
    assert all(s["behind"] == 0 for s in archive.status(meta))
    # the operator page shows it
    from seglake import console
    from seglake_airflow.ui.render import render_page
    data = console.overview(meta, store)
    assert data["backup"]["error"] is None and len(data["backup"]["rows"]["archive"]) == len(st)
    page = render_page(data)
    assert "WAL archive (continuous backup)" in page and "default.c1" in page and "up to date" in page


def _fragments(store, p):
    return {o.key for o in store.list(f"{layout.WAL}/{p}/")}


def _age(store, keys, seconds=3 * 86400):
    t = time.time() - seconds
    for k in keys:
        os.utime(store.root / k, (t, t))


def test_gc_keeps_what_the_archive_has_not_shipped_and_lets_go_once_shipped_or_off(meta, store, settings, target):
    coll = _ingest(meta, store, settings, create=True)
    ps = pchannels(coll)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    _archived(meta)
    before = {p: _fragments(store, p) for p in ps}
    for p in ps:
        _age(store, before[p])
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert {p: _fragments(store, p) for p in ps} == before          # nothing shipped: nothing truncated
    assert all(truncated_before(meta, p) == 1 for p in ps)
    # shipped up to the middle of one pchannel: truncation stops at the cursor
    p0 = ps[0]
    last = WalLog(meta, store, p0).state().last
    assert last >= 3
    site = archive.site_id(meta)
    log = WalLog(meta, store, p0)
    for rec in log.fragments(1):
        if rec.n > 2:
            break
        archive.ship_fragment(store, target, site, p0, rec)
    archive._move_cursor(meta, p0, archive.read_cursor(meta, p0), 2, target.uri, 1)
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert truncated_before(meta, p0) == 3
    # everything shipped: truncation goes as far as the checkpoints allow
    archive.run(meta, store, target)
    gc.run(meta, store, gc.GCOptions(**OPTS))
    truncated = {p: truncated_before(meta, p) for p in ps}
    assert all(t > 1 for t in truncated.values())
    # the archive still reads back every fragment, including the truncated ones
    for p in ps:
        assert [r.n for r in archive.ArchivedLog(target, site, p).fragments()] == \
            list(range(1, WalLog(meta, store, p).state().last + 1))


def test_gc_truncates_again_once_the_archive_is_turned_off_and_what_it_held_is_shipped(meta, store, settings, target):
    coll = _ingest(meta, store, settings, create=True)
    ps = pchannels(coll)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    _archived(meta)
    for p in ps:
        _age(store, _fragments(store, p))
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert all(truncated_before(meta, p) == 1 for p in ps)
    _archived(meta, on=False)
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert all(truncated_before(meta, p) == 1 for p in ps)     # what was written while on is not shipped yet
    r = archive.run(meta, store, target)                        # ships it, then lets go of the pchannels
    assert all(d.get("released") for d in r["pchannels"].values()) and archive.archived_pchannels(meta) == {}
    gc.run(meta, store, gc.GCOptions(**OPTS))
    assert all(truncated_before(meta, p) > 1 for p in ps)


def test_an_unreadable_archive_state_truncates_no_wal(meta, store, settings, target, monkeypatch):
    coll = _ingest(meta, store, settings, create=True)
    ps = pchannels(coll)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
        _age(store, _fragments(store, p))

    def broken(meta):
        raise RuntimeError("etcd went away")
    monkeypatch.setattr(archive, "wanted_pchannels", broken)   # what GC reads of the archive
    r = gc.run(meta, store, gc.GCOptions(**OPTS))
    assert r["mark"]["wal"]["error"] and all(truncated_before(meta, p) == 1 for p in ps)


def test_a_killed_archive_resumes_without_loss_and_never_overwrites(meta, store, settings, target, monkeypatch):
    coll = _ingest(meta, store, settings, create=True, batches=6)
    _archived(meta)
    real_put, puts = target.put, [0]

    def dying_put(key, data):
        puts[0] += 1
        if puts[0] == 6:        # after 2 whole fragments (+ SITE.json): a .frag written, its entry not
            raise KeyboardInterrupt("killed")
        return real_put(key, data)
    monkeypatch.setattr(target, "put", dying_put)
    with pytest.raises(KeyboardInterrupt):
        archive.run(meta, store, target)
    monkeypatch.setattr(target, "put", real_put)
    r = archive.run(meta, store, target)
    for p in pchannels(coll):
        _same_log(meta, store, target, r["site"], p)
    # the target holding another fragment under a shipped number: refused, nothing overwritten
    p = pchannels(coll)[0]
    ekey = layout.archive_entry(r["site"], p, 1)
    forged = json.loads(target.get(ekey))
    forged["sha256"] = "0" * 64
    target.put(ekey, json.dumps(forged).encode())
    meta.kv.delete(meta.keys.root + f"/archive/{p}")      # a lost cursor: the next run starts at 1 again
    with pytest.raises(archive.ArchiveError, match="holds another fragment 1"):
        archive.run(meta, store, target)
    assert json.loads(target.get(ekey))["sha256"] == "0" * 64


def test_a_damaged_or_missing_archived_fragment_is_loud(meta, store, settings, target):
    coll = _ingest(meta, store, settings, create=True, batches=6)
    _archived(meta)
    r = archive.run(meta, store, target)
    p = max(pchannels(coll), key=lambda p: WalLog(meta, store, p).state().last)
    site = r["site"]
    fkey = layout.archive_fragment(site, p, 2)
    data = bytearray(target.get(fkey))
    data[-20] ^= 1
    target.put(fkey, bytes(data))
    with pytest.raises(CorruptFragment, match="SHA-256"):
        list(archive.ArchivedLog(target, site, p).messages())
    target.delete_many([layout.archive_entry(site, p, 3)])
    assert archive.ArchivedLog(target, site, p).gaps() == [(3, 3)]
    with pytest.raises(CorruptFragment, match="3..3 are missing"):
        list(archive.ArchivedLog(target, site, p).fragments(3))


def test_the_archive_refuses_bad_input_before_anything_is_written(meta, store, settings, target):
    _ingest(meta, store, settings, create=True)
    _archived(meta)
    for bad in (float("nan"), -1, 10**9, "5", True):
        with pytest.raises(ValidationError, match="seconds"):
            archive.run(meta, store, target, seconds=bad)
    with pytest.raises(ValidationError, match="archive"):
        retention.set_policy(meta, "c1", {"keep_last": 1, "archive": "yes"})
    with pytest.raises(ValidationError, match="'archive'"):
        retention.set_policy(meta, "c1", {"keep_last": 1, "archiv": True})
    with pytest.raises(archive.ArchiveError, match="store itself"):
        archive.run(meta, store, store)
    assert list(target.list("")) == []


def test_site_ids_are_made_once_and_differ_between_roots(meta, settings):
    from seglake.meta import Meta

    a = archive.site_id(meta)
    assert archive.site_id(meta) == a and layout.SITE_RE.fullmatch(a)
    other = Meta.from_settings(settings.replace(etcd_root=meta.keys.root + "x"))
    try:
        assert archive.site_id(other) != a
    finally:
        other.close()


def test_the_cli_archives_and_status_reports_it(meta, store, settings, target, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    _ingest(meta, store, settings, create=True)
    assert cli.main(["retention", "set", "c1", "--keep-last", "2", "--archive"]) == 0
    capsys.readouterr()
    assert cli.main(["wal", "archive", "--target", str(target.root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fragments"] > 0 and out["target"] == target.uri
    assert cli.main(["wal", "status"]) == 0
    text = capsys.readouterr().out
    assert "WAL archive" in text and "up to date" in text
    with pytest.raises(SystemExit) as refused:
        cli.main(["wal", "archive", "--target", str(target.root), "--seconds", "nan"])
    assert refused.value.code == 2 and "--seconds" in capsys.readouterr().err


def test_another_target_is_refused_unless_the_archive_moves_and_bundles_name_their_site(meta, store, settings, target,
                                                                                   tmp_path):
    from seglake.lifecycle import snapshot
    from seglake.lifecycle.backup import bundle as bundles
    from seglake.lifecycle.backup import export

    coll = _ingest(meta, store, settings, create=True)
    _archived(meta)
    site = archive.run(meta, store, target)["site"]
    other = LocalStore(tmp_path / "backup2")
    with pytest.raises(archive.ArchiveError, match="--move"):      # one target at a time
        archive.run(meta, store, other)
    assert list(other.list("")) == []
    archive.run(meta, store, other, move=True)
    for p in pchannels(coll):
        last = WalLog(meta, store, p).state().last
        assert archive.ArchivedLog(other, site, p).numbers() == list(range(1, last + 1))
        assert archive.read_cursor(meta, p).target == other.uri
    for p in pchannels(coll):
        flush_pchannel(meta, store, p, settings, flush_all=True)
    snapshot.create(meta, store, "c1", "s1")
    export.export(meta, store, target, "c1", "s1", say=lambda line: None)
    assert bundles.read(target, "default", "c1", "s1")["source"]["site"] == site


def test_an_s3_target_holds_the_same_archive(meta, store, settings, s3_store):
    """SeaweedFS as the backup target: shipped, read back equal, a re-run ships nothing."""
    coll = _ingest(meta, store, settings, create=True)
    _archived(meta)
    r = archive.run(meta, store, s3_store)
    assert r["fragments"] > 0
    for p in pchannels(coll):
        _same_log(meta, store, s3_store, r["site"], p)
    assert archive.run(meta, store, s3_store)["fragments"] == 0
