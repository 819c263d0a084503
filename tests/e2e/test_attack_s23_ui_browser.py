"""Attack s23 (issue 27) in headless Chromium, without a server: the seglake page rendered from a
real store's overview, opened from a file, Airflow's answers given by a stubbed fetch."""

import pytest

from seglake import console
from seglake.dev import demo

pytestmark = [pytest.mark.airflow]


def test_f5_the_result_line_says_a_run_waits_behind_max_active_runs(meta, store, tmp_path):
    """The API answers a run queued behind its DAG's max_active_runs with `waits`; the page's result
    line said "started <run>" for it (it read dag_paused only)."""
    import json

    from cdp import Browser
    from seglake_airflow.ui.render import render_page

    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=1, rows=10, dim=4))
    page = tmp_path / "page.html"
    page.write_text(render_page(console.overview(meta, store)), encoding="utf-8")
    answer = {"dag_id": "gc", "dag_run_id": "manual__2nd", "state": "queued", "run_url": "/dags/gc/runs/manual__2nd",
              "conf": {}, "object": {}, "dag_paused": False, "can_unpause": False,
              "message": "queued: run manual__2nd of gc waits: 1 runs of gc are running, its limit "
                         "(max_active_runs 1); it starts when one of them ends",
              "waits": "1 runs of gc are running, its limit (max_active_runs 1); it starts when one of them ends"}
    setup = ("window.fetch = function (url, opts) { var post = opts && opts.method === 'POST';"
             f" var body = post ? {json.dumps(json.dumps(answer))} : '{{\"state\": \"queued\"}}';"
             " return Promise.resolve(new Response(body, {status: post ? 201 : 200,"
             " headers: {'Content-Type': 'application/json'}})); };")
    with Browser(timeout=20) as b:
        b.send("Page.addScriptToEvaluateOnNewDocument", {"source": setup})
        b.open(page.as_uri())
        b.click('form.act[data-path="gc/dry-run"] button')
        b.wait_text("max_active_runs 1")
        line = b.text("#action-result")
        assert "queued" in line and "started" not in line, line
