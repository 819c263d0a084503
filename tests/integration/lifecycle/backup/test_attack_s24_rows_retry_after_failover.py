"""Adversary s24 (issue 26 item 2, "an acknowledgement means written ... nothing twice"):
a named producer's call half-committed on the primary (AppendIncomplete: one pchannel
committed, the other refused), the primary's collection then brought into a DR site from
the backup target (a restore straight from the bundle; an import + restore), and the
producer, pointed at the DR site, retries the call with `seq=err.result.seq` as the
README says.

The DR site has no producer record of the call, so its retry is judged a new call and
appended whole: the half that the bundle already carried is there twice (count(*) 2 of
each of its pks). Expected: the retry never appends twice -- it is refused (the call was
numbered before the DR collection existed: it went to another collection), naming why."""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lifecycle" / "restore"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lifecycle" / "pitr"))

from seglake.errors import ValidationError
from seglake.lifecycle import pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.lifecycle.pitr import from_target
from seglake.lifecycle.flush import flush_pchannel
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.meta.catalog import pchannel_of
from seglake.storage.local import LocalStore
from seglake.visibility import visible_rows
from seglake.wal.client import AppendIncomplete, WalClient, synthetic_rows

from bundle_restore_helpers import restore_bundle
from copy_model_helpers import other_root, quiet, run_restore
from pitr_model import copy_and_replay
from wal_helpers import append_incomplete, make_collection, pchannels


def _pks(meta, store, name) -> Counter:
    coll = meta.catalog.get_by_name(name)
    return Counter(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())


def _flush(meta, store, settings, name):
    for p in pchannels(meta.catalog.get_by_name(name)):
        flush_pchannel(meta, store, p, settings, flush_all=True)


def _half_committed_call(meta, store, settings, monkeypatch):
    """`src` (2 shards on two pchannels) with pks 1..40 flushed, then a call of 20 new rows
    (pks 101..120) from producer 'ingest' whose second pchannel refuses: (coll, rows, error)."""
    with WalClient(meta, store, settings, producer_id="ingest") as c:
        coll = make_collection(c, "src", shards=2)
        assert len(set(pchannels(coll))) == 2
        base = synthetic_rows(coll, 40, 1)
        c.insert("src", base)
        rows = synthetic_rows(coll, 20, 101)
        e = append_incomplete(monkeypatch, pchannel_of(coll.vchannels[1]), lambda: c.insert("src", rows))
    assert e.value.result.committed == {pchannel_of(coll.vchannels[0]): 1}
    _flush(meta, store, settings, "src")
    return coll, rows, e.value


@pytest.mark.parametrize("path", ["bundle_restore", "import_then_restore", "from_target_as_of"])
def test_a_retry_after_a_failover_never_appends_the_half_the_bundle_carried_again(meta, store, settings, etcd_server,
                                                                                  tmp_path, monkeypatch, path):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "dr")
    backup = LocalStore(tmp_path / "backup")
    try:
        coll, rows, err = _half_committed_call(meta, store, settings, monkeypatch)
        on_primary = _pks(meta, store, "src")
        half = {pk for pk in rows.column("pk").to_pylist() if on_primary[pk]}
        assert 0 < len(half) < 20 and sum(on_primary.values()) == 40 + len(half)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        if path == "from_target_as_of":
            pitr.set_window(meta, "src", "1h")
            retention.set_policy(meta, "src", {"keep_last": 5, "archive": True})
        # the primary is gone; the DR site brings `src` back under its name (a failover takes
        # minutes; here the DR clients' max_clock_skew is 1 s, so 3 s stand for them)
        time.sleep(3.0)
        if path == "bundle_restore":
            restore_bundle(meta2, store2, backup, "src", "s1", "src")
        elif path == "from_target_as_of":     # the bundle + the WAL archive, to the archive's last instant
            archive.run(meta, store, backup)
            covered = min(archive.ArchivedLog(backup, archive.site_id(meta), p).covered()
                          for p in archive.archived_pchannels(meta))
            job = from_target.restore_as_of_from_target(meta2, store2, backup, "src", "src", covered, engine="inline")
            copy_and_replay(meta2, store2, settings2, job, "src")
        else:
            imports.import_bundle(meta2, store2, backup, "src", "s1", as_collection="src_imported", **quiet)
            run_restore(meta2, store2, "src_imported", "s1", "src")
        assert _pks(meta2, store2, "src") == on_primary
        # the producer, pointed at the DR site, retries its call as the README says
        acked = False
        with WalClient(meta2, store2, settings2.replace(max_clock_skew=1.0), producer_id="ingest") as c:
            try:
                c.insert("src", rows, seq=err.result.seq)
                acked = True
            except (ValidationError, AppendIncomplete) as e:
                print("retry refused:", e)
        _flush(meta2, store2, settings2, "src")
        got = _pks(meta2, store2, "src")
        twice = sorted(pk for pk, n in got.items() if n > 1)
        assert not twice, (f"acked={acked}: {len(twice)} pks visible twice after the retry ({twice[:5]}...); "
                           f"{sum(got.values())} rows for {40 + 20} written")
        if acked:
            assert got == Counter({**{pk: 1 for pk in got}, **{pk: 1 for pk in rows.column('pk').to_pylist()}})
    finally:
        meta2.close()


