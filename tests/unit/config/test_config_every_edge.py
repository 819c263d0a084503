"""Adversarial-review leftovers of issue 8, each across every edge that feeds it: config
dict, SEGLAKE_CONFIG / SEGLAKE_<KEY> env, the Airflow Variable JSON, the secrets file,
DAG conf (Param/REST, check_conf) and CLI flags. Pure checks, no servers."""

import json
import math
from dataclasses import fields

import pytest

from seglake import cli, limits, contract as params
from seglake.cli import entry as cli_entry
from seglake.config import Settings, loads_strict
from seglake.errors import ConfigError, ValidationError
from seglake.lifecycle import gc
from seglake.names import parse_endpoints
from seglake.storage.s3 import S3Store, parse_s3_uri


def _every_layer(key, json_value, env_text=None):
    """Call each config layer with `key` set; yield (layer, callable)."""
    text = json.dumps({key: json_value}) if not isinstance(json_value, str) or not json_value.startswith("RAW:") \
        else json_value[4:]
    yield "variable", lambda: Settings.load(variable=text, env={})
    yield "SEGLAKE_CONFIG", lambda: Settings.from_env({"SEGLAKE_CONFIG": text})
    if env_text is not None:
        yield "env", lambda: Settings.from_env({f"SEGLAKE_{key.upper()}": env_text})


# -- item 2: the GC floor has a floor; only an explicit force goes below it ---------------
@pytest.mark.parametrize("value,env", [(0, "0"), (0.0, "0s"), (59, "59"), ("10m", "10m"), (3599.9, "3599.9")])
def test_tolerance_floor_below_its_own_minimum_is_refused_in_every_layer(value, env):
    with pytest.raises(ConfigError, match="tolerance_floor.*>= 3600"):
        Settings.from_dict({"tolerance_floor": value})
    for layer, call in _every_layer("tolerance_floor", value, env):
        with pytest.raises(ConfigError, match="tolerance_floor"):
            call()


def test_the_floor_can_be_raised():
    assert Settings.from_dict({"tolerance_floor": "1h"}).tolerance_floor == 3600
    assert Settings.from_env({"SEGLAKE_TOLERANCE_FLOOR": "2d"}).tolerance_floor == 172800


def test_gc_options_refuse_a_zero_floor_unless_forced():
    with pytest.raises(ValidationError, match="floor"):
        gc.GCOptions(floor=0, missing_tolerance=0, drop_tolerance=0).check()
    with pytest.raises(ValidationError, match="floor"):  # the floor itself, even with tolerances above it
        gc.GCOptions(floor=0, missing_tolerance=7200, drop_tolerance=7200).check()
    gc.GCOptions(floor=0, missing_tolerance=0, drop_tolerance=0, force=True).check()  # explicit force only


def test_gc_conf_cannot_lower_the_floor_and_low_tolerances_need_force():
    with pytest.raises(ValidationError, match="unknown conf key 'tolerance_floor'"):
        params.check_conf("gc", {"tolerance_floor": 0})
    conf = params.check_conf("gc", {"missing_tolerance_hours": 0})  # a valid conf ...
    s = Settings.from_dict({})
    opts = gc.GCOptions.from_settings(s, missing_tolerance=conf["missing_tolerance_hours"] * 3600)
    with pytest.raises(ValidationError, match="below the 3600s floor"):  # ... refused by the floor
        opts.check()
    gc.GCOptions.from_settings(s, missing_tolerance=0, force=True).check()


# -- item 3: a key given twice is refused, naming it ---------------------------------------
DUPLICATES = ['{"missing_tolerance": "3d", "missing_tolerance": "1s"}',
              '{"copy_threads": 2, "etcd_root": "x", "copy_threads": 3}']


@pytest.mark.parametrize("text", DUPLICATES)
def test_duplicate_json_keys_are_refused_in_every_layer(text, tmp_path):
    key = "missing_tolerance" if "missing" in text else "copy_threads"
    with pytest.raises(ConfigError, match=f"'{key}' is given more than once"):
        Settings.load(variable=text, env={})
    with pytest.raises(ConfigError, match=f"SEGLAKE_CONFIG: key '{key}' is given more than once"):
        Settings.from_env({"SEGLAKE_CONFIG": text})


def test_duplicate_keys_in_the_secrets_file_are_refused_without_the_value(tmp_path):
    f = tmp_path / "secrets.json"
    f.write_text('{"etcd_password": "first-secret", "etcd_password": "second-secret"}')
    with pytest.raises(ConfigError, match="'etcd_password' is given more than once") as e:
        Settings.from_env({"SEGLAKE_SECRETS_FILE": str(f)})
    assert "secret" not in str(e.value).replace("SECRETS_FILE", "")


