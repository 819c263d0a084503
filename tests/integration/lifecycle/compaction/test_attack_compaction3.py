"""Adversarial tests of compaction, third round (row-exact against the Model): lineage
across copies (restore, bundle import on another root: held); a fold stopped after its
files then runs with another policy and GC (held); and five defects, fixed: a delete log
hitting more segments than one fold's txn holds was never folded; a fold's txn over etcd's
request limit (big records) wedged folding; a dropped collection's compaction history
outlived it and was reported for a namesake; a corrupt unit record crashed the run, and
one stopped every GC run."""

from __future__ import annotations

import pytest

from seglake.lifecycle import compaction, snapshot
from seglake.meta.segments import DROPPED

from compaction_helpers import Writer, policy, rows
from etcd_root import root_state

pytestmark = pytest.mark.etcd


def _closed_lineage(meta, name: str) -> list[str]:
    """Problems with the collection's compaction lineage: every id an output names in
    `compacted_from` must be a segment OF THIS COLLECTION, Dropped, compacted into it
    (ids are local to one etcd root and one collection; no GC ran in these tests)."""
    coll = meta.catalog.get_by_name(name)
    segs = {s.segment_id: s for s in meta.segments.list(coll.collection_id)}
    bad = []
    for s in segs.values():
        for f in s.compacted_from:
            src = segs.get(f)
            if src is None or src.state != DROPPED or src.compacted_to != s.segment_id:
                bad.append(f"segment {s.segment_id} names {f} as an input, which is "
                           f"{'no segment of ' + name if src is None else f'{src.state} -> {src.compacted_to}'}")
    return bad


def _compacted_src(meta, store, settings, name: str = "src") -> Writer:
    w = Writer(meta, store, settings)
    w.create(name, ["_default", "p1"], shards=1)
    for i in range(4):
        w.insert(name, range(10 * i, 10 * i + 6), "p1", float(i))
        w.flush(name)
    w.delete(name, [1, 11], partition="p1")
    w.flush(name)
    s = compaction.compact(meta, store, name, policy())
    assert s.results and all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    assert not _closed_lineage(meta, name)
    assert rows(meta, store, name) == w.model.visible()
    return w


def test_a_restored_copy_of_a_compaction_output_names_no_source_ids_as_its_inputs(meta, store, settings):
    from copy_model_helpers import snap_and_restore
    w = _compacted_src(meta, store, settings)
    snap_and_restore(meta, store, "src", "r1")
    assert rows(meta, store, "r1") == w.model.visible()
    assert _closed_lineage(meta, "r1") == []
    # the copy compacted again: its own lineage, closed
    w.insert("r1", [100, 101], "p1", 9.0)
    w.flush("r1")
    w.delete("r1", [2])
    w.flush("r1")
    compaction.compact(meta, store, "r1", policy())
    assert _closed_lineage(meta, "r1") == []
    assert rows(meta, store, "r1") == w.model.visible()


def test_a_bundle_imported_on_another_root_names_no_source_ids_as_inputs(meta, store, settings, etcd_server,
                                                                          tmp_path):
    from seglake.lifecycle.backup import export as exports
    from seglake.storage.local import LocalStore
    from bundle_restore_helpers import restore_bundle
    from copy_model_helpers import other_root, quiet

    w = _compacted_src(meta, store, settings)
    backup = LocalStore(tmp_path / "backup")
    snapshot.create(meta, store, "src", "x1")
    exports.export(meta, store, backup, "src", "x1", **quiet)
    meta2, store2, _ = other_root(etcd_server, tmp_path, "b")
    try:
        restore_bundle(meta2, store2, backup, "src", "x1", "b1")
        assert rows(meta2, store2, "b1") == w.model.visible()
        assert _closed_lineage(meta2, "b1") == []
    finally:
        meta2.close()


