"""Issue 28: a compaction against what runs beside it. A delete arriving between plan and
commit is never lost; a second compaction of the same inputs loses cleanly (reported, its
files removed, the winner intact); a run killed between its files and its commit
converges on a re-run (no duplicate row, no orphan referenced); a drop of the collection
during it wins."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction
from seglake.lifecycle.compaction.policy import make_unit
from seglake.storage import layout

from compaction_helpers import DROPPED, Writer, exact, input_ids, mixed_workload, policy, rows, segments

pytestmark = pytest.mark.etcd


class Killed(Exception):
    pass


def _workload(meta, store, settings, name: str, steps: int = 2, shards: int = 1) -> Writer:
    w = Writer(meta, store, settings)
    w.create(name, ["_default", "p1", "p2"], shards=shards)
    for step in range(steps):
        mixed_workload(w, name, step)
    return w


def _files_under(store, unit, output: int) -> list[str]:
    return [o.key for d in layout.segment_dirs(unit.collection_id, unit.partition_id, output) for o in store.list(d)]


def test_a_delete_between_plan_and_commit_is_not_lost(meta, store, settings):
    w = _workload(meta, store, settings, "c")
    units = compaction.plan(meta, store, "c", policy(target_rows=10_000)).units
    assert units
    # pks that are visible now and live in the inputs: deleted after the plan, once before
    # the unit runs and once between its files and its commit
    first, second = units[0], units[-1]
    coll = meta.catalog.get_by_name("c")
    part = {p.partition_id: p.name for p in coll.partitions}
    vis = rows(meta, store, "c")
    pks_of = lambda u: sorted({pk for pk, p, _ in vis if p == part[u.partition_id]})  # noqa: E731
    early, late = pks_of(first)[:2], pks_of(second)[-2:]
    w.delete("c", early, partition=part[first.partition_id])
    w.flush("c")

    def delete_late(_unit):
        w.delete("c", late)          # collection-wide, flushed into a new segment mid-unit
        w.flush("c")

    results = [compaction.run_unit(meta, store, u, hooks={"after_files": delete_late} if u is second else None)
               for u in units]
    assert [r.status for r in results] == [compaction.COMMITTED] * len(units)
    assert rows(meta, store, "c") == w.model.visible()
    assert not {pk for pk, _, _ in rows(meta, store, "c")} & set(late)
    # and again after the next compaction folds the late delete's segment in
    compaction.compact(meta, store, "c", policy(target_rows=10_000))
    assert rows(meta, store, "c") == w.model.visible()


def test_a_second_compaction_of_the_same_inputs_loses_cleanly(meta, store, settings):
    _workload(meta, store, settings, "d", steps=3)
    before = exact(meta, store, "d")
    mine = compaction.plan(meta, store, "d", policy(target_rows=10_000)).units
    theirs = compaction.plan(meta, store, "d", policy(target_rows=15)).units   # other groups, same inputs
    assert input_ids(mine) & input_ids(theirs)
    assert {u.unit_id for u in mine}.isdisjoint({u.unit_id for u in theirs})
    won = []

    def other_wins(_unit):
        won.extend(compaction.run_units(meta, store, theirs))

    victim = mine[0]
    r = compaction.run_unit(meta, store, victim, hooks={"after_files": other_wins})
    assert [x.status for x in won] == [compaction.COMMITTED] * len(theirs)
    assert r.status == compaction.LOST and "changed since the plan" in r.reason
    rec = [x for x in compaction.unit_records(meta) if x["unit"]["unit_id"] == victim.unit_id][0]
    assert rec["state"] == compaction.LOST
    assert _files_under(store, victim, rec["output"]) == []          # its files are gone
    assert exact(meta, store, "d") == before                         # the winner is intact
    winners = {x.output for x in won}
    for s in segments(meta, "d", DROPPED):
        if s.segment_id in victim.segment_ids and s.segment_id in input_ids(theirs):
            assert s.compacted_to in winners
    # a re-run of the lost unit stays lost; the other plan's units are already committed
    assert compaction.run_unit(meta, store, victim).status == compaction.LOST
    assert {x.status for x in compaction.run_units(meta, store, theirs)} == {compaction.ALREADY}


def test_the_same_unit_run_twice_at_once_commits_once(meta, store, settings):
    _workload(meta, store, settings, "e")
    before = exact(meta, store, "e")
    unit = compaction.plan(meta, store, "e", policy(target_rows=10_000)).units[0]
    inner = []
    r = compaction.run_unit(meta, store, unit,
                            hooks={"after_files": lambda u: inner.append(compaction.run_unit(meta, store, u))})
    assert inner[0].status == compaction.COMMITTED
    assert r.status == compaction.ALREADY and r.output == inner[0].output
    assert exact(meta, store, "e") == before
    outs = [s for s in segments(meta, "e") if s.compacted_from == tuple(unit.segment_ids)]
    assert len(outs) == 1


def test_a_kill_between_files_and_commit_converges_on_a_rerun(meta, store, settings):
    _workload(meta, store, settings, "f", steps=3)
    before, n_before = exact(meta, store, "f"), sum(exact(meta, store, "f").values())
    unit = compaction.plan(meta, store, "f", policy(target_rows=10_000)).units[0]

    def kill(_unit):
        raise Killed()

    with pytest.raises(Killed):
        compaction.run_unit(meta, store, unit, hooks={"after_files": kill})
    rec = [x for x in compaction.unit_records(meta) if x["unit"]["unit_id"] == unit.unit_id][0]
    assert rec["state"] == compaction.PREPARED
    written = sorted(_files_under(store, unit, rec["output"]))
    assert written                                                      # files, no record yet
    assert rec["output"] not in {s.segment_id for s in segments(meta, "f")}
    assert exact(meta, store, "f") == before                            # nothing visible changed
    r = compaction.run_unit(meta, store, unit)
    assert r.status == compaction.COMMITTED and r.output == rec["output"]   # the recorded ids, not new ones
    assert sorted(_files_under(store, unit, r.output)) == written          # the same keys rewritten
    out = [s for s in segments(meta, "f") if s.segment_id == r.output][0]
    assert sorted(f.key for f in layout.segment_files(out)) == written     # every file referenced
    assert exact(meta, store, "f") == before and sum(exact(meta, store, "f").values()) == n_before
    assert compaction.run_unit(meta, store, unit).status == compaction.ALREADY


def test_a_drop_of_the_collection_during_a_compaction_wins(meta, store, settings):
    from seglake.lifecycle import drop
    _workload(meta, store, settings, "g")
    unit = compaction.plan(meta, store, "g", policy(target_rows=10_000)).units[0]
    w = Writer(meta, store, settings)

    def drop_it(_unit):
        drop.begin_drop(meta, store, settings, "g")
        w.flush("g")                       # the flusher releases the vchannels: segments Dropped

    r = compaction.run_unit(meta, store, unit, hooks={"after_files": drop_it})
    assert r.status == compaction.LOST
    coll = meta.catalog.get(unit.collection_id)
    assert not [s for s in meta.segments.list(coll.collection_id) if s.state != DROPPED]


def test_an_input_already_compacted_makes_a_stale_unit_lose_before_writing(meta, store, settings):
    _workload(meta, store, settings, "h")
    unit = compaction.plan(meta, store, "h", policy(target_rows=10_000)).units[0]
    compaction.compact(meta, store, "h", policy(target_rows=10_000))
    stale = make_unit(unit.collection_id, unit.partition_id, unit.channel, compaction.MERGE, unit.inputs)
    assert stale.unit_id == unit.unit_id
    # the unit already committed: a re-run reports it; a unit over the same inputs at older
    # revisions would be a new id and lose
    assert compaction.run_unit(meta, store, unit).status == compaction.ALREADY
    older = make_unit(unit.collection_id, unit.partition_id, unit.channel, compaction.MERGE,
                      [(s, r - 1) for s, r in unit.inputs])
    r = compaction.run_unit(meta, store, older)
    assert r.status == compaction.LOST


def test_unit_records_expire_and_an_abandoned_unit_is_lost_with_its_files(meta, store, settings):
    import time
    _workload(meta, store, settings, "k", steps=2, shards=2)
    before = exact(meta, store, "k")
    units = compaction.plan(meta, store, "k", policy(target_rows=10_000)).units
    assert len(units) >= 2
    done, abandoned = units[0], units[1]
    assert compaction.run_unit(meta, store, done).status == compaction.COMMITTED

    def kill(_unit):
        raise Killed()

    with pytest.raises(Killed):
        compaction.run_unit(meta, store, abandoned, hooks={"after_files": kill})
    rec = {x["unit"]["unit_id"]: x for x in compaction.unit_records(meta)}
    out = rec[abandoned.unit_id]["output"]
    assert _files_under(store, abandoned, out)
    # within retention: nothing happens
    assert compaction.expire_unit_records(meta, store, 3600.0, time.time()) == \
        {"unit_records_removed": 0, "abandoned_units_lost": 0, "corrupt_unit_records_kept": 0}
    # past it: the abandoned unit is lost (files removed), the committed record removed
    later = time.time() + 7200
    assert compaction.expire_unit_records(meta, store, 3600.0, later) == \
        {"unit_records_removed": 1, "abandoned_units_lost": 1, "corrupt_unit_records_kept": 0}
    assert _files_under(store, abandoned, out) == []
    assert exact(meta, store, "k") == before
    assert compaction.expire_unit_records(meta, store, 3600.0, time.time() + 3 * 7200)["unit_records_removed"] == 1
    assert compaction.unit_records(meta) == []
    # a re-plan compacts what the abandoned unit did not: the same unit (its inputs did not
    # move), a fresh attempt with a new output id
    s = compaction.compact(meta, store, "k", policy(target_rows=10_000))
    assert abandoned.unit_id in {u.unit_id for u in s.plan.units}
    assert s.results and {r.status for r in s.results} == {compaction.COMMITTED}
    assert out not in {r.output for r in s.results}
    assert exact(meta, store, "k") == before


def test_a_rerun_whose_delete_sources_are_gone_loses_and_a_replan_compacts(meta, store, settings):
    _workload(meta, store, settings, "m", steps=3)
    before = exact(meta, store, "m")
    units = compaction.plan(meta, store, "m", policy(target_rows=10_000)).units
    unit, others = units[0], units[1:]

    def kill(_unit):
        raise Killed()

    with pytest.raises(Killed):
        compaction.run_unit(meta, store, unit, hooks={"after_files": kill})
    rec = [x for x in compaction.unit_records(meta) if x["unit"]["unit_id"] == unit.unit_id][0]
    sources = {s.segment_id for s in compaction.delete_sources(meta, unit.collection_id, rec["sources_revision"])}
    assert sources & input_ids(others)
    # the other units compact some of its delete sources, and GC reclaims them past the tolerance
    assert {r.status for r in compaction.run_units(meta, store, others)} == {compaction.COMMITTED}
    from seglake.lifecycle import gc
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True,
                                                   collection_id=unit.collection_id))
    r = compaction.run_unit(meta, store, unit)
    assert r.status == compaction.LOST and "delete sources cannot be read" in r.reason
    assert _files_under(store, unit, rec["output"]) == []
    assert exact(meta, store, "m") == before                      # its inputs untouched, rows exact
    # a re-plan plans the same unit (its inputs did not move): a fresh attempt, new sources
    s = compaction.compact(meta, store, "m", policy(target_rows=10_000))
    assert unit.unit_id in {u.unit_id for u in s.plan.units}
    assert s.results and {x.status for x in s.results} == {compaction.COMMITTED}
    assert rec["output"] not in {x.output for x in s.results}
    assert exact(meta, store, "m") == before
    again = [x for x in compaction.unit_records(meta) if x["unit"]["unit_id"] == unit.unit_id][0]
    assert again["state"] == compaction.COMMITTED and again["attempt"] == 2


def test_a_flush_of_the_same_partition_during_a_unit_and_a_workload_compacted_while_it_runs(meta, store, settings):
    """Each step of a mixed workload (inserts, scoped and collection-wide deletes, upserts,
    each flushed) runs INSIDE a unit, between its files and its commit, on the partitions
    the unit compacts; every unit still commits (its inputs did not move) and the visible
    rows equal the model's after every step."""
    w = _workload(meta, store, settings, "n", steps=1, shards=2)
    for step in range(1, 5):
        units = compaction.plan(meta, store, "n", policy(target_rows=30)).units
        assert units, step
        ran = []

        def during(_unit, step=step):
            if not ran:
                ran.append(step)
                mixed_workload(w, "n", step)           # flushes new segments into the same partitions

        results = [compaction.run_unit(meta, store, u, hooks={"after_files": during}) for u in units]
        assert ran == [step]
        assert {r.status for r in results} == {compaction.COMMITTED}, [r.reason for r in results]
        assert rows(meta, store, "n") == w.model.visible(), step
    assert len(segments(meta, "n", DROPPED)) > 0


