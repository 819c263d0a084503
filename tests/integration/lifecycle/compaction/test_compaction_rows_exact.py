"""Issue 28: visible rows are identical before and after a compaction (row-exact: pk, row
id, timestamp, partition, value), across a mixed workload of partition-scoped deletes,
collection-wide deletes and upserts, compacted after every step; plans are deterministic
and converge."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction

from compaction_helpers import DROPPED, Writer, exact, mixed_workload, policy, rows, segments

pytestmark = pytest.mark.etcd


def test_rows_exact_across_compactions_of_a_mixed_workload(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("c", ["_default", "p1", "p2"], shards=2)
    committed = 0
    for step in range(4):
        mixed_workload(w, "c", step)
        before = exact(meta, store, "c")
        assert rows(meta, store, "c") == w.model.visible()
        n_before = len(segments(meta, "c"))
        s = compaction.compact(meta, store, "c", policy())
        assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
        committed += len(s.results)
        assert exact(meta, store, "c") == before                 # row-exact, ids and timestamps kept
        assert rows(meta, store, "c") == w.model.visible()
        assert len(segments(meta, "c")) == n_before - s.counts()["segments_in"] + len(s.results)
    assert committed >= 4
    # every compacted input is Dropped with compacted_to naming a Flushed output whose
    # compacted_from names it back
    outs = {s.segment_id: s for s in segments(meta, "c")}
    dropped = [s for s in segments(meta, "c", DROPPED) if s.compacted_to is not None]
    assert dropped
    for s in dropped:
        out = outs.get(s.compacted_to)
        if out is not None:     # (an output may itself have been compacted later)
            assert s.segment_id in out.compacted_from


def test_deleted_rows_are_dropped_and_the_plan_converges(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("d", ["_default", "p1", "p2"], shards=1)
    for step in range(3):
        mixed_workload(w, "d", step)
    pol = policy(target_rows=10_000)
    p = compaction.plan(meta, store, "d", pol)
    assert p.units and p.gain()["rows_dropped"] > 0
    s = compaction.compact(meta, store, "d", pol)
    dropped = s.counts()["rows_dropped"]
    assert dropped == p.gain()["rows_dropped"]
    live = segments(meta, "d")
    assert sum(x.num_rows for x in live) == sum(rows(meta, store, "d").values())   # no hidden row stored
    assert rows(meta, store, "d") == w.model.visible()
    again = compaction.plan(meta, store, "d", pol)
    assert again.units == [], [u.to_json() for u in again.units]
    from seglake.lifecycle import verify
    report = verify.verify_collection(meta, store, "d", threads=2)       # files match their records
    assert report["ok"], verify.format_report(report)
    assert report["visible_rows"] == sum(w.model.visible().values())


def test_plans_are_deterministic_for_the_same_state(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("e", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "e", step)
    pol = policy(target_rows=25)
    a = compaction.plan(meta, store, "e", pol)
    b = compaction.plan(meta, store, "e", pol)
    assert len(a.units) >= 2
    assert [u.to_json() for u in a.units] == [u.to_json() for u in b.units]
    for u in a.units:
        assert u.segment_ids == sorted(u.segment_ids)
        assert compaction.Unit.from_json(u.to_json()) == u
    # a change to one input plans a new id for its unit only
    w.delete("e", [10_000])          # a new L0 segment: inputs unchanged
    w.flush("e")
    c = compaction.plan(meta, store, "e", pol)
    assert {u.unit_id for u in a.units} & {u.unit_id for u in c.units}


def test_a_hand_edited_unit_is_refused(meta, store, settings):
    w = Writer(meta, store, settings)
    w.create("f", ["_default"], shards=1)
    for step in range(2):
        w.insert("f", range(step * 10, step * 10 + 5))
        w.flush("f")
    u = compaction.plan(meta, store, "f", policy()).units[0]
    bad = {**u.to_json(), "inputs": [[u.inputs[0][0], u.inputs[0][1] + 1]] + [list(x) for x in u.inputs[1:]]}
    with pytest.raises(Exception, match="does not match its content"):
        compaction.Unit.from_json(bad)
    with pytest.raises(Exception, match="unknown compaction policy key"):
        compaction.Policy.from_json({"target_row": 3})


def test_a_restored_collection_compacts_with_its_deletes_translated_by_name(meta, store, settings):
    """A restored segment's delta logs hold the SOURCE collection's partition ids (copied
    verbatim, mapped by name through delta_partitions); the output's delta log holds this
    collection's own ids, named in its own delta_partitions."""
    from compaction_helpers import run_restore
    from seglake.lifecycle import snapshot

    w = Writer(meta, store, settings)
    w.create("src", ["_default", "p1", "p2"], shards=1)
    for step in range(2):
        mixed_workload(w, "src", step)
    w.create("pad", ["_default", "x1", "x2", "x3"], shards=1)      # target partition ids differ from the source's
    snapshot.create(meta, store, "src", "s")
    run_restore(meta, store, "src", "s", "r")
    src, r = meta.catalog.get_by_name("src"), meta.catalog.get_by_name("r")
    assert {p.partition_id for p in src.partitions}.isdisjoint({p.partition_id for p in r.partitions})
    before = exact(meta, store, "r")
    assert rows(meta, store, "r") == w.model.visible()
    s = compaction.compact(meta, store, "r", policy(target_rows=10_000))
    assert s.results and {x.status for x in s.results} == {compaction.COMMITTED}
    assert exact(meta, store, "r") == before
    own = {p.partition_id: p.name for p in r.partitions}
    outs = [x for x in segments(meta, "r") if x.compacted_from]
    assert any(x.delta_partitions for x in outs)
    for x in outs:
        assert x.delta_partitions is not None and set(x.delta_partitions.items()) <= set(own.items())
    # and the source, compacted on its own, is unaffected by the copy
    src_before = exact(meta, store, "src")
    compaction.compact(meta, store, "src", policy(target_rows=10_000))
    assert exact(meta, store, "src") == src_before and rows(meta, store, "src") == w.model.visible()