def test_a_purged_collections_compaction_history_goes_with_it_and_never_reports_for_a_namesake(
        meta, store, settings):
    """A dropped collection's compaction records (last run, history lines) go with its
    record, like its policy; a new collection of the same name is never reported
    (metrics, history) with the old one's compactions."""
    import sys
    from pathlib import Path

    from seglake import metrics
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "console"))
    from test_console_and_metrics import parse

    w = _compacted_src(meta, store, settings, "hx")
    old = meta.catalog.get_by_name("hx").collection_id
    assert compaction.history(meta, old)
    lab = '{collection="hx",db="default"}'
    assert lab in parse(metrics.render(meta, store))["seglake_collection_last_compaction_age_seconds"]
    # dropped (not purged yet) and made again under the same name: the new one was never compacted
    from seglake.lifecycle import drop, gc
    from seglake.lifecycle.flush import flush_pchannel
    from wal_helpers import pchannels
    coll = meta.catalog.get_by_name("hx")
    drop.begin_drop(meta, store, settings, "hx")
    for pch in pchannels(coll):
        flush_pchannel(meta, store, pch, settings, flush_all=True)
    drop.finish_drop(meta, "hx")
    w.create("hx", ["_default"], shards=1)
    m = parse(metrics.render(meta, store))
    for fam in ("seglake_collection_last_compaction_age_seconds", "seglake_compaction_last_rows_dropped",
                "seglake_compaction_last_segments_after"):
        assert lab not in m.get(fam, {}), (fam, m.get(fam))
    # purged: its compaction records are gone with it
    for _ in range(2):
        gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True, copy_job_retention=0.0,
                                                       collection_id=old))
    assert meta.kv.get(meta.keys.collection(old)) is None, "GC did not purge the collection"
    assert compaction.history(meta, old) == []
    assert compaction.last_run(meta, old) is None


def test_a_delete_log_that_hits_more_segments_than_one_fold_txn_holds_is_still_folded(meta, store, settings):
    """A collection-wide delete of scattered pks hits every segment; more hits than one
    fold's txn holds (MAX_FOLD_OPS) must not leave the delete log unfoldable for ever:
    the runs converge to no delete log, row-exact, the hidden rows physically gone."""
    n = compaction.MAX_FOLD_OPS // 2 + 5          # hits: more than one fold txn takes
    w = Writer(meta, store, settings)
    w.create("wide", ["_default"], shards=1)
    for i in range(n):
        w.insert("wide", [10 * i + 1, 10 * i + 2], "_default", float(i))
        w.flush("wide")
    w.delete("wide", [10 * i + 1 for i in range(n)])          # one row of every segment
    w.flush("wide")
    assert rows(meta, store, "wide") == w.model.visible()
    # segments of >= 1 row are big; no deleted fraction rewrites them (only folding can act)
    pol = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    cid = meta.catalog.get_by_name("wide").collection_id
    dry = compaction.compact(meta, store, "wide", pol, dry_run=True)       # shows what the run does
    assert dry.plan.units and not compaction.history(meta, cid) and not compaction.unit_records(meta, cid)
    for i in range(6):
        s = compaction.compact(meta, store, "wide", pol)
        if i == 0:
            assert [u.unit_id for u in s.plan.units] == [u.unit_id for u in dry.plan.units]
            assert s.plan.gain() == dry.plan.gain()
        assert s.counts()["lost"] == 0, s.to_json()
        assert rows(meta, store, "wide") == w.model.visible()
        if not s.plan.units:
            break
    coll = meta.catalog.get_by_name("wide")
    left = [x.segment_id for x in meta.segments.list(coll.collection_id, states=["Flushed"]) if x.deltalogs]
    assert not left, f"delete logs never folded: segments {left}"
    stored = sum(x.num_rows for x in meta.segments.list(coll.collection_id, states=["Flushed"]))
    assert stored == sum(w.model.visible().values())


