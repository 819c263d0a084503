"""PySpark job: run the unfinished tasks of a copy-segment job on executors.

    spark-submit spark/jobs/copy_segments.py --job-id ID

The driver lists the job's unfinished tasks and spreads them over the executors (one
partition per core). Each executor opens etcd and the store itself, copies its tasks'
files and writes each task's progress and final state to etcd. On S3 every copy is
server-side and `copy_threads` copies are in flight per executor, shared by several of
its tasks at once (copyjob.run_tasks); each task lists its sources first (a few
ListObjectsV2 pages, on the executor), then sends one CopyObject per file conditional on
the listed ETag (UploadPartCopy above 5 GiB); no object's bytes pass through the
executor or the driver. The driver decides nothing: the DAG's sensor and
finalize step read the task states. Re-submitting the job, or running it beside a
re-drive, is harmless: every file is written under a temporary name of its own and
renamed into place after its checksum was taken, a retry keeps only files whose checksum
equals the source's, only the attempt owning a task writes its record, and terminal
tasks are left alone.
"""

from __future__ import annotations

import argparse
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="copy_segments")
    p.add_argument("--job-id", type=int, required=True)
    return p.parse_args(argv)


def run(spark, meta, job_id: int) -> list[tuple[int, str, str]]:
    """Distribute the unfinished tasks; returns (task_id, state, reason) per task run."""
    from seglake.lifecycle import copyjob

    task_ids = copyjob.pending_task_ids(meta, job_id)
    if not task_ids:
        return []
    from seglake.config import spark_env
    env = spark_env()  # secrets resolved: executors may not reach the driver's secrets file
    sc = spark.sparkContext
    n = max(1, min(len(task_ids), sc.defaultParallelism))
    return (sc.parallelize(task_ids, n)
              .mapPartitions(lambda it: copyjob.run_tasks_from_env(list(it), job_id, env))
              .collect())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings
    from seglake.meta import Meta

    settings = Settings.load()
    spark = job_session(f"seglake-copy-{args.job_id}")  # seglake env -> spark.executorEnv.*, never argv
    try:
        from seglake.progress import watch_copy_job

        with Meta.from_settings(settings) as meta, Meta.from_settings(settings) as watcher, \
                watch_copy_job(watcher, args.job_id):   # a progress line every 5 s while executors copy
            results = run(spark, meta, args.job_id)
    finally:
        spark.stop()
    failed = [r for r in results if r[1] == "Failed"]
    print(f"copy job {args.job_id}: ran {len(results)} tasks, {len(failed)} failed")
    for task_id, _, reason in failed[:10]:
        print(f"  task {task_id}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
