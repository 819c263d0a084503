"""DropCollection (issue 11) against real etcd and real files: flush-and-drop by the
flusher, crash at every step, restores and snapshots around a drop, GC after the drop,
name reuse, appends to a released vchannel."""

from __future__ import annotations

import json
import sys

import pytest

from seglake import cli
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.faults import InjectedFault, inject
from seglake.lifecycle import copyjob, drop, gc, restore, snapshot, verify
from seglake.lifecycle.flush import Flusher, flush_pchannel
from seglake.wal.checkpoints import RELEASED, live_vchannels, read_checkpoint
from seglake.meta.catalog import CREATED, DROPPED as COLL_DROPPED, DROPPING, pchannel_of
from seglake.meta.segments import DROPPED, FLUSHED
from seglake.storage import layout
from seglake.wal.client import WalClient, synthetic_rows
from seglake.wal.message import Message
from seglake.wal import message as M
from seglake.lifecycle.verify import segment_rows

from wal_helpers import make_collection, pchannels

FLUSHED_PKS = list(range(1, 101))
BUFFERED_PKS = list(range(101, 151))
DELETED = [3, 120]          # one in a Flushed segment, one still buffered


def _files(meta, coll, states=(DROPPED,)) -> set[str]:
    return {k for seg in meta.segments.list(coll.collection_id, states=list(states))
            for k in (f.key for f in layout.segment_files(seg))}


def _ingest(meta, store, settings, name="c1"):
    """100 rows flushed, then 50 rows and 2 deletes left in the log (buffered)."""
    with WalClient(meta, store, settings) as c:
        coll = make_collection(c, name, shards=2)
        c.insert(name, synthetic_rows(coll, 100, 1))
        for p in pchannels(coll):
            flush_pchannel(meta, store, p, settings, flush_all=True)
        c.insert(name, synthetic_rows(coll, 50, 101))
        c.delete(name, DELETED)
    return meta.catalog.get(coll.collection_id)


def _flush(meta, store, settings, coll, **kw):
    return [flush_pchannel(meta, store, p, settings, **kw) for p in pchannels(coll)]


def _assert_dropped(meta, store, coll):
    """The converged final state: every row acknowledged before the drop is in the
    Dropped segments' files exactly once, the deletes too; name free; channels released."""
    c = meta.catalog.get(coll.collection_id)
    assert c.state == COLL_DROPPED
    assert sorted(c.properties[RELEASED]) == sorted(coll.vchannels)
    assert {s.state for s in meta.segments.list(coll.collection_id)} == {DROPPED}
    assert all(s.dropped_at for s in meta.segments.list(coll.collection_id))
    pks, dels = segment_rows(meta, store, coll.collection_id, [DROPPED])
    assert pks == FLUSHED_PKS + BUFFERED_PKS
    assert dels == DELETED
    for v in coll.vchannels:
        assert read_checkpoint(meta, v)[0] is None
        assert v not in live_vchannels(meta, pchannel_of(v))
    with pytest.raises(NotFound):
        meta.catalog.get_by_name(coll.name)


def test_drop_syncs_buffered_rows_and_deletes_before_segments_become_dropped(meta, store, settings):
    coll = _ingest(meta, store, settings)
    assert segment_rows(meta, store, coll.collection_id, [FLUSHED]) == (FLUSHED_PKS, [])
    rep = drop.begin_drop(meta, store, settings, "c1")
    assert rep["state"] == DROPPING and {h["vchannel"] for h in rep["held"]} == set(coll.vchannels)
    with pytest.raises(StateError, match="still held"):
        drop.finish_drop(meta, "c1")
    with pytest.raises(Conflict):                       # the name stays reserved while Dropping
        meta.catalog.create("c1", coll.schema)
    stats = _flush(meta, store, settings, coll)
    assert sorted(v for s in stats for v in s["released"]) == sorted(coll.vchannels)
    assert sum(s["rows"] for s in stats) == len(BUFFERED_PKS)
    rep = drop.finish_drop(meta, "c1")
    assert rep["segments_dropped"] == rep["segments"] and rep["rows_dropped"] == 150
    assert rep["bytes_awaiting_gc"] > 0
    _assert_dropped(meta, store, coll)
    # re-running on Dropped reports, changes nothing
    assert drop.begin_drop(meta, store, settings, "c1")["note"] == "already Dropped"
    assert drop.finish_drop(meta, "c1")["state"] == COLL_DROPPED
    # a flusher re-run does not re-open the released vchannels
    f = Flusher(meta, store, pchannels(coll)[0], settings).open()
    assert not set(f.states) & set(coll.vchannels)


