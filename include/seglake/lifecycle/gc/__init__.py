"""Garbage collection: fail-closed, mark then sweep; never a referenced file, never a
file that is not seglake's own.

The package, one concern per module: options (GCOptions, GCError), pause (pauses and
the scheduled-run settings), refs (the references), walview (the WAL as GC sees it),
judgement (THE judgement of one key), engine (inline or Spark), listing (the store cut into listing units, both
engines), report (the candidate report under _gc/), marking, sweeping, records
(snapshot, copy-job and collection records), inline (the whole inline run), dist (what
the Spark mark's executors run), verdicts (the reason names). Modules are named so that
no module shadows a function of the same name. This module is the public face:
`from seglake.lifecycle import gc; gc.mark(...)`.

    check tolerances (finite; floor unless force) -> load references (ALL or nothing)
      -> mark:  list the store (cutoff fixed when listing STARTS), judge every key:
                only keys `layout.parse_key` parses (and round-trips) are ever candidates:
                orphans older than the cutoff, and the files of segments Dropped longer
                than drop_tolerance; everything else is counted as unrecognised (files,
                bytes, a sample) and never touched -> candidate report
                (_gc/{run}/candidates.parquet, dropped.json, summary.json)
      -> sweep: only a report whose parts are byte for byte what its mark wrote (sha256 in
                summary.json), never a dry run's; per batch of 1,000: refresh references with
                everything changed in etcd since they were loaded (read from etcd's history,
                or from the current state once that history is compacted), drop candidates
                now referenced, delete the rest
                only if still the object the mark saw (size, mtime), never through a
                symlink; then remove the records of Dropped segments whose files are all
                gone (guarded: the record is unchanged since the mark)
      -> records: stale PENDING and unfinished DELETING snapshots, expired TTL snapshots,
                finished copy jobs past retention, empty Dropped collections

References: every file of every live segment record, every file of every snapshot
(RefIndex) and the snapshot records' own manifests and metadata; files of Dropped
segment records until their drop tolerance passes. A collection with a PENDING snapshot,
or paused, is skipped and reported. Internal prefixes (_gc/, _reports/) are never
collected. WAL fragments (wal/{pchannel}/*.frag) are candidates ("wal_truncated") only
when `wal.checkpoints.truncatable_fragments` says every live vchannel of the pchannel has a
checkpoint above them, or no committed fragment of the log names them (a producer's
write that never committed: producers never commit a file older than a minute), and
they are older than missing_tolerance; the sets are computed
once per pchannel in the mark (any error: no WAL key is a candidate, the error is
reported) and again right before each sweep batch, which records the truncation in etcd
before deleting. Counts are true: `deleted` is what this run
unlinked, a file another run removed first is `already_gone`. A dry run is the mark
alone and reports the same candidates (and totals) the real run deletes.
"""

from __future__ import annotations

from seglake.lifecycle.gc.verdicts import (GC_PREFIX, INTERNAL, SWEEP_BATCH, SAMPLE, ORPHAN,
                                           DROPPED_SEGMENT, WAL_TRUNCATED, CANDIDATE_REASONS,
                                           WAL_RETAINED, WAL_SKIPPED, REFERENCED, INTERNAL_FILE,
                                           UNRECOGNISED, UNKNOWN_SEGMENT, OUT_OF_SCOPE,
                                           DROPPED_RECENT, UNREADABLE_DIR, BLOCKED, PAUSED, YOUNG)
from seglake.lifecycle.gc.options import (GCError, GCOptions, positive)
from seglake.lifecycle.gc.pause import (pause, resume, paused_scopes, set_schedule, get_schedule,
                                        clear_schedule)
from seglake.lifecycle.gc.refs import (References, load_references, snapshot_records,
                                       refresh_references, changed_records)
from seglake.lifecycle.gc.walview import (WalView, wal_truncatable, wal_referenced, load_wal_view,
                                          not_truncatable)
from seglake.lifecycle.gc.judgement import (Reclaim, reclaimable, judge, decide, lookup_segment,
                                        refuse_symlink, report_row, classify, scan_prefixes)
from seglake.lifecycle.gc.report import (CANDIDATES, DROPPED_PARTS, LEGACY_PART, check_run_id,
                                         part_key, write_part, report_parts, read_part, sweep_plan,
                                         read_report, read_json, latest_summary)
from seglake.lifecycle.gc.marking import (Tally, MarkCounts, MarkResult, new_run_id, judging_time, mark, finish_mark)
from seglake.lifecycle.gc.sweeping import (SweepResult, still_collectable, sweep, record_sweep,
                                        sweep_part, sweep_parts_from_env)
from seglake.lifecycle.gc.records import (clean_records)
from seglake.lifecycle.gc.engine import choose as choose_engine
from seglake.lifecycle.gc.inline import (run, format_summary)

__all__ = ['choose_engine', 'GC_PREFIX', 'INTERNAL', 'SWEEP_BATCH', 'SAMPLE', 'ORPHAN', 'DROPPED_SEGMENT', 'WAL_TRUNCATED', 'CANDIDATE_REASONS', 'WAL_RETAINED', 'WAL_SKIPPED', 'REFERENCED', 'INTERNAL_FILE', 'UNRECOGNISED', 'UNKNOWN_SEGMENT', 'OUT_OF_SCOPE', 'DROPPED_RECENT', 'UNREADABLE_DIR', 'BLOCKED', 'PAUSED', 'YOUNG', 'GCError', 'GCOptions', 'positive', 'pause', 'resume', 'paused_scopes', 'set_schedule', 'get_schedule', 'clear_schedule', 'References', 'load_references', 'snapshot_records', 'refresh_references', 'changed_records', 'WalView', 'wal_truncatable', 'wal_referenced', 'load_wal_view', 'not_truncatable', 'Reclaim', 'reclaimable', 'judge', 'decide', 'lookup_segment', 'refuse_symlink', 'report_row', 'classify', 'scan_prefixes', 'CANDIDATES', 'DROPPED_PARTS', 'LEGACY_PART', 'check_run_id', 'part_key', 'write_part', 'report_parts', 'read_part', 'sweep_plan', 'read_report', 'read_json', 'latest_summary', 'Tally', 'MarkCounts', 'MarkResult', 'new_run_id', 'judging_time', 'mark', 'finish_mark', 'SweepResult', 'still_collectable', 'sweep', 'record_sweep', 'sweep_part', 'sweep_parts_from_env', 'clean_records', 'run', 'format_summary']

from seglake.facade import seal  # noqa: E402

seal(__name__)
