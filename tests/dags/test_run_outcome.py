"""Issue 27 item 1: the run's state is the lifecycle's outcome. A run whose work did not
finish (tasks marked success without running, a run marked failed mid-copy that skipped
the rest) ends `failed`, decided by the `run_note` teardown (on_failure_fail_dagrun),
whatever was marked, skipped or cleared. dag.test() drives the real DAGs; the rule itself
(notes.outcome) is checked on the states a stopped run leaves."""

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = pytest.mark.airflow


def test_outcome_rule_on_the_states_a_stopped_restore_leaves():
    from seglake_airflow.notes import outcome

    # marked failed mid-copy: the running sensor failed, the rest skipped; the note already says FAILED
    stopped = {"restore": "success", "copy_job.wait": "failed", "verify.resolve": "skipped", "compare": "skipped"}
    assert outcome("FAILED: demo/s1 -> t: copy job Executing", stopped) == \
        (False, "FAILED: demo/s1 -> t: copy job Executing")
    # a note that reads as success beside a failed task: the failed task wins, and is named
    ok, text = outcome("snapshot demo/s1: COMMITTED", {"begin": "success", "give_up": "upstream_failed"})
    assert not ok and text == "FAILED: task give_up ended failed; snapshot demo/s1: COMMITTED"
    # the summary could not be read: not finished
    assert outcome("gc: no summary (KeyError)", {}, summarized=False) == \
        (False, "FAILED: the outcome could not be read; gc: no summary (KeyError)")
    # the note task's own earlier try does not count; skipped branches do not fail a finished run
    assert outcome("gc DRY RUN", {"run_note": "failed", "sweep": "skipped"}) == (True, "gc DRY RUN")


@pytest.mark.parametrize("pattern", [
    r"^(copy_job\.|verify\.|compare$)",   # every step after the restore marked success: nothing was copied
    r"^compare$",                          # everything ran, but the last check was marked instead of run
])
def test_a_restore_whose_steps_were_marked_instead_of_run_ends_failed(airflow_env, meta, store, pattern):
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=40, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    run = load_dag("snapshot_restore").test(
        run_conf={"collection": "demo", "snapshot": "s1", "target": "marked", "engine": "inline"},
        mark_success_pattern=pattern)
    states = task_states(run)
    assert states["compare"] == "success", states   # marked: every leaf before the note reads success
    assert states["run_note"] == "failed" and run.state == "failed", states


def test_a_restore_that_ran_to_the_end_is_still_green(airflow_env, meta, store):
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=40, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    run = load_dag("snapshot_restore").test(
        run_conf={"collection": "demo", "snapshot": "s1", "target": "whole", "engine": "inline"})
    states = task_states(run)
    assert run.state == "success" and states["run_note"] == "success", states


def test_every_lifecycle_dag_ends_with_the_note_that_decides_its_state(dagbag):
    """Done once in the plugin: every lifecycle DAG has the run_note teardown, and it is
    the leaf Airflow counts (on_failure_fail_dagrun), downstream of every other leaf."""
    for dag_id, dag in dagbag.dags.items():
        note = dag.task_dict.get("run_note")
        assert note is not None and note.is_teardown and note.on_failure_fail_dagrun, dag_id
        leaves = [t.task_id for t in dag.tasks if not t.downstream_list]
        assert leaves == ["run_note"], (dag_id, leaves)


def test_a_snapshot_drop_marked_instead_of_run_ends_failed_and_a_real_one_green(airflow_env, meta, store):
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=1, rows=10, dim=4))
    snapshot.create(meta, store, "demo", "gone")
    marked = load_dag("snapshot_drop").test(run_conf={"collection": "demo", "name": "gone"},
                                            mark_success_pattern=r"^drop$")
    assert marked.state == "failed" and task_states(marked)["drop"] == "success", task_states(marked)
    assert meta.snapshots.find(meta.catalog.get_by_name("demo").collection_id, "gone") is not None   # not dropped
    run = load_dag("snapshot_drop").test(run_conf={"collection": "demo", "name": "gone"})
    assert run.state == "success", task_states(run)


def _gc_orphans(meta, store):
    import os
    import time

    coll, _ = demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=40, dim=4))
    snapshot.create(meta, store, "demo", "s")
    orphans = [f"insert_log/{coll.collection_id}/9/{i}/100/1" for i in range(3)]
    for k in orphans:
        store.put(k, b"orphan")
        t = time.time() - 3 * 86400
        os.utime(os.path.join(store.uri, k), (t, t))
    return orphans


@pytest.mark.parametrize("pattern", [r"^sweep$", r"^(sweep|records)$", r"^records$"])
def test_a_real_gc_whose_sweep_or_records_were_marked_instead_of_run_ends_failed(airflow_env, meta, store, pattern):
    """A real GC (dry_run false) whose sweep was marked success by hand deleted nothing: its
    summary said "deleted 0 files of 3 candidates" and the run was green."""
    orphans = _gc_orphans(meta, store)
    run = load_dag("gc").test(run_conf={"dry_run": False, "engine": "inline"}, mark_success_pattern=pattern)
    states = task_states(run)
    assert states["summary"] == "success", states
    assert states["run_note"] == "failed" and run.state == "failed", states
    if "sweep" in pattern:
        assert all(store.exists(k) for k in orphans)


