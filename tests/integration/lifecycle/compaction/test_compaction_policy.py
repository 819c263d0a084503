"""Per-collection compaction policies (stored in etcd, set / shown / cleared from the CLI),
the plan by bytes, the scheduled run and the run history: real etcd, real files, rows
exact against the model before and after every compaction."""

from __future__ import annotations

import json
import math

import pytest

from seglake import cli
from seglake.errors import ValidationError
from seglake.lifecycle import compaction

from compaction_helpers import Writer, exact, mixed_workload, rows, segments  # noqa: F401
from etcd_root import root_state

pytestmark = pytest.mark.etcd


@pytest.fixture
def env(settings, monkeypatch):
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("SEGLAKE_COMPACTION_PROTECTION", "0")
    return settings


def _run(capsys, argv) -> tuple[int, str, str]:
    try:
        rc = cli.main(argv)
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def _collection(w, name="c", steps=2):
    w.create(name, ["_default", "p1", "p2"], shards=1)
    for step in range(steps):
        mixed_workload(w, name, step)


def test_policy_set_show_clear_and_the_plan_uses_it(env, meta, store, settings, capsys):
    """Config (min rows 100k by default here: every test segment is small, but target 1M)
    vs a stored policy: the CLI sets it, `compact` plans with it, clear brings config back."""
    w = Writer(meta, store, settings)
    _collection(w)
    before = exact(meta, store, "c")
    # a policy that makes every segment large (min rows 1) with no deletes threshold hit -> rewrite units only
    rc, out, err = _run(capsys, ["compaction", "policy", "set", "c", "--min-segment-rows", "1",
                                 "--delete-ratio", "1", "--target-rows", "30"])
    assert rc == 0, err
    assert "min_segment_rows=1" in out and "scheduled: no" in out
    rc, out, err = _run(capsys, ["compaction", "policy", "show", "c", "--json"])
    doc = json.loads(out)
    assert doc["policy"] == {"min_segment_rows": 1, "delete_ratio": 1.0, "target_rows": 30}
    assert doc["effective"]["target_bytes"] == settings.compaction_target_bytes and doc["scheduled"] is False
    # min rows 1, delete ratio 1: nothing is small, nothing exceeds the ratio -> nothing to compact
    rc, out, err = _run(capsys, ["compact", "c", "--dry-run"])
    assert rc == 0 and "nothing to compact" in out, (out, err)
    # a run's own flag still overrides the stored policy
    rc, out, err = _run(capsys, ["compact", "c", "--dry-run", "--min-segment-rows", "1000"])
    assert rc == 0 and "expected gain" in out, (out, err)
    rc, out, err = _run(capsys, ["compaction", "policy", "clear", "c"])
    assert rc == 0 and "cleared" in out
    rc, out, err = _run(capsys, ["compaction", "policy", "show", "c"])
    assert rc != 0 and "no compaction policy" in err
    rc, out, err = _run(capsys, ["compact", "c", "--json"])   # config: min rows 100k, every segment merged
    assert rc == 0, err
    assert json.loads(out)["counts"]["committed"] > 0
    assert exact(meta, store, "c") == before and rows(meta, store, "c") == w.model.visible()


@pytest.mark.parametrize("values,words", [
    ({"target_row": 5}, "did you mean 'target_rows'"),
    ({"min_segment_rows": 0}, "out of range"),
    ({"min_segment_rows": 1.5}, "expected an integer"),
    ({"delete_ratio": math.nan}, "not a finite number"),
    ({"delete_ratio": 1.5}, "out of range"),
    ({"target_bytes": True}, "expected an integer"),
    ({"l0_age": "1h"}, "expected a number"),
    ({"l0_age": math.inf}, "not a finite number"),
    ({"min_segment_bytes": -1}, "out of range"),
    ({}, "sets nothing"),
])
def test_bad_policy_refused_before_any_write(env, meta, store, settings, values, words):
    w = Writer(meta, store, settings)
    w.create("c", ["_default"], shards=1)
    rev = root_state(meta)
    with pytest.raises(ValidationError, match=words):
        compaction.set_policy(meta, settings, "c", values)
    assert root_state(meta) == rev
    assert compaction.get_policy(meta, "c") is None


