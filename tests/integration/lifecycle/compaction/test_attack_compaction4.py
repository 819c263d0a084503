"""Adversarial tests of compaction, fourth round: records written for a collection that GC
purged while they were being made (a compaction run's last-run + history lines, a policy
set while its collection went away) outlived it for ever -- and an orphan scheduled policy
made every scheduled compaction run report a failure."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from seglake.lifecycle import compaction, drop, gc
from seglake.lifecycle.compaction import compacting, policies
from seglake.lifecycle.flush import flush_pchannel

from compaction_helpers import Writer, exact, policy, rows

pytestmark = pytest.mark.etcd


def _drop_and_purge(meta, store, settings, name: str) -> int:
    """The whole drop of `name` and GC's purge of its record (zero tolerances)."""
    from wal_helpers import pchannels
    coll = meta.catalog.get_by_name(name)
    drop.begin_drop(meta, store, settings, name)
    for pch in pchannels(coll):
        flush_pchannel(meta, store, pch, settings, flush_all=True)
    drop.finish_drop(meta, name)
    for _ in range(2):
        gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True, copy_job_retention=0.0,
                                                       collection_id=coll.collection_id))
    assert meta.kv.get(meta.keys.collection(coll.collection_id)) is None, "GC did not purge the collection"
    return coll.collection_id


def _small(meta, store, settings, name: str) -> Writer:
    w = Writer(meta, store, settings)
    w.create(name, ["_default", "p1"], shards=1)
    for i in range(3):
        w.insert(name, range(10 * i, 10 * i + 5), "p1", float(i))
        w.flush(name)
    return w


def _orphans(meta, cid: int) -> list[str]:
    keys = [meta.keys.compaction_run(cid), meta.keys.compaction_policy(cid)]
    out = [k for k in keys if meta.kv.get(k) is not None]
    out += [kv.key for kv in meta.kv.range(meta.keys.compaction_history_prefix(cid), keys_only=True)]
    return out


def test_a_compaction_run_whose_collection_is_purged_meanwhile_leaves_no_record(meta, store, settings,
                                                                                monkeypatch):
    """A compaction whose units committed, then its collection dropped and purged by GC
    before the run's summary is recorded (a Spark driver records after its executors are
    done): the summary must not be recorded for a collection id that no longer exists
    (nothing would ever remove it; the page's history of every collection showed it)."""
    w = _small(meta, store, settings, "gone")
    real = compacting.run_units
    seen = {}

    def purge_then_run(meta_, store_, units, **kw):
        out = real(meta_, store_, units, **kw)
        seen["cid"] = _drop_and_purge(meta, store, settings, "gone")
        return out

    monkeypatch.setattr(compacting, "run_units", purge_then_run)
    s = compaction.compact(meta, store, "gone", policy())
    assert s.plan.units and "cid" in seen
    assert all(r.status == compaction.COMMITTED for r in s.results), s.to_json()
    assert _orphans(meta, seen["cid"]) == []
    assert compaction.history(meta) == []       # the page's history of every collection
    # a new namesake has no compaction record of the old one
    w.create("gone", ["_default"], shards=1)
    new = meta.catalog.get_by_name("gone").collection_id
    assert compaction.last_run(meta, new) is None and compaction.history(meta, new) == []


def test_a_policy_set_while_its_collection_is_purged_is_not_left_behind(meta, store, settings, monkeypatch):
    """set_policy reads the collection, then writes; GC purging the collection in between
    left a scheduled policy for an id that no longer exists: no GC removes it (GC deletes a
    policy with the collection's record) and every scheduled run reported it FAILED."""
    _small(meta, store, settings, "pp")
    real = policies._collection
    seen = {}

    def read_then_purge(meta_, collection, db):
        coll = real(meta_, collection, db)
        if not seen:
            seen["cid"] = _drop_and_purge(meta, store, settings, "pp")
        return coll

    monkeypatch.setattr(policies, "_collection", read_then_purge)
    with pytest.raises(Exception) as e:
        policies.set_policy(meta, settings, "pp", {"min_segment_rows": 7}, scheduled=True)
    assert "pp" in str(e.value)
    monkeypatch.setattr(policies, "_collection", real)
    assert _orphans(meta, seen["cid"]) == []
    report = policies.run_scheduled(meta, store, settings)
    assert [r for r in report if "error" in r] == [], report


def _fuzz_policy(rng) -> "compaction.Policy":
    return policy(min_segment_rows=int(rng.choice([1, 3, 8, 1000])), target_rows=int(rng.choice([1, 5, 20, 10_000])),
                  delete_ratio=float(rng.choice([0.0, 0.3, 1.0])), l0_age=0.0,
                  min_segment_bytes=int(rng.choice([0, 0, 10_000])), target_bytes=int(rng.choice([1, 1 << 30])))


