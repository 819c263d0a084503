"""
### Capture Milvus collections into bundles (a backup of a running Milvus)

Reads a Milvus's collections -- its etcd (range reads at one revision) and its bucket
(GET/LIST only): **nothing is written on the Milvus side** -- and writes one seglake
bundle per collection into the **backup target** (a local directory or
`s3://bucket/prefix`; the `seglake_backup` connection), in the bundle format
(docs/BUNDLE.md, docs/MILVUS_BUNDLE.md): schema, partitions, shards and vchannels, index
definitions, and every Flushed segment's insert logs (row ids and timestamps included),
delete logs, stats logs and index files, each checked by content.

* **Consistent**: Milvus's flushed-only view at one etcd revision. Flush the collections
  through Milvus's API first to include every write acknowledged before the flush.
* **Incremental**: a file an earlier bundle of the collection holds is not copied again.
* **Resumable**: a re-run after a kill reuses what is in the target and commits.
* **Throttled**: `max_mib_per_second` / `max_requests_per_second`.
* `engine`: `inline` (a thread pool in the task), `spark` (the files spread over the
  executors: `spark/jobs/milvus_capture.py`), `auto` (Spark from `inline_threshold_bytes`).

The Milvus bucket's S3 credentials come from the `seglake_milvus` connection (login,
password, extra `endpoint_url`, `region_name`), never from the conf.

REST: `conf = {"collections": "c1,c2", "milvus_etcd": "etcd:2379", "milvus_root": "by-dev",
"bucket": "milvus-bucket", "bucket_root": "files", "bundle": "nightly_1"}`.
Check with `snapshot_verify` (collection = the Milvus collection, bundle = the bundle).
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

RESOLVE = "ti.xcom_pull(task_ids='resolve')"


@dag(
    dag_id="milvus_backup",
    dag_display_name="Milvus: capture (backup)",
    description="Capture Milvus collections into bundles of a backup target (read-only on Milvus)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "milvus", "backup"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("milvus_backup"),
)
def milvus_backup():
    @task
    def resolve(params: dict) -> dict:
        """Plan (read-only on Milvus: names resolved, objects listed) and pick the engine."""
        from seglake.milvus import capture as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            req = engine.check_request(params["milvus_etcd"], params["milvus_root"], params["bucket"],
                                       params["bucket_root"], params["collections"] or "", params["bundle"],
                                       db=params["db"], all_collections=params["all_collections"])
            return engine.resolve(req, hook.settings, params["engine"], say=print)

    @task
    def capture_inline(params: dict, resolved: dict) -> list:
        from seglake.milvus import capture as engine
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            return engine.run_request(resolved["request"], hook.settings, hook.backup_target(params["backup_uri"]),
                                      meta=hook.meta, max_bytes_per_second=params["max_mib_per_second"] * (1 << 20),
                                      max_requests_per_second=params["max_requests_per_second"], say=print)

    capture_spark = spark_submit_task("capture_spark", "milvus_capture", [
        "--milvus-etcd={{ params.milvus_etcd }}", "--milvus-root={{ params.milvus_root }}",
        "--bucket={{ params.bucket }}", "--bucket-root={{ params.bucket_root }}", "--bundle={{ params.bundle }}",
        "--db={{ params.db }}", "--collections={{ %s['request']['collections'] | join(',') }}" % RESOLVE,
        "--backup-uri={{ params.backup_uri or '' }}", "--max-mib-per-second={{ params.max_mib_per_second }}",
        "--max-requests-per-second={{ params.max_requests_per_second }}",
    ])

    @task(trigger_rule="none_failed_min_one_success")
    def summary(params: dict, resolved: dict, ti=None) -> list:
        """Every collection's bundle, read back committed from the target (either engine)."""
        from seglake.milvus import capture as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        inline = ti.xcom_pull(task_ids="capture_inline") if ti is not None else None
        hook = SeglakeHook()   # recorded in seglake's etcd (the operator page lists them), either engine
        return engine.committed(hook.backup_target(params["backup_uri"]), resolved["request"], inline, meta=hook.meta)

    resolved = resolve()
    check_conf("milvus_backup") >> resolved
    inline = capture_inline(resolved=resolved)
    engine_step(resolved, inline, capture_spark)
    [inline, capture_spark] >> summary(resolved=resolved)
    run_note("milvus_backup")


milvus_backup()
