"""The gc DAG through dag.test() against the real stack, on both engines."""

import os
import time
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import gc, snapshot

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow
SMALL = demo.SeedParams(partitions=2, segments=2, rows=100, dim=4)





def _seed_with_orphans(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    snapshot.create(meta, store, "demo", "s")
    orphans = [f"insert_log/{coll.collection_id}/9/{i}/100/1" for i in range(3)] + ["index_files/1/1/9/9/x"]
    for k in orphans:
        store.put(k, b"orphan")
        t = time.time() - 3 * 86400
        os.utime(os.path.join(store.uri, k), (t, t))
    young = f"delta_log/{coll.collection_id}/9/9/1"
    store.put(young, b"young")
    return coll, orphans, young


@pytest.mark.parametrize("engine", ["inline", pytest.param("spark", marks=pytest.mark.spark)])
def test_gc_dag_dry_run_then_real_run(airflow_env, meta, store, engine):
    """The dry run on the inline engine only: its mark is the same task as a real run's
    (the Spark mark's dry run adds one spark-submit and nothing the real run lacks)."""
    coll, orphans, young = _seed_with_orphans(meta, store)
    referenced = gc.load_references(meta, store).files
    dag = load_dag("gc")
    if engine == "inline":
        run = dag.test(run_conf={"dry_run": True, "engine": engine})
        states = task_states(run)
        assert run.state == "success", states
        assert states[f"mark_{engine}"] == "success" and states["sweep"] == "skipped"
        assert states["records"] == "skipped" and states["summary"] == "success"
        assert all(store.exists(k) for k in orphans)
        dry = gc.latest_summary(store)
        assert dry["candidates"] == 4 and dry["swept"] is None

    run = dag.test(run_conf={"dry_run": False, "engine": engine})
    assert task_states(run)[f"mark_{engine}"] == "success"
    assert run.state == "success", task_states(run)
    assert not any(store.exists(k) for k in orphans)
    assert store.exists(young) and all(store.exists(k) for k in referenced)
    assert gc.latest_summary(store)["swept"]["deleted"] == 4


def test_gc_dag_refuses_a_tolerance_below_the_floor(airflow_env, meta, store, capfd):
    """dag.test() does not pass through the trigger route (HTTP 400, test_conf_rest): the
    first task refuses, before prepare, and the note says why."""
    coll, orphans, _ = _seed_with_orphans(meta, store)
    run = load_dag("gc").test(run_conf={"dry_run": False, "missing_tolerance_hours": 0.1})
    states = task_states(run)
    assert run.state == "failed" and states["check_conf"] == "failed" and states["prepare"] == "upstream_failed"
    assert all(store.exists(k) for k in orphans)
    assert list(store.list("_gc")) == []
    note = _note_line(capfd)
    assert note.startswith("FAILED: gc did not finish, nothing was deleted unless the sweep ran: task check_conf "
                           "failed: gc: refused conf before any change: conf key 'missing_tolerance_hours' "
                           "(Orphan tolerance (hours)): 0.1 is below the GC floor of 1 hour"), note
    assert "see the task logs" not in note and "Traceback" not in note


def test_gc_dag_bad_conf(airflow_env, meta):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="dry_run"):
        load_dag("gc").test(run_conf={"dry_run": "maybe"})
    with pytest.raises(ParamValidationError, match="collection"):
        load_dag("gc").test(run_conf={"collection": "no-such name"})


def _note_line(capfd) -> str:
    out = capfd.readouterr()
    lines = [ln for ln in (out.out + out.err).splitlines() if "run note: " in ln]
    assert lines, "no run note printed"
    return lines[-1].split("run note: ", 1)[1].strip()


def test_a_manual_gc_run_is_a_dry_run_unless_turned_off(airflow_env, meta, store, capfd):
    """The form's default (no conf at all): marks, deletes nothing, says so in the note."""
    coll, orphans, _ = _seed_with_orphans(meta, store)
    run = load_dag("gc").test(run_conf={})
    states = task_states(run)
    assert run.state == "success", states
    assert states["sweep"] == "skipped" and states["records"] == "skipped"
    assert all(store.exists(k) for k in orphans)
    summary = gc.latest_summary(store)
    assert summary["dry_run"] is True and summary["candidates"] == 4 and summary["swept"] is None
    assert _note_line(capfd).startswith("gc DRY RUN (nothing deleted): a real run would delete 4 files")


