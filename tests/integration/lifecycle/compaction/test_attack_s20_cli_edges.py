"""Attack s20: the CLI's dry runs write nothing (etcd revision unchanged, store unchanged),
also with L0 folds planned and a stored policy; bad values through the CLI are refused
before any write (etcd revision unchanged); the plan is deterministic (same units, twice)."""

from __future__ import annotations

import json

import pytest

from seglake import cli
from seglake.lifecycle import compaction

from compaction_helpers import Writer, mixed_workload
from etcd_root import root_state

pytestmark = pytest.mark.etcd


@pytest.fixture
def env(settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SEGLAKE_COMPACTION_MIN_SEGMENT_ROWS", "1000")
    monkeypatch.setenv("SEGLAKE_COMPACTION_PROTECTION", "0")
    monkeypatch.setenv("SEGLAKE_COMPACTION_L0_AGE", "0")
    return settings


def _run(capsys, argv):
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _files(store):
    return sorted((o.key, o.size) for o in store.list(""))


def test_dry_runs_and_refusals_write_nothing(env, meta, store, settings, capsys):
    w = Writer(meta, store, settings)
    w.create("dr", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "dr", step)
    rc, out, err = _run(capsys, ["compaction", "policy", "set", "dr", "--target-rows", "7", "--scheduled"])
    assert rc == 0, err
    p1 = compaction.plan(meta, store, "dr", compaction.effective(settings, {"target_rows": 7, "l0_age": 0, "protection": 0}))
    p2 = compaction.plan(meta, store, "dr", compaction.effective(settings, {"target_rows": 7, "l0_age": 0, "protection": 0}))
    assert [u.to_json() for u in p1.units] == [u.to_json() for u in p2.units] and p1.units
    assert {u.kind for u in p1.units} >= {compaction.FOLD}, {u.kind for u in p1.units}
    rev, files = root_state(meta), _files(store)
    for argv in (["compact", "dr", "--dry-run"], ["compact", "dr", "--dry-run", "--json"],
                 ["compaction", "scheduled", "--dry-run"],
                 ["compact", "dr", "--target-rows", "0"], ["compact", "dr", "--delete-ratio", "nan"],
                 ["compact", "dr", "--delete-ratio", "1.5"], ["compact", "dr", "--l0-age-seconds", "-1"],
                 ["compact", "dr", "--min-segment-bytes", "1e400"], ["compact", "dr", "--target-rows", "1e3"],
                 ["compaction", "policy", "set", "dr", "--target-rows", "-5"],
                 ["compaction", "policy", "set", "dr", "--delete-ratio", "inf"],
                 ["compact", "no_such", "--dry-run"], ["compact", "dr/../x", "--dry-run"]):
        rc, out, err = _run(capsys, argv)
        assert root_state(meta) == rev, (argv, rc, out, err)
        assert _files(store) == files, argv
        if "--dry-run" not in argv or argv[1] in ("no_such", "dr/../x"):
            assert rc != 0, (argv, out)

