"""The CLI's one error path (cli.fail): every subcommand given a bad input answers with
one `seglake <command>: error: ...` line, exit 2 when refused as asked and 1 when the
operation failed, no traceback, no secret value; and counts the CLI prints are the
run's counts, never the length of a capped sample list."""

import argparse
import json
import socket
import subprocess
import sys

import pytest

from seglake import cli
from seglake.dev import demo
from seglake.lifecycle import gc, snapshot

SECRET = "Sk9xQv7pL2"   # also a valid collection name: echoed input must be masked too
SMALL = demo.SeedParams(partitions=1, segments=2, rows=20, dim=4)


@pytest.fixture
def env(meta, store, settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SEGLAKE_S3_SECRET_KEY", SECRET)
    demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1")   # makes `demo purge demo` a refusal
    return settings


def _leaves(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {parser.prog: parser}
    return {prog: p for a in subs for child in a.choices.values() for prog, p in _leaves(child).items()}


# one bad input per subcommand: (argv, exit code, words the message must hold)
CASES = {
    "seglake demo seed": (["demo", "seed", "--dim", "0"], 2, "--dim"),
    "seglake demo purge": (["demo", "purge", "demo"], 2, "has snapshots 's1'"),
    "seglake collections list": (["collections", "list", "--db", "x y"], 2, "--db"),
    "seglake collections describe": (["collections", "describe", "nope"], 2, "collection 'nope' not found"),
    "seglake collections drop": (["collections", "drop", "nope", "--yes"], 2, "collection 'nope' not found"),
    "seglake collections undrop": (["collections", "undrop", "demo", "--as", "d2"], 2, "is Created, not dropped"),
    "seglake segments list": (["segments", "list", "nope"], 2, "collection 'nope' not found"),
    "seglake snapshots list": (["snapshots", "list", "--collection", "a b"], 2, "--collection"),
    "seglake snapshots describe": (["snapshots", "describe", "demo", "nope"], 2, "snapshot 'nope' not found"),
    "seglake snapshots create": (["snapshots", "create", "demo", "s1"], 2, "snapshot 's1' already exists"),
    "seglake snapshots drop": (["snapshots", "drop", "demo", "nope"], 2, "snapshot 'nope' not found"),
    "seglake snapshots pin": (["snapshots", "pin", "demo", "s1", "--ttl-hours", "nan"], 2, "--ttl-hours"),
    "seglake snapshots unpin": (["snapshots", "unpin", "424242"], 2, "pin 424242 not found"),
    "seglake snapshots pins": (["snapshots", "pins", "--collection", "a b"], 2, "--collection"),
    "seglake jobs list": (["jobs", "list", "--collection", "a\n"], 2, "--collection"),
    "seglake jobs describe": (["jobs", "describe", "424242"], 2, "copy job 424242 not found"),
    "seglake jobs limit": (["jobs", "limit", "--max-mib-per-second", "-1"], 2, "--max-mib-per-second"),
    "seglake gc report": (["gc", "report"], 2, "no gc run"),
    "seglake gc run": (["gc", "run", "--collection", "nope"], 2, "collection 'nope' not found"),
    "seglake gc run --missing-tolerance-hours 0.1": (["gc", "run", "--missing-tolerance-hours", "0.1"], 2,
                                                     "gc missing_tolerance of 360s (0.1 h) is below the 3600s floor "
                                                     "(1 h); allowed: at least the floor, or force (CLI --force"),
    "seglake gc pause": (["gc", "pause", "--collection", "nope"], 2, "collection 'nope' not found"),
    "seglake gc resume": (["gc", "resume", "--collection", "nope"], 2, "collection 'nope' not found"),
    "seglake retention set": (["retention", "set", "demo"], 2, "every count is 0"),
    "seglake retention show": (["retention", "show", "demo"], 2, "has no retention policy"),
    "seglake retention clear": (["retention", "clear", "nope"], 2, "collection 'nope' not found"),
    "seglake retention list": (["retention", "list", "--jsn"], 2, "did you mean --json?"),
    "seglake retention run": (["retention", "run", "--collection", "demo"], 2, "no retention policy"),
    "seglake gc schedule set": (["gc", "schedule", "set", "--execute", "--missing-tolerance-hours", "0.1"], 2,
                                "--missing-tolerance-hours (Orphan tolerance (hours)): 0.1 is below the GC floor of 1 "
                                "hour; allowed: at least 1, or pass --force to go below the floor"),
    "seglake gc schedule show": (["gc", "schedule", "show", "--db", "a b"], 2, "--db"),
    "seglake gc schedule clear": (["gc", "schedule", "clear", "--jsn"], 2, "did you mean --json?"),
    "seglake verify": (["verify", "nope"], 2, "collection 'nope' not found"),
    "seglake compact": (["compact", "demo", "--delete-ratio", "1.5"], 2, "--delete-ratio"),
    "seglake compaction policy set": (["compaction", "policy", "set", "demo", "--target-bytes", "0"], 2,
                                      "--target-bytes"),
    "seglake compaction policy show": (["compaction", "policy", "show", "demo"], 2, "has no compaction policy"),
    "seglake compaction policy clear": (["compaction", "policy", "clear", "nope"], 2, "collection 'nope' not found"),
    "seglake compaction policy list": (["compaction", "policy", "list", "--jsn"], 2, "did you mean --json?"),
    "seglake compaction scheduled": (["compaction", "scheduled", "--dry-rn"], 2, "did you mean --dry-run?"),
    "seglake compaction history": (["compaction", "history", "nope"], 2, "collection 'nope' not found"),
    "seglake config show": (["config", "show", "--jsn"], 2, "did you mean --json?"),
    "seglake stack": (["stack", "sideways"], 2, "invalid choice"),
    "seglake cluster": (["cluster", "up", "--workers", "9"], 2, "--workers"),
    "seglake ingest": (["ingest", "demo"], 2, "exactly one of --file PATH or --rows N"),
    "seglake delete": (["delete", "demo", "--pks", "1,x"], 2, "comma-separated integers"),
    "seglake backup export": (["backup", "export", "demo", "s1"], 2, "no backup target: set config key 'backup_uri'"),
    "seglake snapshots export": (["snapshots", "export", "demo", "s1", "--target", "rel/dir"], 2, "not an absolute path"),
    "seglake backup list": (["backup", "list", "--target", "ftp://x"], 2, "unsupported scheme"),
    "seglake backup show": (["backup", "show", "demo", "nope", "--target", "/tmp/seglake-no-backup-here"], 2,
                            "bundle default.demo/nope not found"),
    "seglake backup verify": (["backup", "verify", "demo", "my bundle"], 2, "invalid snapshot name 'my bundle'"),
    "seglake backup import": (["backup", "import", "demo", "b", "--max-mib-per-second", "inf"], 2,
                              "--max-mib-per-second"),
    "seglake backup prune": (["backup", "prune", "demo", "--target", "/tmp/seglake-no-backup-here"], 2,
                             "every count is 0"),
    "seglake backup restore": (["backup", "restore", "demo", "b"], 2, "the following arguments are required"),
    "seglake restore-database": (["restore-database", "--as-of", "1970-01-01T00:00:00Z", "--suffix", "_x"], 2, "as_of"),
    "seglake wal archive": (["wal", "archive", "--seconds", "-1"], 2, "--seconds"),
    "seglake milvus backup": (["milvus", "backup", "--milvus-etcd", "127.0.0.1:1", "--bucket", "b", "--bundle", "1bad", "c"], 2, "1bad"),
    "seglake milvus restore": (["milvus", "restore", "demo", "b", "1bad", "--address", "127.0.0.1:1", "--bucket", "b",
                                "--s3-endpoint", "http://127.0.0.1:1"], 2, "invalid collection name '1bad'"),
    "seglake milvus source set": (["milvus", "source", "set", "prod", "--milvus-etcd", "http://x", "--bucket",
                                   "milvus-bucket", "--collections", "c", "--keep-last", "1"], 2, "host:port"),
    "seglake milvus source show": (["milvus", "source", "show", "nope"], 2, "no Milvus source 'nope'"),
    "seglake milvus source clear": (["milvus", "source", "clear", "1bad"], 2, "1bad"),
    "seglake milvus source list": (["milvus", "source", "list", "--jsn"], 2, "did you mean --json?"),
    "seglake milvus source run": (["milvus", "source", "run", "nope"], 2, "no Milvus source 'nope'"),
    "seglake milvus pin": (["milvus", "pin", "demo", "b", "--ttl-hours", "0"], 2, "--ttl-hours"),
    "seglake wal status": (["wal", "status", "--pchannel", "nope"], 2, "unknown pchannel 'nope'"),
    "seglake pitr set": (["pitr", "set", "demo", "nan"], 2, "is not a duration"),
    "seglake pitr show": (["pitr", "show", "nope"], 2, "collection 'nope' not found"),
    "seglake pitr clear": (["pitr", "clear", "nope"], 2, "collection 'nope' not found"),
    "seglake pitr list": (["pitr", "list", "--jsn"], 2, "did you mean --json?"),
    "seglake restore": (["restore", "demo", "d2", "--as-of", "2026-11-27T12:00:00"], 2, "a time zone is required"),
    "seglake wal pause": (["wal", "pause"], 2, "exactly one of --pchannel NAME or --all"),
    "seglake wal resume": (["wal", "resume", "--pchannel", "nope"], 2, "unknown pchannel 'nope'"),
}


def _run(capsys, argv) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:   # argparse leaves by SystemExit: through cli.fail too
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_every_subcommand_has_a_bad_input_case():
    assert set(_leaves(cli.build_parser())) == {k.split(" --")[0] for k in CASES}


@pytest.mark.parametrize("prog", sorted(CASES))
def test_a_bad_input_gets_one_error_line_in_one_format(env, capsys, prog):
    argv, code, words = CASES[prog]
    rc, out, err = _run(capsys, argv)
    assert rc == code, (rc, out, err)
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and lines[0].startswith(f"{prog.split(' --')[0]}: error: "), err
    assert words in lines[0], err
    assert "Traceback" not in err and out == ""


def test_a_secret_is_masked_even_when_the_input_echoes_it(env, capsys):
    rc, out, err = _run(capsys, ["collections", "describe", SECRET])
    assert rc == 2 and SECRET not in err and "collection '***' not found" in err, err


def test_an_unreachable_etcd_is_an_operation_failure_without_traceback(env):
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run([sys.executable, "-m", "seglake.cli", "collections", "list"], capture_output=True, text=True,
                       env={**_child_env(env), "SEGLAKE_ETCD_ENDPOINT": f"127.0.0.1:{port}", "SEGLAKE_ETCD_RETRIES": "0",
                            "SEGLAKE_ETCD_TIMEOUT": "2"}, timeout=60)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert p.stderr.startswith("seglake collections list: error: ") and "Traceback" not in p.stderr, p.stderr


def test_a_password_without_a_user_is_refused_not_a_traceback(env):
    """etcd3's client raised a bare Exception for it: a traceback, exit 1."""
    p = subprocess.run([sys.executable, "-m", "seglake.cli", "collections", "list"], capture_output=True, text=True,
                       env={**_child_env(env), "SEGLAKE_ETCD_PASSWORD": "pw-" + SECRET}, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("seglake collections list: error: etcd_user and etcd_password must be set together")
    assert "Traceback" not in p.stderr and SECRET not in p.stderr, p.stderr


def test_drop_without_yes_on_a_terminal_is_refused_through_the_same_path(env, meta, capsys, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    rc, out, err = _run(capsys, ["collections", "drop", "demo"])
    assert rc == 2 and err.startswith("seglake collections drop: error: refusing to drop collection 'demo' "
                                      "without --yes"), err
    assert meta.catalog.get_by_name("demo").state == "Created"


def _child_env(settings) -> dict:
    import os

    base = {k: v for k, v in os.environ.items() if not k.startswith("SEGLAKE_")}
    return {**base, **settings.to_env(), "PYTHONPATH": os.pathsep.join(sys.path)}


# -- counts from capped lists ----------------------------------------------------------------------
def _sweep_with_errors(store, run_id: str, n: int) -> None:
    """Record `n` failed deletes on the run's summary the way the sweep does (SweepResult.error,
    then summary['swept'] = out.summary()): more than the MAX_ERRORS the summary keeps."""
    out = gc.SweepResult()
    for i in range(n):
        out.error(f"insert_log/1/2/3/4/{i}", "Permission denied")
    doc = gc.latest_summary(store)
    doc["swept"] = out.summary()
    store.put(f"{gc.GC_PREFIX}/{run_id}/summary.json", json.dumps(doc).encode())


def test_gc_report_prints_the_runs_error_count_not_the_capped_sample(env, meta, store, capsys):
    res = gc.run(meta, store, gc.GCOptions())
    n = gc.SweepResult.MAX_ERRORS + 50
    _sweep_with_errors(store, res["mark"]["run_id"], n)
    assert len(gc.latest_summary(store)["swept"]["errors"]) == gc.SweepResult.MAX_ERRORS   # the sample is capped
    rc, out, err = _run(capsys, ["gc", "report"])
    assert rc == 0 and f"{n} errors" in out, out


def test_the_page_shows_the_runs_error_count(env, meta, store):
    from seglake import console
    from seglake_airflow.ui.render import _gc

    res = gc.run(meta, store, gc.GCOptions())
    n = gc.SweepResult.MAX_ERRORS + 7
    _sweep_with_errors(store, res["mark"]["run_id"], n)
    g = console.gc_latest(store)
    assert g["error_count"] == n
    assert f"{n} could not be deleted" in _gc(g, {"all": False, "collections": []})


def test_ctrl_c_while_watching_a_job_is_one_line_not_a_traceback(env, meta, store):
    import os
    import signal

    from seglake.lifecycle import restore

    job = restore.restore(meta, store, "demo", "s1", "t_watch")
    p = subprocess.Popen([sys.executable, "-m", "seglake.cli", "jobs", "describe", str(job), "--watch",
                          "--interval", "0.2"], env=_child_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline()            # the first refresh: it is watching (however long it took to start)
        assert f"copy job {job}" in line, line
        os.kill(p.pid, signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and err.strip() == "seglake jobs describe: error: interrupted", err


def test_a_store_uri_that_is_a_file_is_an_operation_failure_without_traceback(env, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    p = subprocess.run([sys.executable, "-m", "seglake.cli", "gc", "report"], capture_output=True, text=True,
                       env={**_child_env(env), "SEGLAKE_STORE_URI": str(blocker)}, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith(f"seglake gc report: error: store_uri '{blocker}': cannot use it"), p.stderr


def test_verify_problems_and_a_failed_job_end_with_one_error_line_exit_1(env, meta, store, capsys):
    """The command ran and its answer is a failure: the report on stdout, and the same one
    error line as every other failure on stderr."""
    from seglake.lifecycle import copyjob, restore

    coll = meta.catalog.get_by_name("demo")
    seg = next(iter(meta.segments.list(coll.collection_id)))
    store.delete_many([next(iter(layout_files(seg))).key])
    rc, out, err = _run(capsys, ["verify", "demo"])
    assert rc == 1 and "PROBLEMS" in out and err.startswith("seglake verify: error: collection 'demo': 1 missing"), err

    job = restore.restore(meta, store, "demo", "s1", "t_fail")
    copyjob.plan(meta, job, 1)
    copyjob.run_inline(meta, store, job)            # the missing file fails its task
    copyjob.finalize(meta, job)
    rc, out, err = _run(capsys, ["jobs", "describe", str(job)])
    assert rc == 1 and f"copy job {job}: Failed" in out
    assert err.startswith(f"seglake jobs describe: error: copy job {job} Failed: "), err


def layout_files(seg):
    from seglake.storage import layout

    return layout.segment_files(seg)


def test_gc_schedule_set_show_clear(env, capsys):
    """The settings of scheduled gc runs: explicit (no default mode), shown in words."""
    rc, out, err = _run(capsys, ["gc", "schedule", "show"])
    assert rc == 0 and "no scheduled gc settings: a scheduled gc run is refused" in out, (out, err)
    rc, out, err = _run(capsys, ["gc", "schedule", "set"])
    assert rc == 2 and "one of the arguments --dry-run --execute is required" in err, err
    rc, out, err = _run(capsys, ["gc", "schedule", "set", "--execute", "--collection", "demo",
                                 "--drop-tolerance-hours", "6", "--engine", "inline"])
    assert rc == 0, err
    assert out.startswith("scheduled gc runs will use: a REAL run (deletes), collection default.demo, engine inline, "
                          "drop_tolerance 6 h (set 20"), out
    rc, out, _ = _run(capsys, ["gc", "schedule", "show", "--json"])
    rec = json.loads(out)
    assert rec["conf"] == {"dry_run": False, "collection": "demo", "db": "default", "missing_tolerance_hours": None,
                           "drop_tolerance_hours": 6, "force": False, "engine": "inline"}
    rc, out, _ = _run(capsys, ["gc", "schedule", "clear"])
    assert rc == 0 and "scheduled runs are refused until they are set again" in out
    rc, out, _ = _run(capsys, ["gc", "schedule", "show"])
    assert "no scheduled gc settings" in out
