"""SeglakeSparkSubmitOperator: SparkSubmitOperator for seglake's PySpark jobs.

At execute time it resolves the seglake settings (Variable + connections) and hands them
to spark-submit through the ENVIRONMENT (SEGLAKE_CONFIG and per-secret variables): never
through argv, `conf` or XCom. It also applies the pitfalls noted in STACK.md: the venv's
bin first on PATH, PYSPARK_PYTHON pinned to this interpreter, loopback binding, no UI,
few shuffle partitions. In cluster mode the engine ships as --py-files.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator


class SeglakeSparkSubmitOperator(SparkSubmitOperator):
    def __init__(self, *, etcd_conn_id: str = "etcd_default", aws_conn_id: str = "aws_default",
                 settings_overrides: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", "spark_default")
        kwargs.setdefault("conf", {})
        super().__init__(**kwargs)
        self.etcd_conn_id = etcd_conn_id
        self.aws_conn_id = aws_conn_id
        self.settings_overrides = settings_overrides or {}

    def execute(self, context) -> None:
        from seglake_airflow.hooks.engine import SeglakeHook

        settings = SeglakeHook(self.etcd_conn_id, self.aws_conn_id, self.settings_overrides).settings
        bin_dir = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"),
        }
        if os.environ.get("JAVA_HOME"):
            env["JAVA_HOME"] = os.environ["JAVA_HOME"]
        env.update(settings.to_env())
        self.env_vars = {**env, **(self.env_vars or {})}
        conf = dict(self.conf or {})
        conf.setdefault("spark.ui.enabled", "true" if settings.spark_ui else "false")
        conf.setdefault("spark.sql.shuffle.partitions", "4")
        self.conf = conf
        super().execute(context)
