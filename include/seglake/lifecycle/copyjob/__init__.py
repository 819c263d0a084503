"""Copy-segment jobs: the checker of Milvus's copy_segment_checker.go as small steps.

    Pending --plan--> Executing --(every task Completed)--> finish --> Completed
       |                  |--(a task Failed | timeout)----> fail   --> Failed + rollback
       '--(timeout)-------'
    Completed | Failed --(copy_job_retention after finished_at)--> removed (tasks, then job);
                          a job stays while its target is not settled.

The package, one concern per module: planning (plan, the engine of a run), copying (one
task), running (inline on the one runner, or the Spark executor side), finishing (wait,
finalize, fail), jobs (read side, retention), target (the restore target a job fills:
its files, rollback, dropped segments), bundled (a job whose files come from a bundle in
a backup target: a restore from a bundle). This module is the public face.

- plan: Pending -> Executing. The task size is recorded on the job first, then tasks of
  that many mappings are written (children before the parent), then the job flips.
  Mappings are taken in the order their source directories list (_listing_order).
  Idempotent with any size argument: a re-run derives exactly the same tasks.
- copy_task: copies every file of each mapped segment (insert, delta, stats, index) to
  the target's paths, each through its own temporary object made visible atomically
  and checked by checksum against the source; on a retry, a file already present is
  kept only if its checksum equals the source's, and leftovers that are not part of the
  segment are removed. Fail-fast: a missing source fails the task with the file's name.
  On S3 the task first lists its sources (Store.describe: a few ListObjectsV2 pages for
  the task's files, no HEAD per file), then copies each file in ONE request, conditional
  on the listed ETag and checked against it (see _copy_mappings for why per task).
  The runner (inline thread or Spark executor) writes the task's progress to etcd; a
  task record is written only by the attempt that owns it (a zombie cannot finish it).
- wait_status: read-only, for the sensor: done when every task is Completed, any is
  Failed, the job is terminal, or the timeout has passed. A poke reads the job record
  and counts the tasks' state markers: O(1) in the number of tasks.
- finalize: all tasks Completed wins over a timeout reached afterwards. Completed: the
  job flips first (the decision, one guarded txn), targets go Flushed in batches while
  the collection is still Importing, then ONE txn makes the collection Created.
  Failed: the job flips first, remaining tasks Failed, ONE txn drops the collection and
  frees its name, then the targets go Dropped in batches. Both unpin. Idempotent, and
  safe to observe half done: the collection is never Created with a target not Flushed.
"""

from __future__ import annotations

from seglake.lifecycle.copyjob.target import (rollback_target, drop_segments, source_and_target_files)
from seglake.lifecycle.copyjob.copying import (PROGRESS_EVERY_S, COPY_WINDOW, SourceMissing, job_throttle,
                                               copy_task)
from seglake.lifecycle.copyjob.finishing import (PROGRESS_EVERY_S, wait_status, finalize, newest_ts, fail)
from seglake.lifecycle.copyjob.planning import (PROGRESS_EVERY_S, plan, UNSET_ENGINE, resume_engine)
from seglake.lifecycle.copyjob.running import (PROGRESS_EVERY_S, pending_task_ids, PARALLEL_MIN_FILES,
                                               run_inline, run_tasks_from_env, TASKS_IN_FLIGHT, run_tasks)
from seglake.lifecycle.copyjob.jobs import (PROGRESS_EVERY_S, progress, describe_job, list_jobs,
                                            cleanup_expired)

__all__ = ['rollback_target', 'drop_segments', 'source_and_target_files', 'PROGRESS_EVERY_S', 'COPY_WINDOW', 'SourceMissing', 'job_throttle', 'copy_task', 'PROGRESS_EVERY_S', 'wait_status', 'finalize', 'newest_ts', 'fail', 'PROGRESS_EVERY_S', 'plan', 'UNSET_ENGINE', 'resume_engine', 'PROGRESS_EVERY_S', 'pending_task_ids', 'PARALLEL_MIN_FILES', 'run_inline', 'run_tasks_from_env', 'TASKS_IN_FLIGHT', 'run_tasks', 'PROGRESS_EVERY_S', 'progress', 'describe_job', 'list_jobs', 'cleanup_expired']

from seglake.facade import seal  # noqa: E402

seal(__name__)