def test_two_compactions_at_once_in_threads_never_duplicate_or_lose_a_row(meta, store, settings):
    """Two whole compactions with different groupings, really concurrent (two threads, two
    etcd clients), three times over: every unit commits once or loses, every input is
    Dropped into exactly one output, rows stay exact."""
    import threading

    from seglake.meta import Meta

    w = _workload(meta, store, settings, "t2", steps=2, shards=2)
    for step in range(2, 5):
        mixed_workload(w, "t2", step)
        before = exact(meta, store, "t2")
        out: dict = {}

        def run(tag, target):
            with Meta.from_settings(settings) as m:
                out[tag] = compaction.compact(m, store, "t2", policy(target_rows=target))

        ts = [threading.Thread(target=run, args=("a", 15)), threading.Thread(target=run, args=("b", 10_000))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        results = out["a"].results + out["b"].results
        # (the two plans may share a unit: one run commits it, the other finds it committed)
        assert results and {r.status for r in results} <= {compaction.COMMITTED, compaction.ALREADY, compaction.LOST}
        assert exact(meta, store, "t2") == before, step
        assert rows(meta, store, "t2") == w.model.visible()
        live = {s.segment_id: s for s in segments(meta, "t2")}
        for s in segments(meta, "t2", DROPPED):
            if s.compacted_to is not None:
                assert s.segment_id in (live.get(s.compacted_to) or
                                        [x for x in segments(meta, "t2", DROPPED)
                                         if x.segment_id == s.compacted_to][0]).compacted_from
        units = {u.unit_id: u for u in out["a"].plan.units + out["b"].plan.units}
        committed = [r.unit_id for r in results if r.status == compaction.COMMITTED]
        assert len(committed) == len(set(committed))                   # a unit commits once
        committed_inputs = [i for uid in committed for i in units[uid].segment_ids]
        assert len(committed_inputs) == len(set(committed_inputs))     # no input compacted twice


def test_a_unit_committed_by_another_run_after_this_one_read_its_record_is_settled(meta, store, settings,
                                                                                   monkeypatch):
    """Two compactions whose plans share a unit (make test caught it in the two-threads race
    above): run B read the unit's record PREPARED and its inputs Flushed, then run A
    committed the unit (its output made, in the same transaction as the record's commit).
    B met the output and raised 'the record was edited or is corrupt' instead of settling."""
    from seglake.lifecycle.compaction import running

    w = _workload(meta, store, settings, "sh", steps=3)
    before = exact(meta, store, "sh")
    unit = compaction.plan(meta, store, "sh", policy(target_rows=10_000)).units[0]
    real, calls = running._inputs, []

    def inputs_then_run_a_commits(m, u):
        got = real(m, u)
        calls.append(u.unit_id)
        if len(calls) == 2:        # run B, right after its prepare: run A commits the unit now
            monkeypatch.setattr(running, "_inputs", real)
            assert running.run_unit(meta, store, u).status == compaction.COMMITTED
        return got

    monkeypatch.setattr(running, "_inputs", inputs_then_run_a_commits)
    b = running.run_unit(meta, store, unit)
    assert b.status == running.ALREADY and len(calls) == 2
    assert exact(meta, store, "sh") == before and rows(meta, store, "sh") == w.model.visible()
