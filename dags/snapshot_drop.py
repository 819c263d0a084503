"""
### Drop a snapshot

COMMITTED -> DELETING -> manifests and metadata removed -> record removed. A drop that
was interrupted in DELETING resumes where it stopped; a clear or retry of a run that
already dropped it (its intent key in etcd says so) ends green, saying so. Refused (clear error, nothing
changed) while a restore job still reads the snapshot, and for a PENDING snapshot.

The segment files a snapshot referenced are not deleted here: once no snapshot and no
segment references them, garbage collection reclaims them.

REST: `conf = {"collection": "demo", "name": "nightly"}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="snapshot_drop",
    dag_display_name="Snapshot: drop",
    description="Drop a snapshot (COMMITTED -> DELETING -> removed)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "snapshot"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("snapshot_drop"),
)
def snapshot_drop():
    @task
    def drop(params: dict, run_id: str | None = None) -> dict:
        import json

        from seglake.errors import Conflict, NotFound
        from seglake.lifecycle import snapshot
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        # this run's intent, leased for a week: a clear of this run (Airflow re-runs drop) finds the
        # snapshot already dropped by itself and says so, instead of failing on "not found" (atk s20 F7),
        # and never drops a later snapshot that took the name since (atk s20 F10's twin)
        intent = hook.meta.keys.dropped_by_run(run_id, params["db"], params["collection"], params["name"]) \
            if run_id else None
        held = hook.meta.kv.get(intent) if intent else None
        mine = json.loads(held.value) if held is not None else None
        if mine is not None and mine.get("dropped") is True:
            print(f"snapshot {params['name']!r} of {params['collection']!r} was already dropped by this run "
                  f"({run_id}): nothing to do")
            return {"snapshot": params["name"], "files_removed": 0, "already": True}
        with fail_fast():
            try:
                rec, _ = snapshot.resolve(hook.meta, params["collection"], params["name"], db=params["db"])
            except NotFound:
                if mine is None:
                    raise
                # this run began dropping it (its intent holds the id) and it is gone: an earlier
                # try removed it and died before it could say so
                print(f"snapshot {params['name']!r} of {params['collection']!r} is gone: this run's earlier "
                      f"try dropped it ({run_id}): nothing to do")
                return {"snapshot": params["name"], "files_removed": 0, "already": True}
            if mine is not None and mine.get("snapshot_id") not in (None, rec.snapshot_id):
                raise Conflict(f"snapshot {params['name']!r} is now id {rec.snapshot_id}, not the one this run "
                               f"began dropping ({mine['snapshot_id']}): a later snapshot took the name; "
                               f"drop it with a new run")
            if intent is not None and mine is None:
                hook.meta.kv.put(intent, json.dumps({"run_id": run_id, "snapshot_id": rec.snapshot_id}),
                                 lease=hook.meta.kv.grant_lease(7 * 86400))
            result = snapshot.drop(hook.meta, hook.store, params["collection"], params["name"], db=params["db"])
        if intent is not None:
            hook.meta.kv.put(intent, json.dumps({"run_id": run_id, "snapshot_id": rec.snapshot_id, "dropped": True}),
                             lease=hook.meta.kv.grant_lease(7 * 86400))
        print(f"dropped snapshot {params['name']!r} of {params['collection']!r}: "
              f"{result['files_removed']} snapshot files removed")
        return result

    check_conf("snapshot_drop") >> drop()
    run_note("snapshot_drop")


snapshot_drop()