def _run_type(monkeypatch, run_type: str) -> None:
    """dag.test() creates a manual run; this makes it another type (run_type only: what
    the scheduler or a backfill creates), so the real DAG runs as that type."""
    from airflow.serialization.definitions.dag import SerializedDAG
    from airflow.utils.types import DagRunType

    real = SerializedDAG.create_dagrun

    def create_dagrun(self, *args, **kwargs):
        kwargs["run_type"] = DagRunType(run_type)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SerializedDAG, "create_dagrun", create_dagrun)


@pytest.fixture
def as_scheduled(monkeypatch):
    _run_type(monkeypatch, "scheduled")


def test_a_backfill_gc_run_is_refused_even_with_an_execute_record(airflow_env, meta, store, monkeypatch, capfd):
    """The backstop of the API's 400 (a backfill made e.g. by `airflow backfill create`):
    the recorded --execute settings are never replayed once per past interval."""
    from seglake.contract import GC_BACKFILL_REFUSED

    coll, orphans, young = _seed_with_orphans(meta, store)
    gc.set_schedule(meta, {"dry_run": False, "engine": "inline"}, floor=3600, by="ops")
    _run_type(monkeypatch, "backfill")
    run = load_dag("gc").test()
    states = task_states(run)
    assert run.run_type == "backfill"
    assert run.state == "failed" and states["check_conf"] == "failed", states
    assert all(s in ("upstream_failed", None) for t, s in states.items() if t not in ("check_conf", "run_note"))
    assert all(store.exists(k) for k in orphans) and list(store.list("_gc")) == []
    note = _note_line(capfd)
    assert note.startswith("FAILED") and GC_BACKFILL_REFUSED in note, note
    gc.clear_schedule(meta)


def test_a_scheduled_gc_run_is_refused_until_an_operator_sets_its_settings(airflow_env, meta, store, as_scheduled,
                                                                           capfd):
    coll, orphans, young = _seed_with_orphans(meta, store)
    gc.clear_schedule(meta)
    run = load_dag("gc").test()
    states = task_states(run)
    assert run.run_type == "scheduled"
    assert run.state == "failed" and states["check_conf"] == "failed", states
    assert all(s in ("upstream_failed", None) for t, s in states.items() if t not in ("check_conf", "run_note"))
    assert all(store.exists(k) for k in orphans) and list(store.list("_gc")) == []
    note = _note_line(capfd)
    assert "a scheduled run has no operator settings, so it was refused and nothing was deleted; set them with " \
           "`seglake gc schedule set --dry-run` (or `--execute` for a real GC)" in note, note
    assert note.startswith("FAILED"), note

    # the operator records a real run: the scheduled run deletes (the form's dry-run default does not apply)
    gc.set_schedule(meta, {"dry_run": False, "engine": "inline"}, floor=3600, by="ops")
    run = load_dag("gc").test(conn_file_path=None)
    assert run.state == "success", task_states(run)
    assert not any(store.exists(k) for k in orphans) and store.exists(young)
    text = capfd.readouterr()
    text = text.out + text.err
    assert "gc options (scheduled run; the settings `seglake gc schedule set` recorded at" in text
    assert "by ops" in text and "REAL run" in text


def test_the_schedule_record_is_checked_before_it_is_written(airflow_env, meta):
    from seglake.errors import NotFound, ValidationError

    gc.clear_schedule(meta)
    with pytest.raises(ValidationError, match="below the GC floor"):
        gc.set_schedule(meta, {"dry_run": False, "missing_tolerance_hours": 0.5}, floor=3600)
    with pytest.raises(ValidationError, match="did you mean 'dry_run'"):
        gc.set_schedule(meta, {"dryrun": False}, floor=3600)
    with pytest.raises(NotFound):
        gc.set_schedule(meta, {"dry_run": True, "collection": "nope"}, floor=3600)
    assert gc.get_schedule(meta) is None
    rec = gc.set_schedule(meta, {"dry_run": True, "missing_tolerance_hours": 0.5, "force": True}, floor=3600)
    assert gc.get_schedule(meta) == rec and rec["conf"]["force"] is True
    assert gc.clear_schedule(meta) is True and gc.clear_schedule(meta) is False
