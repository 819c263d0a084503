"""atk-s25-edges F6: a secret given in SEGLAKE_CONFIG, the Variable or the secrets file, and
pasted by mistake into another key (s3_endpoint, etcd_root, ...), was echoed by that key's
refusal: the CLI masked only SEGLAKE_<SECRET> variables (its fallback when the config did
not load), the REST API and the task logs nothing. The config masks every secret value of
every layer in its own refusals now (config._masked)."""

import json

import pytest

from seglake import cli
from seglake.config import Settings
from seglake.errors import ConfigError

S = "Sk9xQv7pL2-s25"


@pytest.mark.parametrize("env, variable", [
    ({"SEGLAKE_CONFIG": json.dumps({"s3_secret_key": S, "s3_endpoint": S})}, None),
    ({"SEGLAKE_CONFIG": json.dumps({"etcd_user": "u", "etcd_password": S}), "SEGLAKE_ETCD_ROOT": S + "/"}, None),
    ({"SEGLAKE_ETCD_ENDPOINT": S}, json.dumps({"backup_s3_secret_key": S})),
    ({}, json.dumps({"milvus_s3_secret_key": S, "etcd_ca_cert": S + "\n"})),
    ({}, {"s3_secret_key": S, "gc_list_threads": 4, "backup_uri": f"/tmp/{S}/../x"}),
], ids=["json-endpoint", "json-root", "variable-secret-env-endpoint", "variable-ca-cert", "variable-dict-uri"])
def test_a_secret_pasted_into_another_key_is_masked_in_the_refusal(env, variable):
    with pytest.raises(ConfigError) as e:
        Settings.load(variable=variable, env=env)
    assert S not in str(e.value) and "***" in str(e.value), str(e.value)


def test_the_secrets_file_is_masked_too(tmp_path):
    f = tmp_path / "secrets.json"
    f.write_text(json.dumps({"etcd_password": S}))
    with pytest.raises(ConfigError) as e:
        Settings.load(env={"SEGLAKE_SECRETS_FILE": str(f), "SEGLAKE_ETCD_USER": "u", "SEGLAKE_ETCD_ENDPOINT": S})
    assert S not in str(e.value) and "'etcd_endpoint'" in str(e.value), str(e.value)


def test_a_connection_layer_over_loaded_settings_is_masked():
    """SeglakeHook layers the connections with Settings.replace: a connection's secret in another field."""
    with pytest.raises(ConfigError) as e:
        Settings.load(env={}).replace(s3_access_key="k", s3_secret_key=S, s3_endpoint=S)
    assert S not in str(e.value), str(e.value)


def test_the_cli_says_it_masked(monkeypatch, capsys):
    monkeypatch.setenv("SEGLAKE_CONFIG", json.dumps({"s3_secret_key": S, "s3_endpoint": S}))
    try:
        rc = cli.main(["collections", "list"])
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and S not in err and "config key 's3_endpoint': '***'" in err, err
