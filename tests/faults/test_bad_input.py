"""Every bad-input class at every edge: NaN, infinity, negative and huge numbers,
unknown and misspelt keys, names with a trailing newline -- through the CLI (a real
`python -m seglake.cli` process), a DAG's Param / REST conf (dag.test run_conf), the
SEGLAKE_* environment and the Airflow Variable JSON. Each must be refused with the key
named (unknown keys: with the closest valid one) and leave etcd and the store exactly
as they were."""

import json
import math
import subprocess
import sys
from typing import NamedTuple

import pytest
from dag_helpers import load_dag
from fault_harness import child_env, fingerprint, seed_and_snapshot

from seglake.lifecycle import restore

NAN, INF = math.nan, math.inf
HUGE_F = 1e308            # finite, but hours * 3600 overflows to inf
HUGE_I = 10**30           # past any int64
BAD_NUMBERS = [("nan", NAN), ("inf", INF), ("negative", -1), ("huge", HUGE_F), ("negative_zero", -0.0)]


@pytest.fixture
def world(meta, store):
    """demo with the snapshots `snap` (every DAG's default name) and `s1`, an old and a
    young orphan: a refused input that slipped through would change one of them."""
    import os
    import time

    from seglake.storage import layout

    from seglake.lifecycle import snapshot

    coll, _ = seed_and_snapshot(meta, store, snap="snap", partitions=1, segments=2, rows=50, dim=4)
    snapshot.create(meta, store, "demo", "s1")
    part = coll.partitions[0].partition_id
    for seg, age in ((900_001, 2 * 86400), (900_002, 0)):
        key = layout.insert_log(coll.collection_id, part, seg, 100, 1)
        store.put(key, b"orphan")
        t = time.time() - age
        os.utime(os.path.join(store.uri, key), (t, t))
    return coll


# -- the CLI -----------------------------------------------------------------------------------
def _cli(settings, *argv, env=None, timeout=20):
    try:
        p = subprocess.run([sys.executable, "-m", "seglake.cli", *argv], env=child_env(settings, extra=env),
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"seglake {' '.join(argv)!r} still running after {timeout}s instead of refusing")
    return p


def _assert_cli_refused(p, *names):
    out = p.stdout + p.stderr
    assert p.returncode not in (0, None), f"accepted (rc 0): {out[-1500:]}"
    assert "Traceback" not in out, f"crashed instead of refusing:\n{out[-3000:]}"
    for n in names:
        assert n.lower() in out.lower(), f"the error does not name {n!r}: {out[-1500:]}"


@pytest.mark.parametrize("label,value", BAD_NUMBERS)
@pytest.mark.parametrize("cmd", [["snapshots", "create", "demo", "s_cli"], ["gc", "pause"]],
                         ids=["snapshots_create", "gc_pause"])
def test_cli_bad_numbers(meta, store, settings, world, cmd, label, value):
    before = fingerprint(meta, store)
    p = _cli(settings, *cmd, "--ttl-hours", repr(value) if label != "negative" else "-1")
    _assert_cli_refused(p, "ttl")
    assert fingerprint(meta, store) == before


@pytest.mark.parametrize("text", ["-0", "+5", "1e3", "010", "0x10", " 1"])
def test_cli_numbers_are_plain_decimal(meta, store, settings, world, text):
    before = fingerprint(meta, store)
    _assert_cli_refused(_cli(settings, "snapshots", "create", "demo", "s_cli", "--ttl-hours", text), "ttl")
    assert fingerprint(meta, store) == before


@pytest.mark.parametrize("interval", ["nan", "inf", "-1", "-0.0"])
def test_cli_bad_watch_interval(meta, store, settings, world, interval):
    job = restore.restore(meta, store, "demo", "s1", "t_watch")
    before = fingerprint(meta, store)
    p = _cli(settings, "jobs", "describe", str(job), "--watch", "--interval", interval, timeout=15)
    _assert_cli_refused(p, "interval")
    assert fingerprint(meta, store) == before


