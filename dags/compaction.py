"""
### Compaction

Merges a collection's small Flushed segments (below `min_segment_rows`) into segments
of about `target_rows` rows, and rewrites alone a segment whose deleted fraction exceeds
`delete_ratio`; rows hidden by a delete (the one visibility rule) are dropped, row ids
and timestamps kept, the inputs' delete entries carried to the output
(`seglake.lifecycle.compaction`). Each unit commits with ONE guarded etcd transaction:
inputs Dropped with `compacted_to`, output Flushed; a unit that loses to a concurrent
change (a drop, another compaction) is reported and re-planned by the next run. GC
reclaims the inputs after `drop_tolerance`, never while a snapshot references them. A
collection snapshotted within `protection_seconds` is skipped.

1. **plan**: the units of each target collection from one etcd revision (deterministic),
   their expected gain, and the engine: `auto` runs inline below
   `inline_threshold_bytes` of input, else Spark.
2. **compact**: inline in the task, or `spark/jobs/compact.py` (units on the executors).
   Both re-plan (same state, same units) and record the run at
   `{root}/compaction/runs/{collection}`.
3. **summary**: this run's recorded summary (a dry run: the plan).

Scheduled by config `compaction_schedule` (`SEGLAKE_COMPACTION_SCHEDULE` on the scheduler;
default `none`: manual only). A run with an empty `collection` -- every scheduled run --
compacts every collection whose compaction policy says `scheduled`, each with its own
policy (one engine for the run, chosen by their total input); nothing scheduled, or
nothing to compact: the run succeeds and changes nothing. REST: `conf = {"collection": "demo", "dry_run": false, "engine": "auto"}`;
empty policy keys come from the collection's policy (`seglake compaction policy set`, the
**Compaction: policy** DAG, `PUT /seglake/api/v1/compaction/policies/{collection}`), then config.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import dag, task

from seglake.config import compaction_schedule
from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

PLAN = "ti.xcom_pull(task_ids='plan')"


@dag(
    dag_id="compaction",
    dag_display_name="Compaction",
    description="Merge small segments, drop deleted rows, fold old L0 delete logs (inline or Spark), one guarded "
                "commit per unit; scheduled runs compact every collection whose policy says scheduled",
    schedule=compaction_schedule(),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["seglake", "compaction"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("compaction"),
)
def compaction():
    @task
    def plan(params: dict) -> dict:
        """Check the policies (before any side effect), plan every target, choose the
        engine: a small dict (the targets' policies, counts and gains)."""
        import time

        from seglake.errors import SeglakeError
        from seglake.lifecycle import compaction as engine
        from seglake.runners import choose
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        overrides = {"min_segment_rows": params["min_segment_rows"], "target_rows": params["target_rows"],
                     "delete_ratio": params["delete_ratio"], "protection": params["protection_seconds"],
                     "min_segment_bytes": params["min_segment_bytes"], "target_bytes": params["target_bytes"],
                     "l0_age": params["l0_age_seconds"]}
        if params["collection"]:
            trigger = "manual"
            coll = hook.meta.catalog.get_by_name(params["collection"], params["db"])
            targets = [{"collection": coll.name, "db": coll.db, "collection_id": coll.collection_id,
                        "policy": engine.policy_for(hook.meta, hook.settings, coll.name, db=coll.db,
                                                    overrides=overrides)}]
        else:
            trigger = "scheduled"
            targets = engine.scheduled_targets(hook.meta, hook.settings, overrides)
        out, failed = [], []
        for t in targets:
            if "error" in t:
                failed.append(t)
                continue
            if "skipped" in t:   # a dropped collection's policy: nothing to compact, not a failure
                print(f"{t['db']}.{t['collection']}: not compacted: {t['skipped']}")
                continue
            try:
                planned = engine.plan(hook.meta, hook.store, t["collection"], t["policy"], db=t["db"])
            except SeglakeError as e:
                failed.append({**t, "policy": None, "error": f"{type(e).__name__}: {e}"})
                continue
            out.append({**t, "policy": t["policy"], "units": len(planned.units), "gain": planned.gain(),
                        "skipped": planned.skipped})
            print(f"{t['db']}.{t['collection']}: {len(planned.units)} units, {planned.gain()}"
                  + (f" (skipped: {planned.skipped})" if planned.skipped else ""))
        for f in failed:
            print(f"{f.get('db')}.{f.get('collection')}: NOT PLANNED: {f['error']}")
        busy = [t for t in out if t["units"]]
        total = sum(t["gain"]["bytes_in"] for t in busy)
        chosen = "inline" if params["dry_run"] or not busy else choose("compaction", params["engine"], total,
                                                                      hook.settings)
        if not targets:
            print("no collection has a scheduled compaction policy: nothing to do")
        print(f"{len(busy)} of {len(out)} collection(s) to compact, {total} bytes of input -> {chosen}")
        return {"engine": chosen, "trigger": trigger, "targets_json": engine.targets_json(busy),
                "targets": [{**t, "policy": t["policy"].to_json()} for t in out],
                "failed": [{"collection": f.get("collection"), "db": f.get("db"), "error": f["error"]} for f in failed],
                "at": time.time()}

    @task
    def compact_inline(params: dict, planned: dict) -> dict:
        """Each target on its own (engine.compact_targets): one failing does not stop the
        others; the task fails after them, naming it."""
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle import compaction as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        targets = [{**t, "policy": engine.Policy.from_json(t["policy"])} for t in planned["targets"]
                   if t["units"] or params["dry_run"]]
        done, failed = engine.compact_targets(hook.meta, hook.store, targets, dry_run=params["dry_run"],
                                              trigger=planned["trigger"], say=print)
        if failed:
            raise AirflowFailException("not compacted: " + "; ".join(f"{f['db']}.{f['collection']}: {f['error']}"
                                                                     for f in failed))
        return {f"{d['db']}.{d['collection']}": {"units": d["units"], **d["counts"]} for d in done}

    compact_spark = spark_submit_task("compact_spark", "compact", [
        "--targets", "{{ %s['targets_json'] }}" % PLAN, "--trigger", "{{ %s['trigger'] }}" % PLAN])

    @task(trigger_rule="none_failed_min_one_success")
    def summary(params: dict, planned: dict) -> dict:
        """This run's summary: each target's recorded run (not older than the plan), summed;
        a dry run: the plan. A collection that could not be planned fails the run (after the
        others were compacted)."""
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle import compaction as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        busy = [t for t in planned["targets"] if t["units"]]
        gain = {k: sum(t["gain"][k] for t in planned["targets"]) for k in
                (planned["targets"][0]["gain"] if planned["targets"] else {})}
        skipped = "; ".join(f"{t['collection']}: {t['skipped']}" for t in planned["targets"] if t["skipped"]) or None
        base = {"dry_run": params["dry_run"], "skipped": skipped, "gain": gain,
                "collections": [t["collection"] for t in planned["targets"]], "failed": planned["failed"]}
        if params["dry_run"] or not busy:
            out = {**base, "counts": {}, "engine": planned["engine"]}
        else:
            meta, counts, lost, seconds, engines = SeglakeHook().meta, {}, [], 0.0, set()
            for t in busy:
                last = engine.last_run(meta, t["collection_id"])
                if last is None or last.get("recorded_at", 0) < planned["at"] - 1:
                    if gone := engine.target_gone(meta, t["collection_id"]):    # dropped since the plan: skipped
                        base["skipped"] = "; ".join(filter(None, [base["skipped"], f"{t['collection']}: {gone}"]))
                        continue
                    raise AirflowFailException(f"the {planned['engine']} compaction recorded no summary for "
                                               f"{t['collection']} in this run")
                for k, v in last["counts"].items():
                    counts[k] = counts.get(k, 0) + v
                lost += [r for r in last["results"] if r["status"] == engine.LOST][:20]
                seconds += last["seconds"]
                engines.add(last["engine"])
            out = {**base, "counts": counts, "engine": ",".join(sorted(engines)), "seconds": seconds, "lost": lost}
        if planned["failed"]:
            print(out)
            raise AirflowFailException("not compacted: " + "; ".join(f"{f['collection']}: {f['error']}"
                                                                     for f in planned["failed"]))
        return out

    planned = plan()
    check_conf("compaction") >> planned
    inline = compact_inline(planned=planned)
    engine_step(planned, inline, compact_spark)
    [inline, compact_spark] >> summary(planned=planned)
    run_note("compaction")


compaction()
