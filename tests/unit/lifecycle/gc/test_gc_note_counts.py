"""The gc run note reports the run's own totals whichever engine swept: with the Spark
sweep there is no inline `sweep` XCom, and the note said "deleted N files (0 B)" and
never how many deletes failed."""

from seglake.runinfo import gc_note

SPARK_SWEPT = {"run_id": "r", "dry_run": False, "candidates": 5, "candidate_bytes": 5000,
               "by_collection_reason": {"7/orphan": {"files": 5, "bytes": 5000}}, "unrecognised": 0,
               "deleted": 3, "deleted_bytes": 3072, "error_count": 2}


def test_a_spark_sweep_note_has_its_bytes_and_its_failed_deletes():
    note = gc_note(SPARK_SWEPT, None, {7: "c"})
    assert note.startswith("gc: deleted 3 files (3.0 KiB) of 5 candidates, 2 could not be deleted"), note


def test_the_inline_sweeps_xcom_still_wins_and_no_errors_says_nothing():
    swept = {"deleted": 5, "deleted_bytes": 5000, "error_count": 0}
    note = gc_note({**SPARK_SWEPT, "error_count": 0}, swept, {7: "c"})
    assert note.startswith("gc: deleted 5 files (4.9 KiB) of 5 candidates -- c:") and "could not" not in note, note


def test_a_real_run_whose_sweep_or_records_did_not_run_is_failed():
    """Marked success by hand: the counts say 0 deleted, the note must say the sweep did not run."""
    note = gc_note({**SPARK_SWEPT, "swept": False, "deleted": 0, "deleted_bytes": 0}, None, {7: "c"})
    assert note.startswith("FAILED: gc: the sweep did not run, nothing was deleted of 5 candidates"), note
    note = gc_note({**SPARK_SWEPT, "swept": True}, None, {7: "c"}, cleaned=False)
    assert note.startswith("FAILED: gc: the records step did not run"), note
    dry = {**SPARK_SWEPT, "dry_run": True, "swept": False}
    assert gc_note(dry, None, {7: "c"}, cleaned=False).startswith("gc DRY RUN")
