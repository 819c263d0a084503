"""atk-s25-edges: CLI doors found open (each refusal one error line, exit 2, nothing written).

F2: the free text of `gc pause --reason` and `wal pause --reason` was stored as given: an
escape sequence, a NUL or a line break went to etcd and back to the terminal (`wal status`),
and a 2 MB reason reached etcd, whose "request is too large" was said as "the local etcd ...
is not running: start it with `make up`" (exit 1). Free text is checked in one place now
(names.check_text: the pins' `by`, a snapshot's description, a source's and a policy's `by`,
the pause reasons)."""

import pytest

from seglake import cli
from seglake.dev import demo

SMALL = demo.SeedParams(partitions=1, segments=1, rows=10, dim=4)


@pytest.fixture
def env(meta, store, settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    demo.seed(meta, store, SMALL)
    return settings


def _keys(meta) -> dict:
    return {kv.key: kv.value for kv in meta.kv.range(meta.keys.prefix)}


def _run(capsys, argv) -> tuple[int, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["gc", "pause", "--reason", "maintenance\x1b[2J\x1b[31m"],
    ["gc", "pause", "--reason", "a\x00b"],
    ["gc", "pause", "--collection", "demo", "--reason", "line1\nline2"],
    ["gc", "pause", "--reason", "x" * 2_000_000],
    ["wal", "pause", "--all", "--reason", "evil\x1b[31mred"],
    ["wal", "pause", "--pchannel", "seglake-dml_0", "--reason", "x" * 2_000_000],
], ids=["gc-escape", "gc-nul", "gc-newline", "gc-2MB", "wal-escape", "wal-2MB"])
def test_a_pause_reason_that_is_not_printable_short_text_is_refused_before_any_write(env, meta, capsys, argv):
    before = _keys(meta)
    rc, err = _run(capsys, argv)
    prog = "seglake " + " ".join(argv[:2])
    assert rc == 2, (rc, err[:300])
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), err[:300]
    assert "pause reason" in lines[0] and "printable text of at most 1024 characters" in lines[0], lines[0][:300]
    assert "\x1b" not in err and "\x00" not in err and len(err) < 1000
    assert _keys(meta) == before


def test_a_plain_reason_still_pauses(env, meta, capsys):
    rc, err = _run(capsys, ["gc", "pause", "--reason", "disk swap, back at 14:00 (ops-123)"])
    assert rc == 0, err
    rc, err = _run(capsys, ["gc", "resume"])
    assert rc == 0, err


# -- F5: ingest / delete refused only after their first writes ------------------------------------
@pytest.mark.parametrize("argv, words", [
    (["ingest", "demo", "--rows", "5", "--partition", "_default\n"], "invalid partition name"),
    (["ingest", "demo", "--rows", "5", "--partition", "../p"], "invalid partition name"),
    (["ingest", "demo", "--rows", "5", "--partition", "nope"], "partition 'nope' not found"),
    (["ingest", "demo", "--rows", "5", "--producer-id", "a/../b"], "is not a producer id"),
    (["ingest", "demo", "--rows", "5", "--producer-id", "x" * 65], "is not a producer id"),
    (["ingest", "de mo", "--rows", "5"], "invalid collection name"),
    (["delete", "de\u0301mo", "--pks", "1"], "invalid collection name"),
    (["delete", "demo", "--pks", "1", "--producer-id", "p q"], "is not a producer id"),
], ids=["partition-newline", "partition-dotdot", "partition-unknown", "pid-slash", "pid-65", "coll-space",
        "delete-coll-accent", "delete-pid-space"])
def test_ingest_and_delete_refuse_before_drawing_ids_or_writing_markers(env, meta, capsys, argv, words):
    """Before: --partition and --producer-id were checked after `--rows` drew its primary
    keys from the id allocator (alloc/id moved) and a transaction marker was written."""
    before = _keys(meta)
    rc, err = _run(capsys, argv)
    assert rc == 2, (rc, err)
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and lines[0].startswith(f"seglake {argv[0]}: error: ") and words in lines[0], err
    assert _keys(meta) == before


def test_an_ingest_with_good_flags_still_appends(env, meta, capsys):
    rc, err = _run(capsys, ["ingest", "demo", "--rows", "5", "--partition", "_default", "--producer-id", "s25.p-1"])
    assert rc == 0, err


# -- F9: backup prune's --min-age-hours took what the engine refuses, after a write -----------------
@pytest.mark.parametrize("hours", ["0", "0.5", "0.99"])
def test_backup_prune_refuses_a_min_age_under_an_hour_before_any_write(env, meta, capsys, tmp_path, hours):
    """The flag was checked against missing_tolerance (from 0): 0 passed argparse, the site id
    record was created in etcd (and a transaction marker written), then the engine refused
    it (its floor: 1 hour). One Limit, bundle_min_age, now serves both."""
    before = _keys(meta)
    rc, err = _run(capsys, ["backup", "prune", "demo", "--keep-last", "1", "--min-age-hours", hours,
                            "--target", str(tmp_path / "backup")])
    assert rc == 2, err
    assert "argument --min-age-hours" in err and "must be >= 1" in err, err
    assert _keys(meta) == before