def _write_step(w, meta, store, settings, pchs, rng, op: str, pks, part: str, v: float) -> bool:
    """One write step of the fuzzes (insert, upsert, delete in a partition or wide, flush one
    pchannel): True when `op` is one of them."""
    if op in ("ins", "ups"):
        w.insert("fz", pks, part, v, upsert=op == "ups")
    elif op == "del":
        w.delete("fz", pks, partition=part)
    elif op == "wide":
        w.delete("fz", pks)
    elif op == "flush1":
        flush_pchannel(meta, store, pchs[int(rng.integers(0, len(pchs)))], settings, flush_all=True)
    else:
        return False
    return True


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("ATTACK_FUZZ_SEEDS", "1,2,3,4").split(",")])
def test_fuzz_partial_flushes_scoped_and_wide_deletes_upserts_compactions_row_exact(meta, store, settings, seed):
    """Random acknowledged writes (inserts, upserts, scoped and collection-wide deletes of a
    small pk range, so they collide across partitions and vchannels) on 2 shards, flushed
    ONE pchannel at a time (the vchannels' checkpoints apart: folding's per-vchannel rule),
    compacted with random policies (folds on: l0_age 0), GC with zero tolerances between:
    a compaction never changes the visible rows (row-exact: pk, row id, ts, partition, v);
    after a full flush the visible rows == the Model, and stay so through more compactions."""
    import numpy as np
    from wal_helpers import pchannels

    rng = np.random.default_rng(seed)
    w = Writer(meta, store, settings)
    parts = ["_default", "p1", "p2"]
    w.create("fz", parts, shards=2)
    coll = meta.catalog.get_by_name("fz")
    pchs = sorted(pchannels(coll))
    kinds = Counter()
    for step in range(int(os.environ.get("ATTACK_FUZZ_STEPS", "80"))):
        op = rng.choice(["ins", "ins", "ups", "del", "wide", "flush1", "compact", "gc"])
        pks = sorted({int(x) for x in rng.integers(0, 24, size=int(rng.integers(1, 6)))})
        part = str(rng.choice(parts))
        v = float(step)
        if _write_step(w, meta, store, settings, pchs, rng, op, pks, part, v):
            pass
        elif op == "compact":
            before = exact(meta, store, "fz")     # what the Flushed segments show (the WAL's tail is not read)
            s = compaction.compact(meta, store, "fz", _fuzz_policy(rng))
            assert all(r.status != compaction.LOST for r in s.results), (step, s.to_json())
            kinds.update(u.kind for u in s.plan.units)
            assert exact(meta, store, "fz") == before, (seed, step, s.to_json())
        else:
            gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                           force=True, copy_job_retention=0.0,
                                                           collection_id=coll.collection_id))
    w.flush("fz")
    assert rows(meta, store, "fz") == w.model.visible(), dict(kinds)
    for _ in range(3):
        before = exact(meta, store, "fz")
        compaction.compact(meta, store, "fz", _fuzz_policy(rng))
        assert exact(meta, store, "fz") == before
        assert rows(meta, store, "fz") == w.model.visible()


def test_a_target_planned_for_one_collection_never_compacts_a_namesake_made_since(meta, store, settings):
    """The compaction DAG plans its targets (names + policies) in one task and compacts them
    in the next (inline, or a Spark job given --targets). A scheduled collection dropped and
    made again under its name in between: the run compacted the NEW collection (which has no
    policy: "only compacted when asked") with the old one's policy, and a target dropped for
    good made the whole task fail (NotFound), so the later targets were never compacted.
    A target names its collection id: another collection under the name is skipped, said why."""
    from wal_helpers import pchannels

    _small(meta, store, settings, "ns")
    _small(meta, store, settings, "other")
    policies.set_policy(meta, settings, "ns", {"min_segment_rows": 1000, "target_rows": 40}, scheduled=True)
    policies.set_policy(meta, settings, "other", {"min_segment_rows": 1000, "target_rows": 40}, scheduled=True)
    planned = [t for t in policies.scheduled_targets(meta, settings, {"protection": 0.0})]
    text = policies.targets_json(planned)
    # (the next task starts:) ns dropped and made again, with rows of its own
    old = meta.catalog.get_by_name("ns")
    drop.begin_drop(meta, store, settings, "ns")
    for pch in pchannels(old):
        flush_pchannel(meta, store, pch, settings, flush_all=True)
    drop.finish_drop(meta, "ns")
    w = _small(meta, store, settings, "ns")
    new = meta.catalog.get_by_name("ns")
    before = exact(meta, store, "ns")
    segs = sorted(s.segment_id for s in meta.segments.list(new.collection_id))
    done = {}
    for t in policies.parse_targets(text):
        s = compaction.compact(meta, store, t["collection"], t["policy"], db=t["db"],
                               collection_id=t.get("collection_id"), trigger="scheduled")
        done[t["collection"]] = s
    assert not done["ns"].plan.units and "ns" in (done["ns"].plan.skipped or ""), done["ns"].to_json()
    assert sorted(s.segment_id for s in meta.segments.list(new.collection_id)) == segs   # untouched
    assert exact(meta, store, "ns") == before and rows(meta, store, "ns") == w.model.visible()
    assert compaction.history(meta, new.collection_id) == []
    assert done["other"].results and all(r.status == compaction.COMMITTED for r in done["other"].results)
    # dropped for good (name free): skipped too, the next target still compacted
    _small(meta, store, settings, "third")
    policies.set_policy(meta, settings, "third", {"target_rows": 40}, scheduled=True)
    policies.set_policy(meta, settings, "ns", {"target_rows": 40}, scheduled=True)     # the new ns, chosen
    text = policies.targets_json([t for t in policies.scheduled_targets(meta, settings, {"protection": 0.0})
                                  if "policy" in t])
    _drop_and_purge(meta, store, settings, "ns")
    out = [compaction.compact(meta, store, t["collection"], t["policy"], db=t["db"],
                              collection_id=t.get("collection_id")) for t in policies.parse_targets(text)]
    assert sorted(s.plan.collection for s in out) == ["ns", "other", "third"]
    assert any(s.plan.skipped and "ns" in s.plan.skipped for s in out)
    assert any(s.plan.collection == "third" and s.results for s in out)


