"""Data written before the row model (tests/data/store_v1, by main at d95988c) read by the
row model's visibility function: legacy segments (no fields 0/1), legacy delta logs (pk
int64, ts uint64, no partition), legacy stats logs ({field_id, min, max, rows}) give
exactly the visible pks the old code meant."""

from __future__ import annotations

import numpy as np
import pytest
from upgrade_helpers import load_store_v1

from seglake.lifecycle import verify
from seglake.meta.segments import FLUSHED
from seglake.segfiles import TS_FIELD, read_stats
from seglake.visibility import visible_count, visible_rows


@pytest.fixture
def v1(meta, store, settings):
    return load_store_v1(meta, settings.store_uri)["collections"]


@pytest.mark.parametrize("name", ["demo_v1", "wal_v1"])
def test_visible_pks_of_old_data_are_what_the_old_code_meant(meta, store, v1, name):
    exp = v1[name]
    coll = meta.catalog.get_by_name(name)
    assert coll.collection_id == exp["collection_id"]
    segs = list(meta.segments.list(coll.collection_id, states=[FLUSHED]))
    assert segs and all(TS_FIELD not in s.binlogs for s in segs)      # legacy segments, every one
    t = visible_rows(meta, store, coll.collection_id, columns=["price"])
    assert sorted(t.column("pk").to_pylist()) == exp["visible_pks"]
    assert visible_count(meta, store, coll.collection_id) == exp["visible_rows"]
    # legacy rows: Timestamp = the record's start_ts, RowID negative positions
    start = {s.segment_id: s.start_ts for s in segs}
    assert all(start[s] == ts for s, ts in zip(t.column("segment_id").to_pylist(), t.column("Timestamp").to_pylist()))
    assert all(r < 0 for r in t.column("RowID").to_pylist())
    report = verify.verify_collection(meta, store, name)
    assert report["ok"], verify.format_report(report)
    assert report["visible_rows"] == exp["visible_rows"] and report["rows"] == exp["rows_in_binlogs"]


def test_the_reinserted_pks_stay_visible(meta, store, v1):
    """wal_v1: 41..45 were deleted from round 1's segments (legacy delta logs there), then
    inserted again into round 2's segments whose start_ts is BELOW the delete's tick. Read
    collection-wide, those legacy deletes would hide the new rows; they apply to their own
    segment only."""
    coll = meta.catalog.get_by_name("wal_v1")
    t = visible_rows(meta, store, coll.collection_id)
    rows = {}
    for pk, seg in zip(t.column("pk").to_pylist(), t.column("segment_id").to_pylist()):
        rows.setdefault(pk, []).append(seg)
    segs = {s.segment_id: s for s in meta.segments.list(coll.collection_id)}
    for pk in (41, 42, 43, 44, 45, 11):
        assert len(rows[pk]) == 1
        holder = segs[rows[pk][0]]
        assert not holder.deltalogs
    delete_ts = max(b.ts_to for s in segs.values() for b in s.deltalogs)
    assert any(segs[rows[pk][0]].start_ts < delete_ts for pk in (41, 42, 43, 44, 45))
    assert not set(range(12, 31)) & set(rows) and not set(v1["wal_v1"]["unflushed_pks"]) & set(rows)


def test_legacy_stats_logs_read_as_ranges(meta, store, v1):
    for name in ("demo_v1", "wal_v1"):
        coll = meta.catalog.get_by_name(name)
        t = visible_rows(meta, store, coll.collection_id)
        for seg in meta.segments.list(coll.collection_id):
            st = read_stats(store, seg)
            assert st.bloom is None and st.rows == seg.num_rows
            mine = np.array([p for p, s in zip(t.column("pk").to_pylist(), t.column("segment_id").to_pylist())
                             if s == seg.segment_id], dtype=np.int64)
            assert st.may_contain(mine).all()
            assert not st.may_contain(np.array([st.min - 1, st.max + 1])).any()


def test_a_wal_written_before_the_row_model_is_read_as_is_and_flushed_once(meta, store, settings, v1):
    """wal_v1's log is format 1 (numbered fragments, absolute ticks, no index): the new
    flusher reads it as is, flushes the 30 rows that were never flushed, and skips what
    the old flusher already wrote; new producers append after it (the record converts
    in place) and a delete through the new log hides an old row."""
    from seglake.lifecycle.flush import flush_pchannel, pchannels_with_log
    from seglake.wal.client import WalClient
    from seglake.wal.log import WalLog

    exp = v1["wal_v1"]
    coll = meta.catalog.get_by_name("wal_v1")
    ps = pchannels_with_log(meta)
    assert ps and all(WalLog(meta, store, p).state().legacy_last > 0 for p in ps)
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
    got = sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())
    assert got == sorted(exp["visible_pks"] + exp["unflushed_pks"])
    old = exp["visible_pks"][0]
    with WalClient(meta, store, settings) as c:
        c.delete("wal_v1", [old])
        c.insert("wal_v1", __import__("seglake.wal.client", fromlist=["x"]).synthetic_rows(coll, 3, 10**6))
    for p in ps:
        flush_pchannel(meta, store, p, settings, flush_all=True)
        flush_pchannel(meta, store, p, settings, flush_all=True)     # converged: nothing twice
    got = sorted(visible_rows(meta, store, coll.collection_id).column("pk").to_pylist())
    assert got == sorted([x for x in exp["visible_pks"] if x != old] + exp["unflushed_pks"]
                         + [10**6, 10**6 + 1, 10**6 + 2])
