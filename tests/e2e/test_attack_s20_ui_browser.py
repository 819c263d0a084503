"""Attack s20 (issue 27) in a real `airflow standalone` + headless Chromium, one standalone
with a GC schedule (SEGLAKE_GC_SCHEDULE, as tests/e2e/test_gc_scheduled.py):

* F1: with `seglake gc schedule set --execute` recorded, the page's *run a GC dry run* on a
  paused gc answers "queued ... paused [unpause gc]"; the page must say, beside that button,
  that unpausing starts the schedule's latest run and that it is a REAL gc. Then the button is
  clicked, to record what it does (the scheduled run, the orphans).
* F3: deleting a seglake run's run_note task instance is refused (400), no change.
* roles: a viewer's REST POSTs (bearer and cookie) and unpause are refused; an admin's cookie
  session without the anti-CSRF header is refused.
"""

from __future__ import annotations

import os
import time

import pytest
from conftest import launch
from pages import logged_in, seeded

from seglake.lifecycle import gc

pytestmark = [pytest.mark.airflow]
COLL = "atk_demo"
SCHEDULE = "0 0 * * *"
API = "/seglake/api/v1"


@pytest.fixture(scope="module")
def sched(etcd_server):
    with launch(etcd_server, "atk_s20_ui", {"SEGLAKE_GC_SCHEDULE": SCHEDULE}) as sa:
        with seeded(sa, etcd_server, COLL, segments=1, rows=20, snapshot="s1") as (meta, store, coll):
            orphans = [f"insert_log/{coll.collection_id}/9/{i}/100/1" for i in range(3)]
            old = time.time() - 5 * 86400
            for k in orphans:
                store.put(k, b"an orphan a real gc deletes")
                os.utime(os.path.join(store.uri, k), (old, old))
            yield sa, meta, store, orphans


def _runs(sa, dag_id="gc") -> list[dict]:
    r = sa.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
    r.raise_for_status()
    return r.json()["dag_runs"]


def test_f1_the_pages_unpause_after_a_gc_dry_run_says_it_starts_a_real_gc(sched):
    sa, meta, store, orphans = sched
    gc.set_schedule(meta, {"dry_run": False, "engine": "inline"}, floor=3600, by="e2e")   # scheduled: REAL
    assert sa.request("GET", "/api/v2/dags/gc").json()["is_paused"] is True
    with logged_in(sa) as b:
        b.open(f"{sa.base}/seglake/")
        b.wait("!!document.querySelector('form[data-path=\"gc/dry-run\"] button')", what="the GC dry run button")
        b.click('form[data-path="gc/dry-run"] button')
        b.wait("!!document.querySelector('#action-result .paused')", what="the paused note")
        said = b.text("#action-result")
        print("PAGE SAID:", said)
        warned = "REAL" in said and "schedule" in said
        b.click('#action-result form[data-path="dags/gc/unpause"] button')
        b.wait("!!document.querySelector('#action-result .unpaused')", what="the unpaused note")
        after = b.text("#action-result")
        print("PAGE AFTER UNPAUSE:", after)
    deadline = time.time() + 240
    while len(runs := _runs(sa)) < 2 or not all(r["state"] in ("success", "failed") for r in runs):
        assert time.time() < deadline, [(r["run_type"], r["state"]) for r in runs]
        time.sleep(1)
    kinds = sorted((r["run_type"], r["state"], bool((r.get("conf") or {}).get("dry_run"))) for r in runs)
    gone = [k for k in orphans if not store.exists(k)]
    print("RUNS:", kinds, "ORPHANS DELETED:", gone)
    sa.request("PATCH", "/api/v2/dags/gc", {"is_paused": True})
    gc.clear_schedule(meta)
    # observed on a05f92e: the page said only "the run waits until it is unpaused", and the
    # unpause started a scheduled REAL gc that deleted the 3 orphans
    assert warned, (said, kinds, gone)
    assert "REAL" in after, after   # the unpause's own answer: a scheduled REAL gc started


