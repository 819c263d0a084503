"""The restore's wait through Airflow: the sensor's poke (reschedule mode) and the trigger's
poll (deferrable) give the same answers, and neither reads a copy-task record (the job
record and two count-only reads per poll, whatever the number of tasks)."""

import asyncio

import pytest

from seglake.dev import demo
from seglake.lifecycle import copyjob, restore, snapshot
from seglake.meta.kv import KV
from seglake.storage import layout

pytestmark = pytest.mark.airflow


@pytest.fixture
def job(airflow_env, meta, store):
    demo.seed(meta, store, demo.SeedParams(partitions=1, segments=6, rows=10, dim=4))
    snapshot.create(meta, store, "demo", "s1")
    job_id = restore.restore(meta, store, "demo", "s1", "t1")
    copyjob.plan(meta, job_id, 1)   # 6 tasks
    return job_id


@pytest.fixture
def task_reads(meta, monkeypatch):
    """How many copy-task records any KV in this process reads."""
    seen = []
    prefix = meta.keys.copy_tasks_prefix(0).rsplit("/", 2)[0] + "/"   # {root}/copy/tasks/
    orig_range, orig_get = KV.range, KV.get

    def range_(kv, p, *a, **k):
        for item in orig_range(kv, p, *a, **k):
            if item.key.startswith(prefix):
                seen.append(item.key)
            yield item

    def get(kv, key, *a, **k):
        if key.startswith(prefix):
            seen.append(key)
        return orig_get(kv, key, *a, **k)
    monkeypatch.setattr(KV, "range", range_)
    monkeypatch.setattr(KV, "get", get)
    return seen


def _both(job_id):
    from seglake_airflow.sensors.state import SeglakeStateSensor
    from seglake_airflow.triggers.state import SeglakeStateTrigger

    sensor = SeglakeStateSensor(task_id="wait", kind="copy_job_done", check_kwargs={"job_id": job_id})
    poked = sensor.poke({})
    trigger = SeglakeStateTrigger("copy_job_done", {"job_id": job_id}, poll_interval=0.05)

    async def first_event():
        gen = trigger.run()
        try:
            return await asyncio.wait_for(gen.__anext__(), 0.5)
        except asyncio.TimeoutError:
            return None
        finally:
            await gen.aclose()
    event = asyncio.run(first_event())
    return poked, event


def test_sensor_and_trigger_agree_and_read_no_task_record(job, meta, store, task_reads):
    for t in range(5):
        copyjob.copy_task(meta, store, job, t)
    task_reads.clear()
    poked, event = _both(job)
    assert poked is False and event is None          # 5 of 6 Completed: both still wait
    assert task_reads == []
    copyjob.copy_task(meta, store, job, 5)
    task_reads.clear()
    poked, event = _both(job)
    assert poked is True and event.payload == {"status": "success", "message": f"copy job {job}: all 6 tasks completed"}
    assert task_reads == []


def test_one_failed_task_ends_both_waits_at_once(job, meta, store, task_reads):
    task, _ = meta.copyjobs.get_task(job, 2)
    m = task.mappings[0]
    src = meta.segments.get(m.source_collection, m.source_partition, m.source_segment)
    store.delete_many([next(iter(layout.segment_files(src))).key])
    copyjob.copy_task(meta, store, job, 2)           # Failed: its source is gone; 5 tasks still Pending
    task_reads.clear()
    poked, event = _both(job)
    assert poked is True and event.payload == {"status": "success", "message": f"copy job {job} has a failed task"}
    assert task_reads == []