def test_an_integer_past_the_digit_limit_is_a_config_error():
    with pytest.raises(ConfigError, match="copy_threads|out of range"):
        Settings.load(variable='{"copy_threads": ' + "9" * 5000 + "}", env={})


def test_nested_duplicates_are_refused_too():
    with pytest.raises(ConfigError, match="'b' is given more than once"):
        loads_strict("x", '{"a": {"b": 1, "b": 1}}')
    assert loads_strict("x", '{"a": {"b": 1}, "b": 1}') == {"a": {"b": 1}, "b": 1}  # other objects: fine


# -- item 4: signed zeros, signs, exponents, padding ---------------------------------------
@pytest.mark.parametrize("raw", ["-0.0", "-0", "-0e5", "-0.000"])
def test_negative_zero_in_json_is_refused_naming_the_key(raw):
    for key in ("missing_tolerance", "copy_threads"):
        for layer, call in _every_layer(key, f'RAW:{{"{key}": {raw}}}'):
            with pytest.raises(ConfigError, match=f"'{key}' is {raw}, a negative zero"):
                call()


@pytest.mark.parametrize("name", sorted(limits.LIMITS))
def test_every_limit_refuses_a_negative_zero(name):
    with pytest.raises(ValidationError, match="negative zero"):
        limits.LIMITS[name].check("k", -0.0)
    lim = limits.LIMITS[name]
    if lim.minimum == 0 and not lim.exclusive_minimum:
        assert math.copysign(1, lim.check("k", 0.0)) > 0


@pytest.mark.parametrize("dag_id,key", [(d, k) for d, spec in params.SPECS.items() for k, v in spec.items()
                                        if v.kind in ("number", "integer")])
def test_conf_refuses_a_negative_zero(dag_id, key):
    with pytest.raises(ValidationError, match=f"'{key}'.*negative zero"):
        params.check_conf(dag_id, {**_required(dag_id), key: -0.0})


def _required(dag_id):
    return {k: (1 if v.kind == "integer" else "x") for k, v in params.SPECS[dag_id].items() if v.required}


BAD_TEXT = ["-0", "-0.0", "+5", "1e3", "1E3", "010", "00", "0x10", "1.", ".5", "5_0", " 5", "5 ", "nan", "inf",
            "-1", "５", ""]


@pytest.mark.parametrize("raw", BAD_TEXT)
def test_env_numbers_are_plain_decimal(raw):
    with pytest.raises(ConfigError, match="copy_threads"):
        Settings.from_env({"SEGLAKE_COPY_THREADS": raw})
    with pytest.raises(ConfigError, match="missing_tolerance"):
        Settings.from_env({"SEGLAKE_MISSING_TOLERANCE": raw})
    with pytest.raises(ConfigError, match="missing_tolerance"):
        Settings.from_env({"SEGLAKE_MISSING_TOLERANCE": raw + "h"})


@pytest.mark.parametrize("raw", ["+5", "1e3", "-0", "010", "0x10"])
def test_duration_strings_in_json_are_plain_decimal(raw):
    for layer, call in _every_layer("drop_tolerance", raw):
        with pytest.raises(ConfigError, match="drop_tolerance"):
            call()


def test_plain_decimal_text_passes():
    s = Settings.from_env({"SEGLAKE_COPY_THREADS": "10", "SEGLAKE_MISSING_TOLERANCE": "0",
                           "SEGLAKE_DROP_TOLERANCE": "1.5h", "SEGLAKE_COPY_JOB_RETENTION": "0.25"})
    assert (s.copy_threads, s.missing_tolerance, s.drop_tolerance, s.copy_job_retention) == (10, 0, 5400, 0.25)
    assert math.copysign(1, s.missing_tolerance) > 0


@pytest.mark.parametrize("text", ["-0.0", "-0", "+5", "1e3", "010", " 1", "nan", "0x1", "1_0"])
@pytest.mark.parametrize("argv", [["gc", "pause", "--ttl-hours"], ["snapshots", "create", "demo", "s", "--ttl-hours"],
                                  ["gc", "run", "--missing-tolerance-hours"], ["gc", "run", "--drop-tolerance-hours"],
                                  ["collections", "drop", "demo", "--timeout-hours"], ["jobs", "describe"]])