def test_f3_deleting_the_run_note_task_instance_is_refused(sched):
    sa, meta, store, _ = sched
    sa.request("PATCH", "/api/v2/dags/snapshot_drop", {"is_paused": True})
    r = sa.trigger("snapshot_drop", {"collection": COLL, "name": "s1"})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    d = sa.request("DELETE", f"/api/v2/dags/snapshot_drop/dagRuns/{run_id}/taskInstances/run_note")
    print("DELETE run_note:", d.status_code, d.text[:200])
    states = sa.task_states("snapshot_drop", run_id)
    sa.request("PATCH", f"/api/v2/dags/snapshot_drop/dagRuns/{run_id}", {"state": "failed"})
    assert d.status_code == 400 and "run_note" in states, (d.status_code, d.text, states)


def test_roles_and_csrf(sched):
    sa, *_ = sched
    viewer = sa.token_of("viewer")
    for method, path, body in (("POST", f"{API}/gc/dry-run", {}), ("POST", f"{API}/dags/gc/unpause", None),
                               ("POST", f"{API}/snapshots/{COLL}/s1/pins", {"ttl_hours": 1}),
                               ("POST", f"{API}/runs/snapshot_create", {"collection": COLL, "name": "v"}),
                               ("PUT", f"{API}/collections/{COLL}/pitr", {"window": "1h"}),
                               ("PUT", f"{API}/compaction/policies/{COLL}", {"min_segment_rows": 5}),
                               ("DELETE", f"{API}/collections/{COLL}/pitr", None)):
        r = sa.request(method, path, body, token=viewer)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
    before = len(_runs(sa))
    with logged_in(sa, token=viewer) as b:
        b.open(f"{sa.base}/seglake/")
        b.wait("!!document.querySelector('#read-only')", what="the read-only line")
        assert b.js("document.querySelectorAll('form.act').length") == 0
        ans = b.js("fetch('api/v1/gc/dry-run', {method: 'POST', credentials: 'same-origin', headers: "
                   "{'Content-Type': 'application/json', 'X-Seglake-Request': '1'}, body: '{}'}).then(r => r.status)")
        assert ans == 403, ans
    with logged_in(sa) as b:   # an admin's session without the header: refused
        b.open(f"{sa.base}/seglake/")
        ans = b.js("fetch('api/v1/gc/dry-run', {method: 'POST', credentials: 'same-origin', headers: "
                   "{'Content-Type': 'application/json'}, body: '{}'}).then(r => r.status)")
        assert ans == 403, ans
    assert len(_runs(sa)) == before


def test_f7_a_cleared_green_drop_run_stays_green(sched):
    """F7: Airflow's clear of a finished green snapshot_drop run re-runs drop for a snapshot
    this very run dropped."""
    from seglake.lifecycle import snapshot

    sa, meta, store, _ = sched
    snapshot.create(meta, store, COLL, "todrop")
    sa.request("PATCH", "/api/v2/dags/snapshot_drop", {"is_paused": False})
    r = sa.trigger("snapshot_drop", {"collection": COLL, "name": "todrop"})
    assert r.status_code == 200, r.text
    run_id = r.json()["dag_run_id"]
    assert sa.wait_run("snapshot_drop", run_id) == "success"
    c = sa.request("POST", f"/api/v2/dags/snapshot_drop/dagRuns/{run_id}/clear", {"dry_run": False})
    assert c.status_code == 200, c.text
    time.sleep(3)
    state = sa.wait_run("snapshot_drop", run_id)
    note = sa.run("snapshot_drop", run_id).get("note")
    print("CLEARED DROP:", state, sa.task_states("snapshot_drop", run_id), note)
    sa.request("PATCH", "/api/v2/dags/snapshot_drop", {"is_paused": True})
    assert state == "success", (state, note)
