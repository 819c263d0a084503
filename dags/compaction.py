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

1. **plan**: the units from one etcd revision (deterministic), their expected gain, and
   the engine: `auto` runs inline below `inline_threshold_bytes` of input, else Spark.
2. **compact**: inline in the task, or `spark/jobs/compact.py` (units on the executors).
   Both re-plan (same state, same units) and record the run at
   `{root}/compaction/runs/{collection}`.
3. **summary**: this run's recorded summary (a dry run: the plan).

Manual; the scheduled runs are the **Compaction: schedule** DAG's (every collection whose
policy says `scheduled`). REST: `conf = {"collection": "demo", "dry_run": false, "engine": "auto"}`;
empty policy keys come from the collection's policy (`seglake compaction policy set`, the
**Compaction: policy** DAG, `PUT /seglake/api/v1/compaction/policies/{collection}`), then config.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note
from seglake_airflow.operators.spark import spark_submit_task
from seglake_airflow.taskgroups import engine_step

PLAN = "ti.xcom_pull(task_ids='plan')"


@dag(
    dag_id="compaction",
    dag_display_name="Compaction",
    description="Merge small segments and drop deleted rows (inline or Spark), one guarded commit per unit",
    schedule=None,
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
        """Check the policy (before any side effect), plan, choose the engine: a small dict."""
        import time

        from seglake.lifecycle import compaction as engine
        from seglake.runners import choose
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        policy = engine.policy_for(hook.meta, hook.settings, params["collection"], db=params["db"], overrides={
            "min_segment_rows": params["min_segment_rows"], "target_rows": params["target_rows"],
            "delete_ratio": params["delete_ratio"], "protection": params["protection_seconds"],
            "min_segment_bytes": params["min_segment_bytes"], "target_bytes": params["target_bytes"],
            "l0_age": params["l0_age_seconds"]})
        planned = engine.plan(hook.meta, hook.store, params["collection"], policy, db=params["db"])
        gain = planned.gain()
        chosen = "inline" if params["dry_run"] or not planned.units else \
            choose("compaction", params["engine"], gain["bytes_in"], hook.settings)
        print(f"{params['db']}.{params['collection']}: {len(planned.units)} units, {gain} -> {chosen}"
              + (f" (skipped: {planned.skipped})" if planned.skipped else ""))
        return {"engine": chosen, "policy": policy.to_json(), "collection_id": planned.collection_id,
                "units": len(planned.units), "gain": gain, "skipped": planned.skipped, "at": time.time()}

    @task
    def compact_inline(params: dict, planned: dict) -> dict:
        from seglake.lifecycle import compaction as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        summary = engine.compact(hook.meta, hook.store, params["collection"],
                                 engine.Policy.from_json(planned["policy"]), db=params["db"],
                                 dry_run=params["dry_run"])
        c = summary.counts()
        print(f"{c['committed']} committed, {c['already_committed']} already, {c['lost']} lost")
        return {"units": len(summary.plan.units), **c}

    compact_spark = spark_submit_task("compact_spark", "compact", [
        "--collection", "{{ params.collection }}", "--db", "{{ params.db }}",
        "--min-segment-rows", "{{ %s['policy']['min_segment_rows'] }}" % PLAN,
        "--target-rows", "{{ %s['policy']['target_rows'] }}" % PLAN,
        "--delete-ratio", "{{ %s['policy']['delete_ratio'] }}" % PLAN,
        "--protection-seconds", "{{ %s['policy']['protection'] }}" % PLAN,
        "--min-segment-bytes", "{{ %s['policy']['min_segment_bytes'] }}" % PLAN,
        "--target-bytes", "{{ %s['policy']['target_bytes'] }}" % PLAN,
        "--l0-age-seconds", "{{ %s['policy']['l0_age'] }}" % PLAN,
    ])

    @task(trigger_rule="none_failed_min_one_success")
    def summary(params: dict, planned: dict) -> dict:
        """This run's summary: the recorded run (not older than the plan), or the plan (dry run)."""
        from airflow.sdk.exceptions import AirflowFailException

        from seglake.lifecycle import compaction as engine
        from seglake_airflow.hooks.engine import SeglakeHook

        base = {"dry_run": params["dry_run"], "skipped": planned["skipped"], "gain": planned["gain"]}
        if params["dry_run"] or not planned["units"]:
            return {**base, "counts": {}, "engine": planned["engine"]}
        last = engine.last_run(SeglakeHook().meta, planned["collection_id"])
        if last is None or last.get("recorded_at", 0) < planned["at"] - 1:
            raise AirflowFailException(f"the {planned['engine']} compaction recorded no summary for this run")
        return {**base, "counts": last["counts"], "engine": last["engine"], "seconds": last["seconds"],
                "lost": [r for r in last["results"] if r["status"] == engine.LOST][:20]}

    planned = plan()
    check_conf("compaction") >> planned
    inline = compact_inline(planned=planned)
    engine_step(planned, inline, compact_spark)
    [inline, compact_spark] >> summary(planned=planned)
    run_note("compaction")


compaction()