def test_a_wal_flush_whose_flush_was_marked_instead_of_run_ends_failed(airflow_env, meta, store):
    """The flush marked success by hand: the summary counted 0 of 0 pchannels and the run was green."""
    from dag_helpers import wal_ingest

    wal_ingest(meta, store, airflow_env, "w1", 50)
    run = load_dag("wal_flush").test(run_conf={"engine": "inline", "flush_all": True},
                                     mark_success_pattern=r"^flush_inline$")
    states = task_states(run)
    assert states["summary"] == "success", states
    assert states["run_note"] == "failed" and run.state == "failed", states
    assert list(meta.segments.list(meta.catalog.get_by_name("w1").collection_id)) == []   # nothing flushed


def test_a_drop_whose_finish_was_marked_instead_of_run_ends_failed(airflow_env, meta, store):
    """wait_for_flush (the default) and the wait and finish marked success: the collection is still
    Dropping, the note said "... Dropped, files wait for GC" and the run was green."""
    from dag_helpers import wal_ingest

    coll = wal_ingest(meta, store, airflow_env, "d1", 20, shards=1)
    run = load_dag("drop_collection").test(run_conf={"collection": "d1"},
                                           mark_success_pattern=r"^(wait_released|finish)$")
    states = task_states(run)
    assert states["summary"] == "success", states
    assert meta.catalog.get(coll.collection_id).state == "Dropping"
    assert states["run_note"] == "failed" and run.state == "failed", states


def test_a_snapshot_schedule_whose_milvus_sources_were_marked_instead_of_run_ends_failed(airflow_env, meta, store):
    run = load_dag("snapshot_schedule").test(run_conf={}, mark_success_pattern=r"^milvus_sources$")
    states = task_states(run)
    assert states["run_policies"] == "success", states
    assert states["run_note"] == "failed" and run.state == "failed", states
    run = load_dag("snapshot_schedule").test(run_conf={})
    assert run.state == "success", task_states(run)


def test_a_snapshot_create_whose_write_and_wait_were_marked_instead_of_run_ends_failed(airflow_env, meta, store):
    """The manifests never written, the snapshot still PENDING: the report read it from etcd and
    the note said "snapshot demo/s: PENDING, ..." on a green run."""
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=40, dim=4))
    run = load_dag("snapshot_create").test(run_conf={"collection": "demo", "name": "s", "engine": "inline"},
                                           mark_success_pattern=r"^(write_inline|wait_committed)$")
    states = task_states(run)
    assert states["report"] == "success", states
    assert states["run_note"] == "failed" and run.state == "failed", states



def test_a_restore_note_with_a_result_but_an_unfinished_job_is_failed():
    """copy_segment_job has no compare: a verify that passed on a partly copied target (its copy
    steps marked success by hand) left a result beside a job still Executing; the note read
    as a finished restore. (Driven through dag.test() the verify group completed the job:
    the rule is checked here on the note.)"""
    from seglake.runinfo import restore_note

    job = {"job_id": 7, "state": "Executing", "engine": "inline", "total_rows": 80,
           "progress": {"copied_segments": 1, "total_segments": 2, "copied_bytes": 10}}
    note = restore_note({"collection": "demo", "snapshot": "s1", "target": "t1"}, {"files_checked": 1}, job)
    assert note.startswith("FAILED: restore demo/s1 -> t1: copy job 7 is Executing, not Completed"), note
    assert not restore_note({"collection": "demo", "snapshot": "s1", "target": "t1"}, {"files_checked": 1},
                            {**job, "state": "Completed"}).startswith("FAILED")


def _pitr_source(meta, store, settings):
    """A WAL collection with its window on, a snapshot, then changes after it: an instant t
    whose restore needs the log replayed."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "pitr"))
    from pitr_model import SCHEMA, flush_all, rows

    from seglake.lifecycle import pitr
    from seglake.wal.client import WalClient

    with WalClient(meta, store, settings) as c:
        coll = c.create_collection("src", SCHEMA, shards=2)
        pitr.set_window(meta, "src", "1h")
        c.insert("src", rows(range(1, 50), 1.0))
        flush_all(meta, store, settings, coll)
        snapshot.create(meta, store, "src", "s1")
        c.delete("src", list(range(1, 10)))
        t = meta.tso.now()
        c.delete("src", list(range(10, 20)))
    return t


@pytest.mark.parametrize("pattern", [r"^replay$", r"^(replay|verify\..*)$"])
def test_a_restore_to_a_time_whose_replay_was_marked_instead_of_run_ends_failed(airflow_env, meta, store, settings,
                                                                              pattern, capfd):
    """The replay marked success by hand: the target stays Importing (unusable), but the
    compare task read the replay's account from etcd and the note said "... replayed: 0 rows"
    on a green run."""
    t = _pitr_source(meta, store, settings)
    run = load_dag("snapshot_restore").test(run_conf={"collection": "src", "as_of": str(t), "target": "src_t",
                                                      "engine": "inline"}, mark_success_pattern=pattern)
    states = task_states(run)
    assert states["compare"] == "success" and meta.catalog.get_by_name("src_t").state == "Importing", states
    assert states["run_note"] == "failed" and run.state == "failed", states
    out, err = capfd.readouterr()
    assert "FAILED: restore src/None -> src_t: copy job Completed but the replay stopped at" in out + err


def test_an_undrop_whose_replay_was_marked_instead_of_run_ends_failed(airflow_env, meta, store, settings, capfd):
    from test_undrop_and_database_dags import _write_and_drop

    _write_and_drop(meta, store, settings)
    run = load_dag("collection_undrop").test(run_conf={"collection": "src", "target": "back", "engine": "inline"},
                                             mark_success_pattern=r"^replay$")
    states = task_states(run)
    assert states["summary"] == "success" and meta.catalog.get_by_name("back").state == "Importing", states
    assert states["run_note"] == "failed" and run.state == "failed", states
    out, err = capfd.readouterr()
    assert "copy job Completed but the replay stopped at" in out + err
