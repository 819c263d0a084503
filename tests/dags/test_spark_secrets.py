"""Secrets never reach the spark-submit command line (issue 8, item 17).

With a YARN or Kubernetes master the Spark provider turns every env var into
`--conf spark.yarn.appMasterEnv.K=V` / `spark.kubernetes.driverEnv.K=V` (argv, visible in
`ps`). The operator must hand those masters a 0600 secrets file instead, and remove it
after the job. The command inspected is the one the provider itself builds
(`SparkSubmitHook._build_spark_submit_command`); only the process start is replaced.
"""

import json
import os
import stat

import pytest

from seglake.config import Settings, spark_env

pytestmark = pytest.mark.airflow
ETCD_PW, S3_SECRET = "etcd-pw-Zq81x", "s3-secret-Wv52y"


@pytest.fixture
def secret_settings(airflow_home, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ETCD_DEFAULT", json.dumps(
        {"conn_type": "etcd", "host": "127.0.0.1", "port": 2379, "login": "root", "password": ETCD_PW}))
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        {"conn_type": "aws", "login": "AKIDEXAMPLE", "password": S3_SECRET}))
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({"store_uri": "s3://bucket/prefix"}))


def _spark_conn(monkeypatch, master: str, deploy_mode: str = "client"):
    from airflow.providers.apache.spark.hooks import spark_submit

    if master.startswith("k8s"):  # the cncf provider is not installed; the command builder does not need it
        monkeypatch.setattr(spark_submit, "kube_client", object(), raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(
        {"conn_type": "spark", "host": master, "extra": {"deploy-mode": deploy_mode}}))


def _run(monkeypatch, **operator_kwargs):
    """execute() the operator; capture argv, the process env and the secrets file at submit."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from seglake_airflow.operators.spark import SeglakeSparkSubmitOperator

    seen = {}

    def submit(hook, application="", **kwargs):
        seen["argv"] = hook._build_spark_submit_command(application)
        seen["env"] = dict(hook._env or {})
        path = seen["env"].get("SEGLAKE_SECRETS_FILE")
        if path:
            seen["path"], seen["mode"] = path, stat.S_IMODE(os.stat(path).st_mode)
            seen["driver"] = Settings.load(env={k: v for k, v in seen["env"].items() if k.startswith("SEGLAKE_")})
            seen["executors"] = spark_env(seen["env"])

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    SeglakeSparkSubmitOperator(task_id="job", application="/jobs/x.py", application_args=["--job-id", "7"],
                               **operator_kwargs).execute({})
    return seen


@pytest.mark.parametrize("master", ["yarn", "k8s://https://127.0.0.1:6443"])
def test_yarn_and_kubernetes_get_a_private_file_not_argv(secret_settings, monkeypatch, master):
    _spark_conn(monkeypatch, master)
    seen = _run(monkeypatch)
    argv = " ".join(seen["argv"])
    assert ETCD_PW not in argv and S3_SECRET not in argv
    assert "SEGLAKE_SECRETS_FILE=" in argv or master.startswith("k8s")  # the path, never the value
    assert seen["mode"] == 0o600
    assert not os.path.exists(seen["path"])  # removed once the job ended
    assert seen["driver"].etcd_password == ETCD_PW and seen["driver"].s3_secret_key == S3_SECRET
    assert seen["executors"]["SEGLAKE_ETCD_PASSWORD"] == ETCD_PW  # shipped in the closure, not argv
    assert "SEGLAKE_SECRETS_FILE" not in seen["executors"]


def test_local_master_keeps_secrets_in_the_process_environment(secret_settings, monkeypatch):
    _spark_conn(monkeypatch, "local[2]")
    seen = _run(monkeypatch)
    argv = " ".join(seen["argv"])
    assert ETCD_PW not in argv and S3_SECRET not in argv and "SEGLAKE_SECRETS_FILE" not in argv
    assert seen["env"]["SEGLAKE_ETCD_PASSWORD"] == ETCD_PW and "path" not in seen


def test_cluster_deploy_mode_with_secrets_is_refused_without_echoing_them(secret_settings, monkeypatch, tmp_path):
    from airflow.sdk.exceptions import AirflowFailException

    _spark_conn(monkeypatch, "yarn", deploy_mode="cluster")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    with pytest.raises(AirflowFailException, match="client deploy mode") as err:
        _run(monkeypatch)
    assert ETCD_PW not in str(err.value) and S3_SECRET not in str(err.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.spark
def test_a_real_spark_submit_shows_no_secret_in_any_command_line(secret_settings, monkeypatch, tmp_path):
    """A real spark-submit (local master): the secret reaches the driver's settings while
    no process on the machine has it in its command line (what `ps` shows)."""
    import threading
    import time
    from pathlib import Path

    from seglake_airflow.operators.spark import SeglakeSparkSubmitOperator

    _spark_conn(monkeypatch, "local[1]")
    out = tmp_path / "driver.txt"
    app = tmp_path / "app.py"
    app.write_text("import sys, time\nfrom seglake.config import Settings\ns = Settings.load()\n"
                   f"open({str(out)!r}, 'w').write(s.etcd_password + '|' + s.s3_secret_key)\ntime.sleep(3)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).resolve().parents[2] / "include"),
                                                      os.environ.get("PYTHONPATH", "")]))
    leaks, done = [], threading.Event()

    def scan():
        while not done.is_set():
            for proc in Path("/proc").iterdir():
                try:
                    cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
                except OSError:
                    continue
                if ETCD_PW.encode() in cmd or S3_SECRET.encode() in cmd:
                    leaks.append(cmd[:200])
            time.sleep(0.05)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        SeglakeSparkSubmitOperator(task_id="job", application=str(app)).execute({})
    finally:
        done.set()
        scanner.join()
    assert out.read_text() == f"{ETCD_PW}|{S3_SECRET}"
    assert leaks == []


def test_the_tasks_overrides_and_the_backup_connection_reach_the_job(secret_settings, monkeypatch):
    """A Spark task's settings_overrides and the seglake_backup connection's credentials
    reach the job's environment (the overrides were once passed to the hook positionally,
    as its backup connection id: both were lost)."""
    monkeypatch.setenv("AIRFLOW_CONN_SEGLAKE_BACKUP", json.dumps(
        {"conn_type": "aws", "login": "BACKUPKEY", "password": "backup-secret-Qx7",
         "extra": {"endpoint_url": "http://127.0.0.1:9"}}))
    _spark_conn(monkeypatch, "local[2]")
    seen = _run(monkeypatch, settings_overrides={"wal_scanner_startup_delay": 0, "copy_threads": 3})
    job = Settings.load(env={k: v for k, v in seen["env"].items() if k.startswith("SEGLAKE_")})
    assert (job.wal_scanner_startup_delay, job.copy_threads) == (0, 3)
    assert (job.backup_s3_access_key, job.backup_s3_secret_key, job.backup_s3_endpoint) == \
        ("BACKUPKEY", "backup-secret-Qx7", "http://127.0.0.1:9")
    assert "backup-secret-Qx7" not in " ".join(seen["argv"])
