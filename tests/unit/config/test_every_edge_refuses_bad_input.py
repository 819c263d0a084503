"""Every edge refuses bad input before any side effect (issue 8, items 3, 17, 18, 19 and
"Conf"): config file / Variable JSON, SEGLAKE_* env, DAG conf, CLI flags and the engine
entry points. Pure checks only; the DAG and store-level tests live in tests/dags and
tests/integration."""

import json
import math
from dataclasses import fields

import jsonschema
import pytest

from seglake import cli, limits, contract as params
from seglake.cli import entry as cli_entry
from seglake_airflow.params import param_schema
from seglake.config import Settings, gc_schedule, spark_env
from seglake.errors import ConfigError, ValidationError
from seglake.names import NAME_PATTERN, NAME_RE, validate_name

NON_FINITE = [math.nan, math.inf, -math.inf]


# -- one table of limits ------------------------------------------------------------------
def test_every_numeric_config_key_and_conf_key_has_a_limit():
    numeric = [f.name for f in fields(Settings) if f.metadata["kind"] in ("int", "duration", "float")]
    assert set(numeric) <= set(limits.LIMITS)
    for spec in params.SPECS.values():
        for key in spec.values():
            assert key.kind in params.KINDS
            if key.kind in ("number", "integer"):
                assert key.limit in limits.LIMITS


@pytest.mark.parametrize("name", sorted(limits.LIMITS))
@pytest.mark.parametrize("bad", [*NON_FINITE, True, "1", None, 2**64, -1])
def test_limits_refuse_non_finite_wrong_type_and_out_of_range(name, bad):
    with pytest.raises(ValidationError, match="the_key"):
        limits.check(name, "the_key", bad)


def test_integer_bounds_are_exact():
    """2**63 - 1 divided by 1.0 is 2**63: the bound must not go through a float."""
    assert limits.check("id", "job_id", 2**63 - 1) == 2**63 - 1
    with pytest.raises(ValidationError, match="job_id.*out of range"):
        limits.check("id", "job_id", 2**63)
    with pytest.raises(ValidationError, match="integer"):
        limits.check("id", "job_id", 1.5)


@pytest.mark.parametrize("name", sorted(limits.LIMITS))
def test_param_schema_refuses_nan_and_infinity_but_not_the_bounds(name):
    lim = limits.LIMITS[name]
    schema = {"type": "integer" if lim.integer else "number", **lim.schema()}
    lo, hi = lim.bounds()
    jsonschema.validate(hi, schema)
    if not lim.exclusive_minimum:
        jsonschema.validate(lo, schema)
    for bad in NON_FINITE:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


# -- config: file / Variable JSON / env ---------------------------------------------------------
@pytest.mark.parametrize("text", ['{"missing_tolerance": NaN}', '{"drop_tolerance": Infinity}',
                                  '{"copy_threads": -Infinity}', '{"etcd_timeout": 1e999}'])
def test_json_config_refuses_non_finite_numbers_naming_the_key(text):
    key = json.loads(text.replace("NaN", "0").replace("-Infinity", "0").replace("Infinity", "0"))
    for load in (lambda: Settings.load(variable=text, env={}), lambda: Settings.load(env={"SEGLAKE_CONFIG": text})):
        with pytest.raises(ConfigError, match=repr(next(iter(key)))):
            load()


@pytest.mark.parametrize("env", [{"SEGLAKE_MISSING_TOLERANCE": "9" * 400}, {"SEGLAKE_COPY_THREADS": str(10**30)},
                                 {"SEGLAKE_ETCD_TIMEOUT": "0"}, {"SEGLAKE_COPY_JOB_TIMEOUT": "30d"}])
def test_env_numbers_are_finite_and_in_range(env):
    with pytest.raises(ConfigError, match=next(iter(env)).removeprefix("SEGLAKE_").lower()):
        Settings.load(env=env)


