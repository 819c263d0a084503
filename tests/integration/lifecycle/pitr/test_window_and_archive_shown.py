"""What the point-in-time windows hold and how far the WAL archive is behind, shown to the
operator: the seglake page and the metrics (issue 30 items 1 and 3)."""

from __future__ import annotations

import sys
from pathlib import Path

from seglake import console, metrics
from seglake.lifecycle import pitr, retention, snapshot
from seglake.lifecycle.backup import archive
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient, synthetic_rows

from pitr_model import SCHEMA, flush_all

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "console"))
from test_console_and_metrics import parse  # noqa: E402


def test_the_page_and_the_metrics_show_the_windows_cost_and_the_archives_lag(meta, store, settings, tmp_path):
    from seglake_airflow.ui.render import render_page

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        c.insert("src", synthetic_rows(coll, 40, 1))
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        pitr.set_window(meta, "src", "3d")
        retention.set_policy(meta, "src", {"keep_last": 1, "archive": True})
        c.insert("src", synthetic_rows(coll, 10, 100))
    data = console.overview(meta, store)
    b = data["backup"]["rows"]
    assert [w["collection"] for w in b["pitr"]["windows"]] == ["src"] and b["pitr"]["log_bytes"] > 0
    assert all(a["behind"] > 0 for a in b["archive"])
    page = render_page(data)
    assert "Point-in-time windows (what they hold)" in page and "default.src" in page and "s1" in page
    m = parse(metrics.render(meta, store))
    assert sum(m["seglake_pitr_window_log_bytes"].values()) == b["pitr"]["log_bytes"]
    assert m["seglake_pitr_window_snapshot_bytes"] and all(v > 0 for v in m["seglake_wal_archive_behind_fragments"].values())
    assert all(v > 0 for v in m["seglake_wal_archive_lag_seconds"].values())
    assert all(v == 0 for v in m["seglake_scrape_error"].values())
    archive.run(meta, store, LocalStore(tmp_path / "backup"))
    m = parse(metrics.render(meta, store))
    assert all(v == 0 for v in m["seglake_wal_archive_lag_seconds"].values())