def test_cli_numbers_are_plain_decimal(argv, text, capsys, monkeypatch):
    monkeypatch.setattr(cli_entry, "Settings", None)  # refused before config is loaded or anything connects
    with pytest.raises(SystemExit) as exit_:
        cli.main([*argv, text])
    assert exit_.value.code == 2
    assert "plain decimal" in capsys.readouterr().err


# -- item 5: environment names are case-sensitive ------------------------------------------
@pytest.mark.parametrize("name,want", [("seglake_store_uri", "SEGLAKE_STORE_URI"),
                                       ("Seglake_Missing_Tolerance", "SEGLAKE_MISSING_TOLERANCE"),
                                       ("SEGLAKE_copy_threads", "SEGLAKE_COPY_THREADS"),
                                       ("seglake_config", "SEGLAKE_CONFIG"),
                                       ("seglake_home", "SEGLAKE_HOME")])
def test_other_spellings_of_a_seglake_env_name_are_refused(name, want):
    with pytest.raises(ConfigError, match=f"'{name}' is not read: names are case-sensitive.*'{want}'"):
        Settings.from_env({name: "1"})


def test_lowercase_unknown_names_get_the_closest_known_one():
    with pytest.raises(ConfigError, match="unknown environment variable 'seglake_store_ur'.*'SEGLAKE_STORE_URI'"):
        Settings.from_env({"seglake_store_ur": "/x"})


def test_names_that_only_contain_seglake_are_not_ours():
    Settings.from_env({"AIRFLOW_VAR_SEGLAKE_CONFIG": "{}", "seglakex": "1", "MY_SEGLAKE_X": "1", "SEGLAKE": "1"})


def test_cli_refuses_a_lowercase_env_name(capsys, monkeypatch):
    monkeypatch.setenv("seglake_etcd_endpoint", "127.0.0.1:1")
    assert cli.main(["config", "show"]) == 2
    assert "SEGLAKE_ETCD_ENDPOINT" in capsys.readouterr().err


# -- item 6: store_uri full-matches a strict pattern --------------------------------------
BAD_S3 = ["s3://b/../x", "s3://bkt/a/../b", "s3://bkt/./a", "s3://bkt/a/.", "s3://bkt/%2e%2e/x", "s3://bkt/a%2Fb",
          "s3://bkt//a", "s3://bkt/a//b", "s3://bkt/a/", "s3://bkt/", "s3://bkt\\a", "s3://bkt/a\\b", "s3://",
          "s3:///a", "s3://Bkt/a", "s3://b_k/a", "s3://bk..t/a", "s3://-bkt/a", "s3://bkt-/a", "s3://ab/a",
          "s3://" + "b" * 64, "s3://192.168.1.1/a", "s3://bkt/a b", "s3://bkt/.hidden", "S3://bkt/a",
          "s3://bkt/a?x=1", "s3://bkt/a#f", "s3://bkt/" + "a" * 513]
GOOD_S3 = [("s3://bkt", ("bkt", "")), ("s3://my-bucket.example/a/b_c/d.e", ("my-bucket.example", "a/b_c/d.e")),
           ("s3://seglake-test/t0123abcdef", ("seglake-test", "t0123abcdef")), ("s3://b12/dt=2026-01-01", ("b12", "dt=2026-01-01")),
           ("s3://123/x", ("123", "x"))]


@pytest.mark.parametrize("uri", BAD_S3)
def test_odd_s3_uris_are_refused_before_any_side_effect(uri, monkeypatch):
    with pytest.raises(ValueError):
        parse_s3_uri(uri)
    import boto3
    monkeypatch.setattr(boto3, "client", lambda *a, **k: pytest.fail("no client may be made"))
    with pytest.raises(ValueError):
        S3Store(uri).client
    with pytest.raises(ConfigError, match="store_uri"):
        Settings.from_dict({"store_uri": uri})
    for layer, call in _every_layer("store_uri", uri, uri):
        with pytest.raises(ConfigError, match="store_uri"):
            call()


@pytest.mark.parametrize("uri,parsed", GOOD_S3)
def test_clean_s3_uris_pass(uri, parsed):
    assert parse_s3_uri(uri) == parsed
    assert Settings.from_dict({"store_uri": uri}).store_uri == uri


@pytest.mark.parametrize("uri", ["relative/store", "store", "./store", "/data/../etc", "/data/./store", "~/a/../b",
                                 "file://relative", "gs://bucket/x", "http://h/x", "C:\\store", "/a\\b", ""])