@pytest.mark.parametrize("argv,names", [
    (["demo", "seed", "--name", "fresh", "--rows", str(2**63)], ["rows"]),
    (["demo", "seed", "--name", "fresh", "--partitions", "-1"], ["partitions"]),
    (["demo", "seed", "--name", "fresh\n", "--partitions", "1", "--segments", "1", "--rows", "5", "--dim", "2"],
     ["invalid", "name"]),
    (["snapshots", "create", "demo", "s_cli\n"], ["invalid", "name"]),
    (["snapshots", "drop", "demo", "s1\n"], ["invalid", "name"]),
    (["snapshots", "create", "demo", "s_cli", "--tll-hours", "1"], ["--tll-hours", "--ttl-hours"]),
], ids=["huge_rows", "negative_partitions", "newline_collection", "newline_snapshot", "newline_drop",
        "misspelt_flag"])
def test_cli_bad_arguments(meta, store, settings, world, argv, names):
    before = fingerprint(meta, store)
    _assert_cli_refused(_cli(settings, *argv), *names)
    assert fingerprint(meta, store) == before


# -- SEGLAKE_* environment (through a CLI command that would write) -------------------------------
def _config_json(settings, **bad):
    return json.dumps({**settings.to_dict(), **bad})  # NaN / Infinity as Python's json writes them


@pytest.mark.parametrize("env,names", [
    ({"SEGLAKE_MISSING_TOLERANCE": "nan"}, ["missing_tolerance"]),
    ({"SEGLAKE_MISSING_TOLERANCE": "inf"}, ["missing_tolerance"]),
    ({"SEGLAKE_MISSING_TOLERANCE": "-1"}, ["missing_tolerance"]),
    ({"SEGLAKE_MISSING_TOLERANCE": "9" * 400}, ["missing_tolerance"]),
    ({"SEGLAKE_COPY_THREADS": str(HUGE_I)}, ["copy_threads"]),
    ("config:drop_tolerance=nan", ["drop_tolerance"]),
    ("config:copy_job_timeout=inf", ["copy_job_timeout"]),
    ({"SEGLAKE_MISSING_TOLERENCE": "1h"}, ["missing_tolerence", "missing_tolerance"]),
    ({"SEGLAKE_SEGMENTS_PER_MANIFST": "10"}, ["segments_per_manifst", "segments_per_manifest"]),
    ("root:newline", ["etcd_root"]),
    ({"seglake_missing_tolerance": "1s"}, ["seglake_missing_tolerance", "SEGLAKE_MISSING_TOLERANCE"]),
    ({"SEGLAKE_TOLERANCE_FLOOR": "0"}, ["tolerance_floor"]),
    ({"SEGLAKE_STORE_URI": "s3://bkt/a/../b"}, ["store_uri"]),
    ({"SEGLAKE_ETCD_ENDPOINT": "127.0.0.1:0"}, ["etcd_endpoint"]),
    ("config:duplicate", ["missing_tolerance", "more than once"]),
    ("config:negative_zero", ["missing_tolerance", "negative zero"]),
], ids=["nan", "inf", "negative", "huge_duration", "huge_int", "json_nan", "json_inf", "misspelt",
        "misspelt2", "newline_root", "lowercase_name", "floor_zero", "dotdot_uri", "port_zero", "json_duplicate",
        "json_negative_zero"])
def test_env_bad_values(meta, store, settings, world, env, names):
    if env == "config:drop_tolerance=nan":
        env = {"SEGLAKE_CONFIG": _config_json(settings, drop_tolerance=NAN)}
    elif env == "config:copy_job_timeout=inf":
        env = {"SEGLAKE_CONFIG": _config_json(settings, copy_job_timeout=INF)}
    elif env == "config:duplicate":  # the later value would win silently: 1 s instead of 30 days
        env = {"SEGLAKE_CONFIG": _config_json(settings, missing_tolerance=30 * 86400)[:-1] +
               ', "missing_tolerance": 1}'}
    elif env == "config:negative_zero":
        env = {"SEGLAKE_CONFIG": _config_json(settings, missing_tolerance=-0.0)}
    elif env == "root:newline":
        env = {"SEGLAKE_ETCD_ROOT": settings.etcd_root + "\n"}
    before = fingerprint(meta, store)
    _assert_cli_refused(_cli(settings, "snapshots", "create", "demo", "s_env", env=env), *names)
    assert fingerprint(meta, store) == before