def test_bad_policy_refused_by_the_cli(env, meta, store, settings, capsys):
    w = Writer(meta, store, settings)
    w.create("c", ["_default"], shards=1)
    for argv in (["--delete-ratio", "nan"], ["--target-bytes", "0"], ["--l0-age-seconds", "-1"],
                 ["--min-segment-bytes", "1.5"]):
        rc, out, err = _run(capsys, ["compaction", "policy", "set", "c", *argv])
        assert rc == 2 and argv[0] in err, (argv, out, err)
    rc, out, err = _run(capsys, ["compaction", "policy", "set", "nope", "--target-rows", "5"])
    assert rc != 0 and "not found" in err
    assert compaction.list_policies(meta) == []


def test_hand_edited_policy_record_is_refused(env, meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("c", ["_default"], shards=1)
    compaction.set_policy(meta, settings, "c", {"target_rows": 10})
    cid = meta.catalog.get_by_name("c").collection_id
    key = meta.keys.compaction_policy(cid)
    meta.kv.put(key, meta.kv.get(key).value.replace(b'"target_rows":10', b'"target_rowz":10'))
    with pytest.raises(ValidationError, match="did you mean 'target_rows'"):
        compaction.policy_for(meta, settings, "c")


def test_policy_by_bytes(env, meta, store, settings):
    """Rows say nothing is small (min rows 1); bytes say every segment is: merged toward
    the target byte size (bins close at target bytes), rows exact; then the plan converges."""
    w = Writer(meta, store, settings)
    _collection(w, steps=3)
    before = exact(meta, store, "c")
    segs = segments(meta, "c")
    biggest = max(s.total_size() for s in segs)
    per_part = max(sum(s.total_size() for s in segs if s.partition_id == p) for p in {s.partition_id for s in segs})
    pol = compaction.Policy(min_segment_rows=1, delete_ratio=1.0, protection=0.0, min_segment_bytes=biggest + 1,
                            target_bytes=max(1, per_part // 3))
    by_rows = compaction.plan(meta, store, "c", compaction.Policy(min_segment_rows=1, delete_ratio=1.0, protection=0.0))
    assert by_rows.units == []
    p = compaction.plan(meta, store, "c", pol)
    assert p.units and any(u.kind == compaction.MERGE for u in p.units)
    # bins are cut by bytes: more than one unit in some partition
    parts = [u.partition_id for u in p.units]
    assert len(parts) > len(set(parts))
    s = compaction.compact(meta, store, "c", pol)
    assert s.counts()["lost"] == 0 and s.counts()["committed"] == len(p.units)
    assert exact(meta, store, "c") == before and rows(meta, store, "c") == w.model.visible()
    for _ in range(5):      # outputs may still be below min bytes: merges go on toward the target, then stop
        if not compaction.compact(meta, store, "c", pol).plan.units:
            break
    else:
        pytest.fail("the byte policy does not converge")
    assert exact(meta, store, "c") == before


def test_scheduled_run_compacts_only_scheduled_collections(env, meta, store, settings, capsys):
    wa, wb = Writer(meta, store, settings), Writer(meta, store, settings)    # one model per collection
    assert compaction.run_scheduled(meta, store, settings) == []      # nothing scheduled: nothing to do
    _collection(wa, "a")
    _collection(wb, "b")
    before_a, before_b = exact(meta, store, "a"), exact(meta, store, "b")
    segs_b = {s.segment_id for s in segments(meta, "b")}
    compaction.set_policy(meta, settings, "a", {"min_segment_rows": 1000, "target_rows": 25}, scheduled=True)
    compaction.set_policy(meta, settings, "b", {"min_segment_rows": 1000}, scheduled=False)
    dry = compaction.run_scheduled(meta, store, settings, dry_run=True)
    assert [r["collection"] for r in dry] == ["a"] and dry[0]["units"] > 0
    rc, out, err = _run(capsys, ["compaction", "scheduled", "--json"])
    assert rc == 0, err
    reports = json.loads(out)
    assert [r["collection"] for r in reports] == ["a"] and reports[0]["counts"]["committed"] > 0
    assert exact(meta, store, "a") == before_a and exact(meta, store, "b") == before_b
    assert rows(meta, store, "a") == wa.model.visible()
    assert {s.segment_id for s in segments(meta, "b")} == segs_b
    again = compaction.run_scheduled(meta, store, settings)
    assert again[0]["units"] == 0 and compaction.report_line(again[0]).endswith("nothing to compact")
    # history: one line for a's run (the empty re-run adds none), marked scheduled
    hist = compaction.history(meta)
    assert len(hist) == 1 and hist[0]["collection"] == "a" and hist[0]["trigger"] == "scheduled"
    h = hist[0]
    assert h["segments_after"] < h["segments_before"] and h["rows_dropped"] > 0
    assert h["bytes_reclaimed"] == max(0, h["bytes_in"] - h["bytes_out"])
    assert h["segments_after"] == len(segments(meta, "a"))
    # a manual run of b is still possible, and goes into b's history
    compaction.compact(meta, store, "b", compaction.policy_for(meta, settings, "b"))
    assert exact(meta, store, "b") == before_b and rows(meta, store, "b") == wb.model.visible()
    rc, out, err = _run(capsys, ["compaction", "history", "--json"])
    assert [r["collection"] for r in json.loads(out)] == ["b", "a"]
    rc, out, err = _run(capsys, ["compaction", "history", "b"])
    assert rc == 0 and "manual" in out and "scheduled" not in out


def test_scheduled_run_reports_a_dropped_collection_and_goes_on(env, meta, store, settings):
    w = Writer(meta, store, settings)
    _collection(w, "a", steps=1)
    _collection(w, "b", steps=1)
    before = exact(meta, store, "b")
    compaction.set_policy(meta, settings, "a", {"min_segment_rows": 1000}, scheduled=True)
    compaction.set_policy(meta, settings, "b", {"min_segment_rows": 1000}, scheduled=True)
    from seglake.lifecycle import drop
    drop.begin_drop(meta, store, settings, "a")
    out = {r["collection"]: r for r in compaction.run_scheduled(meta, store, settings)}
    assert out["a"]["skipped"] == "collection is Dropping (GC removes its policy with it)" and "error" not in out["a"]
    assert out["b"]["counts"]["committed"] > 0 and exact(meta, store, "b") == before


def test_a_dropped_collection_s_policy_is_no_failure_and_goes_with_it(env, meta, store, settings, capsys):
    """`make demo` drops demo_wal, whose policy is scheduled: every scheduled compaction
    after it failed (NotFound: the name is free) until GC purged the collection, and the
    purge left the policy, so they failed for good. Now it is skipped, then removed."""
    from seglake.lifecycle import drop
    from seglake.lifecycle.gc.options import GCOptions
    from seglake.lifecycle.gc.records import clean_records
    from wal_helpers import schema
    gone = meta.catalog.create("gone", schema(), shards=1)         # never saw the WAL: dropped directly
    compaction.set_policy(meta, settings, "gone", {"min_segment_rows": 1000}, scheduled=True)
    assert drop.drop_collection(meta, store, settings, "gone")["state"] == "Dropped"
    rc, out, err = _run(capsys, ["compaction", "scheduled", "--dry-run"])
    assert rc == 0 and "gone: not compacted: collection is Dropped" in out and "FAILED" not in out, (out, err)
    clean_records(meta, store, GCOptions())                          # the empty Dropped collection purged
    assert meta.kv.get(meta.keys.collection(gone.collection_id)) is None
    assert meta.kv.get(meta.keys.compaction_policy(gone.collection_id)) is None
    assert compaction.scheduled_targets(meta, settings) == []


def test_history_keeps_the_newest(env, meta, store, settings, monkeypatch):
    monkeypatch.setattr("seglake.lifecycle.compaction.compacting.HISTORY_KEEP", 2)
    w = Writer(meta, store, settings)
    w.create("c", ["_default"], shards=1)
    pol = compaction.Policy(min_segment_rows=1000, target_rows=10_000, protection=0.0)
    for i in range(4):
        w.insert("c", range(i * 10, i * 10 + 5), "_default", float(i))
        w.flush("c")
        w.insert("c", range(i * 10 + 5, i * 10 + 9), "_default", float(i))
        w.flush("c")
        compaction.compact(meta, store, "c", pol)
        assert rows(meta, store, "c") == w.model.visible()
    hist = compaction.history(meta)
    assert len(hist) == 2 and hist[0]["recorded_at"] >= hist[1]["recorded_at"]


def test_the_page_and_the_metrics_show_the_history(env, meta, store, settings):
    """Two runs of one collection and one of another: the page lists each run (segments
    before/after, rows dropped, bytes reclaimed, trigger) and the policies; the metrics
    give each collection's last run."""
    import sys
    from pathlib import Path

    from seglake import console, metrics
    from seglake_airflow.ui.render import render_page

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "console"))
    from test_console_and_metrics import parse

    wa, wb = Writer(meta, store, settings), Writer(meta, store, settings)
    _collection(wa, "ha", steps=1)
    _collection(wb, "hb", steps=1)
    pol = compaction.Policy(min_segment_rows=1000, target_rows=10_000, protection=0.0)
    compaction.compact(meta, store, "ha", pol)
    mixed_workload(wa, "ha", 1)
    s2 = compaction.compact(meta, store, "ha", pol)
    compaction.set_policy(meta, settings, "hb", {"min_segment_rows": 1000}, scheduled=True)
    compaction.run_scheduled(meta, store, settings)
    assert rows(meta, store, "ha") == wa.model.visible() and rows(meta, store, "hb") == wb.model.visible()
    o = console.overview(meta, store)
    h = o["compaction_history"]
    assert h["error"] is None
    runs = h["rows"]["runs"]
    assert [r["collection"] for r in runs] == ["hb", "ha", "ha"]
    assert [r["trigger"] for r in runs] == ["scheduled", "manual", "manual"]
    c2 = s2.counts()
    assert runs[1]["rows_dropped"] == c2["rows_dropped"] and runs[1]["segments_before"] == s2.plan.segments
    assert runs[1]["segments_after"] == s2.plan.segments - c2["segments_in"] + c2["segments_out"]
    page = render_page(o)
    sec = page[page.index('<section id="compaction">'):]
    sec = sec[:sec.index("</section>")]
    assert sec.count(">ha<") == 2 and sec.count(">hb<") == 1 and ">scheduled<" in sec
    assert "default.hb" in sec and "min_segment_rows=1000" in sec
    m = parse(metrics.render(meta, store))
    lab = '{collection="ha",db="default"}'
    assert m["seglake_compaction_last_rows_dropped"][lab] == c2["rows_dropped"]
    assert m["seglake_compaction_last_segments_after"][lab] == runs[1]["segments_after"]
    assert lab in m["seglake_collection_last_compaction_age_seconds"]
    assert '{collection="hb",db="default"}' in m["seglake_compaction_last_bytes_reclaimed"]
    assert m["seglake_compaction_policies"] == {'{scheduled="true"}': 1, '{scheduled="false"}': 0}
    assert m["seglake_scrape_error"]['{source="compaction"}'] == 0


def test_no_scheduled_alone_says_how_to_stop_scheduling(env, meta, store, settings, capsys):
    """`policy set c --no-scheduled` (to stop a scheduled policy) was refused with 'set at
    least one of ... or scheduled' -- the user had set scheduled. It says that scheduled=false
    alone is no policy and that clearing the policy is how; the stored policy is unchanged."""
    w = Writer(meta, store, settings)
    w.create("c", ["_default"], shards=1)
    assert _run(capsys, ["compaction", "policy", "set", "c", "--min-segment-rows", "5", "--scheduled"])[0] == 0
    rc, out, err = _run(capsys, ["compaction", "policy", "set", "c", "--no-scheduled"])
    assert rc == 2 and "scheduled=false" in err and "seglake compaction policy clear c" in err, err
    assert "or scheduled," not in err
    assert compaction.get_policy(meta, "c")["scheduled"] is True
