"""The compaction DAG's run note (runinfo.compaction_note). A run that found nothing to
compact said 'compaction of default.cmp (inline): 0 units committed, 0 lost; 0 segments -> 0,
0 rows dropped, 0 B -> 0 B' of a collection of 4 segments (the CLI says 'nothing to compact')."""

from __future__ import annotations

from seglake.runinfo import compaction_note

P = {"collection": "cmp", "db": "default"}
NONE = {"units": 0, "segments_in": 0, "segments_out": 0, "rows_dropped": 0, "bytes_in": 0}


def test_nothing_to_compact_is_said():
    done = {"dry_run": False, "skipped": None, "gain": NONE, "engine": "inline", "seconds": 0.1,
            "counts": {"committed": 0, "lost": 0, "segments_in": 0, "segments_out": 0}}
    assert compaction_note(P, done) == "compaction of default.cmp: nothing to compact"
    assert compaction_note(P, {**done, "dry_run": True, "counts": {}}) == \
        "compaction of default.cmp: nothing to compact (dry run)"


def test_a_run_that_compacted_is_counted_as_before():
    done = {"dry_run": False, "skipped": None, "engine": "inline", "seconds": 0.5,
            "gain": {**NONE, "units": 4, "segments_in": 6, "segments_out": 4, "rows_dropped": 20},
            "counts": {"committed": 4, "lost": 0, "segments_in": 6, "segments_out": 4, "rows_dropped": 20,
                       "bytes_in": 296765, "bytes_out": 289552}}
    note = compaction_note(P, done)
    assert note.startswith("compaction of default.cmp (inline): 4 units committed, 0 lost; 6 segments -> 4, "
                           "20 rows dropped"), note