# -- DAG Params / REST conf ----------------------------------------------------------------------
@pytest.fixture
def no_spark(monkeypatch):
    """A bad conf that slips through must not start Spark here: its side effects (made
    before the Spark task) are what the case detects."""
    from airflow.sdk.exceptions import AirflowFailException
    from seglake_airflow.operators.spark import SeglakeSparkSubmitOperator

    def refuse(self, context):
        raise AirflowFailException("Spark is not started by the bad-input cases")

    monkeypatch.setattr(SeglakeSparkSubmitOperator, "execute", refuse)


def _refusal(dag_id, conf, capfd) -> tuple[str, bool]:
    """The error text of a refused run and whether it was refused before any run existed:
    the exception dag.test raised (True), or the error lines of a run that failed
    (False). A run that succeeds fails the test."""
    capfd.readouterr()
    dag = load_dag(dag_id)
    for t in dag.tasks:
        t.retries = 0  # the first failure is the answer; retries a minute apart add nothing
    try:
        run = dag.test(run_conf=conf)
    except Exception as e:  # noqa: BLE001 - ParamValidationError or the DAG's own conf check
        return f"{type(e).__name__}: {e}", True
    out = capfd.readouterr()
    assert run.state == "failed", f"{dag_id} accepted {conf!r} (run {run.state})"
    words = ("Error", "Exception", "refused", "invalid", "Invalid", "unknown", "Unknown")
    return "\n".join(line for line in (out.out + out.err).splitlines() if any(w in line for w in words)), False


def _assert_dag_refused(dag_id, conf, names, meta, store, capfd):
    """Refused naming every one of `names`; or, for `Required(misspelt, key)`, either
    the did-you-mean naming both, or Airflow's Param check refusing the missing required
    `key` before any run exists. Either way etcd and the store are untouched."""
    before = fingerprint(meta, store)
    msg, before_run = _refusal(dag_id, conf, capfd)
    low = msg.lower()
    if isinstance(names, Required) and not (names.misspelt.lower() in low and names.key.lower() in low):
        assert before_run, f"{dag_id} {conf!r}: a run was created before the refusal:\n{msg[-2000:]}"
        assert f"invalid input for param {names.key}: no value passed" in low, \
            f"{dag_id} {conf!r}: neither a did-you-mean nor the missing required {names.key!r}:\n{msg[-2000:]}"
    else:
        for n in names:
            assert n.lower() in low, f"{dag_id} {conf!r}: the error does not name {n!r}:\n{msg[-2000:]}"
    assert fingerprint(meta, store) == before, f"{dag_id} {conf!r} changed etcd or the store"


class Required(NamedTuple):
    """A misspelt REQUIRED key: Airflow may refuse the missing `key` first (correct:
    before any run exists), else the conf check must name `misspelt` and `key`."""
    misspelt: str
    key: str


CREATE = {"collection": "demo", "name": "s_new", "engine": "inline"}
RESTORE = {"collection": "demo", "snapshot": "s1", "target": "t_new", "engine": "inline"}
GC = {"engine": "inline"}

CONF_CASES = [
    *[("snapshot_create", {**CREATE, "ttl_hours": v}, ["ttl_hours"], f"create_ttl_{label}")
      for label, v in BAD_NUMBERS],
    ("snapshot_create", {**CREATE, "name": "s_new\n"}, ["name", "invalid"], "create_newline_name"),
    ("snapshot_create", {"collection": "demo", "nmae": "s_new", "engine": "inline"}, Required("nmae", "name"),
     "create_misspelt"),
    *[("snapshot_restore", {**RESTORE, "timeout_hours": v}, ["timeout_hours"], f"restore_timeout_{label}")
      for label, v in BAD_NUMBERS],
    ("snapshot_restore", {**RESTORE, "target": "t_new\n"}, ["target", "invalid"], "restore_newline_target"),
    ("snapshot_restore", {"collection": "demo", "snapshot": "s1", "tagret": "t_new", "engine": "inline"},
     Required("tagret", "target"), "restore_misspelt"),
    ("snapshot_drop", {"collection": "demo", "name": "s1\n"}, ["name", "invalid"], "drop_newline_name"),
    ("snapshot_drop", {"collection": "demo", "snapshot": "s1"}, Required("snapshot", "name"), "drop_misspelt"),
    ("copy_segment_job", {}, ["job_id"], "copy_missing_job_id"),
    ("copy_segment_job", {"job_id": HUGE_I}, ["job_id"], "copy_huge_job_id"),
    ("copy_segment_job", {"job_id": NAN}, ["job_id"], "copy_nan_job_id"),
    *[("gc", {**GC, "missing_tolerance_hours": v}, ["missing_tolerance_hours"], f"gc_tolerance_{label}")
      for label, v in BAD_NUMBERS],
    ("gc", {**GC, "missing_tolerance_hours": 0}, ["floor"], "gc_below_floor_without_force"),
    ("gc", {**GC, "drop_tolerance_hours": NAN}, ["drop_tolerance_hours"], "gc_drop_tolerance_nan"),
    ("gc", {**GC, "collection": "demo\n"}, ["collection", "invalid"], "gc_newline_collection"),
    ("gc", {**GC, "dryrun": True}, ["dryrun", "dry_run"], "gc_misspelt"),
]


