"""`seglake compact [--dry-run] COLLECTION`: the dry run shows the units and their expected
gain and changes nothing; the run compacts (rows unchanged) and a second run finds
nothing; bad input is refused through the CLI's one error path."""

from __future__ import annotations

import json

import pytest

from seglake import cli

from compaction_helpers import Writer, exact, mixed_workload, segments

pytestmark = pytest.mark.etcd


@pytest.fixture
def env(settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SEGLAKE_COMPACTION_MIN_SEGMENT_ROWS", "1000")
    monkeypatch.setenv("SEGLAKE_COMPACTION_PROTECTION", "0")
    return settings


def _run(capsys, argv) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_dry_run_then_run_then_nothing(env, meta, store, settings, capsys):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "c", step)
    before, segs = exact(meta, store, "c"), {s.segment_id for s in segments(meta, "c")}
    rc, out, err = _run(capsys, ["compact", "--dry-run", "c", "--target-rows", "1000"])
    assert rc == 0, err
    assert "expected gain:" in out and "dry run: nothing changed" in out and "planned" in out
    assert {s.segment_id for s in segments(meta, "c")} == segs
    rc, out, err = _run(capsys, ["compact", "c", "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["counts"]["committed"] == len(doc["plan"]["units"]) > 0 and doc["counts"]["lost"] == 0
    assert exact(meta, store, "c") == before
    rc, out, err = _run(capsys, ["compact", "c"])
    assert rc == 0 and "nothing to compact" in out, (out, err)


@pytest.mark.parametrize("argv,words", [
    (["compact", "nope"], "collection 'nope' not found"),
    (["compact", "c", "--target-rows", "0"], "--target-rows"),
    (["compact", "c", "--delete-ratio", "nan"], "--delete-ratio"),
    (["compact", "c", "--protection-seconds", "-1"], "--protection-seconds"),
    (["compact", "a b"], "collection"),
    (["compact", "c", "--dryrun"], "did you mean --dry-run?"),
])
def test_bad_input_is_refused(env, capsys, argv, words):
    rc, out, err = _run(capsys, argv)
    assert rc == 2, (rc, out, err)
    lines = [ln for ln in err.splitlines() if ": error: " in ln]
    assert len(lines) == 1 and words in lines[0], err
    assert "Traceback" not in err


def test_segments_list_shows_the_lineage(env, meta, store, settings, capsys):
    w = Writer(meta, store, settings)
    w.create("l", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "l", step)
    assert _run(capsys, ["compact", "l"])[0] == 0
    rc, out, err = _run(capsys, ["segments", "list", "l"])
    assert rc == 0, err
    outputs = [s for s in segments(meta, "l") if s.compacted_from]
    assert outputs
    for o in outputs:
        line = [ln for ln in out.splitlines() if ln.split() and ln.split()[0] == str(o.segment_id)][0]
        assert f"<- {o.compacted_from[0]}" in line
        line = [ln for ln in out.splitlines() if ln.split() and ln.split()[0] == str(o.compacted_from[0])][0]
        assert f"-> {o.segment_id}" in line


def test_the_page_shows_the_last_compaction_of_each_collection(env, meta, store, settings):
    from seglake import console
    from seglake_airflow.ui.render import render_page

    w = Writer(meta, store, settings)
    w.create("pg", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "pg", step)
    from seglake.lifecycle import compaction
    from compaction_helpers import policy
    s = compaction.compact(meta, store, "pg", policy(target_rows=10_000))
    o = console.overview(meta, store)
    assert o["compaction"]["error"] is None
    (row,) = o["compaction"]["rows"]
    assert row["collection"] == "pg" and row["committed"] == len(s.results) > 0
    assert row["segments_in"] == s.counts()["segments_in"] and row["rows_dropped"] == s.counts()["rows_dropped"]
    page = render_page(o)
    assert '<section id="compaction">' in page and ">pg<" in page


def test_protected_collection_dry_run_says_why_without_a_false_count(env, meta, store, settings, capsys):
    """A collection skipped for a fresh snapshot is not read: the line says why, and no
    '0 Flushed segments' for a collection that holds some."""
    from seglake.lifecycle import snapshot
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    mixed_workload(w, "c", 0)
    assert segments(meta, "c")
    snapshot.create(meta, store, "c", "fresh")
    rc, out, err = _run(capsys, ["compact", "--dry-run", "--protection-seconds", "3600", "c"])
    assert rc == 0, err
    assert "not compacted: snapshot 'fresh' was taken" in out and "Flushed segments" not in out, out