@pytest.mark.parametrize("seed", [int(x) for x in os.environ.get("ATTACK_FUZZ_SEEDS2", "7,8").split(",")])
def test_fuzz_snapshots_pins_drops_restores_of_a_collection_compacted_and_gc_d_between(meta, store, settings,
                                                                                       seed):
    """Random writes (partial flushes), compactions (random policies, folds on), snapshots,
    pins and unpins, snapshot drops, GC with zero tolerances, and restores of a random live
    snapshot (each copy compacted again): every restore equals the rows its snapshot saw,
    and the copy's rows survive its own compaction (row-exact); at the end rows == Model."""
    import numpy as np
    from copy_model_helpers import run_restore
    from seglake.lifecycle import snapshot
    from wal_helpers import pchannels

    rng = np.random.default_rng(seed)
    w = Writer(meta, store, settings)
    parts = ["_default", "p1", "p2"]
    w.create("fz", parts, shards=2)
    coll = meta.catalog.get_by_name("fz")
    pchs = sorted(pchannels(coll))
    snaps, pins, restores = {}, {}, 0

    def gc_all():
        gc.run(meta, store, gc.GCOptions.from_settings(settings, drop_tolerance=0.0, missing_tolerance=0.0,
                                                       force=True, copy_job_retention=0.0))

    for step in range(int(os.environ.get("ATTACK_FUZZ_STEPS2", "60"))):
        op = rng.choice(["ins", "ins", "ups", "del", "wide", "flush1", "flush1", "compact", "compact", "gc",
                         "snap", "pin", "unpin", "dropsnap", "restore"])
        pks = sorted({int(x) for x in rng.integers(0, 24, size=int(rng.integers(1, 6)))})
        part, v = str(rng.choice(parts)), float(step)
        if _write_step(w, meta, store, settings, pchs, rng, op, pks, part, v):
            pass
        elif op == "compact":
            before = exact(meta, store, "fz")
            s = compaction.compact(meta, store, "fz", _fuzz_policy(rng))
            assert exact(meta, store, "fz") == before, (seed, step, s.to_json())
        elif op == "gc":
            gc_all()
        elif op == "snap":
            name = f"s{step}"
            snapshot.create(meta, store, "fz", name)
            snaps[name] = None
            snaps[name] = rows(meta, store, "fz")      # (a snapshot of the Flushed segments)
        elif op == "pin" and snaps:
            name = sorted(snaps)[int(rng.integers(0, len(snaps)))]
            pins[snapshot.pin(meta, "fz", name, 3600.0)["pin_id"]] = name
        elif op == "unpin" and pins:
            pid = sorted(pins)[0]
            del pins[pid]
            snapshot.unpin(meta, pid)
        elif op == "dropsnap" and snaps:
            name = sorted(snaps)[int(rng.integers(0, len(snaps)))]
            if name not in pins.values():
                snapshot.drop(meta, store, "fz", name)
                del snaps[name]
        elif op == "restore" and snaps:
            name = sorted(snaps)[int(rng.integers(0, len(snaps)))]
            restores += 1
            target = f"r{step}"
            run_restore(meta, store, "fz", name, target, compare=False)
            assert rows(meta, store, target) == snaps[name], (seed, step, name)
            before = exact(meta, store, target)
            compaction.compact(meta, store, target, _fuzz_policy(rng))
            gc_all()
            assert exact(meta, store, target) == before, (seed, step, name)
            assert rows(meta, store, target) == snaps[name], (seed, step, name)
    w.flush("fz")
    gc_all()
    assert rows(meta, store, "fz") == w.model.visible()
    for name, seen in snaps.items():
        run_restore(meta, store, "fz", name, f"end_{name}", compare=False)
        assert rows(meta, store, f"end_{name}") == seen, (seed, name)
