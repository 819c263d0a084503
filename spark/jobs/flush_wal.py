"""PySpark job: flush WAL pchannels into Flushed segments, one partition per pchannel.

    spark-submit spark/jobs/flush_wal.py --pchannels P[,P...] --report-key KEY
        [--max-seconds S] [--flush-all 0|1]

Each pchannel's backlog is one partition: the executor runs the same engine function as
the inline path (seglake.lifecycle.flush.flush_partition -> flush_pchannel), which takes
the pchannel's flusher term, so a Spark task retried or racing an inline run is fenced,
never duplicated. The driver writes the per-pchannel results as JSON to KEY. Settings
arrive in the environment (SEGLAKE_CONFIG + secrets), never in argv.
"""

from __future__ import annotations

import argparse
import json
import sys


def parse_args(argv: list[str]) -> argparse.Namespace:
    from seglake.wal.log import validate_pchannel

    p = argparse.ArgumentParser(prog="flush_wal")
    p.add_argument("--pchannels", required=True, help="comma-separated pchannel names")
    p.add_argument("--report-key", required=True)
    p.add_argument("--max-seconds", type=float, default=None)
    p.add_argument("--flush-all", type=int, choices=(0, 1), default=0)
    args = p.parse_args(argv)
    args.pchannels = [validate_pchannel(x) for x in args.pchannels.split(",") if x]
    if args.max_seconds is not None and not 0 < args.max_seconds <= 86400:
        p.error("--max-seconds must be in (0, 86400]")
    return args


def run(spark, pchannels: list[str], max_seconds: float | None, flush_all: bool) -> list[dict]:
    import os

    from seglake.lifecycle.flush import flush_partition

    env = {k: v for k, v in os.environ.items() if k.startswith("SEGLAKE_")}
    opts = {"max_seconds": max_seconds, "flush_all": flush_all}
    sc = spark.sparkContext
    return (sc.parallelize(pchannels, max(1, len(pchannels)))
              .mapPartitions(lambda it: flush_partition(list(it), env, opts))
              .collect())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from seglake.sparksession import job_session

    from seglake.config import Settings
    from seglake.lifecycle.flush import format_summary
    from seglake.storage import open_store

    settings = Settings.load()
    spark = job_session("seglake-flush-wal")  # seglake env -> spark.executorEnv.*, never argv
    try:
        results = run(spark, args.pchannels, args.max_seconds, bool(args.flush_all))
    finally:
        spark.stop()
    open_store(settings).put(args.report_key, json.dumps(results, indent=1).encode())
    print(format_summary(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
