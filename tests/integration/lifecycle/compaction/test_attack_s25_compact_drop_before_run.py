"""Attack s25: a collection dropped between a compaction's plan and the run of its units
(the compaction DAG plans in one task and runs in another; a Spark job's executors run
the driver's plan minutes later). The drop wins: every unit is reported `lost`, naming
the drop, before any work -- no unit record, no id allocated, no output file written for
a collection that is going away; and a drop that GC has already purged (the collection
record gone) is no exception that fails the whole run (every later unit, the summary, the
Spark job), on the inline path and the executor path alike. A unit that committed before
the drop still reports its commit."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, drop, gc
from seglake.storage import layout

from compaction_helpers import Writer, mixed_workload, policy

pytestmark = pytest.mark.etcd


def _collection(meta, store, settings, name: str, kind: str) -> tuple[Writer, "compaction.Plan"]:
    w = Writer(meta, store, settings)
    w.create(name, ["_default", "p1", "p2"], shards=1)
    for s in range(2):
        mixed_workload(w, name, s)
    # merges (deletes too young to fold), or an L0 fold (l0_age 0)
    p = compaction.plan(meta, store, name, policy(target_rows=10_000, l0_age=0.0 if kind == "fold" else 1e6))
    assert p.units and {u.kind for u in p.units} <= ({compaction.FOLD} if kind == "fold" else
                                                    {compaction.MERGE, compaction.REWRITE}), p.units
    return w, p


def _segment_files(store, cid: int) -> set[str]:
    return {o.key for prefix in ("insert_log", "delta_log", "stats_log")
            for o in store.list(f"{prefix}/{cid}/")}


def _drop(meta, store, settings, w: Writer, name: str, purge: bool) -> None:
    drop.drop_collection(meta, store, settings, name)
    if purge:
        w.flush(name)                    # the flusher releases the vchannel: Dropped
        drop.finish_drop(meta, name)
        for _ in range(2):
            gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                           missing_tolerance=0.0))


def _units_left(meta, cid: int) -> list[str]:
    return [kv.key for kv in meta.kv.range(meta.keys.compaction_units_prefix(cid))]


@pytest.mark.parametrize("purge", [False, True], ids=["dropping", "purged"])
@pytest.mark.parametrize("path", ["inline", "executor"])
@pytest.mark.parametrize("kind", ["merge", "fold"])
def test_units_of_a_collection_dropped_after_the_plan_are_lost_before_any_work(meta, store, settings, purge, path,
                                                                              kind):
    w, p = _collection(meta, store, settings, "c", kind)
    cid = p.collection_id
    _drop(meta, store, settings, w, "c", purge)
    assert (meta.kv.get(meta.keys.collection(cid)) is None) == purge
    files = _segment_files(store, cid)
    top = meta.ids.allocate(1)
    if path == "inline":
        results = compaction.run_units(meta, store, p.units, sources_revision=p.revision)
    else:
        results = [compaction.UnitResult(**r) for r in compaction.run_partition(
            [u.to_json() for u in p.units], settings.to_env(), sources_revision=p.revision)]
    assert [r.status for r in results] == [compaction.LOST] * len(p.units), results
    assert all("dropped" in r.reason or "Dropp" in r.reason or "gone" in r.reason for r in results), results
    assert _units_left(meta, cid) == []                       # no record for a collection going away
    assert meta.ids.allocate(1) == top + 1                    # no id allocated
    assert _segment_files(store, cid) <= files                # no output file written


@pytest.mark.parametrize("kind", ["merge", "fold"])
def test_a_unit_committed_before_the_purge_still_reports_its_commit(meta, store, settings, kind):
    w, p = _collection(meta, store, settings, "d", kind)
    first = compaction.run_unit(meta, store, p.units[0], sources_revision=p.revision)
    assert first.status == compaction.COMMITTED
    _drop(meta, store, settings, w, "d", purge=True)
    again = compaction.run_unit(meta, store, p.units[0], sources_revision=p.revision)
    assert again.status == compaction.ALREADY and again.output == first.output
    rest = compaction.run_units(meta, store, p.units[1:], sources_revision=p.revision)
    assert {r.status for r in rest} <= {compaction.LOST}
