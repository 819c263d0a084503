"""Compaction (issue 28): many small Flushed segments and their delete logs into few
clean ones, with lineage that snapshots and GC respect.

The package, one concern per module: policy (Policy: the compaction_* config keys;
Unit: the serializable unit and its content-derived id), planning (plan: deterministic
units from one etcd revision, snapshot protection), running (run_unit: prepare -> write
-> check -> ONE guarded commit; the unit record's state machine), compacting (compact:
the whole inline run, Summary), records (unit records past retention, from GC's records
step), folding (L0 delete segments folded into the segments they hit: FOLD units),
policies (the per-collection policy in etcd, the scheduled run over them). This
module is the public face:
`from seglake.lifecycle import compaction; compaction.plan(...)`.

    plan (read-only) -> per unit: prepare (ids + delete sources recorded once)
      -> write the output's files (rows hidden by THE visibility rule dropped, row ids and
         timestamps kept, the inputs' deletes carried) -> check them
      -> ONE txn: inputs (compared at their planned revisions) Dropped with compacted_to,
         output Flushed with compacted_from, unit record committed; a lost compare is
         reported (`lost`), the winner never undone

GC reclaims compacted inputs like any Dropped segment: after drop_tolerance, never while
a snapshot references them (lifecycle/gc/judgement.reclaimable).
"""

from __future__ import annotations

from seglake.lifecycle.compaction.policy import (MERGE, REWRITE, FOLD, KINDS, MAX_INPUTS, MAX_FOLD_OPS, POLICY_KEYS,
                                                 Policy, Unit, unit_id, make_unit)
from seglake.lifecycle.compaction.folding import (FOLDED, checkpoint_ticks, foldable, plan_folds, run_fold)
from seglake.lifecycle.compaction.planning import (Plan, protected, read_segments, hidden_counts, plan)
from seglake.lifecycle.compaction.running import (PREPARED, COMMITTED, LOST, ALREADY, CompactionError,
                                                  UnitResult, delete_sources,
                                                  run_unit, prepare, write_output, carried_deletes, check_files,
                                                  commit, unit_records)
from seglake.lifecycle.compaction.compacting import (Summary, run_units, run_partition, compact, record,
                                                     last_run, HISTORY_KEEP, HISTORY_COLUMNS, history, history_row)
from seglake.lifecycle.compaction.policies import (parse_overrides, effective, set_policy, get_policy,
                                                   stored_overrides, clear_policy, list_policies, policy_for,
                                                   run_scheduled, report_line, scheduled_targets,
                                                   targets_json, parse_targets, target_gone, compact_targets, TRIGGERS)
from seglake.lifecycle.compaction.records import (expire_unit_records)

__all__ = ['MERGE', 'REWRITE', 'KINDS', 'MAX_INPUTS', 'Policy', 'Unit', 'unit_id', 'make_unit', 'Plan', 'protected',
           'read_segments', 'hidden_counts', 'plan', 'PREPARED', 'COMMITTED', 'LOST', 'ALREADY', 'CompactionError',
           'UnitResult', 'delete_sources', 'run_unit', 'prepare', 'write_output', 'carried_deletes', 'check_files', 'commit',
           'unit_records', 'Summary', 'run_units', 'run_partition', 'compact', 'record', 'last_run', 'expire_unit_records', 'FOLD', 'MAX_FOLD_OPS', 'FOLDED', 'checkpoint_ticks', 'foldable',
           'plan_folds', 'run_fold', 'POLICY_KEYS', 'HISTORY_KEEP', 'HISTORY_COLUMNS', 'history',
           'history_row', 'parse_overrides', 'effective', 'set_policy', 'get_policy', 'stored_overrides',
           'clear_policy', 'list_policies', 'policy_for', 'run_scheduled', 'report_line', 'scheduled_targets',
           'targets_json', 'parse_targets', 'target_gone', 'compact_targets', 'TRIGGERS']

from seglake.facade import seal  # noqa: E402

seal(__name__)
