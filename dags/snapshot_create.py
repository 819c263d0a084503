"""
### Create a snapshot

Two-phase snapshot of a collection: a **PENDING** record (the name is reserved, GC skips
the collection), then the manifests (Avro, many segments per file) and the metadata JSON
are written, then the record is **COMMITTED** in one guarded etcd transaction.

* `engine=spark` writes the manifests with a SparkSubmit job (`spark/jobs/write_manifests.py`),
  `engine=inline` in the task, `engine=auto` picks inline below `snapshot_inline_max_segments`.
* `wait_committed` runs beside the write from the start: it waits until the record is
  COMMITTED, fails with the reason once the write gave up, and meanwhile refreshes the
  record's heartbeat (so does every writer), so garbage collection never reclaims a
  create that is only waiting, e.g. for a slot in the Spark pool. Only a create whose run
  stopped beating for `snapshot_pending_timeout` is reclaimed.
* Every write attempt writes its own manifests; if two attempts race (a retry and a
  zombie), exactly one commits and the other fails with that reason.
* Re-running a failed run resumes its own PENDING record; another run with the same
  name is refused.

REST: `conf = {"collection": "demo", "name": "nightly", "description": "", "ttl_hours": 0, "engine": "auto"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import PokeReturnValue, dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

BEGIN = "ti.xcom_pull(task_ids='begin')"


@dag(
    dag_id="snapshot_create",
    dag_display_name="Snapshot: create",
    description="Two-phase snapshot of a collection (PENDING -> COMMITTED)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_create"),
)
def snapshot_create():
    @task
    def begin(params: dict, run_id: str | None = None) -> dict:
        from seglake.lifecycle import snapshot
        from seglake.runners import choose
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            rec = snapshot.begin(hook.meta, params["collection"], params["name"], params["description"] or "",
                                 db=params["db"], ttl=float(params["ttl_hours"]) * 3600 or None,
                                 owner=run_id or "")
        n = hook.meta.kv.count(hook.meta.keys.segments_prefix(rec.collection_id))
        engine = choose("snapshot", params["engine"], n, hook.settings)
        return {"collection_id": rec.collection_id, "name": rec.name, "snapshot_id": rec.snapshot_id,
                "state": rec.state, "engine": engine, "segment_records": n}

    @task
    def write_inline(begun: dict) -> dict:
        from seglake.lifecycle import snapshot
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        rec, _ = hook.meta.snapshots.get(begun["collection_id"], begun["name"])
        if rec.snapshot_id != begun["snapshot_id"]:
            raise RuntimeError(f"snapshot {begun['name']!r} is now id {rec.snapshot_id}, not {begun['snapshot_id']}")
        if rec.state != "COMMITTED":
            rec = snapshot.write_all(hook.meta, hook.store, rec, hook.settings.segments_per_manifest)
        return {"state": rec.state, "segments": rec.segments}

    write_spark = spark_submit_task("write_spark", "write_manifests", [
        "--collection-id", "{{ %s['collection_id'] }}" % BEGIN,
        "--name", "{{ %s['name'] }}" % BEGIN,
        "--snapshot-id", "{{ %s['snapshot_id'] }}" % BEGIN,
    ])

    @task(trigger_rule="one_failed")
    def give_up(begun: dict) -> None:
        """The write failed for good (retries spent): say so on the record, so the wait
        fails now and the heartbeat stops (GC reclaims the files after the timeout).
        Skipped when nothing was begun (the conf was refused before any change)."""
        from airflow.sdk.exceptions import AirflowSkipException

        from seglake.lifecycle import snapshot

        if not begun:
            raise AirflowSkipException("no snapshot was begun: nothing to give up")
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        rec = hook.meta.snapshots.find(begun["collection_id"], begun["name"])
        if rec is not None and rec.snapshot_id == begun["snapshot_id"]:
            snapshot.record_failure(hook.meta, rec, rec.error or "the write task failed", final=True)

    @task.sensor(task_id="wait_committed", mode="reschedule", poke_interval=10, timeout=3 * 3600)
    def wait_committed(begun: dict, run_id: str | None = None) -> PokeReturnValue:
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle import snapshot
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        try:
            status, message = snapshot.keep_alive_status(hook.meta, begun["collection_id"], begun["name"],
                                                         begun["snapshot_id"], by=f"dag run {run_id}")
        finally:
            hook.close()
        print(message)
        if status == "error":
            raise AirflowFailException(message)
        return PokeReturnValue(is_done=status == "success")

    @task
    def report(begun: dict, params: dict) -> dict:
        from seglake.lifecycle import snapshot
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        d = snapshot.describe(hook.meta, hook.store, params["collection"], params["name"], db=params["db"],
                              collection_id=begun["collection_id"])
        print(f"snapshot {d['name']!r} of {d['collection']!r}: {d['state']}, {d['segments']} segments, "
              f"{d['rows']} rows, {d['bytes']} bytes, {len(d.get('manifests', []))} manifests at {d['location']}")
        return {k: d[k] for k in ("name", "collection", "state", "segments", "rows", "bytes", "location")}

    begun = begin()
    check_conf("snapshot_create") >> begun
    inline = write_inline(begun)
    engine_step(begun, inline, write_spark)
    [inline, write_spark] >> give_up(begun)
    wait_committed(begun) >> report(begun)
    run_note("snapshot_create")


snapshot_create()
