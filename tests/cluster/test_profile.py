"""The cluster's connection profile (issue 13 item 1), without starting servers: the
generated AIRFLOW_CONN_* / AIRFLOW_VAR_* / SEGLAKE_* switch the hooks and the CLI to the
three etcd endpoints, SeaweedFS and the standalone master; the env file is private."""

import json
import os
import shlex
import stat

import pytest

from seglake.dev.cluster import ClusterStack

pytestmark = pytest.mark.airflow


@pytest.fixture
def stack(tmp_path):
    s = ClusterStack(base=tmp_path / "cluster")
    s.state = s._new_state()
    s._servers = s._build(s.state)
    return s


def test_the_profile_names_three_endpoints_seaweedfs_and_the_standalone_master(stack):
    env = stack.airflow_env(root="r1", prefix="p1")
    etcd = json.loads(env["AIRFLOW_CONN_ETCD_DEFAULT"])
    assert etcd["extra"]["endpoints"] == stack.etcd_endpoints and stack.etcd_endpoints.count(",") == 2
    assert all(e.startswith("127.0.0.1:") for e in stack.etcd_endpoints.split(","))
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert f"{spark['host']}:{spark['port']}" == stack.spark_master_url
    aws = json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])
    assert aws["extra"]["endpoint_url"] == stack.s3_endpoint and stack.s3_endpoint.startswith("http://127.0.0.1:")
    assert json.loads(env["AIRFLOW_VAR_SEGLAKE_CONFIG"]) == {"store_uri": "s3://seglake/p1"}  # no secret there


def test_the_hooks_resolve_the_profile_without_any_file_edited(stack, airflow_home, monkeypatch):
    from seglake_airflow.hooks.engine import SeglakeHook

    for k, v in stack.airflow_env(root="r1", prefix="p1").items():
        monkeypatch.setenv(k, v)
    s = SeglakeHook().settings
    assert (s.etcd_endpoint, s.etcd_root, s.store_uri, s.s3_endpoint) == (
        stack.etcd_endpoints, "r1", "s3://seglake/p1", stack.s3_endpoint)
    assert s.s3_secret_key == stack.state["weed"]["secret_key"]
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    conn = SparkSubmitHook(conn_id="spark_default")._resolve_connection()
    assert conn["master"] == stack.spark_master_url and conn["deploy_mode"] == "client"


def test_the_env_file_is_private_and_its_seglake_names_are_settings_keys(stack):
    from seglake.dev.cluster import _write_private
    from seglake.config import Settings

    stack.base.mkdir(parents=True)
    _write_private(stack.env_file, stack.env_text())
    assert stat.S_IMODE(os.stat(stack.env_file).st_mode) == 0o600
    env = {}
    for line in stack.env_file.read_text().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.partition("=")
            env[k] = shlex.split(v)[0]
    seglake = {k: v for k, v in env.items() if k.startswith("SEGLAKE_")}
    s = Settings.from_env(seglake)  # every SEGLAKE_* name is a known key (unknown ones are refused)
    assert s.etcd_endpoint == stack.etcd_endpoints and s.store_uri == "s3://seglake/cluster"
    assert set(env) - set(seglake) == {"AIRFLOW_CONN_ETCD_DEFAULT", "AIRFLOW_CONN_AWS_DEFAULT",
                                       "AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_VAR_SEGLAKE_CONFIG"}


def test_no_repr_shows_the_s3_secret(stack):
    """pytest prints the repr of objects in a failed assertion: the stack and its S3
    server must not carry the secret there."""
    secret = stack.state["weed"]["secret_key"]
    assert secret and secret not in repr(stack) and secret not in repr(stack.weed)
    assert secret not in repr(stack.settings())
