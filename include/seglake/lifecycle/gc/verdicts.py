"""The names of GC's verdicts: why a listed key is a candidate or why it is kept (the
report's `reason` column and the summary's keys), and the fixed sizes of a run."""

from __future__ import annotations

from seglake.storage import layout

GC_PREFIX = layout.GC_RUNS
INTERNAL = tuple(root + "/" for root in layout.INTERNAL_ROOTS)
SWEEP_BATCH = 1000
SAMPLE = 20
ORPHAN, DROPPED_SEGMENT, WAL_TRUNCATED = "orphan", "dropped_segment", "wal_truncated"
CANDIDATE_REASONS = (ORPHAN, DROPPED_SEGMENT, WAL_TRUNCATED)
WAL_RETAINED, WAL_SKIPPED = "wal_retained", "wal_skipped_error"  # kept: needed by a consumer / not judged
REFERENCED, INTERNAL_FILE, UNRECOGNISED = "referenced", "internal", "unrecognised"
UNKNOWN_SEGMENT, OUT_OF_SCOPE, DROPPED_RECENT = "unknown_segment", "out_of_scope", "dropped_within_tolerance"
UNREADABLE_DIR = "unreadable_directory"  # listed with report_unreadable: its content was not judged
BLOCKED, PAUSED, YOUNG = "skipped_pending_snapshot", "skipped_paused", "kept_young"
