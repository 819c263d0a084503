"""
### Drop collection

Drops a collection the Milvus way ("Flush&Drop", `seglake.lifecycle.drop`):

1. **check_conf**: the strict conf check (unknown keys, names, timeout range).
2. **begin**: validates (a running restore targeting the collection or an Importing
   collection is refused, naming the copy job), flips `Created -> Dropping` (the name
   stays reserved) and appends a DropCollection message to each of its vchannels through
   the fenced WAL writer. A collection that never saw the WAL (seeded, restored) has its
   segments marked Dropped and its vchannels released right here.
3. **wait_released** (reschedule sensor, `timeout_hours`): waits until every vchannel is
   released. It TRIGGERS NOTHING: the `wal_flush` DAG (its schedule, or a manual run)
   syncs every buffered insert and delete of the vchannel, marks its segments Dropped
   (records kept) and removes its checkpoint. The log names each vchannel still held and
   its checkpoint lag. With `wait_for_flush` false it does not wait, and finish is
   skipped while a vchannel is still held (the run only begins the drop; the wal_flush
   run that releases the last vchannel finishes it).
4. **finish**: `Dropping -> Dropped`, the name freed (a new collection may take it).
5. **summary**: segments and rows dropped, bytes awaiting GC; the GC DAG reclaims the
   files after `drop_tolerance` (snapshot-referenced files are kept; snapshots of the
   collection stay restorable until dropped).

Idempotent: re-running on a Dropping collection continues, on a Dropped one reports and
succeeds. REST: `conf = {"collection": "c1", "db": "default", "wait_for_flush": true, "timeout_hours": 1}`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="drop_collection",
    dag_display_name="Drop collection",
    description="Drop a collection: Dropping, flush-and-drop by wal_flush, Dropped; GC reclaims later",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["seglake", "wal"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=20)},
    params=dag_params("drop_collection"),
)
def drop_collection():
    @task
    def begin(params: dict, run_id: str | None = None) -> dict:
        import json

        from seglake.lifecycle import drop
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        # the collection this run began on, leased (the wait may last 7 days): a clear of this run,
        # which re-runs begin with the same conf, acts on it again, never on a later collection that
        # took the name since (a clear of an old green run dropped the new one: atk s20 F10)
        key = hook.meta.keys.run_intent("drop_collection", run_id, params["db"], params["collection"]) \
            if run_id else None
        kv = hook.meta.kv.get(key) if key else None
        cid = json.loads(kv.value)["collection_id"] if kv is not None else None
        if cid is None and key is not None:
            coll = drop.find(hook.meta, params["collection"], params["db"])
            if coll is not None and coll.state != "Dropped":
                cid = coll.collection_id
                hook.meta.kv.put(key, json.dumps({"collection_id": cid}), lease=hook.meta.kv.grant_lease(30 * 86400))
        rep = drop.begin_drop(hook.meta, hook.store, hook.settings, params["collection"], params["db"],
                              collection_id=cid)
        print(drop.format_status(rep))
        return {"state": rep["state"], "collection_id": rep["collection_id"]}

    @task.sensor(mode="reschedule", poke_interval=10, timeout=7 * 86400)
    def wait_released(started: dict, params: dict, dag_run=None):
        import time

        from airflow.sdk import PokeReturnValue
        from airflow.sdk.exceptions import AirflowFailException
        from seglake.lifecycle import drop
        from seglake_airflow.hooks.engine import SeglakeHook

        if not params["wait_for_flush"]:
            print("wait_for_flush is false: not waiting (finish is skipped while a vchannel is held)")
            return PokeReturnValue(is_done=True)
        meta = SeglakeHook().meta
        # the collection begun; None once wal_flush finished its drop and GC purged it (done)
        coll = drop.find(meta, params["collection"], params["db"], started["collection_id"])
        held = drop.held_vchannels(meta, coll) if coll is not None and coll.state == "Dropping" else []
        why = ("every vchannel released" if not held else "waiting for wal_flush to release: "
               + ", ".join(f"{h['vchannel']} (checkpoint lag {h['lag_ms']} ms)" for h in held))
        print(why)
        if held and time.time() - dag_run.start_date.timestamp() > params["timeout_hours"] * 3600:
            raise AirflowFailException(f"gave up after {params['timeout_hours']} h: {why}")
        return PokeReturnValue(is_done=not held)

    @task
    def finish(started: dict, params: dict) -> dict:
        from seglake.lifecycle import drop
        from seglake_airflow.hooks.engine import SeglakeHook

        meta = SeglakeHook().meta
        cid = started["collection_id"]   # the collection begun, never a later one with its name
        coll = drop.find(meta, params["collection"], params["db"], cid)
        if not params["wait_for_flush"] and coll is not None and coll.state == "Dropping" \
                and drop.held_vchannels(meta, coll):
            from airflow.sdk.exceptions import AirflowSkipException
            raise AirflowSkipException("vchannels still held and wait_for_flush is false: left Dropping; "
                                       "the wal_flush run that releases them finishes the drop")
        rep = drop.finish_drop(meta, params["collection"], params["db"], collection_id=cid)
        print(drop.format_status(rep))
        return rep

    @task(trigger_rule="none_failed")
    def summary(started: dict, params: dict) -> dict:
        from seglake.lifecycle import drop
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        coll = drop.find(hook.meta, params["collection"], params["db"], started["collection_id"])
        rep = (drop.status(hook.meta, coll) if coll is not None   # else: finished and purged by GC since
               else drop.purged(hook.meta, params["collection"], params["db"], started["collection_id"]))
        if rep is None:
            from seglake.errors import NotFound
            raise NotFound(f"collection {params['collection']!r} (id {started['collection_id']}) not found")
        print(drop.format_status(rep, hook.settings.drop_tolerance))
        print("GC reclaims the Dropped segments' files drop_tolerance after they were dropped; "
              "snapshot-referenced files are kept")
        # held: the vchannels a Dropping collection still waits on (none: only the finish was missing)
        return {**{k: rep[k] for k in ("collection", "state", "segments_dropped", "rows_dropped",
                                       "bytes_awaiting_gc", "latest_dropped_at")}, "held": len(rep["held"])}

    started = begin()
    check_conf("drop_collection") >> started
    wait_released(started) >> finish(started) >> summary(started)
    run_note("drop_collection")


drop_collection()
