import json

import pytest

from seglake.config import Settings, parse_duration
from seglake.errors import ConfigError, ValidationError
from seglake.names import validate_name


def test_defaults_are_valid():
    s = Settings.load(env={})
    assert s.missing_tolerance == 86400 and s.drop_tolerance == 10800 and s.copy_job_retention == 10800
    assert s.max_segments_per_task == 10 and s.etcd_root == "seglake"


@pytest.mark.parametrize("raw,seconds", [(90, 90), ("90", 90), ("10m", 600), ("3h", 10800), ("1d", 86400),
                                         ("1.5h", 5400), ("250ms", 0.25)])
def test_durations(raw, seconds):
    assert parse_duration("k", raw) == seconds


@pytest.mark.parametrize("bad", ["-1h", -5, "soon", "3 weeks", True, [1]])
def test_bad_durations_name_the_key(bad):
    with pytest.raises(ConfigError, match="drop_tolerance"):
        Settings.from_dict({"drop_tolerance": bad})


def test_unknown_keys_and_wrong_types_are_refused():
    with pytest.raises(ConfigError, match="unknown config key.*'retension'"):
        Settings.from_dict({"retension": "3h"})
    with pytest.raises(ConfigError, match="max_segments_per_task"):
        Settings.from_dict({"max_segments_per_task": "ten"})
    with pytest.raises(ConfigError, match="max_segments_per_task.*>= 1"):
        Settings.from_dict({"max_segments_per_task": 0})
    with pytest.raises(ConfigError, match="etcd_endpoint"):
        Settings.from_dict({"etcd_endpoint": 2379})
    with pytest.raises(ConfigError, match="spark_ui"):
        Settings.from_dict({"spark_ui": "yes"})


def test_layers_env_then_variable_then_overrides():
    env = {"SEGLAKE_CONFIG": json.dumps({"etcd_root": "a", "drop_tolerance": "1h"}),
           "SEGLAKE_ETCD_ROOT": "b", "SEGLAKE_MAX_SEGMENTS_PER_TASK": "5"}
    s = Settings.load(env=env)
    assert (s.etcd_root, s.drop_tolerance, s.max_segments_per_task) == ("b", 3600, 5)
    s = Settings.load(variable='{"etcd_root": "c"}', env=env)
    assert s.etcd_root == "c"
    s = Settings.load(variable='{"etcd_root": "c"}', overrides={"etcd_root": "d", "drop_tolerance": None}, env=env)
    assert s.etcd_root == "d" and s.drop_tolerance == 3600


def test_bad_env_and_variable_values_are_clear():
    with pytest.raises(ConfigError, match="SEGLAKE_CONFIG: not valid JSON"):
        Settings.load(env={"SEGLAKE_CONFIG": "{nope"})
    with pytest.raises(ConfigError, match="must be a JSON object"):
        Settings.load(variable="[1]", env={})
    with pytest.raises(ConfigError, match="copy_threads.*not an integer"):
        Settings.load(env={"SEGLAKE_COPY_THREADS": "many"})


def test_secrets_never_in_repr_public_or_config_json():
    s = Settings.from_dict({"etcd_password": "hunter2", "s3_secret_key": "s3cr3t"})
    assert "hunter2" not in repr(s) and "s3cr3t" not in repr(s)
    assert s.to_public()["etcd_password"] == "***"
    env = s.to_env()
    assert "hunter2" not in env["SEGLAKE_CONFIG"] and env["SEGLAKE_ETCD_PASSWORD"] == "hunter2"
    assert Settings.load(env=env).etcd_password == "hunter2"
    assert Settings.load(env=env) == s


@pytest.mark.parametrize("name", ["demo", "_x", "A1_b", "a" * 255])
def test_valid_names(name):
    assert validate_name("collection", name) == name


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a b", "a/b", "ä", "a" * 256, None, 5, "a.b"])
def test_invalid_names(name):
    with pytest.raises(ValidationError, match="invalid collection name"):
        validate_name("collection", name)