def test_a_call_to_the_dr_collection_itself_is_retried_there(meta, store, settings, etcd_server, tmp_path,
                                                             monkeypatch):
    """The other side of the rule: a call made to the DR collection after it was restored,
    half-committed there, is completed by its retry (nothing refused, nothing twice)."""
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "dr2")
    backup = LocalStore(tmp_path / "backup")
    try:
        coll, rows, err = _half_committed_call(meta, store, settings, monkeypatch)
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        restore_bundle(meta2, store2, backup, "src", "s1", "src")
        before = _pks(meta2, store2, "src")
        dr = meta2.catalog.get_by_name("src")
        new = synthetic_rows(dr, 10, 501)
        with WalClient(meta2, store2, settings2, producer_id="ingest") as c:
            c.insert("src", synthetic_rows(dr, 1, 900))       # (announces the DR collection first)
            before[900] += 1
            e2 = append_incomplete(monkeypatch, pchannel_of(dr.vchannels[1]), lambda: c.insert("src", new))
            c.insert("src", new, seq=e2.value.result.seq)
        _flush(meta2, store2, settings2, "src")
        got = _pks(meta2, store2, "src")
        assert got == before + Counter(new.column("pk").to_pylist())
    finally:
        meta2.close()


def test_a_first_write_whose_announce_fails_names_a_retry_that_works(meta, store, settings, etcd_server, tmp_path,
                                                                     monkeypatch):
    """A restored collection is announced on its vchannels by its first write. When that
    announce is refused on one pchannel, the insert's AppendIncomplete carried the
    announce's result: 'Retry with seq=0', and seq=0 is refused ('seq must be an int in
    1..'). Nothing of the insert was numbered or appended: its retry is a new call
    (seq None), and following the error's own advice must work and write the rows once."""
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "ann")
    backup = LocalStore(tmp_path / "backup")
    try:
        with WalClient(meta, store, settings) as c:
            coll = make_collection(c, "src", shards=2)
            c.insert("src", synthetic_rows(coll, 10, 1))
        _flush(meta, store, settings, "src")
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        restore_bundle(meta2, store2, backup, "src", "s1", "dr")
        dr = meta2.catalog.get_by_name("dr")
        new = synthetic_rows(dr, 6, 50)
        with WalClient(meta2, store2, settings2, producer_id="ingest") as c:
            e = append_incomplete(monkeypatch, pchannel_of(dr.vchannels[1]), lambda: c.insert("dr", new))
            assert f"seq={e.value.result.seq}" in str(e.value)
            c.insert("dr", new, seq=e.value.result.seq)        # as the error says
        _flush(meta2, store2, settings2, "dr")
        got = _pks(meta2, store2, "dr")
        assert sum(got.values()) == 16 and all(got[pk] == 1 for pk in new.column("pk").to_pylist())
    finally:
        meta2.close()


def test_a_delete_retried_after_a_failover_never_hides_rows_acknowledged_there_since(meta, store, settings,
                                                                                     etcd_server, tmp_path,
                                                                                     monkeypatch):
    """A delete half-committed on the primary; at the DR site the application writes the
    pks of the half that did not commit again (acknowledged); then the delete is retried
    with its seq. No record remembers its timestamp there, so a retry takes a new one and
    hides the rows acknowledged after the call was made (a delete hides only older rows)."""
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "drd")
    backup = LocalStore(tmp_path / "backup")
    try:
        with WalClient(meta, store, settings, producer_id="ingest") as c:
            coll = make_collection(c, "src", shards=2)
            c.insert("src", synthetic_rows(coll, 40, 1))
        _flush(meta, store, settings, "src")
        doomed = list(range(1, 21))
        with WalClient(meta, store, settings, producer_id="ingest") as c:
            e = append_incomplete(monkeypatch, pchannel_of(coll.vchannels[1]), lambda: c.delete("src", doomed))
        _flush(meta, store, settings, "src")
        on_primary = _pks(meta, store, "src")
        kept = sorted(pk for pk in doomed if on_primary[pk])       # the half whose delete did not commit
        assert 0 < len(kept) < 20
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)
        time.sleep(3.0)     # a failover takes minutes: 3 s against max_clock_skew 1 s below
        restore_bundle(meta2, store2, backup, "src", "s1", "src")
        dr = meta2.catalog.get_by_name("src")
        s2 = settings2.replace(max_clock_skew=1.0)
        with WalClient(meta2, store2, s2, producer_id="ingest") as c:
            again = synthetic_rows(dr, len(kept), 1).set_column(0, "pk", __import__("pyarrow").array(kept, "int64"))
            c.upsert("src", again)                                  # acknowledged at the DR site
            try:
                c.delete("src", doomed, seq=e.value.result.seq)
            except (ValidationError, AppendIncomplete) as err:
                print("retry refused:", err)
        _flush(meta2, store2, s2, "src")
        got = _pks(meta2, store2, "src")
        hidden = sorted(pk for pk in kept if not got[pk])
        assert not hidden, f"rows acknowledged at the DR site after the delete call was made are hidden: {hidden}"
    finally:
        meta2.close()