def test_nan_tolerance_cannot_pass_the_floor():
    from seglake.lifecycle.gc import GCOptions

    with pytest.raises(ValidationError, match="missing_tolerance"):
        GCOptions(missing_tolerance=math.nan).check()
    with pytest.raises(ValidationError, match="drop_tolerance"):
        GCOptions(drop_tolerance=math.inf, force=True).check()


@pytest.mark.parametrize("name,near", [("SEGLAKE_ETCD_ENDPINT", "SEGLAKE_ETCD_ENDPOINT"),
                                       ("SEGLAKE_MISING_TOLERANCE", "SEGLAKE_MISSING_TOLERANCE"),
                                       ("SEGLAKE_GCSCHEDULE", "SEGLAKE_GC_SCHEDULE"),
                                       ("SEGLAKE_CONFG", "SEGLAKE_CONFIG")])
def test_misspelt_env_variables_are_refused_naming_the_nearest(name, near):
    with pytest.raises(ConfigError, match=f"{name}.*did you mean '{near}'"):
        Settings.load(env={name: "1"})


def test_non_key_seglake_variables_are_known():
    Settings.load(env={"SEGLAKE_HOME": "/x", "SEGLAKE_FAULTS": ""})


@pytest.mark.parametrize("key", ["etcd_password", "s3_secret_key"])
@pytest.mark.parametrize("value", [123456789, ["hunter2-secret"], {"v": "hunter2-secret"}])
def test_a_wrongly_typed_secret_is_never_echoed(key, value):
    with pytest.raises(ConfigError, match=key) as err:
        Settings.from_dict({key: value})
    assert "hunter2" not in str(err.value) and "123456789" not in str(err.value)


def test_secrets_file_layer_and_spark_env(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"etcd_password": "pw1", "s3_secret_key": "sk1"}))
    env = {"SEGLAKE_SECRETS_FILE": str(path), "SEGLAKE_CONFIG": json.dumps({"etcd_root": "r"})}
    s = Settings.load(env=env)
    assert (s.etcd_password, s.s3_secret_key, s.etcd_root) == ("pw1", "sk1", "r")
    out = spark_env(env)
    assert out["SEGLAKE_ETCD_PASSWORD"] == "pw1" and "SEGLAKE_SECRETS_FILE" not in out
    path.write_text(json.dumps({"etcd_root": "not-a-secret"}))
    with pytest.raises(ConfigError, match="not a secret key"):
        Settings.load(env=env)


def test_gc_schedule_comes_from_the_environment_only():
    assert gc_schedule({}) is None   # manual only unless an operator sets a schedule
    assert gc_schedule({"SEGLAKE_GC_SCHEDULE": "@daily"}) == "@daily"
    assert gc_schedule({"SEGLAKE_GC_SCHEDULE": "30 2 * * *"}) == "30 2 * * *"
    assert gc_schedule({"SEGLAKE_GC_SCHEDULE": "none"}) is None
    with pytest.raises(ConfigError, match="gc_schedule"):
        gc_schedule({"SEGLAKE_GC_SCHEDULE": "every day"})
    with pytest.raises(ConfigError, match="gc_schedule.*cannot come from the Variable"):
        Settings.load(variable='{"gc_schedule": "@hourly"}', env={})


def test_gc_dag_schedule_is_read_from_the_environment_at_parse_time():
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[3] / "dags" / "gc.py").read_text())
    kw = [k for n in ast.walk(tree) if isinstance(n, ast.Call) for k in n.keywords if k.arg == "schedule"]
    assert [ast.unparse(k.value) for k in kw] == ["SCHEDULE"]   # the same value the form's note is made from
    assigned = {ast.unparse(n.targets[0]): ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign)}
    assert assigned["SCHEDULE"] == "gc_schedule()"


# -- names --------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["abc\n", "abc\r\n", "\nabc", "a" * 256, "1abc", "a-b", "", "ab c", "é"])
def test_names_full_match_in_the_engine_and_the_param_pattern(bad):
    with pytest.raises(ValidationError):
        validate_name("collection", bad)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, {"type": "string", "pattern": NAME_PATTERN})


