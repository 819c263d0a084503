"""The SparkSession of every seglake job (spark/jobs/*), built in one place.

Guarantee: every executor starts with the job's seglake environment -- SEGLAKE_CONFIG,
the secrets (a SEGLAKE_SECRETS_FILE resolved: executors on other hosts cannot read the
driver's file), SEGLAKE_FAULTS -- and nothing of it is on any command line.

Why here: the operator hands the settings to spark-submit through its environment, which
reaches the DRIVER only. With `local[*]` / `local-cluster` the executors are the driver's
children and inherit it; on a standalone cluster they are started by the workers'
daemons and would not. So the job itself copies them into `spark.executorEnv.*` on its
builder: they travel inside the driver's SparkConf over Spark's RPC into the executors'
launch environment (the executor's argv holds only ids and addresses; Spark redacts conf
keys naming a password or secret in its UI and event log). The session also lowers
Spark's logging and says where it runs (application id, master).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping


def executor_env_conf(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """spark.executorEnv.* entries for the seglake environment of this process."""
    from seglake.config import spark_env

    return {f"spark.executorEnv.{k}": v for k, v in sorted(spark_env(env).items())}


def job_session(app_name: str, env: Mapping[str, str] | None = None, conf: Mapping[str, str] | None = None):
    """getOrCreate() a session named `app_name` whose executors get the seglake env;
    `conf`: the job's own Spark settings (e.g. spark.task.maxFailures)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**(conf or {}), **executor_env_conf(env)}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel(os.environ.get("SEGLAKE_SPARK_LOG_LEVEL", "WARN"))
    print(f"seglake spark job {app_name!r}: application {sc.applicationId} on master {sc.master}",
          file=sys.stderr, flush=True)
    return spark
