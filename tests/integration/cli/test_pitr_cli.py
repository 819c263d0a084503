"""`seglake pitr set|show|clear|list`, `seglake restore --as-of` and the windows' cost in
`seglake wal status`, against real etcd and files."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from seglake import cli
from seglake.lifecycle import snapshot
from seglake.meta.alloc import physical_ms
from seglake.wal.client import WalClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lifecycle" / "pitr"))
from pitr_model import SCHEMA, Model, flush_all, rows, visible_of  # noqa: E402


@pytest.fixture
def env(settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    return settings


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_window_restore_and_cost_from_the_cli(meta, store, env, capsys):
    with WalClient(meta, store, env) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        model = Model(meta, store, "src")
        assert _run(capsys, "pitr", "set", "src", "12h")[0] == 0
        model.record(c.insert("src", rows(range(1, 40), 1.0)), 1.0)
        flush_all(meta, store, env, coll)
        snapshot.create(meta, store, "src", "s1")
        model.record(c.delete("src", [1, 2, 3]), 2.0)
        # an ISO instant is a whole millisecond: wait for the next one so nothing later shares it
        t = meta.tso.now()
        while physical_ms(meta.tso.now()) <= physical_ms(t):
            pass
        iso = datetime.fromtimestamp(physical_ms(t) / 1000, timezone.utc).isoformat(timespec="milliseconds")
        model.record(c.upsert("src", rows([4, 5], 3.0)), 3.0)
    rc, out, _ = _run(capsys, "pitr", "show", "src", "--json")
    shown = json.loads(out)
    assert rc == 0 and shown["window"] == "12h" and shown["holds"]["snapshot"] is None   # s1 is inside the window
    rc, out, _ = _run(capsys, "pitr", "list", "--json")
    assert [w["collection"] for w in json.loads(out)] == ["src"]
    rc, out, _ = _run(capsys, "wal", "status", "--json")
    held = [r["pitr"] for r in json.loads(out) if r["pitr"]]
    assert rc == 0 and held and all(h["log_bytes"] > 0 and h["windows"][0]["collection"] == "src" for h in held)
    rc, out, _ = _run(capsys, "wal", "status")
    assert "point-in-time windows hold" in out and "src 12h from its creation" in out

    rc, out, err = _run(capsys, "restore", "src", "back", "--as-of", iso)
    assert rc == 0, err
    assert "from snapshot 's1'" in out and "rows and" in out
    back = meta.catalog.get_by_name("back")
    from seglake.lifecycle.pitr import parse_as_of
    assert visible_of(meta, store, back) == model.visible(parse_as_of(iso))
    assert 1 not in {pk for pk, _ in visible_of(meta, store, back)}

    rc, out, _ = _run(capsys, "pitr", "clear", "src")
    assert rc == 0 and "window off" in out
    rc, out, _ = _run(capsys, "pitr", "show", "src")
    assert "no point-in-time window" in out


def test_show_gives_the_oldest_instant_a_restore_accepts(meta, store, env, capsys):
    """`pitr show` once said 'oldest instant' = now - window for a collection made a minute
    ago (a restore there is refused: before it existed), and 'restores start from the
    collection's creation' for a seeded one (refused: its rows are not in its log)."""
    with WalClient(meta, store, env) as c:
        coll = c.create_collection("young", SCHEMA, shards=2)
        c.insert("young", rows(range(1, 10), 1.0))
    assert _run(capsys, "pitr", "set", "young", "1d")[0] == 0
    rc, out, _ = _run(capsys, "pitr", "show", "young", "--json")
    h = json.loads(out)["holds"]
    assert rc == 0 and h["restorable_from_ts"] == coll.created_ts > h["oldest_instant_ts"]
    rc, out, _ = _run(capsys, "pitr", "show", "young")
    from seglake.lifecycle.pitr import describe
    assert f"oldest instant {describe(coll.created_ts)}" in out and "before the collection existed" in out
    rc, _, err = _run(capsys, "restore", "young", "young_0", "--as-of", str(h["restorable_from_ts"]))
    assert rc == 0, err

    assert _run(capsys, "demo", "seed", "--name", "seeded", "--partitions", "1", "--segments", "1",
                "--rows", "10", "--dim", "4")[0] == 0
    assert _run(capsys, "pitr", "set", "seeded", "1d")[0] == 0
    rc, out, _ = _run(capsys, "pitr", "show", "seeded", "--json")
    assert rc == 0 and json.loads(out)["holds"]["restorable_from_ts"] is None
    rc, out, _ = _run(capsys, "pitr", "show", "seeded")
    assert "no instant can be restored yet" in out and "creation" not in out
    rc, out, _ = _run(capsys, "wal", "status")
    assert "seeded 1d from its creation (nothing restorable yet: it needs a snapshot)" in out
    snap = snapshot.create(meta, store, "seeded", "s1")
    rc, out, _ = _run(capsys, "pitr", "show", "seeded", "--json")
    rec, _ = meta.snapshots.get(meta.catalog.get_by_name("seeded").collection_id, "s1")
    assert json.loads(out)["holds"]["restorable_from_ts"] == rec.consistent_ts, snap
