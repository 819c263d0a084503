"""SeglakeSparkSubmitOperator: SparkSubmitOperator for seglake's PySpark jobs.

At execute time it resolves the seglake settings (Variable + connections) and hands them
to spark-submit through the ENVIRONMENT (SEGLAKE_CONFIG and per-secret variables): never
through argv, `conf` or XCom. It also applies the pitfalls noted in STACK.md: the venv's
bin first on PATH, PYSPARK_PYTHON pinned to this interpreter, loopback binding, no UI,
few shuffle partitions. In cluster mode the engine ships as --py-files.

Secrets with a YARN or Kubernetes master: there the Spark provider turns every env var
into `--conf spark.yarn.appMasterEnv.K=V` / `spark.kubernetes.driverEnv.K=V`, i.e. argv
(visible in `ps`, logged). So for those masters the secrets go into a private 0600 file
whose PATH is passed instead (SEGLAKE_SECRETS_FILE; the driver reads it through
seglake.config and hands the values to its executors inside the task closure), and the
file is deleted when the job ends. Cluster deploy mode on those masters is refused when a
secret is set: the driver would run on a host that cannot read the file.

DAGs build their Spark tasks with `spark_submit_task` only: one place sets the pool,
the connection, the default conf and the application path.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

SPARK_LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")
SPARK_POOL = "seglake_spark"      # bounds the JVMs restores, snapshots and GC may start at once
SPARK_CONN_ID = "spark_default"


def write_secrets_file(secrets: dict[str, str]) -> str:
    """A new file only this user can read (0600 from creation), holding `secrets` as JSON."""
    fd, path = tempfile.mkstemp(prefix="seglake-secrets-", suffix=".json")  # O_EXCL, mode 0600
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(secrets, fh)
    except BaseException:
        os.unlink(path)
        raise
    return path


class SeglakeSparkSubmitOperator(SparkSubmitOperator):
    def __init__(self, *, etcd_conn_id: str = "etcd_default", aws_conn_id: str = "aws_default",
                 settings_overrides: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("conf", {})
        super().__init__(**kwargs)
        self.etcd_conn_id = etcd_conn_id
        self.aws_conn_id = aws_conn_id
        self.settings_overrides = settings_overrides or {}
        self._secrets_file: str | None = None

    def execute(self, context) -> None:
        from seglake_airflow.hooks.engine import SeglakeHook

        settings = SeglakeHook(self.etcd_conn_id, self.aws_conn_id, overrides=self.settings_overrides).settings
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
        # Spark's own INFO lines drown the job's: WARN from the SparkContext's start on
        # (the jobs' setLogLevel comes later); SEGLAKE_SPARK_LOG_LEVEL=INFO to debug
        level = os.environ.get("SEGLAKE_SPARK_LOG_LEVEL", "WARN").upper()
        conf.setdefault("spark.log.level", level if level in SPARK_LOG_LEVELS else "WARN")
        self.conf = conf
        self._hook = None
        try:
            self._keep_secrets_out_of_argv(settings)
            super().execute(context)
        finally:
            self._remove_secrets_file()

    def _keep_secrets_out_of_argv(self, settings) -> None:
        """For masters whose env vars become argv: secrets -> a 0600 file, its path -> env."""
        from airflow.sdk.exceptions import AirflowFailException
        from seglake.config import ENV_PREFIX, ENV_SECRETS_FILE

        hook = self._hook = self._get_hook()
        if not (hook._is_yarn or hook._is_kubernetes):
            return  # local / standalone: env_vars reach spark-submit's environment only
        secret_names = set(settings.secrets_env()) & set(self.env_vars)
        if not secret_names:
            return
        if hook._connection["deploy_mode"] == "cluster":
            raise AirflowFailException(
                f"Spark master {hook._connection['master']!r} in cluster deploy mode would put seglake's secrets "
                f"({', '.join(sorted(secret_names))}; values not shown) on the spark-submit command line; "
                "use client deploy mode")
        secrets = {name.removeprefix(ENV_PREFIX).lower(): self.env_vars[name] for name in secret_names}
        self._secrets_file = write_secrets_file(secrets)
        self.env_vars = {**{k: v for k, v in self.env_vars.items() if k not in secret_names},
                         ENV_SECRETS_FILE: self._secrets_file}
        hook = self._hook = self._get_hook()
        # client mode runs the driver in spark-submit's own process: give it the env too
        # (the provider sets it for YARN only; for Kubernetes only as driverEnv confs)
        hook._env = dict(self.env_vars)

    def _remove_secrets_file(self) -> None:
        if self._secrets_file:
            try:
                os.unlink(self._secrets_file)
            except FileNotFoundError:
                pass
            self._secrets_file = None



def spark_submit_task(task_id: str, job: str, application_args: list[str], *,
                      settings_overrides: dict[str, Any] | None = None, **kwargs: Any) -> SeglakeSparkSubmitOperator:
    """The Spark task of a DAG: spark/jobs/{job}.py (refused at parse time when there is no
    such job) as `seglake-{job}` in the seglake_spark pool on spark_default. Settings and
    secrets reach it through the environment at run time (SeglakeSparkSubmitOperator),
    never through `application_args` or `conf`: both must hold templates of ids only."""
    import difflib

    from seglake_airflow import SPARK_JOBS, spark_job

    jobs = sorted(p.stem for p in SPARK_JOBS.glob("*.py"))
    if job not in jobs:
        close = difflib.get_close_matches(job, jobs, n=1)
        raise ValueError(f"no Spark job {job!r} in {SPARK_JOBS}" + (f"; did you mean {close[0]!r}?" if close else ""))
    for forbidden in ("pool", "conn_id", "application", "name", "env_vars"):
        if forbidden in kwargs:
            raise TypeError(f"spark_submit_task sets {forbidden!r} itself")
    return SeglakeSparkSubmitOperator(
        task_id=task_id, application=spark_job(job), name="seglake-" + job.replace("_", "-"),
        pool=SPARK_POOL, conn_id=SPARK_CONN_ID, application_args=list(application_args),
        settings_overrides=settings_overrides, **kwargs)
