"""Issue 27 item 6 with a GC schedule: its own `airflow standalone` whose dag-processor
has SEGLAKE_GC_SCHEDULE="0 0 * * *" (read at parse time, as an operator sets it), tried in
headless Chromium:

* the gc form says what unpausing a scheduled gc does; triggered as it opens (Airflow's
  *Unpause on trigger* checked), it makes one manual dry run, and unpausing lets the
  scheduler start the latest interval's run, which, with no `seglake gc schedule set`
  ever done, is refused with the reason in its note; nothing is deleted;
* a backfill of gc, even with `--execute` recorded, is refused before any run, from the
  UI's backfill form and over REST; nothing is deleted.
"""

from __future__ import annotations

import json
import os
import time

import pytest
from conftest import launch
from pages import dialog_text, logged_in, open_trigger_form, seeded

from seglake.contract import GC_BACKFILL_REFUSED
from seglake.lifecycle import gc

pytestmark = [pytest.mark.airflow]
COLL = "sched_demo"
SCHEDULE = "0 0 * * *"   # daily at midnight: the latest interval is always due


@pytest.fixture(scope="module")
def scheduled(etcd_server):
    """(standalone, meta, store, orphans): the standalone with a GC schedule, a collection
    and old orphans a real GC would delete."""
    with launch(etcd_server, "gc_scheduled", {"SEGLAKE_GC_SCHEDULE": SCHEDULE}) as sa:
        with seeded(sa, etcd_server, COLL, segments=1, rows=20, snapshot=None) as (meta, store, coll):
            orphans = [f"insert_log/{coll.collection_id}/9/{i}/100/1" for i in range(3)]
            old = time.time() - 5 * 86400
            for k in orphans:
                store.put(k, b"an orphan a real gc deletes")
                os.utime(os.path.join(store.uri, k), (old, old))
            yield sa, meta, store, orphans


def _runs(sa) -> list[dict]:
    r = sa.request("GET", "/api/v2/dags/gc/dagRuns?limit=100")
    r.raise_for_status()
    return r.json()["dag_runs"]


def _note(sa, run_id: str, timeout: float = 60) -> str:
    deadline = time.time() + timeout
    while not (note := sa.run("gc", run_id).get("note")) and time.time() < deadline:
        time.sleep(0.5)
    return note or ""


def test_unpause_on_trigger_with_a_schedule_and_no_settings_stays_dry(scheduled):
    sa, meta, store, orphans = scheduled
    dag = sa.request("GET", "/api/v2/dags/gc").json()
    assert dag["is_paused"] is True and dag["timetable_summary"] == SCHEDULE, dag
    assert gc.get_schedule(meta) is None                       # no `seglake gc schedule set`, ever
    with logged_in(sa) as b:
        open_trigger_form(b, sa, "gc")
        form = dialog_text(b)
        assert "Unpause Garbage collection on trigger" in form, form
        assert f"This DAG has a schedule ({SCHEDULE}): unpausing it" in form, form
        assert b.js("document.querySelector('input[name=\"element_dry_run\"]').checked") is True
        b.click('[data-testid="trigger-dag-submit"]')   # its runs are read through the API below
        # the browser stays open until the form's request has been answered: closing it at once
        # (as this test did) could abort the request under load, and no run appeared (seen once)
        b.wait_text("Dag Run Triggered", timeout=120)
    deadline = time.time() + 240
    while len(runs := _runs(sa)) < 2 or not all(r["state"] in ("success", "failed") for r in runs):
        assert time.time() < deadline, ([(r["run_type"], r["state"], r["dag_run_id"]) for r in runs], {k: v for k, v in sa.request("GET", "/api/v2/dags/gc").json().items()
                                               if k.startswith(("next_dagrun", "is_paused", "max_active"))})
        time.sleep(1)
    by_type = {r["run_type"]: r for r in runs}
    assert sorted(by_type) == ["manual", "scheduled"] and len(runs) == 2, runs
    manual, sched = by_type["manual"], by_type["scheduled"]
    assert manual["conf"]["dry_run"] is True and manual["state"] == "success", manual
    assert _note(sa, manual["dag_run_id"]).startswith("gc DRY RUN (nothing deleted): a real run would delete 3 files")
    # the scheduled run the unpause started: refused, saying why and what to do
    assert sched["state"] == "failed", sched
    assert sa.task_states("gc", sched["dag_run_id"]).get("check_conf") == "failed"
    note = _note(sa, sched["dag_run_id"])
    assert note.startswith("FAILED") and "a scheduled run has no operator settings, so it was refused and nothing " \
           "was deleted; set them with `seglake gc schedule set --dry-run`" in note, note
    assert all(store.exists(k) for k in orphans)


def test_a_backfill_of_gc_is_refused_even_with_execute_recorded(scheduled):
    sa, meta, store, orphans = scheduled
    gc.set_schedule(meta, {"dry_run": False, "engine": "inline"}, floor=3600, by="e2e")   # a real GC recorded
    before = [r["dag_run_id"] for r in _runs(sa)]
    window = {"dag_id": "gc", "from_date": "2026-11-20T00:00:00Z", "to_date": "2026-11-23T00:00:00Z"}
    for path in ("/api/v2/backfills/dry_run", "/api/v2/backfills"):
        r = sa.request("POST", path, window)
        assert r.status_code == 400 and r.json()["detail"] == GC_BACKFILL_REFUSED, r.text
    with logged_in(sa) as b:   # the UI's backfill form: its mode of the trigger dialog, with the page's session
        open_trigger_form(b, sa, "gc")
        b.click('label[id$=":radio:backfill"]')
        b.wait_text("Run Backfill")
        assert f"This DAG has a schedule ({SCHEDULE})" in dialog_text(b)
        # what the form sends once its dates are picked (the date picker is not driven here):
        # the same request with the browser's session cookie, as the UI's fetch makes it
        for path in ("/api/v2/backfills/dry_run", "/api/v2/backfills"):
            answer = b.js(f"fetch({json.dumps(path)}, {{method: 'POST', credentials: 'same-origin', headers: "
                          f"{{'Content-Type': 'application/json'}}, body: {json.dumps(json.dumps(window))}}})"
                          ".then(r => r.json().then(d => [r.status, d.detail]))")
            assert answer == [400, GC_BACKFILL_REFUSED], answer
    time.sleep(10)   # a few scheduler loops: a backfill's runs would be created at once
    assert [r["dag_run_id"] for r in _runs(sa)] == before
    assert all(store.exists(k) for k in orphans)
    gc.clear_schedule(meta)
