"""Issue 20, items 1 and 3, in a real browser (headless Debian Chromium driven over the
DevTools protocol, tests/e2e/cdp.py) against `airflow standalone` with the project's
default GC schedule (the e2e environment does not set one):

* the gc trigger form opens with *Dry run* on and says what a real run deletes;
  triggering it as it opens (Airflow's *Unpause on trigger* checked) makes one manual
  dry run that deletes nothing, its note says DRY RUN, and no scheduled run appears;
* a refusal in the form (a name with a space, a GC tolerance below the floor) is shown
  in the form as one plain sentence, before any run exists;
* the seglake page opened without a login goes to Airflow's login page.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from cdp import Browser
from pages import dialog_text, open_trigger_form, seeded

from seglake.dev import demo

ARTIFACTS = Path(__file__).resolve().parents[2] / ".dev" / "test" / "artifacts"
pytestmark = [pytest.mark.airflow]
COLL = "form_demo"


@pytest.fixture(scope="module")
def store_with_orphans(standalone, etcd_server):
    """A collection and old orphans a REAL gc run would delete."""
    from seglake.config import Settings
    from seglake.meta import Meta
    from seglake.storage import open_store

    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": standalone.root,
                            "store_uri": standalone.store_uri, "etcd_timeout": 5})
    meta, store = Meta.from_settings(s), open_store(s)
    before = {o.key for o in store.list("")}
    coll, _ = demo.seed(meta, store, demo.SeedParams(name=COLL, partitions=1, segments=1, rows=20, dim=4))
    orphans = [f"insert_log/{coll.collection_id}/9/{i}/100/1" for i in range(3)]
    old = time.time() - 5 * 86400
    for k in orphans:
        store.put(k, b"an orphan a real gc deletes")
        os.utime(os.path.join(store.uri, k), (old, old))
    yield meta, store, orphans
    # leave the shared standalone store as it was: the later e2e modules count its files,
    # collections and GC candidates
    assert not store.delete_many([o.key for o in store.list("") if o.key not in before])
    meta.catalog.purge(coll.collection_id)
    meta.close()


def _runs(standalone, dag_id: str) -> list[dict]:
    r = standalone.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")
    r.raise_for_status()
    return r.json()["dag_runs"]


def test_the_gc_form_dry_run_stays_dry_and_no_scheduled_run_appears(standalone, store_with_orphans, browser):
    meta, store, orphans = store_with_orphans
    b = browser
    r = standalone.request("PATCH", "/api/v2/dags/gc", {"is_paused": True})
    assert r.status_code == 200, r.text
    before = {run["dag_run_id"] for run in _runs(standalone, "gc")}
    open_trigger_form(b, standalone, "gc")
    form = dialog_text(b)
    assert "Unpause Garbage collection on trigger" in form, form
    assert "Off: a REAL run that deletes the unreferenced files older than the orphan tolerance" in form, form
    # the switch is on as the form opens: what is sent is what is shown
    assert b.js("document.querySelector('input[name=\"element_dry_run\"]').checked") is True
    b.click('[data-testid="trigger-dag-submit"]')
    b.wait_text("Dag Run Triggered", timeout=60)
    deadline = time.time() + 60
    while not (new := [run for run in _runs(standalone, "gc") if run["dag_run_id"] not in before]):
        assert time.time() < deadline, "the form created no run"
        time.sleep(0.5)
    (run,) = new
    assert run["run_type"] == "manual" and run["conf"]["dry_run"] is True, run
    assert standalone.wait_run("gc", run["dag_run_id"]) == "success", standalone.task_states("gc", run["dag_run_id"])
    deadline = time.time() + 60
    while not (note := standalone.run("gc", run["dag_run_id"]).get("note")) and time.time() < deadline:
        time.sleep(0.5)
    assert note and note.startswith("gc DRY RUN (nothing deleted): a real run would delete 3 files"), note
    assert all(store.exists(k) for k in orphans)
    # the form unpaused the DAG, as it says; by default gc has no schedule, so nothing else runs
    assert standalone.request("GET", "/api/v2/dags/gc").json()["is_paused"] is False
    time.sleep(15)   # a few scheduler loops (the scheduler would create a due run at once)
    runs = [r for r in _runs(standalone, "gc") if r["dag_run_id"] not in before]
    assert [r["run_type"] for r in runs] == ["manual"], runs
    assert all(store.exists(k) for k in orphans)
    # the seglake page marks it and links it
    b.open(f"{standalone.base}/seglake/")
    b.wait_text("DRY RUN: nothing deleted")
    assert run["dag_run_id"] in b.text(), b.text()[:3000]
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    b.screenshot(ARTIFACTS / "gc-dry-run-page.png")
    run_path = f"/dags/gc/runs/{quote(run['dag_run_id'], safe='')}"
    b.click("a.runid")                                   # opened directly: the run's page
    b.wait(f"location.pathname === {json.dumps(run_path)}", what="the run's page")
    b.wait_text("Garbage collection")
    # inside Airflow's navigation (a sandboxed iframe): the link opens the run in the frame
    b.open(f"{standalone.base}/plugin/seglake")
    frame = "document.querySelector('iframe')"
    b.wait(f"!!({frame} && {frame}.contentDocument && {frame}.contentDocument.querySelector('a.runid'))",
           what="the seglake page in Airflow's frame")
    # Airflow's React page may mount the frame again just after it first loads, which
    # cancels a navigation begun in the first copy: click again until the frame leaves
    # (Airflow's router may rewrite the path decoded once the run's page is up: compare decoded)
    moved = (f"decodeURIComponent({frame}.contentWindow.location.pathname) === "
             f"{json.dumps('/dags/gc/runs/' + run['dag_run_id'])}")
    for attempt in range(4):
        b.js(f"{frame}.contentDocument.querySelector('a.runid')?.click()")
        try:
            b.wait(moved, timeout=10, what="the run's page in the frame")
            break
        except AssertionError as e:
            where = b.js(f"{frame}.contentWindow.location.href")
            inside = (b.js(f"{frame}.contentDocument.body.innerText") or "")[:300]
            if attempt == 3:
                raise AssertionError(f"{e}; frame at {where!r}, frame text {inside!r}") from None


@pytest.mark.parametrize("dag_id,field,value,message", [
    ("gc", "missing_tolerance_hours", "0.1",
     "conf key 'missing_tolerance_hours' (Orphan tolerance (hours)): 0.1 is below the GC floor of 1 hour; allowed: "
     "at least 1, or set force to true to go below the floor"),
    ("snapshot_create", "name", "my snap",
     "conf key 'name' (Snapshot name): \"my snap\" is not allowed; allowed: a letter or '_', then letters, digits or "
     "'_' (at most 255 characters, no spaces), e.g. nightly_1"),
])
def test_a_refusal_in_the_form_is_one_plain_sentence(standalone, store_with_orphans, browser, dag_id, field, value,
                                                    message):
    b = browser
    before = len(_runs(standalone, dag_id))
    open_trigger_form(b, standalone, dag_id)
    if dag_id == "snapshot_create":
        b.type_into('input[name="element_collection"]', COLL)
        assert "e.g. nightly_1" in dialog_text(b)            # the name's rule, next to the field
    b.type_into(f'input[name="element_{field}"]', value)
    b.click('[data-testid="trigger-dag-submit"]')
    b.wait_text(message, timeout=60)
    page = b.text()
    for dump in ("(?!", "Failed validating", "should not be valid under", "On instance"):
        assert dump not in page, page[:3000]
    assert len(_runs(standalone, dag_id)) == before


@pytest.mark.parametrize("conf,message", [
    ('{"missing_tolerance_hours": NaN}', "conf key 'missing_tolerance_hours' (Orphan tolerance (hours)): NaN is not "
                                         "allowed; allowed: a finite number from 0 to 87600 hours"),
    ('{"dry_run": false, "drop_tolerance_hours": 0.1}', "conf key 'drop_tolerance_hours' (Dropped-segment tolerance "
                                                         "(hours)): 0.1 is below the GC floor of 1 hour"),
])
def test_rest_refusals_over_real_http_are_plain_400s(standalone, store_with_orphans, conf, message):
    """Airflow's REST trigger on the real API server: the same sentence as the form, no run."""
    import httpx

    before = len(_runs(standalone, "gc"))
    r = httpx.post(f"{standalone.base}/api/v2/dags/gc/dagRuns", content='{"logical_date": null, "conf": %s}' % conf,
                   headers={"Authorization": f"Bearer {standalone.token}", "Content-Type": "application/json"},
                   timeout=30)
    assert r.status_code == 400, r.text
    assert message in r.json()["detail"] and "Failed validating" not in r.text and "(?!" not in r.text, r.text
    assert len(_runs(standalone, "gc")) == before