def test_appends_to_a_released_vchannel_are_refused(meta, store, settings):
    coll = _ingest(meta, store, settings)
    drop.begin_drop(meta, store, settings, "c1")
    v = coll.vchannels[0]
    from seglake.wal.writer import WalWriter
    with WalWriter.open(meta, store, pchannel_of(v), settings) as w:
        with pytest.raises(ValidationError, match="Dropping"):   # no data after the drop message
            w.append(Message.delete(v, coll.collection_id, [1], [1]))
    _flush(meta, store, settings, coll)
    with WalWriter.open(meta, store, pchannel_of(v), settings) as w:
        with pytest.raises(ValidationError, match="released by the drop"):
            w.append(Message(M.DROP_COLLECTION, v, collection_id=coll.collection_id))


def test_name_reuse_after_dropped_gets_new_ids(meta, store, settings):
    coll = _ingest(meta, store, settings)
    drop.begin_drop(meta, store, settings, "c1")
    _flush(meta, store, settings, coll)
    drop.finish_drop(meta, "c1")
    with WalClient(meta, store, settings) as c:
        new = make_collection(c, "c1", shards=2)
        c.insert("c1", synthetic_rows(new, 10, 1))
    assert new.collection_id != coll.collection_id and not set(new.vchannels) & set(coll.vchannels)
    _flush(meta, store, settings, new, flush_all=True)
    assert segment_rows(meta, store, new.collection_id, [FLUSHED])[0] == list(range(1, 11))
    assert meta.catalog.get(coll.collection_id).state == COLL_DROPPED


# -- crash at each step ---------------------------------------------------------------------------
def test_crash_after_dropping_before_messages_rerun_converges(meta, store, settings, monkeypatch):
    coll = _ingest(meta, store, settings)
    monkeypatch.setattr(drop, "_append_drops", lambda *a, **k: (_ for _ in ()).throw(InjectedFault("crash")))
    with pytest.raises(InjectedFault):
        drop.begin_drop(meta, store, settings, "c1")
    monkeypatch.undo()
    assert meta.catalog.get(coll.collection_id).state == DROPPING
    _flush(meta, store, settings, coll)                  # no drop message yet: nothing released
    assert not meta.catalog.get(coll.collection_id).properties.get(RELEASED)
    drop.begin_drop(meta, store, settings, "c1")         # continues: appends the messages
    _flush(meta, store, settings, coll)
    drop.finish_drop(meta, "c1")
    _assert_dropped(meta, store, coll)


def test_crash_after_messages_rerun_appends_again_harmlessly(meta, store, settings):
    coll = _ingest(meta, store, settings)
    drop.begin_drop(meta, store, settings, "c1")
    drop.begin_drop(meta, store, settings, "c1")         # a re-run: a second DropCollection per vchannel
    _flush(meta, store, settings, coll)
    assert drop.begin_drop(meta, store, settings, "c1")["held"] == []   # nothing left to append
    drop.finish_drop(meta, "c1")
    _assert_dropped(meta, store, coll)


@pytest.mark.parametrize("point", ["after_files", "after_commit", "drop_synced", "after_release"])
def test_crash_in_the_flushers_drop_path_rerun_converges(meta, store, settings, point):
    coll = _ingest(meta, store, settings)
    drop.begin_drop(meta, store, settings, "c1")
    with inject(f"flush.{point}"):
        for p in pchannels(coll):
            with pytest.raises(InjectedFault):
                flush_pchannel(meta, store, p, settings)
    if point != "after_release":
        assert drop.begin_drop(meta, store, settings, "c1")["held"]
    _flush(meta, store, settings, coll)
    _flush(meta, store, settings, coll)                  # and again: nothing changes
    drop.finish_drop(meta, "c1")
    _assert_dropped(meta, store, coll)


def test_crash_before_the_collection_flips_rerun_finishes(meta, store, settings):
    coll = _ingest(meta, store, settings)
    drop.begin_drop(meta, store, settings, "c1")
    for p in pchannels(coll):   # the flushers alone: a flush killed before it finished the drop
        Flusher(meta, store, p, settings).run()
    rep = drop.begin_drop(meta, store, settings, "c1")   # every vchannel released, not flipped yet
    assert rep["state"] == DROPPING and rep["held"] == []
    rep = drop.drop_collection(meta, store, settings, "c1")
    assert rep["state"] == COLL_DROPPED
    _assert_dropped(meta, store, coll)


