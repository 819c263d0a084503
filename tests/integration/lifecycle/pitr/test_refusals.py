"""Every refusal of a restore to a time comes before anything is created (issue 30,
deliver 6): an instant outside the window, before the collection existed, in the future,
in a gap of the log (naming the missing fragments), a window that is off, and bad input
(NaN, no time zone, 1970, 3000, a float, a bool, garbage)."""

from __future__ import annotations

import time

import pytest

from seglake.errors import NotFound, StateError, ValidationError
from seglake.lifecycle import pitr
from seglake.lifecycle.pitr import window as pwindow
from seglake.meta.alloc import compose_ts
from seglake.storage import layout
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, rows
from etcd_root import root_changes, root_state


def _nothing_created(meta, store, before_keys: int, before_files: set):
    assert [c.name for c in meta.catalog.list(include_dropped=True)] == ["src"]
    assert meta.kv.count(meta.keys.copy_jobs_prefix()) == 0
    assert {o.key for o in store.list("")} == before_files


@pytest.fixture
def source(meta, store, settings):
    with WalClient(meta, store, settings) as c:
        c.create_collection("src", SCHEMA, shards=2)
        c.insert("src", rows(range(1, 20), 1.0))
    return meta.catalog.get_by_name("src")


BAD = ["nan", "NaN", float("nan"), float("inf"), 1.5, True, None, "", "yesterday", "2026-11-27T12:00:00",
       "2026-11-27 12:00", "1970-01-01T00:00:00Z", "3000-01-01T00:00:00Z", "1970-01-01T00:00:01+00:00",
       "2026-02-30T00:00:00Z", -1, 0, 2**63, "0012", [1]]


@pytest.mark.parametrize("bad", BAD, ids=[repr(b)[:30] for b in BAD])
def test_bad_instants_are_refused(meta, store, source, bad):
    pitr.set_window(meta, "src", "1h")
    files = {o.key for o in store.list("")}
    with pytest.raises(ValidationError):
        pitr.restore_as_of(meta, store, "src", "r", bad)
    _nothing_created(meta, store, 0, files)


def test_instants_the_log_cannot_serve_are_refused_first(meta, store, source, settings, monkeypatch):
    files = {o.key for o in store.list("")}
    now = meta.tso.now()
    with pytest.raises(pitr.OutsideWindow, match="no point-in-time window"):
        pitr.restore_as_of(meta, store, "src", "r", now)
    pitr.set_window(meta, "src", "1h")
    with pytest.raises(pitr.OutsideWindow, match="in the future"):
        pitr.restore_as_of(meta, store, "src", "r", compose_ts(int((time.time() + 60) * 1000)))
    with pytest.raises(pitr.OutsideWindow, match="before collection 'src' existed"):
        pitr.restore_as_of(meta, store, "src", "r", source.created_ts - 1)
    pitr.set_window(meta, "src", "1m")
    monkeypatch.setattr(pwindow, "clock", lambda: time.time() + 120)   # two minutes on: now is out
    with pytest.raises(pitr.OutsideWindow, match="outside the point-in-time window"):
        pitr.restore_as_of(meta, store, "src", "r", meta.tso.now())
    monkeypatch.setattr(pwindow, "clock", time.time)
    with pytest.raises(NotFound):
        pitr.restore_as_of(meta, store, "nope", "r", now)
    with pytest.raises(ValidationError):
        pitr.restore_as_of(meta, store, "src", "bad name!", now)
    _nothing_created(meta, store, 0, files)
    # a committed fragment missing from the store: a gap, named
    pitr.set_window(meta, "src", "1h")
    frag = sorted(o.key for o in store.list(f"{layout.WAL}/"))[0]
    store.delete_many([frag])
    with pytest.raises(pitr.LogGap, match=f"missing from the store: #1 \\({frag}\\)"):
        pitr.restore_as_of(meta, store, "src", "r", meta.tso.now())
    assert [c.name for c in meta.catalog.list(include_dropped=True)] == ["src"]


def test_a_taken_target_name_is_refused(meta, store, source):
    pitr.set_window(meta, "src", "1h")
    with pytest.raises(Exception, match="already exists"):
        pitr.restore_as_of(meta, store, "src", "src", meta.tso.now())


def test_window_of_a_dropped_or_missing_collection(meta, store, source):
    with pytest.raises(NotFound):
        pitr.set_window(meta, "nope", "1h")
    meta.catalog.set_state(source.collection_id, "Dropping")
    with pytest.raises((StateError, NotFound)):
        pitr.set_window(meta, "src", "1h")


def test_an_instant_in_the_future_is_refused_without_a_write(meta, store, source, tmp_path):
    """Issuing a timestamp writes the global mark in etcd: an instant beyond the wall clock
    and that mark is refused on a read alone (here and from a backup target)."""
    from seglake.lifecycle.pitr import from_target
    from seglake.storage.local import LocalStore

    pitr.set_window(meta, "src", "1h")
    future = [compose_ts(int((time.time() + 60) * 1000)), "2999-01-01T00:00:00Z"]
    before = root_state(meta)
    for ts in future:
        with pytest.raises(pitr.OutsideWindow, match="in the future"):
            pitr.restore_as_of(meta, store, "src", "r", ts)
        with pytest.raises(pitr.OutsideWindow, match="in the future"):
            from_target.plan_from_target(meta, LocalStore(tmp_path / "backup"), "src", ts)
    assert root_state(meta) == before, f"a refusal wrote to etcd: {root_changes(before, root_state(meta))}"


def test_a_seeded_collection_never_written_through_the_wal_is_not_restored_empty(meta, store, settings):
    """`seglake demo seed` then `pitr set` then `restore --as-of`: the rows were never in the
    log, so a replay from the creation gave an EMPTY collection, 'verified' (the guard only
    knew collections whose first WAL write saw earlier segments). Refused now, naming the
    snapshot to take; with one, the restore starts from it and keeps every row."""
    from seglake.dev.demo import SeedParams, seed
    from seglake.lifecycle import snapshot

    coll, _ = seed(meta, store, SeedParams(name="seeded", partitions=1, segments=1, rows=10, dim=4))
    pitr.set_window(meta, "seeded", "1h")
    time.sleep(0.01)
    with pytest.raises(pitr.OutsideWindow, match=r"never written through the WAL.*seglake snapshots create seeded"):
        pitr.restore_as_of(meta, store, "seeded", "seeded_t", meta.tso.now())
    assert [c.name for c in meta.catalog.list(include_dropped=True)] == ["seeded"]
    snapshot.create(meta, store, "seeded", "s1")
    assert pitr.plan(meta, store, "seeded", meta.tso.now()).snapshot == "s1"


def test_a_target_taken_by_a_restore_to_a_time_is_named_as_one(meta, store, source):
    """A second restore into the target of a restore to a time said '(snapshot None of
    'src')'; it names the restore: its source, instant and where it started."""
    pitr.set_window(meta, "src", "1h")
    first = meta.tso.now()
    pitr.restore_as_of(meta, store, "src", "back", first)
    with pytest.raises(Exception) as e:
        pitr.restore_as_of(meta, store, "src", "back", meta.tso.now())
    msg = str(e.value)
    assert "None" not in msg and "a restore of 'src' as of " in msg and "from its creation" in msg, msg
    assert "re-trigger snapshot_restore with collection='src', as_of=" in msg, msg
