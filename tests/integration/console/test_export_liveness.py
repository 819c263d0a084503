"""An export whose worker was killed stays "running" in etcd (its record is written at the
start and at the end only). The page showed it running (and refreshed every 2 s) forever.
An export is alive while its pin lease is renewed (every lease / 4); once that pin is gone
or expired, the page and the API say it stopped and how to go on."""

import json
import time

from seglake import console
from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export


def _running(meta, bundle: str, pin_id: int) -> None:
    export._record(meta, "default", "demo", bundle, {"state": "running", "snapshot": "s1", "target": "file:///t",
                                                      "started_at": time.time() - 900, "pin_id": pin_id})


def test_a_running_export_without_a_live_pin_is_said_stopped(meta, store):
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=1, rows=10, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    live = snapshot.pin(meta, "demo", "s1", 600, by="export alive")
    _running(meta, "alive", live["pin_id"])
    _running(meta, "killed", live["pin_id"] + 1000)   # its pin expired (no renewal) and is gone
    rows = {e["bundle"]: e for e in console.backup(meta, time.time())["exports"]}
    assert rows["alive"]["health"] == "running" and rows["alive"]["state"] == "running"
    dead = rows["killed"]
    assert dead["health"] == "stopped", dead
    assert "run snapshot_export again" in dead["stopped_note"], dead
    # the page says it, and does not keep refreshing fast for it
    from seglake_airflow.ui.render import busy as is_busy, render_page

    page = render_page(console.overview(meta, store))
    assert "stopped" in page and "run snapshot_export again" in page
    assert not is_busy({"backup": {"rows": {"exports": [dead]}}})
    assert is_busy({"backup": {"rows": {"exports": [rows["alive"]]}}})
    json.dumps(dead)
