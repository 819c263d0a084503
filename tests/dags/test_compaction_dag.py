"""compaction through dag.test() against the real stack (etcd, files; inline engine): a dry
run changes nothing, a run compacts row-exactly and its note and summary say what it
did, a bad conf is refused before any run."""

import sys
from pathlib import Path

import pytest
from dag_helpers import load_dag, task_states

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "lifecycle" / "compaction"))

pytestmark = [pytest.mark.airflow, pytest.mark.etcd]


def test_dry_run_then_run(airflow_env, meta, store, settings):
    from compaction_helpers import Writer, exact, mixed_workload, segments

    from seglake.lifecycle import compaction

    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "c", step)
    before, segs = exact(meta, store, "c"), {s.segment_id for s in segments(meta, "c")}
    conf = {"collection": "c", "min_segment_rows": 1000, "target_rows": 10000, "protection_seconds": 0,
            "engine": "inline"}
    dag = load_dag("compaction")
    run = dag.test(run_conf={**conf, "dry_run": True})
    assert run.state == "success", task_states(run)
    assert {s.segment_id for s in segments(meta, "c")} == segs
    run = dag.test(run_conf={**conf, "dry_run": False})   # explicit, as the gc DAG tests pass it
    states = task_states(run)
    assert run.state == "success", states
    assert states["compact_inline"] == "success" and states["compact_spark"] == "skipped"
    assert exact(meta, store, "c") == before
    coll = meta.catalog.get_by_name("c")
    last = compaction.last_run(meta, coll.collection_id)
    assert last["counts"]["committed"] == len(last["plan"]["units"]) > 0 and last["counts"]["lost"] == 0
    assert compaction.plan(meta, store, "c", compaction.Policy(min_segment_rows=1000, target_rows=10000,
                                                               protection=0)).units == []


def test_bad_conf_is_refused_before_any_run(airflow_env):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError, match="delete_ratio"):
        load_dag("compaction").test(run_conf={"collection": "c", "delete_ratio": 1.5})


def test_policy_dag_then_scheduled_runs(airflow_env, meta, store, settings, monkeypatch):
    """The policy form records a collection's policy (checked); a run of the compaction DAG
    without a collection (what every scheduled run is) compacts only the scheduled
    collection, with its policy, row-exactly; with nothing left it succeeds and changes
    nothing; a manual run of one collection still works; the policy form clears. The DAG
    carries the configured schedule."""
    from compaction_helpers import Writer, exact, mixed_workload, rows, segments

    from seglake.config import compaction_schedule
    from seglake.lifecycle import compaction

    assert compaction_schedule({}) is None and compaction_schedule({"SEGLAKE_COMPACTION_SCHEDULE": "@hourly"}) == \
        "@hourly"
    dag = load_dag("compaction")
    run = dag.test(run_conf={})                        # nothing scheduled: safe, nothing to do
    assert run.state == "success", task_states(run)
    wa, wb = Writer(meta, store, settings), Writer(meta, store, settings)
    for w, name in ((wa, "a"), (wb, "b")):
        w.create(name, ["_default", "p1", "p2"], shards=1)
        for step in range(2):
            mixed_workload(w, name, step)
    before_a, before_b = exact(meta, store, "a"), exact(meta, store, "b")
    segs_b = {s.segment_id for s in segments(meta, "b")}
    pol = load_dag("compaction_policy")
    run = pol.test(run_conf={"collection": "a", "min_segment_rows": 1000, "target_rows": 30,
                             "protection_seconds": 0, "scheduled": True})
    assert run.state == "success", task_states(run)
    doc = compaction.get_policy(meta, "a")
    assert doc["scheduled"] is True and doc["policy"] == {"min_segment_rows": 1000, "target_rows": 30,
                                                          "protection": 0.0}
    n_before = len(segments(meta, "a"))
    run = dag.test(run_conf={"engine": "inline"})
    states = task_states(run)
    assert run.state == "success", states
    assert states["compact_inline"] == "success" and states["compact_spark"] == "skipped"
    assert len(segments(meta, "a")) < n_before
    assert exact(meta, store, "a") == before_a and rows(meta, store, "a") == wa.model.visible()
    assert {s.segment_id for s in segments(meta, "b")} == segs_b             # not scheduled: untouched
    hist = compaction.history(meta)
    assert [h["trigger"] for h in hist] == ["scheduled"] and hist[0]["collection"] == "a"
    segs_a = {s.segment_id for s in segments(meta, "a")}
    run = dag.test(run_conf={})                        # nothing left to compact
    assert run.state == "success" and {s.segment_id for s in segments(meta, "a")} == segs_a
    run = dag.test(run_conf={"collection": "b", "min_segment_rows": 1000, "protection_seconds": 0})   # manual
    assert run.state == "success", task_states(run)
    assert len(segments(meta, "b")) < len(segs_b)
    assert exact(meta, store, "b") == before_b and rows(meta, store, "b") == wb.model.visible()
    assert [h["trigger"] for h in compaction.history(meta)] == ["manual", "scheduled"]
    run = pol.test(run_conf={"collection": "a", "clear": True})
    assert run.state == "success" and compaction.get_policy(meta, "a") is None


