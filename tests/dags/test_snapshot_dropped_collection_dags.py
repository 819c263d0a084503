"""A snapshot of a dropped collection through the DAGs: restore (to a new name, compared
with the snapshot) and drop still work (issue 8, item 14)."""

import pytest
from dag_helpers import load_dag, task_states

from seglake.dev import demo
from seglake.lifecycle import snapshot

pytestmark = pytest.mark.airflow


def test_restore_and_drop_a_snapshot_whose_collection_was_dropped(airflow_env, meta, store):
    coll, _ = demo.seed(meta, store, demo.SeedParams(partitions=2, segments=2, rows=100, dim=4))
    snapshot.create(meta, store, coll.name, "kept")
    meta.catalog.remove(coll.collection_id, "dropped by the test")
    run = load_dag("snapshot_restore").test(run_conf={"collection": coll.name, "snapshot": "kept",
                                                  "target": "revived", "engine": "inline"})
    states = task_states(run)
    assert run.state == "success", states
    assert states["compare"] == "success"
    revived = meta.catalog.get_by_name("revived")
    assert sum(s.num_rows for s in meta.segments.list(revived.collection_id)) == 400
    run = load_dag("snapshot_drop").test(run_conf={"collection": coll.name, "name": "kept"})
    assert run.state == "success", task_states(run)
    assert meta.snapshots.find(coll.collection_id, "kept") is None