@pytest.mark.parametrize("good", ["abc", "_x", "A1_b2", "a" * 255])
def test_good_names_pass_both(good):
    assert validate_name("collection", good) == good
    jsonschema.validate(good, {"type": "string", "pattern": NAME_PATTERN})


# -- DAG conf -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dag_id,conf,message", [
    ("snapshot_drop", {"collection": "demo", "snapshot": "s1"}, "unknown conf key 'snapshot' (did you mean 'name'?)"),
    ("snapshot_drop", {"collection": "demo", "snapshot": "s1"}, "missing conf key 'name'"),
    ("snapshot_restore", {"collection": "d", "snapshot": "s", "tagret": "t"}, "did you mean 'target'"),
    ("snapshot_restore", {"collection": "d", "snapshot": "s", "tagret": "t"}, "missing conf key 'target'"),
    ("gc", {"dryrun": True}, "did you mean 'dry_run'"),
    ("copy_segment_job", {}, "missing conf key 'job_id'"),
    ("copy_segment_job", {"job_id": 2**63}, "job_id"),
    ("copy_segment_job", {"job_id": "1"}, "conf key 'job_id' (Copy job id): \"1\" is not allowed; allowed: an integer from 1 to"),
    ("snapshot_create", {"collection": "d", "name": "n", "ttl_hours": math.nan},
     "conf key 'ttl_hours' (TTL (hours)): NaN is not allowed; allowed: a finite number from 0 to 87600 hours"),
    ("snapshot_create", {"collection": "d", "name": "n", "ttl_hours": None}, "'ttl_hours' (TTL (hours)) is null"),
    ("snapshot_restore", {"collection": "d", "snapshot": "s", "target": "t", "timeout_hours": math.inf},
     "conf key 'timeout_hours' (Job timeout (hours)): Infinity is not allowed; allowed: a finite number greater "
     "than 0 and at most 168 hours"),
    ("gc", {"missing_tolerance_hours": -math.inf}, "missing_tolerance_hours"),
    ("gc", {"dry_run": "false"}, "conf key 'dry_run' (Dry run): \"false\" is not allowed; allowed: true or false"),
    ("gc", {"collection": "x\n"}, "conf key 'collection' (Collection): \"x\\n\" is not allowed; allowed: a letter or "
                                  "'_', then letters, digits or '_' (at most 255 characters, no spaces), e.g. demo"),
    ("snapshot_create", {"collection": "demo", "name": "my snap"}, "conf key 'name' (Snapshot name): \"my snap\" is "
                                                                   "not allowed; allowed: a letter or '_'"),
    ("verify_collection", {"collection": "demo", "database": "x"}, "unknown conf key 'database'"),
    ("snapshot_create", {"collection": "d", "name": "n", "engine": "gpu"}, "engine"),
])
def test_check_conf_refuses_and_names_the_key(dag_id, conf, message):
    with pytest.raises(ValidationError) as err:
        params.check_conf(dag_id, conf)
    assert message in str(err.value)


TEXT_KEYS = sorted((d, k) for d, spec in params.SPECS.items() for k, key in spec.items() if key.kind == "text")


@pytest.mark.parametrize("dag_id,key", TEXT_KEYS)
@pytest.mark.parametrize("bad", ["a\x00b", "a\nb", "a\rb", "a\x1bb"])
def test_text_conf_keys_refuse_control_characters_naming_the_key(dag_id, key, bad):
    """A free-text conf key (a snapshot's description, Milvus's bucket and etcd, a suffix...)
    took any character: a NUL or a line break went into etcd, the run's log and the page
    (`{"description": "x\u0000y"}` made snapshot s2 with that description). Refused as the
    settings refuse them, naming the key."""
    with pytest.raises(ValidationError) as err:
        params.SPECS[dag_id][key].check(key, bad)
    assert f"conf key {key!r}" in str(err.value) and "printable" in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