def test_a_scheduled_run_with_a_spark_engine_passes_every_target(airflow_env, meta, store, settings):
    """The Spark branch's argv: the plan's targets (names and policy numbers), checked by
    the job's own parser; nothing else."""
    import sys as _sys

    from compaction_helpers import Writer, mixed_workload

    from seglake.lifecycle import compaction

    w = Writer(meta, store, settings)
    w.create("a", ["_default", "p1", "p2"], shards=1)
    mixed_workload(w, "a", 0)
    compaction.set_policy(meta, settings, "a", {"min_segment_rows": 1000, "protection": 0}, scheduled=True)
    dag = load_dag("compaction")
    task = dag.get_task("compact_spark")
    assert task.application_args == ["--targets", "{{ ti.xcom_pull(task_ids='plan')['targets_json'] }}",
                                     "--trigger", "{{ ti.xcom_pull(task_ids='plan')['trigger'] }}"]
    targets = compaction.scheduled_targets(meta, settings)
    text = compaction.targets_json(targets)
    _sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "spark" / "jobs"))
    import compact as job

    args = job.parse_args(["--targets", text, "--trigger", "scheduled"])
    assert [(t["collection"], t["policy"]) for t in args.targets] == [("a", targets[0]["policy"])]
    for bad in ('[{"collection": "a b", "db": "default", "policy": {}}]',
                '[{"collection": "a", "db": "default", "policy": {"target_rowz": 1}}]',
                '[{"collection": "a", "db": "default", "policy": {"delete_ratio": NaN}}]', "{}"):
        with pytest.raises(SystemExit):
            job.parse_args(["--targets", bad])


def test_policy_dag_refuses_bad_values_before_any_run(airflow_env):
    from airflow.sdk.definitions.param import ParamValidationError

    for conf, word in (({"collection": "a", "target_bytes": 0}, "target_bytes"),
                       ({"collection": "a", "l0_age_seconds": -1}, "l0_age_seconds"),
                       ({"collection": "a", "delete_ratio": float("nan")}, "delete_ratio")):
        with pytest.raises(ParamValidationError, match=word):
            load_dag("compaction_policy").test(run_conf=conf)


def test_policy_dag_unknown_key_refused_by_check_conf(airflow_env, meta, store, settings):
    from compaction_helpers import Writer

    from seglake.lifecycle import compaction

    Writer(meta, store, settings).create("a", ["_default"], shards=1)
    run = load_dag("compaction_policy").test(run_conf={"collection": "a", "target_rowz": 5})
    states = task_states(run)
    assert states["check_conf"] == "failed" and states.get("set_policy") != "success"
    assert compaction.get_policy(meta, "a") is None


