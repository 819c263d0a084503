"""
### Restore a Milvus capture into a Milvus server

Restores a bundle of kind `milvus` (a capture of a Milvus collection in the backup target),
or a bundle exported from a seglake collection (its Parquet segments written as Milvus binlogs
at staging), into the Milvus server of the Airflow connection `milvus_conn_id`, under the new name
`name`: the collection is created with the bundle's schema, shard count and partitions
through Milvus's public API, each segment's binlogs are staged in the server's bucket
(under `seglake-restore/`) and imported by Milvus's bulk insert in backup mode (one import
per partition's segments), then the
recorded index is built, the collection loaded and verified: `count(*)` and a sample of
primary keys with all their values equal the bundle's visible rows.

The connection: host and port of the Milvus proxy, login/password if Milvus has auth;
extra `{"bucket": ..., "s3_endpoint": ..., "s3_region": ..., "s3_access_key": ...,
"s3_secret_key": ...}` (the bucket Milvus reads). Secrets stay in the connection.

Resumable: every step is recorded in seglake's etcd; a retried or re-run task continues
where the killed one stopped and never imports a segment twice.

REST: `conf = {"collection": "demo", "bundle": "nightly", "name": "demo_restored",
"milvus_conn_id": "milvus_default"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


def _target(conn_id: str):
    from airflow.sdk import BaseHook

    from seglake.milvus.restore import MilvusTarget

    from seglake_airflow.hooks.extras import checked_extra

    c = BaseHook.get_connection(conn_id)
    x = checked_extra(conn_id, c.extra_dejson, ("bucket", "s3_endpoint", "s3_region", "s3_access_key",
                                                 "s3_secret_key"))
    return MilvusTarget(address=f"{c.host}:{c.port or 19530}", bucket=x.get("bucket", ""),
                        s3_endpoint=x.get("s3_endpoint", ""), s3_region=x.get("s3_region", "us-east-1"),
                        s3_access_key=x.get("s3_access_key", ""), s3_secret_key=x.get("s3_secret_key", ""),
                        user=c.login or "", password=c.password or "")


def _request(params: dict):
    from seglake.milvus.restore import Request
    return Request(db=params["db"], collection=params["collection"], bundle=params["bundle"], name=params["name"],
                   sample=params["sample"])


@dag(
    dag_id="milvus_restore",
    dag_display_name="Milvus: restore a capture into a Milvus server",
    description="Create, bulk-insert (backup mode), index, load and verify a Milvus collection from a bundle",
    schedule=None,
    catchup=False,
    max_active_runs=2,
    tags=["seglake", "milvus", "backup", "restore"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("milvus_restore"),
)
def milvus_restore():
    @task
    def check(params: dict) -> dict:
        """Nothing is written on either side before this passes; the plan is small (XCom)."""
        from seglake.milvus import restore
        from seglake.milvus.restore import MilvusRestoreError
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        meta = hook.meta
        with fail_fast(MilvusRestoreError):
            plan = restore.check(meta.kv, meta.keys, hook.backup_target(params["backup_uri"]),
                                 _target(params["milvus_conn_id"]), _request(params))
        print(f"restore {plan['rid']}: {params['db']}.{params['collection']}/{params['bundle']} -> {params['name']}")
        return plan

    @task
    def restore_and_verify(params: dict, plan: dict) -> dict:
        """Create, stage + import each unit of a partition's segments (a bounded wait on each import), index,
        load, verify; resumes from etcd on a retry."""
        from seglake.milvus import restore
        from seglake.milvus.restore import MilvusRestoreError
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        meta = hook.meta
        with fail_fast(MilvusRestoreError):
            report = restore.run(meta.kv, meta.keys, hook.backup_target(params["backup_uri"]),
                                 _target(params["milvus_conn_id"]), _request(params), plan=plan)
        print({k: v for k, v in report.items() if k != "problems"})
        return {k: report.get(k) for k in ("restore_id", "name", "state", "segments", "imports", "count", "visible_rows",
                                           "sampled", "ok", "seconds")}

    plan = check()
    check_conf("milvus_restore") >> plan
    restore_and_verify(plan=plan)
    run_note("milvus_restore")


milvus_restore()