def test_a_fold_of_delete_logs_with_big_records_fits_one_etcd_request(meta, store, settings):
    """Delete logs scoped to many long-named partitions make big segment records (their
    delta_partitions maps): a fold's ONE txn rewrites every input's record, so the planner
    must keep it under etcd's request limit (else the commit fails, the same plan every
    run: the collection's folding wedged)."""
    from seglake.wal.client import WalClient

    parts = ["_default"] + [f"p{i:04d}_" + "x" * 248 for i in range(1023)]
    w = Writer(meta, store, settings)
    w.create("big", parts, shards=1)
    w.insert("big", [1, 2, 3], parts[5], 1.0)
    w.flush("big")
    cycles = 6
    with WalClient(meta, store, settings) as c:
        for k in range(cycles):
            for i, p in enumerate(parts):
                pk = 1 if (k, i) == (0, 5) else 100_000 + k * 10_000 + i       # one hides a row
                c.delete("big", [pk], partition=p)
                w.model.delete([pk], p)
            w.flush("big")
    assert rows(meta, store, "big") == w.model.visible()
    coll = meta.catalog.get_by_name("big")
    carriers = [s for s in meta.segments.list(coll.collection_id, states=["Flushed"]) if s.deltalogs]
    assert len(carriers) >= cycles
    pol = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    for _ in range(cycles + 2):
        s = compaction.compact(meta, store, "big", pol)
        assert s.counts()["lost"] == 0, s.to_json()
        assert rows(meta, store, "big") == w.model.visible()
        if not s.plan.units:
            break
    left = [x.segment_id for x in meta.segments.list(coll.collection_id, states=["Flushed"]) if x.deltalogs]
    assert not left, f"delete logs never folded: segments {left}"


def test_a_fold_interrupted_after_its_files_then_runs_with_another_policy_then_gc(meta, store, settings):
    """A fold stopped after writing its outputs' files; the next runs use another policy
    (no folding: merges take its L0 input and hits), then the first policy again; GC's
    expiry of the abandoned fold record removes exactly its outputs' files: rows exact,
    no segment compacted twice, no file of the collection unreferenced at the end."""
    from seglake.lifecycle import gc
    from seglake.storage import layout

    w = Writer(meta, store, settings)
    w.create("ki", ["_default", "p1"], shards=1)
    for i in range(4):
        w.insert("ki", range(10 * i, 10 * i + 5), "p1" if i % 2 else "_default", float(i))
        w.flush("ki")
    w.delete("ki", [0, 11, 22])
    w.flush("ki")
    coll = meta.catalog.get_by_name("ki")
    fold = compaction.Policy(min_segment_rows=1, target_rows=10**6, delete_ratio=1.0, protection=0.0, l0_age=0.0)
    p = compaction.plan(meta, store, "ki", fold)
    units = [u for u in p.units if u.kind == compaction.FOLD]
    assert units, p.to_json()

    class Stop(Exception):
        pass

    def stop(_u):
        raise Stop()
    with pytest.raises(Stop):
        compaction.run_unit(meta, store, units[0], hooks={"after_files": stop}, sources_revision=p.revision)
    rec = [r for r in compaction.unit_records(meta, coll.collection_id) if r["state"] == compaction.PREPARED]
    assert len(rec) == 1 and rec[0]["outputs"]
    outs = [(pid, o) for (_, pid, _), o in zip(rec[0]["unit"]["hits"], rec[0]["outputs"])]
    assert all(list(store.list(layout.segment_dirs(coll.collection_id, pid, o)[0])) for pid, o in outs)
    assert rows(meta, store, "ki") == w.model.visible()
    merge = compaction.Policy(min_segment_rows=1000, target_rows=10**6, protection=0.0, l0_age=3600.0)
    s = compaction.compact(meta, store, "ki", merge)
    assert s.results and s.counts()["lost"] == 0, s.to_json()
    assert rows(meta, store, "ki") == w.model.visible()
    for _ in range(3):
        compaction.compact(meta, store, "ki", fold)
        assert rows(meta, store, "ki") == w.model.visible()
    gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, force=True, copy_job_retention=0.0,
                                                   collection_id=coll.collection_id))
    for pid, o in outs:             # the abandoned fold's files are gone, and no record names them
        assert not [x for d in layout.segment_dirs(coll.collection_id, pid, o) for x in store.list(d)]
        assert meta.kv.get(meta.keys.segment(coll.collection_id, pid, o)) is None
    segs = list(meta.segments.list(coll.collection_id))
    assert all(s.state != DROPPED for s in segs), "GC at zero tolerance left Dropped records"
    referenced = {f.key for s in segs for f in layout.segment_files(s)}
    stored = {o.key for o in store.list("") if f"/{coll.collection_id}/" in o.key and layout.parse_key(o.key)}
    assert referenced and stored == referenced, sorted(stored ^ referenced)[:10]
    assert rows(meta, store, "ki") == w.model.visible()