def test_check_conf_fills_defaults_and_keeps_nullables():
    assert params.check_conf("gc", None) == {
        "dry_run": True, "collection": None, "db": "default", "missing_tolerance_hours": None,
        "drop_tolerance_hours": None, "force": False, "engine": "auto"}
    out = params.check_conf("snapshot_restore", {"collection": "d", "snapshot": "s", "target": "t"})
    assert out["timeout_hours"] is None  # -> copy_job_timeout from config


@pytest.mark.parametrize("dag_id,conf,key,value", [
    ("gc", {"missing_tolerance_hours": math.nan}, "missing_tolerance_hours", "NaN"),
    ("snapshot_create", {"collection": "d", "name": "a b"}, "name", '"a b"'),
    ("snapshot_restore", {"collection": "d", "snapshot": "s", "target": "t", "deferrable": "x"}, "deferrable", '"x"'),
    ("copy_segment_job", {"job_id": 0}, "job_id", "0"), ("gc", {"engine": "gpu"}, "engine", '"gpu"'),
    ("gc", {"dry_run": None}, "dry_run", "null"),
])
def test_every_refusal_is_one_plain_sentence(dag_id, conf, key, value):
    """Names the key, shows the value, says what is allowed; no regex, no schema dump."""
    with pytest.raises(ValidationError) as err:
        params.check_conf(dag_id, conf)
    text = str(err.value)
    assert f"conf key {key!r}" in text and value in text and "allowed:" in text, text
    for dump in ("(?!", "^[", "{'", "Failed validating", "\n"):
        assert dump not in text, text
    assert text.replace("e.g. ", "").count(". ") == 0, text   # one sentence


def test_gc_floor_is_refused_in_the_conf_units_unless_forced():
    conf = params.check_conf("gc", {"missing_tolerance_hours": 0.1})
    with pytest.raises(ValidationError) as err:
        params.check_gc_floor(conf, 3600)
    assert str(err.value).endswith("conf key 'missing_tolerance_hours' (Orphan tolerance (hours)): 0.1 is below the "
                                   "GC floor of 1 hour; allowed: at least 1, or set force to true to go below the floor")
    params.check_gc_floor(params.check_conf("gc", {"missing_tolerance_hours": 0.1, "force": True}), 3600)
    params.check_gc_floor(params.check_conf("gc", {"drop_tolerance_hours": 2}), 7200)
    with pytest.raises(ValidationError, match="drop_tolerance_hours.*floor of 2 hours"):
        params.check_gc_floor(params.check_conf("gc", {"drop_tolerance_hours": 1.5}), 7200)


def test_a_scheduled_gc_run_needs_the_operator_record():
    with pytest.raises(ValidationError, match="scheduled run has no operator settings.*seglake gc schedule set"):
        params.scheduled_gc_conf(None)
    conf = params.scheduled_gc_conf({"conf": {"dry_run": False, "engine": "inline"}})
    assert conf["dry_run"] is False and conf["engine"] == "inline"
    with pytest.raises(ValidationError, match="dry_run"):
        params.scheduled_gc_conf({"conf": {"dry_run": "no"}})


def test_form_descriptions_say_the_rule_and_the_gc_dry_run_is_the_default():
    for dag_id, spec in params.SPECS.items():
        for key, k in spec.items():
            schema = param_schema(k)
            if k.kind == "name":
                assert "Allowed: a letter or '_'" in schema["description"] and ", e.g. " in schema["description"]
                assert NAME_RE.fullmatch(schema["description"].rsplit("e.g. ", 1)[1].rstrip(".")), (dag_id, key)
    dry = params.SPECS["gc"]["dry_run"]
    assert dry.default is True and "REAL run that deletes" in param_schema(dry)["description"]
    d = param_schema(params.SPECS["snapshot_restore"]["deferrable"])
    assert d["enum"] == [None, True, False] and set(d["values_display"]) == {"null", "true", "false"}
    assert d["type"][1] == "string"   # Airflow's form draws a dropdown (a boolean first would be a switch)


