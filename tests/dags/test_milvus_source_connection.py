"""A registered Milvus source's scheduled capture takes its bucket's credentials from the
Airflow connection the source names (snapshot_schedule's milvus_sources task). A connection
Airflow does not have was silently replaced by the worker's milvus_s3_* environment (another
Milvus's credentials, or none): refused, naming it; the source's run reports it and the
other sources still run."""

import json

import pytest

from seglake.errors import ConfigError

pytestmark = pytest.mark.airflow
SECRET = "milvus-secret-Hq27"


def test_a_missing_connection_is_refused_not_replaced(airflow_home, monkeypatch):
    from seglake_airflow.hooks.engine import milvus_source_settings

    monkeypatch.setenv("SEGLAKE_MILVUS_S3_ACCESS_KEY", "env-key")
    monkeypatch.setenv("SEGLAKE_MILVUS_S3_SECRET_KEY", "env-secret")
    with pytest.raises(ConfigError, match="connection 'milvus_prod' does not exist") as e:
        milvus_source_settings("milvus_prod")
    assert "env-secret" not in str(e.value)
    monkeypatch.setenv("AIRFLOW_CONN_MILVUS_PROD", json.dumps(
        {"conn_type": "aws", "login": "prod-key", "password": SECRET, "extra": {"endpoint_url": "http://m:9000"}}))
    s = milvus_source_settings("milvus_prod")
    assert (s.milvus_s3_access_key, s.milvus_s3_secret_key) == ("prod-key", SECRET)
    assert SECRET not in json.dumps(s.to_public(), default=str)
    assert milvus_source_settings("seglake_milvus").milvus_s3_access_key == "env-key"   # the default may be absent
