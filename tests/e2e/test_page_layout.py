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
