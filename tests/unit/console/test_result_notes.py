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
    # a flush marked success instead of run: fewer pchannels flushed than prepared
    assert wal_flush_note({"pchannels": 1, "expected": 2, "segments": 3, "rows": 9}).startswith(
        "FAILED: wal_flush flushed 1 of 2 pchannels")
    assert wal_flush_note({"pchannels": 2, "expected": 2}).startswith("wal_flush: 0 segments flushed")


def test_the_drop_note_says_dropping_when_the_drop_did_not_finish():
    from seglake.runinfo import drop_note

    s = {"collection": "d1", "state": "Dropping", "segments_dropped": 0, "rows_dropped": 0, "bytes_awaiting_gc": 0}
    assert drop_note({"collection": "d1"}, s).startswith("FAILED: drop_collection d1 is still Dropping")
    waived = drop_note({"collection": "d1", "wait_for_flush": False}, s)
    assert waived.startswith("drop_collection d1: Dropping (wait_for_flush is false") and "Dropped, files" not in waived
    done = drop_note({"collection": "d1"}, {**s, "state": "Dropped", "segments_dropped": 2})
    assert done.startswith("drop_collection d1: Dropped, 2 segments") and "wait for GC" in done


def test_the_note_of_a_restore_to_a_time_says_what_the_replay_used():
    from seglake.runinfo import restore_note

    job = {"job_id": 7, "engine": "inline", "state": "Completed", "total_rows": 99, "duration_s": 2.0,
           "progress": {"copied_segments": 2, "total_segments": 2, "copied_bytes": 4096}}
    summary = {"as_of_utc": "2026-11-27T12:00:00.000Z (tso 1, logical 0)", "snapshot": "s1", "messages": 12,
               "log_bytes": 2048, "rows_replayed": 40, "deletes_replayed": 3, "state": "Created"}
    importing = restore_note({"collection": "src", "target": "t"}, {**summary, "state": "Importing"}, job)
    assert importing.startswith("FAILED: restore src/None -> t: copy job Completed but the target is Importing, "
                                "not Created: its replay did not finish"), importing
    note = restore_note({"collection": "src", "as_of": "2026-11-27T12:00:00Z", "target": "t"}, summary, job)
    assert note.startswith("restore src as of 2026-11-27T12:00:00.000Z") and "from snapshot s1" in note
    assert "12 log messages (2.0 KiB of log) replayed: 40 rows, 3 deletes" in note and "copy job 7" in note
    # the copy job's facts are the base's copy, said so ('replayed: 40 rows, 3 deletes; 99 rows, 2/2
    # segments' read as two counts of one thing)
    assert "3 deletes; base copied: 99 rows, 2/2 segments, 4.0 KiB" in note, note
    born = restore_note({"collection": "src", "target": "t"}, {**summary, "snapshot": None}, job)
    assert "from the collection's creation" in born


def test_the_schedule_note_counts_milvus_captures_and_says_which_task_failed():
    from seglake.runinfo import schedule_note

    milvus = [{"captured": {"copied_bytes": 4096}, "pruned": ["sched_20261127T1200Z"], "verify": {"ok": True}},
              {"captured": None, "pruned": [], "verify": None}]
    assert schedule_note([], milvus) == ("snapshot_schedule: 0 retention policies run; Milvus: 1 of 2 collections "
                                         "captured (4096 bytes copied), 1 bundles pruned, 1 verified")
    assert schedule_note([], []) == "snapshot_schedule: 0 retention policies run"
    ran = [{"created": "sched_20261128T0300Z", "pruned": ["sched_a", "sched_b"], "dry_run": False,
            "export": {"exported": ["sched_20261128T0300Z"], "pruned": [], "dry_run": False}},
           {"created": None, "pruned": [], "dry_run": False}]
    assert schedule_note(ran, []) == ("snapshot_schedule: 2 retention policies run: 1 snapshots created, 2 pruned, "
                                      "1 bundles exported, 0 pruned in the target")
    # a dry run changed nothing: it read like a real run ("2 retention policies run")
    dry = [{**r, "dry_run": True} for r in ran]
    assert schedule_note(dry, [], dry_run=True) == (
        "snapshot_schedule DRY RUN (nothing created, pruned or exported): 2 retention policies run: would create "
        "1 snapshots, would prune 2, would export 1 bundles and prune 0 in the target")
    assert "Milvus sources: FAILED" in schedule_note([], None)
    # one half did not run (failed or marked success by hand): the note, hence the run, is FAILED
    assert schedule_note([], None).startswith("FAILED: snapshot_schedule: 0 retention policies run")
    assert schedule_note(None, []).startswith("FAILED: snapshot_schedule: retention policies: FAILED")
    assert schedule_note(None, None).startswith("FAILED")


def test_a_scheduled_compaction_note_says_what_was_compacted_beside_what_was_skipped():
    """One collection skipped (a restore importing into it) and another compacted: the note
    said only "scheduled compaction of 2 collection(s): not compacted: b: ...", as if the run
    had compacted nothing."""
    from seglake.runinfo import compaction_note

    done = {"dry_run": False, "skipped": "b: a restore is importing into it (segments [7])", "engine": "inline",
            "collections": ["a", "b"], "gain": {"units": 2}, "seconds": 3.0,
            "counts": {"committed": 2, "lost": 0, "segments_in": 6, "segments_out": 2, "rows_dropped": 10,
                       "bytes_in": 6144, "bytes_out": 2048}}
    note = compaction_note({}, done)
    assert note.startswith("scheduled compaction of 2 collection(s) (inline): 2 units committed, 0 lost; 6 segments "
                           "-> 2"), note
    assert note.endswith("; not compacted: b: a restore is importing into it (segments [7])"), note
    alone = compaction_note({"collection": "b"}, {**done, "collections": ["b"], "counts": {}, "gain": {"units": 0}})
    assert alone == "compaction of default.b: not compacted: b: a restore is importing into it (segments [7])"
    dry = compaction_note({}, {**done, "dry_run": True, "counts": {}, "gain": {"units": 2, "segments_in": 6,
                                                                               "segments_out": 2}})
    assert dry.startswith("scheduled compaction of 2 collection(s) (dry run): 2 units") and "not compacted: b" in dry
