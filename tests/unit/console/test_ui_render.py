"""The seglake page's HTML from overview data: unreadable sections say so and the rest
still renders; values are escaped; the GC chart scales bars to the largest entry."""

from seglake_airflow.ui.render import gc_chart, human_duration, render_page


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


def test_durations_read_well():
    assert [human_duration(x) for x in (None, 5, 65, 3700, 90000)] == ["-", "5s", "1m 5s", "1h 1m", "1d 1h"]


def _gc_run(**over):
    g = {"run_id": "manual__2026-11-24T02_39_01.5_00_00", "started_at": 1_700_000_000.0, "dry_run": True,
         "dag_id": "gc", "dag_run_id": "manual__2026-11-24T02:39:01.5+00:00", "listed": 10, "candidates": 3,
         "candidate_bytes": 3072, "kept": {}, "rows": [], "swept": None, "deleted": 0, "deleted_bytes": 0,
         "error_count": 0}
    g.update(over)
    return g


def test_the_gc_run_is_a_link_to_its_dag_run_and_a_dry_run_says_so():
    html = render_page(_empty(gc={"rows": _gc_run(), "error": None}))
    link = '<a class="runid" href="../dags/gc/runs/manual__2026-11-24T02%3A39%3A01.5%2B00%3A00">' \
           'manual__2026-11-24T02:39:01.5+00:00</a>'
    assert link in html, html
    assert "<b>manual" not in html                                        # not the oversized bold id
    assert 'data-gc-kind="dry">DRY RUN: nothing deleted' in html and "3 files (3.0 KiB) a real run would delete" in html
    assert "at 2023-11-14 22:13:20 UTC" in html
    real = render_page(_empty(gc={"rows": _gc_run(dry_run=False, swept={"deleted": 3}, deleted=3), "error": None}))
    assert 'data-gc-kind="real">REAL run' in real and "DRY RUN" not in real
    cli_run = render_page(_empty(gc={"rows": _gc_run(dag_id=None, dag_run_id=None), "error": None}))
    assert '<span class="runid">manual__2026-11-24T02_39_01.5_00_00</span> (CLI)' in cli_run


def test_the_scheduled_gc_settings_are_shown():
    unset = render_page(_empty())
    assert 'data-gc-schedule="unset">scheduled runs: refused until an operator sets' in unset
    rec = {"conf": {"dry_run": False, "collection": None, "db": "default", "engine": "inline"},
           "set_at": 1_700_000_000.0, "set_by": "ops"}
    page = render_page(_empty(gc_pause={"rows": {"all": False, "collections": [], "schedule": rec}, "error": None}))
    assert "a REAL run of the whole store, engine inline; set at 2023-11-14 22:13:20 UTC by ops" in page


def test_channel_ticks_are_times_not_epoch_seconds():
    rows = [{"vchannel": "v0", "term": 0, "writer": "w", "last_tick_ts": 1_700_000_100.25, "lag_s": None,
             "paused": False, "open_txns": []},
            {"vchannel": "v1", "term": 0, "writer": "w", "last_tick_ts": 1_700_000_100.25, "lag_s": 2.5,
             "paused": False, "open_txns": []}]
    html = render_page(_empty(channels={"rows": rows, "error": None}))
    assert html.count("2023-11-14 22:15:00 UTC") == 2 and "1700000100" not in html
    assert "no checkpoint yet" in html and "last time tick (UTC)" in html


def _job(**over):
    j = {"job_id": 7, "state": "Executing", "terminal": False, "source_collection": "demo", "snapshot": "s1",
         "target_collection": "demo_copy", "rate_bps": 2048.0, "eta_s": 3.0, "duration_s": 5.0, "reason": "",
         "origin": {"dag_id": "snapshot_restore", "run_id": "manual__2026-11-24T09:00:00+00:00"},
         "progress": {"copied_segments": 1, "total_segments": 2, "copied_files": 3, "done_files": 3, "total_files": 6,
                      "done_bytes": 10, "total_bytes": 20, "tasks_completed": 0, "tasks": 1, "tasks_failed": 0},
         "fractions": {"segments": 0.5, "files": 0.5, "bytes": 0.5}, "health": "running", "stalled_s": None}
    j.update(over)
    return j


def test_the_page_polls_fast_while_a_job_runs_and_links_each_job_to_its_run():
    html = render_page(_empty(jobs={"rows": [_job()], "error": None}))
    assert 'data-refresh="2"' in html and "refreshes every 2s" in html
    assert '<a href="../dags/snapshot_restore/runs/manual__2026-11-24T09%3A00%3A00%2B00%3A00"' in html
    idle = render_page(_empty(jobs={"rows": [_job(state="Completed", terminal=True, origin=None)], "error": None}))
    assert 'data-refresh="10"' in idle and "runs/" not in idle.split("Copy jobs")[1].split("</section>")[0]
    exporting = render_page(_empty(backup={"rows": {"exports": [{"db": "default", "collection": "c", "bundle": "b",
                                                                 "state": "running"}], "pins": [], "policies": []},
                                           "error": None}))
    assert 'data-refresh="2"' in exporting