@pytest.mark.parametrize("edit", [{"state": "committed"}, {"state": "done"},
                                  {"result": {"bogus": 1}, "state": "committed"}, {"output": "12"},
                                  {"sources_revision": None}])
def test_a_corrupt_unit_record_is_refused_naming_it(meta, store, settings, edit):
    """A unit record edited by hand (or corrupt) is refused with an error that names it,
    before anything is written: not a KeyError/TypeError from deep inside the run."""
    from seglake.meta.codec import decode, encode

    w = Writer(meta, store, settings)
    w.create("ed", ["_default"], shards=1)
    for i in range(3):
        w.insert("ed", range(10 * i, 10 * i + 3), "_default", float(i))
        w.flush("ed")
    p = compaction.plan(meta, store, "ed", policy())
    assert len(p.units) == 1
    u = p.units[0]
    coll = meta.catalog.get_by_name("ed")
    compaction.prepare(meta, coll, u, 1.0, p.revision)
    key = meta.keys.compaction_unit(u.collection_id, u.unit_id)
    rec = decode(meta.kv.get(key).value, key)
    if edit.get("state") == "committed" and "result" not in edit:
        rec.pop("result", None)
    meta.kv.put(key, encode({**rec, **edit}))
    rev = root_state(meta)
    with pytest.raises(compaction.CompactionError, match="corrupt|edited"):
        compaction.run_unit(meta, store, u, sources_revision=p.revision)
    assert root_state(meta) == rev                         # nothing written
    assert rows(meta, store, "ed") == w.model.visible()


def test_gc_skips_a_corrupt_abandoned_unit_record_and_goes_on(meta, store, settings):
    """GC's expiry of unit records meets a corrupt PREPARED record (past retention): it is
    left alone (nothing deleted for it: fail closed) and the rest of GC's records step
    still runs -- a crash there stopped every GC run for good."""
    from seglake.lifecycle import gc
    from seglake.meta.codec import decode, encode

    w = Writer(meta, store, settings)
    w.create("gx", ["_default"], shards=1)
    for i in range(3):
        w.insert("gx", range(10 * i, 10 * i + 3), "_default", float(i))
        w.flush("gx")
    coll = meta.catalog.get_by_name("gx")
    p = compaction.plan(meta, store, "gx", policy())
    u = p.units[0]
    compaction.prepare(meta, coll, u, 1.0, p.revision)
    key = meta.keys.compaction_unit(u.collection_id, u.unit_id)
    rec = decode(meta.kv.get(key).value, key)
    meta.kv.put(key, encode({**rec, "output": None, "prepared_at": 1.0}))
    # a second, healthy abandoned record, expired by the same GC run
    w.insert("gx", [100, 101], "_default", 5.0)
    w.flush("gx")
    w.insert("gx", [102], "_default", 5.0)
    w.flush("gx")
    p2 = compaction.plan(meta, store, "gx", policy())
    u2 = [x for x in p2.units if x.unit_id != u.unit_id][0]
    compaction.prepare(meta, coll, u2, 1.0, p2.revision)
    gc.run(meta, store, gc.GCOptions.from_settings(settings, copy_job_retention=0.0, force=True,
                                                   collection_id=coll.collection_id))
    states = {r["unit"]["unit_id"]: r["state"] for r in compaction.unit_records(meta, coll.collection_id)}
    assert states[u2.unit_id] == compaction.LOST          # GC went on past the corrupt one
    assert states[u.unit_id] == compaction.PREPARED       # left alone
    assert rows(meta, store, "gx") == w.model.visible()
