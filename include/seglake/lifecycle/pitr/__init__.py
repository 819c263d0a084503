"""Point-in-time restore (issue 30): a collection as it was at any instant of its window.

The package: instants (as_of: ISO-8601 with a zone, or a TSO), window (the per-collection
`pitr_window` policy and what it holds: log fragments and base snapshots, for GC, retention
and `wal status`), planning (the base snapshot, where each vchannel's replay starts, every
refusal), restoring (the restore's set-up through lifecycle/restore and the copy job),
replaying (the log replayed into the target up to the instant; then the target is usable).
An undrop (restoring.undrop) is a restore of a dropped collection to just before its drop: from
this store, or (from_target.undrop_from_target) from a backup target's bundle and WAL archive
alone, the drop's instant read from the archive.
This module is the public face.

    job_id = pitr.restore_as_of(meta, store, "coll", "coll_at_noon", "2026-11-27T12:00:00Z")
    copyjob.plan(meta, job_id); copyjob.run_inline(meta, store, job_id); copyjob.finalize(meta, job_id)
    pitr.replay(meta, store, settings, target_collection_id)     # resumable; then Created
"""

from __future__ import annotations

from seglake.lifecycle.pitr.instants import (parse_as_of, describe, MIN_YEAR, MAX_YEAR)
from seglake.lifecycle.pitr.window import (parse_window, set_window, get_window, window_of, clear_window,
                                           list_windows, Hold, holds, held_fragment, held_positions,
                                           held_snapshots, cost)
from seglake.lifecycle.pitr.planning import (OutsideWindow, LogGap, Plan, base_snapshot, fragment_at, plan)
from seglake.lifecycle.pitr.restoring import (restore_as_of, undrop, plan_undrop, check_undrop, PitrSnapshotSource, LogSource)
from seglake.lifecycle.pitr.replaying import (ReplayRaceLost, replay, replay_vchannel, finish, summary,
                                              replay_plan, progress, replays)

__all__ = ['parse_as_of', 'describe', 'MIN_YEAR', 'MAX_YEAR', 'parse_window', 'set_window', 'get_window',
           'window_of', 'clear_window', 'list_windows', 'Hold', 'holds', 'held_fragment', 'held_positions',
           'held_snapshots', 'cost', 'OutsideWindow', 'LogGap', 'Plan', 'base_snapshot', 'fragment_at', 'plan',
           'restore_as_of', 'undrop', 'plan_undrop', 'check_undrop', 'PitrSnapshotSource', 'LogSource', 'ReplayRaceLost', 'replay', 'replay_vchannel',
           'finish', 'summary', 'replay_plan', 'progress', 'replays']

from seglake.facade import seal  # noqa: E402

seal(__name__)