@pytest.mark.parametrize("dag_id", sorted(params.SPECS))
def test_param_schemas_accept_the_defaults_and_refuse_nan(dag_id):
    for key, spec in params.SPECS[dag_id].items():
        schema = param_schema(spec)
        if not spec.required:
            jsonschema.validate(spec.default, schema)
        if spec.kind in ("number", "integer"):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(math.nan, schema)


# -- string settings: etcd_root full-matches a key prefix, no control characters ---------------
@pytest.mark.parametrize("root", ["seglake", "by-dev", "t0123abcd", "a/b", "a.b_c-d/e1"])
def test_etcd_root_accepts_clean_key_prefixes(root):
    assert Settings.from_dict({"etcd_root": root}).etcd_root == root
    assert Settings.from_env({"SEGLAKE_ETCD_ROOT": root}).etcd_root == root


@pytest.mark.parametrize("root", ["seglake\n", "\nseglake", "seg\nlake", "seglake/", "/seglake", "a//b", "a/../b",
                                  ".", "", "seg lake", "seg\tlake", "seglake\x00", "a/b\r"])
def test_etcd_root_must_full_match_a_key_prefix_in_every_layer(root):
    with pytest.raises(ConfigError, match="etcd_root"):
        Settings.from_dict({"etcd_root": root})
    if "\x00" not in root:  # an environment variable cannot hold NUL
        with pytest.raises(ConfigError, match="etcd_root"):
            Settings.from_env({"SEGLAKE_ETCD_ROOT": root})
    with pytest.raises(ConfigError, match="etcd_root"):
        Settings.load(variable=json.dumps({"etcd_root": root}), env={})


@pytest.mark.parametrize("key,value", [("store_uri", "/tmp/store\n"), ("store_uri", "s3://b/p\r"),
                                       ("store_uri", "/tmp/a\x00b"), ("etcd_endpoint", "127.0.0.1:2379\n"),
                                       ("s3_endpoint", "http://h:1\t"), ("etcd_ca_cert", "/ca.pem\x7f")])
def test_string_settings_refuse_control_characters_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=key):
        Settings.from_dict({key: value})
    with pytest.raises(ConfigError, match=key):
        Settings.load(variable=json.dumps({key: value}), env={})


# -- CLI flags ---------------------------------------------------------------------------------
@pytest.mark.parametrize("argv,flag", [
    (["gc", "pause", "--ttl-hours", "inf"], "--ttl-hours"),
    (["gc", "pause", "--ttl-hours", "nan"], "--ttl-hours"),
    (["gc", "pause", "--ttl-hours", "0"], "--ttl-hours"),
    (["snapshots", "create", "demo", "s", "--ttl-hours", "nan"], "--ttl-hours"),
    (["snapshots", "create", "demo", "s", "--ttl-hours", "1e400"], "--ttl-hours"),
    (["jobs", "describe", "9223372036854775808"], "job_id"),
    (["jobs", "describe", "1", "--interval", "nan"], "--interval"),
    (["demo", "seed", "--rows", "0"], "--rows"),
    (["demo", "seed", "--dim", "100000"], "--dim"),
    (["demo", "purge", "demo\n"], "name"),
    (["snapshots", "drop", "demo", "s\n"], "name"),
    (["collections", "list", "--db", "x y"], "--db"),
])
def test_cli_flags_are_checked_before_any_command_runs(argv, flag, capsys, monkeypatch):
    monkeypatch.setattr(cli_entry, "Settings", None)  # nothing may load config or connect
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    assert f"argument {flag}" in capsys.readouterr().err


@pytest.mark.parametrize("argv,bad,near", [
    (["snapshots", "create", "demo", "s", "--tll-hours", "1"], "--tll-hours", "--ttl-hours"),
    (["snapshots", "create", "demo", "s", "--tll-hours=1"], "--tll-hours", "--ttl-hours"),
    (["gc", "run", "--exectue"], "--exectue", "--execute"),
    (["gc", "run", "--missing-tolerence-hours", "2"], "--missing-tolerence-hours", "--missing-tolerance-hours"),
    (["demo", "seed", "--segmnets", "2"], "--segmnets", "--segments"),
])
def test_cli_misspelt_flag_is_refused_naming_the_subcommands_closest(argv, bad, near, capsys, monkeypatch):
    monkeypatch.setattr(cli_entry, "Settings", None)  # refused before config is loaded or anything connects
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"unrecognized arguments: {bad}" in err and f"did you mean {near}?" in err, err