def test_deferrable_wait_shows_what_it_sends(standalone, etcd_server, browser):
    """Issue 20: the nullable boolean showed as a switch that looked "off" and sent null.
    Now a dropdown whose label says what is sent, and the run gets exactly that."""
    from seglake.lifecycle import restore

    b = browser
    open_trigger_form(b, standalone, "copy_segment_job")
    shown = b.text("#element_deferrable")
    assert "worker default ([operators] default_deferrable)" in shown, shown
    assert not b.js("!!document.querySelector('input[name=\"element_deferrable\"][type=\"checkbox\"]')")
    # what it sends: null (the worker's default), as the label says; the run of a real copy job
    # (of an unknown one, none is created: refused at the trigger) carries the form's conf
    with seeded(standalone, etcd_server, "defer_src", segments=1, rows=10) as (meta, store, _):
        job = restore.restore(meta, store, "defer_src", "s1", "defer_dst", owner="e2e")
        before = {r["dag_run_id"] for r in _runs(standalone, "copy_segment_job")}
        b.type_into('input[name="element_job_id"]', str(job))
        b.click('[data-testid="trigger-dag-submit"]')
        b.wait_text("Dag Run Triggered", timeout=60)
        (run,) = [r for r in _runs(standalone, "copy_segment_job") if r["dag_run_id"] not in before]
        assert "deferrable" in run["conf"] and run["conf"]["deferrable"] is None, run["conf"]
        deadline = time.time() + 300   # the run ends before its collection's keys and files are removed
        while (state := standalone.run("copy_segment_job", run["dag_run_id"]).get("state")) not in ("success",
                                                                                                   "failed"):
            assert time.time() < deadline, state
            time.sleep(1)


def test_the_seglake_page_without_a_login_goes_to_the_login_page(standalone):
    with Browser(timeout=60) as b:
        b.open(f"{standalone.base}/seglake/")
        url = b.wait("location.pathname.startsWith('/auth/login') && location.href", what="the login page")
        assert "next=" in url and "seglake" in url, url
        assert "Not authenticated" not in b.text()
