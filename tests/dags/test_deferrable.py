"""Deferrable is chosen per run: a `deferrable` Param on the restore and copy-job DAGs,
rendered into the sensor, and when unset the worker's `[operators] default_deferrable`
read when the task RUNS (not when the file was parsed). The trigger's log is the wait's
progress, without a settings dump per poll."""

import asyncio
import logging

import pytest
from dag_helpers import load_dag

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.meta.copyjobs import TASK_IN_PROGRESS

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize("dag_id", ["snapshot_restore", "copy_segment_job"])
def test_the_wait_takes_deferrable_from_the_run_not_from_parse_time(airflow_home, monkeypatch, dag_id):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")   # at parse time
    dag = load_dag(dag_id)
    wait = dag.get_task("copy_job.wait")
    assert wait.deferrable == "{{ params.deferrable }}" and "deferrable" in wait.template_fields
    p = dag.params.get_param("deferrable")
    # a dropdown of null / true / false in the form (a nullable boolean switch showed "off" and sent null)
    assert p.value is None and p.schema["enum"] == [None, True, False] and "null" in p.schema["values_display"]


def test_resolve_deferrable_reads_the_config_when_the_task_runs(monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException
    from seglake_airflow.sensors.state import resolve_deferrable

    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert resolve_deferrable(None) is False and resolve_deferrable("None") is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert resolve_deferrable("") is True and resolve_deferrable("None") is True
    assert resolve_deferrable("False") is False and resolve_deferrable(True) is True
    for bad in ("yes", "1", 1, "{{ params.deferrable }}"):
        with pytest.raises(AirflowFailException, match="deferrable must be"):
            resolve_deferrable(bad)


def test_bad_deferrable_params_are_refused(airflow_home):
    from airflow.sdk.definitions.param import ParamsDict, ParamValidationError

    params = load_dag("copy_segment_job").params
    for bad in ("true", 1, "yes"):
        p = ParamsDict(params)
        with pytest.raises(ParamValidationError, match="deferrable"):
            p.update({"job_id": 1, "deferrable": bad})
            p.validate()


def test_the_trigger_logs_progress_changes_not_settings(airflow_env, meta, store):
    from seglake_airflow.triggers.state import SeglakeStateTrigger

    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=2, rows=20, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    job_id = restore.restore(meta, store, "demo", "s1", "t1")
    copyjob.plan(meta, job_id, 1)
    task, kv = meta.copyjobs.get_task(job_id, 0)   # an outside runner owns task 0
    meta.copyjobs.update_task_kv(kv, task.replace(state=TASK_IN_PROGRESS, attempt=1))
    trigger = SeglakeStateTrigger("copy_job_done", {"job_id": job_id}, poll_interval=0.05)

    async def run():
        gen = trigger.run()
        nxt = asyncio.ensure_future(gen.__anext__())
        await asyncio.sleep(0.6)                                # ~12 polls while nothing changes
        assert not nxt.done()
        await asyncio.to_thread(copyjob.run_inline, meta, store, job_id)   # the rest is copied
        return await asyncio.wait_for(nxt, 30)

    text = []

    class Recorder(logging.Handler):
        def emit(self, record):
            text.append(record.getMessage())

    trigger._log = logging.getLogger("test.trigger")   # structlog in Airflow; a stdlib logger here
    trigger._log.setLevel(logging.INFO)
    trigger._log.addHandler(Recorder())
    hook_log = logging.getLogger("seglake_airflow.hooks.engine")
    hook_log.addHandler(Recorder())
    hook_log.setLevel(logging.INFO)                   # the settings line would be recorded too
    event = asyncio.run(run())
    assert event.payload["status"] == "success", event.payload
    assert not [t for t in text if "seglake settings" in t], text
    waiting = [t for t in text if "tasks completed" in t]
    assert waiting and len(waiting) <= 3, text                  # once per change, not per poll
    assert any("success" in t and f"copy job {job_id}" in t for t in text), text
