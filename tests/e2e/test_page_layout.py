"""The seglake page's layout in a real browser, without a server: the page rendered from
the overview of a real store, opened from a file in headless Chromium (1400 px wide).
A 255-character collection and snapshot name (the longest a name may be) made every
table as wide as the name (no wrapping rule): the page scrolled sideways and the action
buttons of each row were off screen."""

import pytest

from seglake import console
from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = [pytest.mark.airflow]


def test_the_longest_names_do_not_push_the_page_wider_than_the_window(meta, store, tmp_path):
    from cdp import Browser
    from seglake_airflow.ui.render import render_page

    long_coll, long_snap = "c" + "x" * 254, "s" * 255
    demo.seed(meta, store, demo.SeedParams(name=long_coll, partitions=1, segments=1, rows=5, dim=4))
    snapshot.create(meta, store, long_coll, long_snap, description="Größe — 日本語 " + "d" * 300)
    page = tmp_path / "page.html"
    page.write_text(render_page(console.overview(meta, store)), encoding="utf-8")
    with Browser() as b:
        b.open(page.as_uri())
        b.wait("document.readyState === 'complete'")
        assert long_snap in b.text() and "日本語" in b.text()
        wide = b.js("[document.documentElement.scrollWidth, window.innerWidth]")
        assert wide[0] <= wide[1], f"page {wide[0]} px wide in a {wide[1]} px window"
        # every action button of the snapshot's row is inside the window
        right = b.js("Math.max(...[...document.querySelectorAll('button')].map(e => e.getBoundingClientRect().right))")
        assert right <= wide[1], right


def test_the_result_line_says_when_its_run_was_deleted_from_airflow(meta, store, tmp_path):
    """The last action's line follows its run through Airflow's API while it lasts. A run
    deleted from Airflow answered 404, which the page took as "not finished yet": the line
    kept saying "started <run>" and the page kept reloading every 2 s, for ever."""
    import json

    from cdp import Browser
    from seglake_airflow.ui.render import render_page

    page = tmp_path / "page.html"
    page.write_text(render_page(console.overview(meta, store)), encoding="utf-8")
    last = {"html": "snapshot: started <a class=\"action-run\" href=\"#\">snapshot_create manual__1</a>", "cls": "ok",
            "at": 0, "run": {"dag_id": "snapshot_create", "run_id": "manual__1"}}
    setup = (f"sessionStorage.getItem('seglake-last-action') || sessionStorage.setItem('seglake-last-action', "
             f"JSON.stringify({json.dumps(last)}));"
             "window.fetch = function (url) { window.asked = String(url);"
             " return Promise.resolve(new Response('{\"detail\": \"Not Found\"}', {status: 404})); };")
    with Browser(timeout=20) as b:
        b.send("Page.addScriptToEvaluateOnNewDocument", {"source": setup})
        b.open(page.as_uri())
        b.wait_text("snapshot_create manual__1")
        b.wait_text("no longer exists in Airflow")
        assert "dagRuns/manual__1" in b.js("window.asked")
        line = b.text("#action-result")
        assert "deleted" in line and "started" not in line.split("snapshot_create manual__1")[1], line
