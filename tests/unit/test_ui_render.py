"""The seglake page's HTML from overview data: unreadable sections say so and the rest
still renders; values are escaped; the GC chart scales bars to the largest entry."""

from seglake_airflow.ui.render import gc_chart, human_duration, render_page, restore_link


def _empty(**over):
    sec = {"rows": [], "error": None}
    data = {"now": 1_700_000_000.0, "collections": sec, "snapshots": sec, "jobs": sec,
            "gc": {"rows": None, "error": None}, "gc_pause": {"rows": {"all": False, "collections": []}, "error": None},
            "channels": sec}
    data.update(over)
    return data


def test_an_unreadable_section_is_reported_and_the_rest_renders():
    html = render_page(_empty(jobs={"rows": [], "error": "Unavailable: etcd <down>"}))
    assert "could not read: Unavailable: etcd &lt;down&gt;" in html
    assert "no collections" in html and "no WAL channels" in html and "no GC run recorded yet" in html


def test_gc_chart_scales_and_escapes():
    svg = gc_chart([{"collection": "a<b", "collection_id": 1, "reason": "orphan", "files": 2, "bytes": 200},
                    {"collection": None, "collection_id": -1, "reason": "orphan", "files": 1, "bytes": 100}])
    assert "a&lt;b" in svg and "a<b" not in svg
    widths = [float(w) for w in __import__("re").findall(r'<rect [^>]*width="([0-9.]+)"', svg)]
    assert widths[0] == 2 * widths[1]


def test_restore_link_prefills_the_form_and_durations_read_well():
    link = restore_link({"collection": "demo", "name": "s1", "db": "default"})
    assert link.startswith("../dags/snapshot_restore/trigger/single?conf=") and "%22s1%22" in link
    assert [human_duration(x) for x in (None, 5, 65, 3700, 90000)] == ["-", "5s", "1m 5s", "1h 1m", "1d 1h"]
