"""atk-s25-edges F11/F12: credentials in an endpoint, and the Milvus restore target's address.

F11: `user:password@host:port` given as an etcd endpoint (config etcd_endpoint, a Milvus
source's or a milvus_backup conf's milvus_etcd, the CLI's --milvus-etcd) was refused
echoing the password ("'u:S@h:1' is not host:port"). names.parse_endpoints, the one endpoint
check, refuses user info without showing it.

F12: a Milvus restore target (CLI `milvus restore --address/--s3-endpoint/--s3-region/--user`,
the DAG's milvus_conn_id connection) was checked only for being non-empty: an address
'u:S@h:1', 'h:99999' or with a trailing newline, an endpoint with credentials, a region with
a line break passed `check` ("nothing written before this passes") and failed later at
connect, in words that carried the address."""

import pytest

from seglake.config import Settings
from seglake.errors import ConfigError, ValidationError
from seglake.milvus.restore import MilvusTarget
from seglake.names import parse_endpoints

S = "Sk9xQv7pL2-ep"


@pytest.mark.parametrize("value", [f"u:{S}@127.0.0.1:2379", f"127.0.0.1:2379,root:{S}@h:1", f"http://u:{S}@h:1",
                                   f"{S}@h:1"])
def test_an_endpoint_with_user_info_is_refused_without_echoing_it(value):
    with pytest.raises(ValidationError) as e:
        parse_endpoints("milvus etcd", value)
    assert S not in str(e.value) and "carries user info before '@'" in str(e.value), str(e.value)
    with pytest.raises(ConfigError) as e:
        Settings.load(env={"SEGLAKE_ETCD_ENDPOINT": value})
    assert S not in str(e.value) and "config key 'etcd_endpoint'" in str(e.value), str(e.value)


GOOD = dict(address="127.0.0.1:19530", bucket="bkt", s3_endpoint="http://127.0.0.1:9000", s3_region="us-east-1",
            s3_access_key="k", s3_secret_key=S, user="", password="")


@pytest.mark.parametrize("key, value, said", [
    ("address", "127.0.0.1:19530\n", "is not host:port"),
    ("address", "h:99999", "is not host:port"),
    ("address", f"root:{S}@h:19530", "carries user info"),
    ("address", "a:1,b:2", "one host:port"),
    ("s3_endpoint", f"http://k:{S}@127.0.0.1:9000", "no credentials"),
    ("s3_endpoint", "ftp://127.0.0.1", "is not an http:// or https:// URL"),
    ("s3_region", "us-east-1\n", "s3_region"),
    ("user", "root\x1b[2J", "user"),
])
def test_a_milvus_restore_target_is_checked_whole_before_anything(key, value, said):
    with pytest.raises(ValidationError) as e:
        MilvusTarget(**{**GOOD, key: value}).check()
    assert said in str(e.value) and S not in str(e.value), str(e.value)


def test_a_good_target_passes():
    MilvusTarget(**GOOD).check()
    MilvusTarget(**{**GOOD, "address": "[::1]:19530", "s3_endpoint": "https://s3.example.com"}).check()
