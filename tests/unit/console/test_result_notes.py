"""The run notes of the small lifecycles (issue 27: every lifecycle DAG ends with the note
that decides its state): FAILED when the result task left nothing, else one line."""

from seglake.runinfo import result_note, wal_flush_note


def test_no_result_is_a_failed_note_and_a_result_is_one_line():
    p = {"collection": "demo", "name": "s1"}
    assert result_note("snapshot_drop", p, None) == "FAILED: snapshot demo/s1 did not finish (see the task logs)"
    assert result_note("snapshot_drop", p, {"files_removed": 3}) == "snapshot demo/s1 dropped, 3 snapshot files removed"
    assert result_note("snapshot_retention", p, {"cleared": True}) == "retention policy of demo cleared"
    assert result_note("snapshot_retention", p, {"keep_last": 2}) == "retention policy of demo set"
    assert result_note("snapshot_schedule", {}, []) == "snapshot_schedule: 0 retention policies run"   # [] is a result
    assert result_note("verify_collection", p, {"files_checked": 4, "rows": 80}) == \
        "verify demo: OK, 4 files, 80 rows checked"


def test_a_wal_flush_with_no_pchannels_did_its_work():
    assert wal_flush_note(None, []) == "wal_flush: no WAL pchannels, nothing to flush"
    assert wal_flush_note(None, None).startswith("FAILED")
    assert wal_flush_note(None, ["p0"]).startswith("FAILED")   # channels listed, no summary: not finished
