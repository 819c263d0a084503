"""
### Compaction policy

Set (or clear) a collection's compaction policy: the thresholds its compactions use instead
of config (`min_segment_rows` / `min_segment_bytes`: segments below either are merged;
`target_rows` / `target_bytes`: merged segments hold about that much, whichever comes first;
`delete_ratio`: a segment with a larger deleted fraction is rewritten alone;
`l0_age_seconds`: delete-only L0 segments older than this are folded into the segments they
hit; `protection_seconds`: a collection snapshotted within this long is skipped). Empty
keys come from config. `scheduled`: a scheduled run of the **Compaction** DAG compacts this collection.
Every value is checked (finite, in range) before anything is written.
CLI: `seglake compaction policy set demo --min-segment-rows 50000 --scheduled`.
REST: `PUT /seglake/api/v1/compaction/policies/demo` with `{"min_segment_rows": 50000, "scheduled": true}`.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from seglake_airflow.conf import check_conf, dag_params
from seglake_airflow.notes import run_note


@dag(
    dag_id="compaction_policy",
    dag_display_name="Compaction: policy",
    description="Set or clear a collection's compaction policy (thresholds over config, scheduled or not)",
    schedule=None,
    catchup=False,
    max_active_runs=4,
    tags=["seglake", "compaction"],
    doc_md=__doc__,
    default_args={"owner": "seglake", "retries": 2, "retry_delay": timedelta(seconds=10)},
    params=dag_params("compaction_policy"),
)
def compaction_policy():
    @task
    def set_policy(params: dict, dag_run=None) -> dict:
        from seglake.lifecycle import compaction
        from seglake_airflow.failfast import fail_fast
        from seglake_airflow.hooks.engine import SeglakeHook

        hook = SeglakeHook()
        with fail_fast():
            if params["clear"]:
                gone = compaction.clear_policy(hook.meta, params["collection"], db=params["db"])
                print(f"compaction policy of {params['collection']!r} " + ("cleared" if gone else "was not set"))
                return {"cleared": gone}
            values = {"min_segment_rows": params["min_segment_rows"], "target_rows": params["target_rows"],
                      "delete_ratio": params["delete_ratio"], "protection": params["protection_seconds"],
                      "min_segment_bytes": params["min_segment_bytes"], "target_bytes": params["target_bytes"],
                      "l0_age": params["l0_age_seconds"]}
            doc = compaction.set_policy(hook.meta, hook.settings, params["collection"],
                                        {k: v for k, v in values.items() if v is not None}, db=params["db"],
                                        scheduled=params["scheduled"], by=f"dag:{dag_run.run_id}"[:256])
        print(f"compaction policy of {params['collection']!r}: {doc['policy'] or 'config'}, "
              f"scheduled: {doc['scheduled']}")
        return doc

    check_conf("compaction_policy") >> set_policy()
    run_note("compaction_policy")


compaction_policy()
