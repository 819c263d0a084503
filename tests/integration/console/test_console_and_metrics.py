"""The operator's view (seglake.console) and the Prometheus exposition (seglake.metrics)
against real etcd and real files: values match what the engine wrote, every state is
emitted, and a source that cannot be read is reported without hiding the others."""

import math
import re
import time

import pytest

from seglake import console, metrics
from seglake.dev import demo
from seglake.lifecycle import copyjob, gc, restore, snapshot
from seglake.meta.copyjobs import JOB_EXECUTING
from seglake.storage import layout

SMALL = demo.SeedParams(partitions=2, segments=3, rows=100, dim=8)
SAMPLE = re.compile(r'^([a-z_]+)(\{([a-z_]+="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse(text: str) -> dict[str, dict[str, float]]:
    """Prometheus text -> {metric: {labels: value}}; fails on any malformed line."""
    out: dict[str, dict[str, float]] = {}
    typed = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"malformed sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", float(m.group(4))
        assert name in typed, f"{name} has no TYPE line"
        assert math.isfinite(value), line
        out.setdefault(name, {})[labels] = value
    return out


@pytest.fixture
def world(meta, store):
    """A collection, a committed snapshot with a TTL, a finished restore, one Executing job."""
    src, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s1", ttl=3600)
    job = restore.restore(meta, store, "demo", "s1", "demo_copy")
    copyjob.plan(meta, job, 2)
    copyjob.run_inline(meta, store, job)
    copyjob.finalize(meta, job)
    running = restore.restore(meta, store, "demo", "s1", "demo_copy2")
    copyjob.plan(meta, running, 2)
    return src, job, running


def test_overview_reports_what_the_engine_wrote(meta, store, world):
    src, done_job, running_job = world
    o = console.overview(meta, store)
    assert all(o[k]["error"] is None for k in ("collections", "snapshots", "jobs", "gc", "gc_pause", "channels"))
    colls = {c["name"]: c for c in o["collections"]["rows"]}
    segs = list(meta.segments.list(src.collection_id))
    assert colls["demo"]["segments"] == len(segs) == 6
    assert colls["demo"]["rows"] == sum(s.num_rows for s in segs)
    assert colls["demo"]["bytes"] == sum(s.total_size() for s in segs) > 0
    assert colls["demo"]["channels"] == list(src.vchannels)
    assert colls["demo_copy"]["segments"] == 6 and colls["demo_copy"]["state"] == "Created"
    (snap,) = o["snapshots"]["rows"]
    assert (snap["name"], snap["state"], snap["segments"]) == ("s1", "COMMITTED", 6)
    assert 3500 < snap["ttl_left_s"] <= 3600 and snap["pins"] == [f"copy job {running_job}"]
    jobs = {j["job_id"]: j for j in o["jobs"]["rows"]}
    assert jobs[done_job]["state"] == "Completed" and jobs[done_job]["fractions"]["bytes"] == 1.0
    assert jobs[done_job]["eta_s"] is None
    assert jobs[running_job]["state"] == JOB_EXECUTING and jobs[running_job]["fractions"]["segments"] == 0.0
    assert o["gc"]["rows"] is None                       # no GC run yet
    assert o["gc_pause"]["rows"] == {"all": False, "collections": [], "schedule": None}   # scheduled runs: refused
    assert o["channels"]["rows"] == []                   # no WAL yet (or no channels)


def test_rate_and_eta_of_a_running_job_are_the_current_ones():
    """Issue 27 item 2: the rate of a running job is its tasks' rate over the recent
    window, not the run's average (which kept a stall looking like progress)."""
    p = {"copied_bytes": 300, "done_bytes": 300, "total_bytes": 1000, "progress_at": 108.0,
         "live": [[108.0, 20.0], [109.0, 10.0]]}
    job = {"state": JOB_EXECUTING, "started_at": 100.0, "finished_at": None, "progress": p}
    rate, eta = console.job_rate_eta(job, now=110.0)
    assert rate == 30.0 and eta == pytest.approx(700 / 30)
    # one task's rate is older than the window: it no longer counts
    assert console.job_rate_eta(job, now=118.5) == (10.0, pytest.approx(70.0))
    # nothing moved for longer than the window: rate 0, no ETA promised
    assert console.job_rate_eta(job, now=200.0) == (0.0, None)
    assert console.job_rate_eta({**job, "progress": {**p, "live": []}}, 110.0) == (None, None)   # nothing running
    # a finished job: its average from the first file copy to the end
    done = {**job, "state": "Completed", "finished_at": 105.0}
    assert console.job_rate_eta(done, 500.0) == (60.0, None)
    late = {**done, "finished_at": 110.0, "progress": {**p, "first_copy_at": 108.0}}
    assert console.job_rate_eta(late, 500.0) == (150.0, None)


def test_a_job_whose_count_does_not_move_is_stalled():
    job = {"state": JOB_EXECUTING, "started_at": 50.0, "progress": {"progress_at": 100.0}}
    assert console.stalled_for(job, 129.9) is None
    assert console.stalled_for(job, 130.0) == 30.0 and console.stalled_for(job, 175.0) == 75.0
    assert console.stalled_for({**job, "progress": {}}, 100.0) == 50.0   # never moved: since the start
    assert console.stalled_for({**job, "state": "Completed"}, 1e9) is None


def test_a_copy_records_when_its_first_file_copy_began(meta, store, world):
    _, done_job, running_job = world
    p = copyjob.progress(meta, done_job)
    job = meta.copyjobs.get(done_job)[0]
    assert job.started_at <= p["first_copy_at"] <= job.finished_at
    assert copyjob.progress(meta, running_job)["first_copy_at"] is None    # planned, nothing copied yet


def test_gc_summary_and_pause_are_shown(meta, store, world):
    src, *_ = world
    store.put(layout.insert_log(src.collection_id, src.partitions[0].partition_id, 987654, 100, 1), b"x" * 100)
    time.sleep(0.05)   # older than the cutoff of a zero tolerance
    gc.run(meta, store, gc.GCOptions(dry_run=True, force=True, missing_tolerance=0))
    gc.pause(meta, src.collection_id, ttl=60, reason="test")
    o = console.overview(meta, store)
    g = o["gc"]["rows"]
    assert g is not None and g["dry_run"] is True and g["swept"] is None
    assert g["candidates"] == 1 and g["candidate_bytes"] == 100
    assert [(r["collection"], r["reason"], r["files"]) for r in g["rows"]] == [("demo", "orphan", 1)]
    assert g["candidates"] == sum(r["files"] for r in g["rows"])
    assert g["candidate_bytes"] == sum(r["bytes"] for r in g["rows"])
    assert o["gc_pause"]["rows"] == {"all": False, "collections": [src.collection_id], "schedule": None}


def test_metrics_count_every_state_and_are_well_formed(meta, store, world):
    src, done_job, running_job = world
    m = parse(metrics.render(meta, store))
    assert m["seglake_copy_jobs"] == {'{state="Pending"}': 0, '{state="Executing"}': 1,
                                      '{state="Completed"}': 1, '{state="Failed"}': 0}
    tasks = sum(m["seglake_copy_tasks"].values())
    assert tasks == len(meta.copyjobs.tasks(done_job)) + len(meta.copyjobs.tasks(running_job))
    assert m["seglake_copy_tasks"]['{state="Pending"}'] == len(meta.copyjobs.tasks(running_job))
    assert m["seglake_snapshots"]['{state="COMMITTED"}'] == 1 and m["seglake_snapshots"]['{state="PENDING"}'] == 0
    # the running restore's target stays Importing (invisible) until its job completes
    assert m["seglake_collections"]['{state="Created"}'] == 2 and m["seglake_collections"]['{state="Importing"}'] == 1
    assert m["seglake_segments"]['{state="Flushed"}'] == 12 and m["seglake_segments"]['{state="Importing"}'] == 6
    assert m["seglake_gc_runs_recorded"] == {"": 0} and m["seglake_gc_candidate_bytes"] == {"": 0}
    assert all(v == 0 for v in m["seglake_scrape_error"].values())
    # per unfinished job and per collection being restored: progress
    job = meta.copyjobs.get(running_job)[0]
    lb = f'{{job_id="{running_job}",collection="{job.target_collection}",db="default"}}'
    done = meta.copyjobs.get(done_job)[0]
    done_lb = f'{{job_id="{done_job}",collection="{done.target_collection}",db="default"}}'
    # a finished job's series stay (until retention removes the job), showing its end
    assert m["seglake_copy_job_total_bytes"] == {lb: job.total_bytes, done_lb: done.total_bytes}
    assert m["seglake_copy_job_done_bytes"] == {lb: 0, done_lb: done.total_bytes}
    assert m["seglake_copy_job_finished"] == {lb: 0, done_lb: 1}
    assert m["seglake_copy_job_rate_bytes_per_second"] == {lb: 0}
    assert m["seglake_copy_job_stalled_seconds"] == {lb: 0}   # planned just now: not stalled yet
    # per collection (issue 27): rows, bytes, live segments, the newest snapshot's age
    demo_lb = '{collection="demo",db="default"}'
    segs = [s for s in meta.segments.list(src.collection_id) if s.state != "Dropped"]
    assert m["seglake_collection_rows"][demo_lb] == sum(s.num_rows for s in segs) > 0
    assert m["seglake_collection_bytes"][demo_lb] == sum(s.total_size() for s in segs)
    assert m["seglake_collection_segments"][demo_lb] == len(segs) == 6
    assert list(m["seglake_collection_last_snapshot_age_seconds"]) == [demo_lb]
    assert 0 <= m["seglake_collection_last_snapshot_age_seconds"][demo_lb] < 3600
    assert m.get("seglake_collection_last_backup_age_seconds", {}) == {}   # no export yet
    from seglake.lifecycle.backup import export
    now = time.time()
    export._record(meta, "default", "demo", "b_old", {"state": "committed", "finished_at": now - 7200})
    export._record(meta, "default", "demo", "b_new", {"state": "committed", "finished_at": now - 100})
    export._record(meta, "default", "demo", "b_bad", {"state": "failed", "finished_at": now - 1})
    m = parse(metrics.render(meta, store, now=now))
    assert m["seglake_collection_last_backup_age_seconds"] == {demo_lb: pytest.approx(100)}   # newest committed
    # an export of a dropped namesake (another collection id) is not this collection's backup
    export._record(meta, "default", "demo", "b_gone", {"state": "committed", "finished_at": now - 5}, 10**9)
    export._record(meta, "default", "demo", "b_mine", {"state": "committed", "finished_at": now - 50},
                   src.collection_id)
    m = parse(metrics.render(meta, store, now=now))
    assert m["seglake_collection_last_backup_age_seconds"] == {demo_lb: pytest.approx(50)}
    assert m["seglake_collection_restore_fraction"] == {f'{{collection="{job.target_collection}",db="default"}}': 0}


def test_metrics_after_a_real_sweep(meta, store, world):
    src, *_ = world
    store.put(layout.insert_log(src.collection_id, src.partitions[0].partition_id, 987654, 100, 1), b"y" * 250)
    time.sleep(0.05)
    result = gc.run(meta, store, gc.GCOptions(dry_run=False, force=True, missing_tolerance=0))
    m = parse(metrics.render(meta, store))
    assert m["seglake_gc_runs_recorded"] == {"": 1} and m["seglake_gc_last_run_dry_run"] == {"": 0}
    assert m["seglake_gc_candidate_bytes"][""] == result["mark"]["candidate_bytes"]
    assert m["seglake_gc_deleted_bytes"][""] == result["sweep"]["deleted_bytes"]
    assert m["seglake_gc_deleted_files"][""] == result["sweep"]["deleted"] == 1
    assert m["seglake_gc_deleted_bytes"][""] == 250


def test_a_source_that_cannot_be_read_is_reported_not_hidden(meta, store, world, monkeypatch):
    from seglake.errors import Unavailable

    def boom(*a, **k):
        raise Unavailable("etcd down (test)")

    monkeypatch.setattr(console, "copy_jobs", boom)
    monkeypatch.setattr(console, "task_states", boom)
    o = console.overview(meta, store)
    assert "etcd down" in o["jobs"]["error"] and o["collections"]["error"] is None
    m = parse(metrics.render(meta, store))
    assert m["seglake_scrape_error"]['{source="copy_jobs"}'] == 1
    assert m["seglake_scrape_error"]['{source="collections"}'] == 0
    assert "seglake_copy_tasks" not in m and "seglake_collections" in m


def test_label_values_are_escaped_and_values_finite():
    e = metrics.Exposition()
    e.family("x", "h", [({"a": 'q"b\\c\nd'}, 1)])
    assert 'x{a="q\\"b\\\\c\\nd"} 1' in e.text()
    with pytest.raises(ValueError):
        metrics.Exposition().family("x", "h", [({}, float("nan"))])


def test_wal_channels_show_term_ticks_and_checkpoint_lag(meta, store, settings):
    """The page and /metrics read the real WAL: one row per vchannel, its pchannel's term (0 until a takeover)
    and last tick; lag appears once a checkpoint exists, and is the tick distance."""
    import json

    from seglake.meta.alloc import physical_ms
    from seglake.wal.client import WalClient, synthetic_rows

    from wal_helpers import make_collection

    with WalClient(meta, store, settings) as client:
        coll = make_collection(client, "walc", shards=2)
        client.insert("walc", synthetic_rows(coll, 50, meta.ids.allocate(50)))
    rows = {r["vchannel"]: r for r in console.wal_channels(meta)}
    assert set(rows) == set(coll.vchannels)
    assert all(r["last_tick_ts"] and r["lag_s"] is None for r in rows.values())
    v = coll.vchannels[0]
    last = rows[v]["last_tick_ts"]
    tick = (int(last * 1000) - 2500) << 18           # a checkpoint 2.5 s behind the log
    meta.kv.put(meta.keys.channel_checkpoint(v), json.dumps({"message_id": [1, 1, 0], "time_tick": tick}))
    rows = {r["vchannel"]: r for r in console.wal_channels(meta)}
    assert rows[v]["lag_s"] == pytest.approx(2.5, abs=0.002)
    assert rows[v]["checkpoint_ts"] == physical_ms(tick) / 1000
    m = parse(metrics.render(meta, store))
    assert m["seglake_wal_checkpoint_lag_seconds"] == {f'{{vchannel="{v}"}}': pytest.approx(2.5, abs=0.002)}