def test_one_run_reads_its_delete_sources_once(meta, store, settings, monkeypatch):
    """The units of one run take their delete sources at the plan's revision and share
    them: listed once per unit's prepare (its legacy map) plus ONE read of the deletes,
    not one per unit; and the rows stay exact."""
    from seglake.lifecycle.compaction import running

    w = Writer(meta, store, settings)
    w.create("o", ["_default", "p1", "p2"], shards=2)
    for step in range(3):
        mixed_workload(w, "o", step)
    before = exact(meta, store, "o")
    calls = []
    real = running.delete_sources
    monkeypatch.setattr(running, "delete_sources", lambda *a: calls.append(a) or real(*a))
    s = compaction.compact(meta, store, "o", policy(target_rows=20))
    assert len(s.results) >= 3 and {r.status for r in s.results} == {compaction.COMMITTED}
    assert len(calls) == len(s.results) + 1
    assert {rev for _, _, rev in calls} == {s.plan.revision}
    assert exact(meta, store, "o") == before


def test_a_unit_whose_channel_is_not_its_inputs_is_refused_before_any_write(meta, store, settings):
    from seglake.lifecycle.compaction.policy import make_unit

    w = Writer(meta, store, settings)
    w.create("q", ["_default"], shards=2)
    for step in range(3):
        w.insert("q", range(step * 10, step * 10 + 6))
        w.flush("q")
    u = compaction.plan(meta, store, "q", policy()).units[0]
    other = [v for v in meta.catalog.get_by_name("q").vchannels if v != u.channel][0]
    forged = make_unit(u.collection_id, u.partition_id, other, u.kind, u.inputs)   # a consistent id
    with pytest.raises(compaction.CompactionError, match="is on vchannel"):
        compaction.run_unit(meta, store, forged)
    assert compaction.unit_records(meta) == []                  # nothing written
    with pytest.raises(Exception, match="out of range"):
        make_unit(u.collection_id, u.partition_id, u.channel, u.kind, u.inputs, rows=-1)


def test_units_are_cut_to_fit_one_commit(meta, store, settings, monkeypatch):
    """A unit's commit rewrites every input record in one transaction: units are cut at
    MAX_INPUTS inputs and at MAX_RECORD_BYTES of input records."""
    from seglake.lifecycle.compaction import planning, policy as policy_mod
    from seglake.meta.codec import encode_struct

    w = Writer(meta, store, settings)
    w.create("t", ["_default"], shards=1)
    for step in range(7):
        w.insert("t", range(step * 10, step * 10 + 4))
        w.flush("t")
    segs = sorted(segments(meta, "t"), key=lambda s: s.segment_id)
    one = max(len(encode_struct(s)) for s in segs)
    monkeypatch.setattr(planning, "MAX_RECORD_BYTES", 2 * one)
    units = compaction.plan(meta, store, "t", policy(target_rows=10_000)).units
    assert [len(u.inputs) for u in units] == [2, 2, 2]        # 7 segments; a lone last one gains nothing
    monkeypatch.setattr(planning, "MAX_RECORD_BYTES", 10**9)
    monkeypatch.setattr(planning, "MAX_INPUTS", 3)
    units = compaction.plan(meta, store, "t", policy(target_rows=10_000)).units
    assert [len(u.inputs) for u in units] == [3, 3]
    assert policy_mod.MAX_INPUTS == 100
    before = exact(meta, store, "t")
    assert {r.status for r in compaction.run_units(meta, store, units)} == {compaction.COMMITTED}
    assert exact(meta, store, "t") == before


@pytest.mark.parametrize("name,db", [("a b", "default"), ("c", "x/y"), ("", "default"), ("c\n", "default")])
def test_plan_refuses_a_bad_name_before_reading_anything(meta, store, name, db):
    from seglake.errors import ValidationError

    with pytest.raises(ValidationError, match="invalid (collection|db) name"):
        compaction.plan(meta, store, name, policy(), db=db)