def test_a_stalled_job_says_so_and_only_a_stalled_job_is_offered_resume():
    """Issue 27: a stall is not shown as progress with a growing ETA, and a healthy running
    job is not offered a second runner."""
    def jobs_section(html):
        return html.split("Copy jobs")[1].split("</section>")[0]

    healthy = jobs_section(render_page(_empty(jobs={"rows": [_job()], "error": None})))
    assert "stalled" not in healthy and "/resume" not in healthy and "2.0 KiB/s" in healthy and "3s" in healthy
    stalled = jobs_section(render_page(_empty(jobs={"rows": [_job(health="stalled", stalled_s=75.0, rate_bps=0.0,
                                                                   eta_s=None)], "error": None})))
    assert '<span class="st warn stalled">stalled for 1m 15s</span>' in stalled
    assert 'data-path="jobs/7/resume"' in stalled
    done = jobs_section(render_page(_empty(jobs={"rows": [_job(state="Completed", terminal=True, health="finished")],
                                               "error": None})))
    assert "/resume" not in done and "stalled" not in done


def test_the_pin_box_refuses_zero_in_the_browser():
    import re

    html = render_page(_empty(snapshots={"rows": [{
        "collection": "c", "db": "default", "name": "s", "state": "COMMITTED", "expires_at": None, "ttl_left_s": None,
        "age_s": 1.0, "pins": [], "segments": 1, "rows": 1, "bytes": 1, "error": None, "description": ""}],
        "error": None}))
    (box,) = re.findall(r'<input name="ttl_hours"[^>]*>', html)
    low = float(re.search(r'min="([^"]+)"', box).group(1))
    assert 0 < low and low * 3600 >= 1.0 and low * 3600 < 2.0, box   # 0 is below it; 1 s is the engine's floor


def test_a_read_only_page_offers_no_action_and_says_why():
    data = _empty(collections={"rows": [{"name": "c1", "db": "default", "collection_id": 1, "state": "Created",
                                         "segments": 1, "rows": 10, "bytes": 100, "files": 2,
                                         "partitions": 1, "channels": ["ch0"]}], "error": None},
                  gc={"rows": _gc_run(), "error": None})
    full, read_only = (html.split("<script>")[0] for html in (render_page(data), render_page(data, can_act=False)))
    assert full.count('<form class="act"') >= 2 and 'id="read-only"' not in full
    assert '<form class="act"' not in read_only and "<button" not in read_only
    assert 'id="read-only">read-only: your role may look but not start runs' in read_only
    assert "c1" in read_only and "DRY RUN: nothing deleted" in read_only     # it still shows everything
    assert '<form class="act"' in render_page(data)                          # the next page is not affected


def test_the_milvus_section_lists_sources_captures_and_restores_escaped():
    m = {"sources": [{"name": "prod", "milvus_etcd": "etcd:2379", "milvus_root": "by-dev", "bucket": "mb",
                      "bucket_root": "files", "db": "default", "collections": ["docs<x>"], "conn_id": "milvus_prod",
                      "verify": True, "keep_last": 2, "keep_daily": 7},
                     {"name": "broken", "error": "unreadable record"}],
         "captures": [{"source": "prod", "db": "default", "collection": "docs", "bundle": "sched_20261127T1200Z",
                       "created_at": 1_700_000_000.0, "finished_at": 1_700_000_010.0, "rows": 1234, "bytes": 8192,
                       "copied_bytes": 4096, "files": 15, "verified_ok": False, "verified_at": 1_700_000_020.0,
                       "pinned_until": 1_700_003_600.0},
                      {"source": None, "db": "default", "collection": "imgs", "bundle": "manual1", "rows": None,
                       "bytes": None, "files": None, "verified_ok": None}],
         "restores": [{"restore_id": "r1", "bundle": "default.docs/sched_20261127T1200Z", "name": "docs_copy",
                       "address": "milvus:19530", "state": "verified", "count": 1234, "visible_rows": 1234,
                       "created_at": 1_700_000_030.0, "verified_at": 1_700_000_040.0}]}
    html = render_page(_empty(milvus={"rows": m, "error": None}))
    sec = html.split('<section id="milvus">', 1)[1].split("</section>", 1)[0]
    assert "docs&lt;x&gt;" in sec and "docs<x>" not in sec
    assert "last 2, daily 7" in sec and "milvus_prod" in sec and "unreadable record" in sec
    assert "1,234" in sec and "8.0 KiB" in sec and '<span class="st bad">BAD</span>' in sec
    assert "2023-11-14 23:13:20 UTC" in sec                     # pinned until
    assert "never" in sec                                      # the manual capture was never verified
    assert "1,234 of 1234" in sec and '<span class="st ok">verified</span>' in sec
    empty = render_page(_empty())
    assert "no Milvus source registered" in empty and "no restores into Milvus" in empty


def test_a_stalled_replay_says_so_and_a_moving_one_keeps_the_fast_refresh():
    """Issue 27 for restores to a time and undrops: a replay whose driver died kept showing
    "replaying now" at its last rate (and the page refreshed every 10 s as if idle while
    a live replay ran)."""
    def replay(**over):
        return {"target": "back", "source": "src", "as_of": 470767722859331584, "vchannels_done": 0,
                "vchannels": 2, "vchannel": "v0", "messages": 10, "bytes": 1 << 20, "bytes_total": 4 << 20,
                "percent": 25.0, "rate_bps": 2 << 20, "health": "replaying", "stalled_s": None, **over}

    def page(r):
        return render_page(_empty(backup={"rows": {"exports": [], "pins": [], "policies": [], "replays": [r]},
                                          "error": None}))

    moving = page(replay())
    assert "2.0 MiB/s" in moving and "stalled" not in moving.split("Replays")[1] and 'data-refresh="2"' in moving
    stuck = page(replay(health="stalled", stalled_s=95.0, rate_bps=None))
    assert "stalled for 1m 35s" in stuck.split("Replays")[1] and 'data-refresh="10"' in stuck