def test_a_drop_begun_without_waiting_ends_with_the_flush_that_releases_its_last_vchannel(meta, store, settings):
    """`seglake collections drop` without --wait (or the DAG with wait_for_flush false) left
    the collection Dropping, its name taken, after wal_flush released every vchannel: the
    state diagram's "Dropping --(wal_flush released every vchannel)--> Dropped" needed a
    second drop. The flush that releases the last vchannel finishes it; so does the next
    flush of a pchannel after a flusher killed between its release and the finish."""
    coll = _ingest(meta, store, settings)
    assert drop.drop_collection(meta, store, settings, "c1")["state"] == DROPPING   # held: not waited for
    *first, last = pchannels(coll)
    assert first                                      # two pchannels: the first flush leaves one held
    for p in first:
        assert flush_pchannel(meta, store, p, settings)["drops_finished"] == []
        assert meta.catalog.get(coll.collection_id).state == DROPPING                 # one still held
    assert flush_pchannel(meta, store, last, settings)["drops_finished"] == ["c1"]
    assert meta.catalog.get(coll.collection_id).state == COLL_DROPPED
    _assert_dropped(meta, store, coll)
    with WalClient(meta, store, settings) as c:
        make_collection(c, "c1")                       # the name is free
    # a flusher killed after its release, before the finish: the next flush finishes it
    c2 = meta.catalog.get_by_name("c1")
    with WalClient(meta, store, settings) as c:
        c.insert("c1", synthetic_rows(c2, 20, 1))
    drop.begin_drop(meta, store, settings, "c1")
    for p in pchannels(c2):
        Flusher(meta, store, p, settings).run()
    assert meta.catalog.get(c2.collection_id).state == DROPPING
    assert flush_pchannel(meta, store, pchannels(c2)[0], settings)["drops_finished"] == ["c1"]
    assert meta.catalog.get(c2.collection_id).state == COLL_DROPPED


# -- restores, snapshots, GC -------------------------------------------------------------------------
def _restore(meta, store, src, snap, target, finish=True):
    job_id = restore.restore(meta, store, src, snap, target)
    if finish:
        copyjob.plan(meta, job_id, 3)
        copyjob.run_inline(meta, store, job_id, threads=2)
        copyjob.finalize(meta, job_id)
    return job_id


def test_drop_refused_while_a_restore_targets_it_then_direct_drop(meta, store, settings):
    coll = _ingest(meta, store, settings)
    snapshot.create(meta, store, "c1", "s1")
    job_id = _restore(meta, store, "c1", "s1", "c2", finish=False)
    with pytest.raises(StateError, match=f"job {job_id}"):
        drop.begin_drop(meta, store, settings, "c2")
    assert meta.catalog.get_by_name("c2").state != DROPPING
    copyjob.plan(meta, job_id, 3)
    copyjob.run_inline(meta, store, job_id, threads=2)
    copyjob.finalize(meta, job_id)
    c2 = meta.catalog.get_by_name("c2")
    assert c2.state == CREATED
    rep = drop.drop_collection(meta, store, settings, "c2")   # never saw the WAL: no flusher to wait on
    assert rep["state"] == COLL_DROPPED and rep["mode"] == "direct"
    assert {s.state for s in meta.segments.list(c2.collection_id)} == {DROPPED}
    assert meta.catalog.get(coll.collection_id).state == CREATED   # the source is untouched


def test_snapshot_of_a_dropped_collection_restores_after_forced_gc(meta, store, settings):
    coll = _ingest(meta, store, settings)
    snapshot.create(meta, store, "c1", "s1")            # holds the 100 flushed rows
    snap_files = set(gc.load_references(meta, store).files)
    in_snap = {x.segment_id for x in meta.segments.list(coll.collection_id, states=[FLUSHED])}
    drop.begin_drop(meta, store, settings, "c1")
    _flush(meta, store, settings, coll)
    drop.finish_drop(meta, "c1")
    dropped_files = {f.key for x in meta.segments.list(coll.collection_id) if x.segment_id not in in_snap
                     for f in layout.segment_files(x)}
    tiny = gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True)
    gc.run(meta, store, tiny)
    left = {o.key for o in store.list("")}
    assert snap_files <= left                            # a snapshot's segments' files are kept
    assert dropped_files and not dropped_files & left    # the drop-synced segment's files are gone
    assert [x.name for x in meta.snapshots.list(coll.collection_id)] == ["s1"]
    _restore(meta, store, "c1", "s1", "c1copy")
    report = verify.verify_collection(meta, store, "c1copy")
    assert report["ok"], verify.format_report(report)
    assert report["rows"] == len(FLUSHED_PKS)


def test_gc_reclaims_dropped_files_only_after_drop_tolerance_then_the_record(meta, store, settings):
    coll = _ingest(meta, store, settings)
    drop.drop_collection(meta, store, settings, "c1", wait=False)
    _flush(meta, store, settings, coll)
    drop.finish_drop(meta, "c1")
    files = _files(meta, coll)
    assert files <= {o.key for o in store.list("")}
    gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=3600, floor=0, force=True))
    assert files <= {o.key for o in store.list("")}      # within drop_tolerance: kept
    assert meta.catalog.get(coll.collection_id).state == COLL_DROPPED
    gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))
    assert not files & {o.key for o in store.list("")}
    gc.run(meta, store, gc.GCOptions(missing_tolerance=0, drop_tolerance=0, floor=0, force=True))
    assert meta.kv.count(meta.keys.segments_prefix(coll.collection_id)) == 0
    with pytest.raises(NotFound):                         # nothing left: the record is removed
        meta.catalog.get(coll.collection_id)