@pytest.mark.airflow
@pytest.mark.parametrize("dag_id,conf,names", [c[:3] for c in CONF_CASES], ids=[c[3] for c in CONF_CASES])
def test_dag_conf_bad_values(airflow_env, meta, store, world, no_spark, capfd, dag_id, conf, names):
    _assert_dag_refused(dag_id, conf, names, meta, store, capfd)


@pytest.mark.airflow
def test_dag_conf_misspelt_key_on_an_existing_job(airflow_env, meta, store, world, no_spark, capfd):
    job = restore.restore(meta, store, "demo", "s1", "t_job")
    _assert_dag_refused("copy_segment_job", {"job_id": job, "engnie": "inline"}, ["engnie", "engine"],
                        meta, store, capfd)


# -- the Airflow Variable ------------------------------------------------------------------------
VARIABLE_CASES = [
    ({"snapshot_pending_timeout": NAN}, ["snapshot_pending_timeout"], "nan"),
    ({"copy_job_timeout": INF}, ["copy_job_timeout"], "inf"),
    ({"tolerance_floor": -1}, ["tolerance_floor"], "negative"),
    ({"segments_per_manifest": HUGE_I}, ["segments_per_manifest"], "huge"),
    ({"missing_tolerence": "1h"}, ["missing_tolerence", "missing_tolerance"], "misspelt"),
    ({"etcd_root": "seglake\n"}, ["etcd_root"], "newline_root"),
    ({"tolerance_floor": 0}, ["tolerance_floor"], "floor_zero"),
    ({"missing_tolerance": -0.0}, ["missing_tolerance", "negative zero"], "negative_zero"),
    ({"store_uri": "s3://bkt/a/../b"}, ["store_uri"], "dotdot_uri"),
    ({"etcd_endpoint": "127.0.0.1:99999"}, ["etcd_endpoint"], "bad_endpoint_masked_by_the_connection"),
]


@pytest.mark.airflow
@pytest.mark.parametrize("bad,names", [c[:2] for c in VARIABLE_CASES], ids=[c[2] for c in VARIABLE_CASES])
def test_variable_bad_values(airflow_env, meta, store, world, no_spark, capfd, monkeypatch, bad, names):
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({"store_uri": airflow_env.store_uri, **bad}))
    _assert_dag_refused("snapshot_create", CREATE, names, meta, store, capfd)


@pytest.mark.airflow
def test_variable_duplicate_key_is_refused(airflow_env, meta, store, world, no_spark, capfd, monkeypatch):
    """Python's json keeps the last of two equal keys: a 30-day tolerance followed by 1 s."""
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG", json.dumps({"store_uri": airflow_env.store_uri})[:-1] +
                       ', "missing_tolerance": "30d", "missing_tolerance": "1s"}')
    _assert_dag_refused("gc", GC, ["missing_tolerance", "more than once"], meta, store, capfd)


@pytest.mark.airflow
def test_variable_nan_tolerance_never_reaches_a_gc_sweep(airflow_env, meta, store, world, no_spark, capfd,
                                                         monkeypatch):
    """The data-loss case of item 3: a NaN tolerance made every unreferenced file,
    however young, a deletion candidate."""
    monkeypatch.setenv("AIRFLOW_VAR_SEGLAKE_CONFIG",
                       json.dumps({"store_uri": airflow_env.store_uri, "missing_tolerance": NAN}))
    _assert_dag_refused("gc", GC, ["missing_tolerance"], meta, store, capfd)
