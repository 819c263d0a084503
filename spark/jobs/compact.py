"""PySpark job: compact one collection (big compactions; small ones run inline).

    spark-submit spark/jobs/compact.py --targets JSON [--trigger manual|scheduled]
    spark-submit spark/jobs/compact.py --collection NAME [--db DB] [--min-segment-rows N]
        [--target-rows N] [--delete-ratio X] [--protection-seconds S] [--min-segment-bytes B]
        [--target-bytes B] [--l0-age-seconds S]   (the DAG passes the policy its plan resolved)

The driver plans (seglake.lifecycle.compaction.plan: deterministic units from one etcd
revision), executors run the units (compaction.run_partition: each unit prepares, writes
its output's files, checks them and commits with its own guarded etcd transaction), the
driver records the summary in etcd ({root}/compaction/runs/{collection}), where the CLI,
the page and a DAG read it. A re-submitted job re-plans: committed units are gone from
the plan (their inputs are Dropped), an interrupted unit is planned again with the same
id and converges. Configuration and secrets arrive in the environment (SEGLAKE_CONFIG +
secrets), never in argv; the policy numbers are no secret. Exit code 0 when the job ran
(lost units are reported in the summary, a re-plan picks them up); 1 when it failed.
"""

from __future__ import annotations

import argparse
import sys
import time


def parse_args(argv: list[str]) -> argparse.Namespace:
    from seglake.cli.args import name_arg, number_arg

    p = argparse.ArgumentParser(prog="compact")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--collection", type=name_arg("collection"))
    which.add_argument("--targets", type=_targets, help="JSON [{collection, db, policy}] (the compaction DAG's "
                                                         "plan: one or every scheduled collection)")
    p.add_argument("--trigger", choices=("manual", "scheduled"), default="manual")
    p.add_argument("--db", default="default", type=name_arg("db"))
    p.add_argument("--min-segment-rows", type=number_arg("compaction_min_segment_rows"), default=None)
    p.add_argument("--target-rows", type=number_arg("compaction_target_rows"), default=None)
    p.add_argument("--delete-ratio", type=number_arg("compaction_delete_ratio"), default=None)
    p.add_argument("--protection-seconds", type=number_arg("compaction_protection"), default=None)
    p.add_argument("--min-segment-bytes", type=number_arg("compaction_min_segment_bytes"), default=None)
    p.add_argument("--target-bytes", type=number_arg("compaction_target_bytes"), default=None)
    p.add_argument("--l0-age-seconds", type=number_arg("compaction_l0_age"), default=None)
    return p.parse_args(argv)


def _targets(text: str) -> list[dict]:
    from seglake.errors import ValidationError
    from seglake.lifecycle import compaction

    try:
        return compaction.parse_targets(text)
    except ValidationError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def policy_of(args: argparse.Namespace, settings):
    from seglake.lifecycle import compaction

    return compaction.Policy.from_settings(settings, {"min_segment_rows": args.min_segment_rows,
                                                      "target_rows": args.target_rows,
                                                      "delete_ratio": args.delete_ratio,
                                                      "protection": args.protection_seconds,
                                                      "min_segment_bytes": args.min_segment_bytes,
                                                      "target_bytes": args.target_bytes,
                                                      "l0_age": args.l0_age_seconds})


def executor_error(e: Exception) -> str:
    """The seglake error an executor raised, from the Java error the driver sees (its
    Python traceback's last `seglake...: message` line), else the error's type."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip().startswith("seglake.") and ": " in ln]
    return lines[-1][:1000] if lines else type(e).__name__


def run(spark, meta, store, collection: str, db: str, policy, collection_id: int | None = None):
    """Plan on the driver, run the units on executors, summarize: the job minus its I/O setup.
    `collection_id`: the collection the target was chosen for (a namesake made since is skipped)."""
    from seglake.config import spark_env
    from seglake.lifecycle import compaction
    from seglake.lifecycle.compaction.running import UnitResult

    started = time.monotonic()
    planned = compaction.plan(meta, store, collection, policy, db=db, collection_id=collection_id)
    summary = compaction.Summary(planned, engine="spark")
    if planned.units:
        sc = spark.sparkContext
        env = spark_env()   # secrets resolved: executors may not reach the driver's secrets file
        units = [u.to_json() for u in planned.units]
        n = max(1, min(sc.defaultParallelism, len(units)))
        rev = planned.revision      # every unit's delete sources at the plan's revision: read once per partition
        try:
            results = (sc.parallelize(units, n)
                         .mapPartitions(lambda it: compaction.run_partition(it, env, rev))
                         .collect())
        except Exception as e:      # a unit refused/failed on an executor: reaches the driver as a Java error
            raise compaction.CompactionError(f"the units of {db}.{collection} failed on the executors: "
                                             f"{executor_error(e)}") from None
        summary.results = [UnitResult(**r) for r in results]
    summary.seconds = time.monotonic() - started
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.config import Settings
    from seglake.errors import SeglakeError
    from seglake.lifecycle import compaction
    from seglake.meta import Meta
    from seglake.sparksession import job_session
    from seglake.storage import open_store

    settings = Settings.load()
    targets = args.targets if args.targets is not None else [   # checked before any side effect
        {"collection": args.collection, "db": args.db, "policy": policy_of(args, settings)}]
    if not targets:
        print("compaction: nothing to compact (no target)")
        return 0
    name = args.collection or f"{len(targets)}-collections"
    failed: list[str] = []
    spark = job_session(f"seglake-compact-{name}")   # seglake env -> executorEnv, never argv
    try:
        with Meta.from_settings(settings) as meta:
            store = open_store(settings)
            for t in targets:       # each on its own: one failing does not stop the others (exit 1 after them)
                try:
                    summary = run(spark, meta, store, t["collection"], t["db"], t["policy"], t.get("collection_id"))
                except SeglakeError as e:
                    failed.append(f"{t['db']}.{t['collection']}: {type(e).__name__}: {e}")
                    print(f"compaction of {failed[-1]} FAILED")
                    continue
                compaction.record(meta, summary, args.trigger)
                c = summary.counts()
                print(f"compaction of {t['db']}.{t['collection']}: {len(summary.plan.units)} units, "
                      f"{c['committed']} committed, {c['already_committed']} already, {c['lost']} lost; "
                      f"{c['segments_in']} segments -> {c['segments_out']}, {c['rows_dropped']} rows dropped"
                      + (f" (skipped: {summary.plan.skipped})" if summary.plan.skipped else ""))
    finally:
        spark.stop()
    if failed:
        print("not compacted: " + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
