"""atk-s25-edges F3: a connection's extra with a misspelt key was ignored and its default
used: `etcd_default` {"endpoint": ...} ran against the connection's host (another etcd),
{"rooot": "prod"} against the root `seglake`; `seglake_backup` {"endpoint": ...} sent the
backup to AWS; a milvus_restore target {"s3_secret": ...} went without its secret. An
unknown key is refused naming the closest valid one (hooks/extras.checked_extra), never
echoing a value; `aws_default`, shared with the Amazon provider, refuses only near misses."""

import json

import pytest

from seglake.errors import ConfigError

pytestmark = pytest.mark.airflow
SECRET = "Sk9xQv7pL2-conn"


def _settings(**overrides):
    from seglake_airflow.hooks.engine import SeglakeHook

    return SeglakeHook(get_variable=lambda name: None, overrides=overrides).settings


@pytest.mark.parametrize("conn_id, conn, said", [
    ("etcd_default", {"conn_type": "etcd", "host": "127.0.0.1", "port": 23790, "extra": {"endpoint": "10.0.0.5:2379"}},
     "unknown extra key 'endpoint' (did you mean 'endpoints'?)"),
    ("etcd_default", {"conn_type": "etcd", "host": "127.0.0.1", "port": 23790, "extra": {"rooot": "prod"}},
     "unknown extra key 'rooot' (did you mean 'root'?)"),
    ("etcd_default", {"conn_type": "etcd", "host": "127.0.0.1", "login": "u", "password": SECRET,
                      "extra": {"ca_certs": "/etc/ca.pem"}}, "unknown extra key 'ca_certs' (did you mean 'ca_cert'?)"),
    ("seglake_backup", {"conn_type": "aws", "login": "k", "password": SECRET,
                        "extra": {"endpoint": "http://127.0.0.1:8333"}},
     "unknown extra key 'endpoint' (did you mean 'endpoint_url'?)"),
    ("seglake_milvus", {"conn_type": "aws", "login": "k", "password": SECRET, "extra": {"region": "eu-west-1"}},
     "unknown extra key 'region' (did you mean 'region_name'?)"),
])
def test_a_misspelt_extra_key_is_refused_naming_the_closest(airflow_home, monkeypatch, conn_id, conn, said):
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    with pytest.raises(ConfigError) as e:
        _settings()
    assert f"connection {conn_id!r}: {said}" in str(e.value), str(e.value)
    assert SECRET not in str(e.value)


def test_aws_default_refuses_a_near_miss_but_keeps_the_amazon_providers_own_keys(airflow_home, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        {"conn_type": "aws", "login": "k", "password": SECRET, "extra": {"endpoint": "http://127.0.0.1:8333"}}))
    with pytest.raises(ConfigError, match=r"connection 'aws_default': unknown extra key 'endpoint' \(did you mean "
                                          r"'endpoint_url'\?\)"):
        _settings(store_uri="s3://bucket/p")
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        {"conn_type": "aws", "login": "k", "password": SECRET,
         "extra": {"endpoint_url": "http://127.0.0.1:8333", "region_name": "eu-west-1", "config_kwargs": {}}}))
    s = _settings(store_uri="s3://bucket/p")
    assert (s.s3_endpoint, s.s3_region, s.s3_secret_key) == ("http://127.0.0.1:8333", "eu-west-1", SECRET)


def test_the_valid_extras_still_apply(airflow_home, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ETCD_DEFAULT", json.dumps(
        {"conn_type": "etcd", "host": "127.0.0.1", "port": 1, "extra": {"endpoints": "127.0.0.1:23790", "root": "prod"}}))
    s = _settings()
    assert (s.etcd_endpoint, s.etcd_root) == ("127.0.0.1:23790", "prod")


def test_a_milvus_restore_target_refuses_a_misspelt_extra(airflow_home, monkeypatch):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "dags" / "milvus_restore.py"
    spec = importlib.util.spec_from_file_location("_s25_milvus_restore", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("AIRFLOW_CONN_MILVUS_S25", json.dumps(
        {"conn_type": "generic", "host": "127.0.0.1", "port": 19530,
         "extra": {"bucket": "b", "s3_endpoint": "http://127.0.0.1:9000", "s3_access_key": "k", "s3_secret": SECRET}}))
    with pytest.raises(ConfigError) as e:
        mod._target("milvus_s25")
    assert "connection 'milvus_s25': unknown extra key 's3_secret' (did you mean 's3_secret_key'?)" in str(e.value)
    assert SECRET not in str(e.value)