def test_cli_unrecognised_argument_without_a_close_flag_gets_no_guess(capsys, monkeypatch):
    monkeypatch.setattr(cli_entry, "Settings", None)
    with pytest.raises(SystemExit):
        cli.main(["snapshots", "create", "demo", "s", "extra", "--zzzz"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: extra --zzzz" in err and "did you mean" not in err, err


def test_cli_refuses_a_misspelt_env_variable(capsys, monkeypatch):
    monkeypatch.setenv("SEGLAKE_ETCD_ENDPINT", "127.0.0.1:1")
    assert cli.main(["config", "show"]) == 2
    assert "did you mean 'SEGLAKE_ETCD_ENDPOINT'" in capsys.readouterr().err


def test_optional_string_params_are_nullable():
    """In the 3.3 trigger form a `Param("", type="string")` counts as required."""
    for dag_id, spec in params.SPECS.items():
        for key, k in spec.items():
            if not k.required and k.kind in ("name", "text") and k.default in ("", None):
                assert k.nullable, f"{dag_id}.{key}"


@pytest.mark.parametrize("raw", ["١٢", "+3", "1_0", "3\n", " 3", "²"])
def test_env_integers_are_plain_ascii_digits(raw):
    """Found by the adversarial review: int() takes other digits, signs, underscores, padding."""
    from seglake.config import ConfigError, Settings

    with pytest.raises(ConfigError, match="copy_threads"):
        Settings.from_env({"SEGLAKE_COPY_THREADS": raw})


@pytest.mark.parametrize("raw", ["１０h", "١٠d", " 10h\n", "10 h"])
def test_env_durations_are_plain_ascii(raw):
    from seglake.config import ConfigError, Settings

    with pytest.raises(ConfigError, match="missing_tolerance"):
        Settings.from_env({"SEGLAKE_MISSING_TOLERANCE": raw})


@pytest.mark.parametrize("key", sorted(k for k in Settings.__dataclass_fields__ if k.endswith("_schedule")))
def test_every_schedule_key_takes_only_what_airflow_can_parse(key):
    """wal_flush_schedule took 'x' (the wal_flush DAG file then failed to import: its DAG
    was gone from Airflow); the other schedule keys took cron-shaped text croniter refuses."""
    for bad in ("x", "every day", "x x x x x", "61 * * * *", "* * 32 * *"):
        with pytest.raises(ConfigError, match=f"{key}.*not a cron expression"):
            Settings.from_dict({key: bad})
    for good in ("none", "@hourly", "@continuous", "*/5 * * * *", "30 2 * * 1-5"):
        Settings.from_dict({key: good})


@pytest.mark.parametrize("key", sorted(k for k in Settings.__dataclass_fields__ if k.endswith("s3_endpoint")))
def test_every_s3_endpoint_key_is_a_url_with_a_host(key):
    """s3_endpoint 'x' or 'localhost:9000' was taken and failed at the first request with a
    bare ValueError from botocore (a traceback, not a sentence naming the key)."""
    for bad in ("x", "localhost:9000", "http://", "ftp://a", "http://h:99999", "http://u:p@h:1", " http://h"):
        with pytest.raises(ConfigError, match=f"{key}.*not an http"):
            Settings.from_dict({key: bad})
    for good in ("", "http://127.0.0.1:8333", "https://s3.example.com", "http://[::1]:9000"):
        Settings.from_dict({key: good})
    with pytest.raises(ConfigError) as e:
        Settings.from_dict({key: "http://user:hunter2@h:1"})
    assert "hunter2" not in str(e.value)