def test_odd_local_store_uris_are_refused(uri):
    with pytest.raises(ConfigError, match="store_uri"):
        Settings.from_dict({"store_uri": uri})


@pytest.mark.parametrize("uri", ["/data/store", "/data/store/", "~/store", "file:///data/store", "/"])
def test_absolute_local_store_uris_pass(uri):
    assert Settings.from_dict({"store_uri": uri}).store_uri == uri


# -- item 7: etcd_endpoint is host:port, or a comma list of them ---------------------------
GOOD_EP = {"127.0.0.1:2379": [("127.0.0.1", 2379)], "localhost:1": [("localhost", 1)],
           "etcd-0.etcd.svc.cluster.local:65535": [("etcd-0.etcd.svc.cluster.local", 65535)],
           "[::1]:2379": [("[::1]", 2379)], "proj_etcd_1:2379": [("proj_etcd_1", 2379)],
           "127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792": [("127.0.0.1", p) for p in (23790, 23791, 23792)]}
BAD_EP = ["h:0", "h:65536", "h:99999", "h:02379", "h", ":2379", "h:", "h:2379,", ",h:2379", "h:1,,h:2", "h:1, h:2",
          "http://h:1", "h:1,h:1", "H:1,h:1", "256.1.1.1:1", "1.2.3:1", "h:+1", "h:-1", "h:1 ", " h:1", "[zz]:1",
          "[::1:1", "_h:1", "h_:1", "-h:1", "h-:1", "h..x:1", "h:1/x", "h:1\n", "h:１", ",".join(f"h{i}:1" for i in range(33))]


@pytest.mark.parametrize("value", sorted(GOOD_EP))
def test_etcd_endpoints_pass(value):
    assert parse_endpoints("k", value) == GOOD_EP[value]
    assert Settings.from_env({"SEGLAKE_ETCD_ENDPOINT": value}).etcd_endpoint == value


@pytest.mark.parametrize("value", BAD_EP)
def test_odd_etcd_endpoints_are_refused_in_every_layer(value):
    with pytest.raises(ValidationError):
        parse_endpoints("k", value)
    with pytest.raises(ConfigError, match="etcd_endpoint"):
        Settings.from_dict({"etcd_endpoint": value})
    for layer, call in _every_layer("etcd_endpoint", value, value):
        with pytest.raises(ConfigError, match="etcd_endpoint"):
            call()


# -- item 8: every numeric settings key has its own Limit, used at every layer -------------
NUMERIC = [f for f in fields(Settings) if f.metadata["kind"] in ("int", "duration", "float")]


def test_there_are_numeric_settings():
    assert {"flush_seal_rows", "flush_seal_bytes", "flush_seal_age", "flush_seal_idle",
            "compaction_delete_ratio", "compaction_min_segment_rows"} <= {f.name for f in NUMERIC}


@pytest.mark.parametrize("f", NUMERIC, ids=lambda f: f.name)
def test_every_numeric_setting_has_a_limit_that_its_layers_enforce(f):
    lim = limits.LIMITS[f.name]
    assert lim.integer == (f.metadata["kind"] == "int"), "an int key needs an integer Limit"
    assert lim.check("d", f.default) == f.default, "the default must be in range"
    assert lim.maximum < math.inf
    above = int(lim.maximum) + 1 if lim.integer else lim.maximum * 2
    below = lim.minimum - 1 if lim.integer or not lim.exclusive_minimum else lim.minimum
    for bad in (above, below, math.nan):
        with pytest.raises(ConfigError, match=f.name):
            Settings.from_dict({f.name: bad})
    with pytest.raises(ConfigError, match=f.name):
        Settings.from_env({f"SEGLAKE_{f.name.upper()}": str(above)})


# -- every layer is checked whole: a later layer never masks a bad value ------------------
@pytest.mark.parametrize("key,bad,good", [("etcd_endpoint", "h:0", "127.0.0.1:2379"),
                                          ("store_uri", "s3://b/../x", "/data/store"),
                                          ("tolerance_floor", 0, "2h")])
def test_a_bad_value_is_refused_even_when_a_later_layer_overrides_it(key, bad, good):
    with pytest.raises(ConfigError, match=key):  # the Variable's value, replaced by a connection override
        Settings.load(variable=json.dumps({key: bad}), overrides={key: good}, env={})
    env_text = bad if isinstance(bad, str) else str(bad)
    with pytest.raises(ConfigError, match=key):  # the environment's, replaced by the Variable
        Settings.load(variable=json.dumps({key: good}), env={f"SEGLAKE_{key.upper()}": env_text})
