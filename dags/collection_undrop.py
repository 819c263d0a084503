"""
### Undrop a collection

Bring a collection dropped inside its point-in-time window back as a NEW collection
`target`, as it was just before the drop (`seglake collections undrop NAME --as NEW`):

1. **undrop**: plans it, refused before anything is created: the latest COMMITTED snapshot
   before the drop (or the collection's creation) and its log up to each vchannel's
   DropCollection, from this store (its window must have been on and the drop inside it).
   With `from_target` and when this store cannot give it (its record, log or files
   reclaimed or lost): from the backup target alone, its latest bundle (or `bundle`) and
   the WAL archive up to the drop, the drop's instant read from the archive. Refused, saying why for both,
   when neither can. Sets up the target (Importing) and its copy job.
2. **copy_job**: the base snapshot or bundle copied (as in `snapshot_restore`).
3. **replay**: the log replayed into the target up to the drop; only then is it usable.
4. **verify**, **summary**: every file of the target; what the undrop used (snapshot or
   bundle, log messages and bytes, rows and deletes replayed) -- the run note says it.

A re-run resumes the same undrop. REST: `conf = {"collection": "demo", "target": "demo_back"}`,
or `{"collection": "demo", "target": "demo_back", "from_target": true, "backup_uri": null}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.taskgroups import copy_job_group, replay_step, verify_collection_group


@dag(
    dag_id="collection_undrop",
    dag_display_name="Collection: undrop",
    description="Bring a dropped collection back as a new collection, as it was just before the drop",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "restore"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("collection_undrop"),
)
def collection_undrop():
    @task
    def undrop(params: dict, run_id: str | None = None) -> dict:
        from seglake.lifecycle import pitr
        from seglake.lifecycle import restore as restores
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        began = None
        if run_id and not params["from_target"]:
            # the dropped collection this run began on, leased: a clear of this run (same conf, by name)
            # undrops it again or is refused, never a later namesake dropped since (atk s23 F6; drop's twin
            # is atk s20 F10)
            import json

            from seglake.lifecycle import drop
            from seglake.meta.catalog import DROPPED, DROPPING

            key = hook.meta.keys.run_intent("collection_undrop", run_id, params["db"], params["collection"])
            kv = hook.meta.kv.get(key)
            if kv is not None:
                began = json.loads(kv.value)["collection_id"]
            else:
                coll = drop.find(hook.meta, params["collection"], params["db"])
                if coll is not None and coll.state in (DROPPING, DROPPED):
                    began = coll.collection_id
                    hook.meta.kv.put(key, json.dumps({"collection_id": began}),
                                     lease=hook.meta.kv.grant_lease(30 * 86400))
        with fail_fast():
            try:
                job_id = pitr.undrop(
                    hook.meta, hook.store, params["collection"], params["target"], db=params["db"],
                    backup=hook.backup_target(params["backup_uri"]) if params["from_target"] else None,
                    bundle=params["bundle"],
                    timeout=(hook.settings.copy_job_timeout if params["timeout_hours"] is None
                             else float(params["timeout_hours"]) * 3600), owner=run_id or "",
                    engine=params["engine"],
                    origin={"dag_id": "collection_undrop", "run_id": run_id} if run_id else None,
                    collection_id=began)
            except restores.RestoreRaceLost as e:   # a retry converges on the winner's job
                raise RuntimeError(f"{e}; retrying") from e
        print(f"undrop of {params['db']}.{params['collection']} into {params['target']!r}: copy job {job_id}")
        return {"job_id": job_id, "target": params["target"]}

    @task
    def summary(params: dict) -> dict:
        from seglake.lifecycle import pitr
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        return pitr.summary(hook.meta, hook.meta.catalog.get_by_name(params["target"], params["db"]))

    started = undrop()
    check_conf("collection_undrop") >> started
    copy = copy_job_group("{{ ti.xcom_pull(task_ids='undrop')['job_id'] }}", "{{ params.engine }}")
    verify = verify_collection_group("{{ params.target }}", "{{ params.db }}", engine="{{ params.engine }}")
    started >> copy >> replay_step(always=True) >> verify >> summary()
    run_note("collection_undrop")


collection_undrop()