# -- CLI ----------------------------------------------------------------------------------------------
def test_cli_drop_waits_and_refuses_on_a_terminal_without_yes(meta, store, settings, monkeypatch, capsys):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    coll = _ingest(meta, store, settings)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert cli.main(["collections", "drop", "c1"]) == 2
    assert "without --yes" in capsys.readouterr().err
    assert meta.catalog.get(coll.collection_id).state == CREATED
    rc = cli.main(["collections", "drop", "c1", "--yes", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["state"] == DROPPING
    _flush(meta, store, settings, coll)
    rc = cli.main(["collections", "drop", "c1", "--yes", "--wait", "--timeout-hours", "0.01", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["state"] == COLL_DROPPED
    with pytest.raises(SystemExit):
        cli.main(["collections", "drop", "c1", "--yes", "--timeout-hours", "nan"])


def test_cli_drop_text_shows_times_not_epochs(meta, store, settings, monkeypatch, capsys):
    """Issue 20: the drop output printed a raw epoch (and raw time ticks)."""
    import re

    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    coll = _ingest(meta, store, settings)
    assert cli.main(["collections", "drop", "c1", "--yes"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"held: \S+ \(checkpoint at 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC, [0-9.]+ s behind the log\)",
                     out), out
    _flush(meta, store, settings, coll)
    assert cli.main(["collections", "drop", "c1", "--yes", "--wait", "--timeout-hours", "0.01"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"latest dropped at 20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC, reclaimable by GC from "
                     r"20\d\d-\d\d-\d\d \d\d:\d\d:\d\d UTC \(drop_tolerance 3 h", out), out
    assert not re.search(r"\b1[0-9]{9}(\.[0-9]+)?\b", out), out            # no unix epoch anywhere
    assert "None" not in out, out


def test_a_direct_drop_while_a_flusher_runs_leaves_nothing_written_for_the_released_vchannels(meta, store, settings):
    """A flusher opened before a direct drop (a collection the client never announced,
    fed by a raw writer) must write neither a segment nor a checkpoint for its vchannels
    once they are released: every flusher commit re-checks the collection record."""
    from wal_helpers import schema
    from seglake.wal.writer import WalWriter
    d = meta.catalog.create("direct", schema(), shards=16)
    with WalClient(meta, store, settings) as c:
        a = make_collection(c, "a", shards=16)
        c.insert("a", synthetic_rows(a, 64, 1))
    v = d.vchannels[0]
    p = pchannel_of(v)
    with WalWriter.open(meta, store, p, settings) as w:   # rows for d without an announcement
        w.append(Message.insert(v, d.collection_id, d.partitions[0].partition_id,
                                synthetic_rows(d, 5, 1).to_batches()[0]))
    f = Flusher(meta, store, p, settings).open()
    assert v in f.states
    assert drop.begin_drop(meta, store, settings, "direct")["state"] == DROPPING
    drop.finish_drop(meta, "direct")
    f.run(flush_all=True)
    assert v not in f.states
    assert read_checkpoint(meta, v)[0] is None
    assert {s.state for s in meta.segments.list(d.collection_id)} <= {DROPPED}
    assert segment_rows(meta, store, d.collection_id, [FLUSHED]) == ([], [])
    va = next(x for x in a.vchannels if pchannel_of(x) == p)     # the other collection is still served
    assert read_checkpoint(meta, va)[0] is not None


def test_finishing_a_drop_acts_on_the_collection_begun_never_on_a_newer_one_with_its_name(meta, store, settings):
    """A drop run (DAG, CLI --wait) finishes by the id it began on: when someone else
    finished it meanwhile and re-created the name, the run reports the old collection
    Dropped and leaves the new one alone."""
    from wal_helpers import schema
    old = meta.catalog.create("c1", schema(), shards=1)
    rep = drop.begin_drop(meta, store, settings, "c1")
    drop.finish_drop(meta, "c1")                               # someone else finishes it
    new = meta.catalog.create("c1", schema(), shards=1)
    again = drop.finish_drop(meta, "c1", collection_id=rep["collection_id"])
    assert again["collection_id"] == old.collection_id and again["state"] == COLL_DROPPED
    assert meta.catalog.get(new.collection_id).state == CREATED
    assert drop.wait_released(meta, "c1", collection_id=old.collection_id)["collection_id"] == old.collection_id
    assert drop.find(meta, "c1", collection_id=new.collection_id + 10**6) is None
