"""`seglake config show --airflow`: the settings a DAG run would use, resolved like its
tasks (environment, the Variable, the etcd_default / aws_default connections, here from
a real Airflow metadata DB), each with its source; secrets never printed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.airflow


def _run(args, env, timeout=180):
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def _migrated_db(dst: Path) -> None:
    """A migrated Airflow metadata DB at `dst`: a copy of this worker's test DB (migrated
    once per worker by the airflow_home fixture), without its connections and variables
    (given through the environment there; none may leak in). The same schema as an
    `airflow db migrate` of its own, which cost ~4-5 s of this test."""
    import sqlite3

    src = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    dst.parent.mkdir(parents=True, exist_ok=True)
    a, b = sqlite3.connect(src), sqlite3.connect(dst)
    try:
        a.backup(b)
        with b:
            b.execute("DELETE FROM connection")
            b.execute("DELETE FROM variable")
    finally:
        a.close()
        b.close()


def test_config_show_airflow_resolves_connections_from_the_metadata_db(tmp_path, airflow_home):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SEGLAKE_"))}
    db = tmp_path / "airflow" / "airflow.db"
    _migrated_db(db)
    env.update({"AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{db}",
                "AIRFLOW__CORE__FERNET_KEY": "", "SEGLAKE_DROP_TOLERANCE": "5h",
                "PYTHONPATH": f"{REPO / 'include'}"})   # plugins/ found by the CLI itself
    airflow = str(Path(sys.executable).parent / "airflow")
    conn = {"conn_type": "etcd", "host": "10.9.8.7", "port": 2379, "login": "seg",
            "password": "etcd-Pa55-word", "extra": {"root": "prodroot"}}
    subprocess.run([airflow, "connections", "add", "etcd_default", "--conn-json", json.dumps(conn)],
                   env=env, check=True, capture_output=True, timeout=120)
    subprocess.run([airflow, "variables", "set", "seglake_config",
                    json.dumps({"store_uri": "s3://bucket/prefix", "missing_tolerance": "2d"})],
                   env=env, check=True, capture_output=True, timeout=120)
    env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps({"conn_type": "aws", "login": "AKIAEXAMPLE",
                                                  "password": "s3-Secret-Value",
                                                  "extra": {"endpoint_url": "http://127.0.0.1:9"}})
    data = json.loads(_run(["-m", "seglake.cli", "config", "show", "--airflow", "--json"], env))
    s, src = data["settings"], data["sources"]
    assert (s["etcd_endpoint"], src["etcd_endpoint"]) == ("10.9.8.7:2379", "connection etcd_default")
    assert (s["etcd_root"], s["etcd_user"]) == ("prodroot", "seg")
    assert (s["store_uri"], src["store_uri"]) == ("s3://bucket/prefix", "Variable seglake_config")
    assert (s["missing_tolerance"], src["missing_tolerance"]) == (172800.0, "Variable seglake_config")
    assert (s["drop_tolerance"], src["drop_tolerance"]) == (18000.0, "environment")
    assert (s["s3_endpoint"], src["s3_endpoint"]) == ("http://127.0.0.1:9", "connection aws_default")
    assert s["etcd_password"] == "***" and s["s3_secret_key"] == "***"
    assert src["copy_threads"] == "default"
    text = _run(["-m", "seglake.cli", "config", "show", "--airflow"], env)
    for out in (text, json.dumps(data)):
        assert "etcd-Pa55-word" not in out and "s3-Secret-Value" not in out
    assert "a DAG run uses etcd 10.9.8.7:2379 root 'prodroot' and store s3://bucket/prefix" in text
    plain = json.loads(_run(["-m", "seglake.cli", "config", "show", "--json"], env))
    assert plain["etcd_endpoint"] != "10.9.8.7:2379"      # without --airflow: no connections


def test_config_show_airflow_without_the_workers_airflow_home_is_one_line(tmp_path, airflow_home):
    """A shell without the workers' AIRFLOW_HOME (a newcomer's first try) gets an empty
    metadata DB: one line saying so and what to set, exit 1 -- Airflow logged a traceback
    for each lookup before."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SEGLAKE_"))}
    env.update({"AIRFLOW_HOME": str(tmp_path / "elsewhere"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "PYTHONPATH": f"{REPO / 'include'}"})
    out = subprocess.run([sys.executable, "-m", "seglake.cli", "config", "show", "--airflow"], capture_output=True,
                         text=True, env=env, timeout=180)
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert lines[-1].startswith("seglake config show: error: Airflow's metadata DB sqlite:///") and \
        "has no Airflow tables; AIRFLOW_HOME is " in lines[-1] and "export AIRFLOW_HOME=$PWD/.dev/airflow" in lines[-1]
