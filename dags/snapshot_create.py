"""
### Create a snapshot

Two-phase snapshot of a collection: a **PENDING** record (the name is reserved, GC skips
the collection), then the manifests (Avro, many segments per file) and the metadata JSON
are written, then the record is **COMMITTED** in one guarded etcd transaction.

* `engine=spark` writes the manifests with a SparkSubmit job (`spark/jobs/write_manifests.py`),
  `engine=inline` in the task, `engine=auto` picks inline below `snapshot_inline_max_segments`.
* A sensor waits until the record is COMMITTED, or fails with the recorded reason.
* Re-running a failed run resumes its own PENDING record; another run with the same
  name is refused.

REST: `conf = {"collection": "demo", "name": "nightly", "description": "", "ttl_hours": 0, "engine": "auto"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow import spark_job
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.operators.spark import SeglakeSparkSubmitOperator
from seglake_airflow.sensors.state import SeglakeStateSensor

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
        from seglake_airflow.engine_choice import choose
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            rec = snapshot.begin(hook.meta, params["collection"], params["name"], params["description"] or "",
                                 db=params["db"], ttl=float(params["ttl_hours"]) * 3600 or None,
                                 owner=run_id or "")
        n = hook.meta.kv.count(hook.meta.keys.segments_prefix(rec.collection_id))
        engine = choose(params["engine"], n, hook.settings.snapshot_inline_max_segments)
        return {"collection_id": rec.collection_id, "name": rec.name, "snapshot_id": rec.snapshot_id,
                "state": rec.state, "engine": engine, "segment_records": n}

    @task.branch
    def choose_engine(begun: dict) -> str:
        return "write_spark" if begun["engine"] == "spark" else "write_inline"

    @task
    def write_inline(begun: dict) -> dict:
        from seglake.lifecycle import snapshot
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        rec, _ = hook.meta.snapshots.get(begun["collection_id"], begun["name"])
        if rec.state != "COMMITTED":
            rec = snapshot.write_all(hook.meta, hook.store, rec, hook.settings.segments_per_manifest)
        return {"state": rec.state, "segments": rec.segments}

    write_spark = SeglakeSparkSubmitOperator(
        task_id="write_spark",
        application=spark_job("write_manifests"),
        name="seglake-write-manifests",
        pool="seglake_spark",
        application_args=["--collection-id", "{{ %s['collection_id'] }}" % BEGIN,
                          "--name", "{{ %s['name'] }}" % BEGIN],
    )

    wait = SeglakeStateSensor(
        task_id="wait_committed",
        kind="snapshot_state",
        check_kwargs={"collection": "{{ params.collection }}", "snapshot": "{{ params.name }}",
                      "db": "{{ params.db }}", "target_state": "COMMITTED"},
        poke_interval=5,
        timeout=3 * 3600,
        trigger_rule="none_failed_min_one_success",
    )

    @task
    def report(params: dict) -> dict:
        from seglake.lifecycle import snapshot
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        d = snapshot.describe(hook.meta, hook.store, params["collection"], params["name"], db=params["db"])
        print(f"snapshot {d['name']!r} of {d['collection']!r}: {d['state']}, {d['segments']} segments, "
              f"{d['rows']} rows, {d['bytes']} bytes, {len(d.get('manifests', []))} manifests at {d['location']}")
        return {k: d[k] for k in ("name", "collection", "state", "segments", "rows", "bytes", "location")}

    begun = begin()
    check_conf("snapshot_create") >> begun
    inline = write_inline(begun)
    choose_engine(begun) >> [inline, write_spark]
    [inline, write_spark] >> wait >> report()


snapshot_create()