def _two_scheduled(meta, store, settings, **policy) -> dict:
    """Collections a and b (3 partitions, one shard), each with a mixed workload and a
    scheduled policy that merges them: {name: its Writer}."""
    from compaction_helpers import Writer, mixed_workload

    from seglake.lifecycle import compaction

    ws = {}
    for name in ("a", "b"):
        ws[name] = Writer(meta, store, settings)
        ws[name].create(name, ["_default", "p1", "p2"], shards=1)
        mixed_workload(ws[name], name, 0)
        compaction.set_policy(meta, settings, name, {"min_segment_rows": 1000, "target_rows": 30,
                                                     "protection": 0, **policy}, scheduled=True)
    return ws


def test_a_target_dropped_between_plan_and_compact_is_skipped_and_the_others_compacted(
        airflow_env, meta, store, settings, monkeypatch):
    """Two scheduled collections; the first is dropped and purged by GC after the plan task
    chose it, before the compact task reaches it (attack-compaction4): the run compacts the
    other one row-exactly and succeeds, saying the dropped one was skipped -- before, the
    compact task failed on NotFound and never compacted the second."""
    from compaction_helpers import exact, rows, segments

    from seglake.lifecycle import drop, gc
    from seglake.lifecycle.flush import flush_pchannel
    from wal_helpers import pchannels

    ws = _two_scheduled(meta, store, settings)
    before_b, n_b = exact(meta, store, "b"), len(segments(meta, "b"))
    from seglake.lifecycle.compaction import compacting
    real = compacting.plan

    def drop_a_first(meta_, store_, collection, *a, **kw):
        if collection == "a" and meta.kv.get(meta.keys.collection(kw["collection_id"])) is not None:
            coll = meta.catalog.get_by_name("a")
            drop.begin_drop(meta, store, settings, "a")
            for pch in pchannels(coll):
                flush_pchannel(meta, store, pch, settings, flush_all=True)
            drop.finish_drop(meta, "a")
            for _ in range(2):
                gc.run(meta, store, gc.GCOptions.from_settings(
                    settings, drop_tolerance=0.0, missing_tolerance=0.0, force=True, copy_job_retention=0.0,
                    collection_id=coll.collection_id))
        return real(meta_, store_, collection, *a, **kw)

    monkeypatch.setattr(compacting, "plan", drop_a_first)    # the compact task's plan: after the plan task
    run = load_dag("compaction").test(run_conf={"engine": "inline"})
    states = task_states(run)
    assert run.state == "success", states
    assert len(segments(meta, "b")) < n_b
    assert exact(meta, store, "b") == before_b and rows(meta, store, "b") == ws["b"].model.visible()


def test_one_target_failing_in_the_compact_task_does_not_stop_the_others(airflow_env, meta, store, settings):
    """Two scheduled collections; the first one's unit record is corrupt (its run refuses it,
    naming it: CompactionError). The compact task went no further: the second collection was
    never compacted (the plan task's failures are reported after the others ran, the compact
    task's were not). Now each target on its own: the second is compacted row-exactly, the
    run still fails, naming the first (attack-compaction4)."""
    from compaction_helpers import exact, rows, segments

    from seglake.lifecycle import compaction
    from seglake.meta.codec import decode, encode

    ws = _two_scheduled(meta, store, settings, l0_age=3600)
    p = compaction.plan(meta, store, "a", compaction.policy_for(meta, settings, "a"))
    u = p.units[0]
    compaction.prepare(meta, meta.catalog.get_by_name("a"), u, 1.0, p.revision)
    key = meta.keys.compaction_unit(u.collection_id, u.unit_id)
    meta.kv.put(key, encode({**decode(meta.kv.get(key).value, key), "sources_revision": None}))
    before_b, n_b = exact(meta, store, "b"), len(segments(meta, "b"))
    run = load_dag("compaction").test(run_conf={"engine": "inline"})
    assert run.state == "failed", task_states(run)
    assert len(segments(meta, "b")) < n_b, "the second target was not compacted"
    assert exact(meta, store, "b") == before_b and rows(meta, store, "b") == ws["b"].model.visible()
    assert rows(meta, store, "a") == ws["a"].model.visible()
