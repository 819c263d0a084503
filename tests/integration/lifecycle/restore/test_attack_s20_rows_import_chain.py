"""Adversary s20 (issue 26 #1): a chain through IMPORTS (not restore-from-bundle) across
three etcd roots and back into the first, with restores of restores in between, writes
(partition-scoped deletes, upserts into each partition, collection-wide deletes) and a
compaction at every stop; every copy compared with the model of every acknowledged op."""

from __future__ import annotations

from seglake.lifecycle import compaction, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet, rows, run_restore, snap_and_restore

PARTS = ["_default", "p1", "p2"]


def _check(meta, store, name, model, where):
    got, want = rows(meta, store, name), model.visible()
    assert got == want, (where, sorted((got - want).items())[:6], sorted((want - got).items())[:6])
    return sum(want.values())


def _writes(w, name, k):
    b = 100 * k
    w.insert(name, range(b, b + 30), PARTS[k % 3], float(k))
    w.insert(name, range(b + 10, b + 20), PARTS[(k + 1) % 3], float(k) + 0.5)      # same pks, other partition
    w.flush(name)
    w.delete(name, range(b + 5, b + 15), partition=PARTS[(k + 1) % 3])             # scoped
    w.insert(name, range(b + 12, b + 18), PARTS[k % 3], float(k) + 0.25, upsert=True)
    w.insert(name, list(range(max(0, b - 100), max(0, b - 95))), PARTS[(k + 2) % 3], float(k) + 0.75,
             upsert=True)   # upsert pks of an earlier stop into another partition
    w.delete(name, [b + 1, b + 2, max(0, b - 99)], partition=None)                     # collection-wide
    w.flush(name)


def _compact(m, s, name):
    compaction.compact(m, s, name, compaction.Policy(min_segment_rows=1000, target_rows=25, delete_ratio=0.0,
                                                     protection=0.0, l0_age=0.0))


def test_an_import_chain_across_three_roots_and_back_equals_the_model(meta, store, settings, etcd_server, tmp_path):
    roots = [(meta, store, settings)]
    for tag in "bc":
        roots.append(other_root(etcd_server, tmp_path, tag))
    backup = LocalStore(tmp_path / "backup")
    audited = 0
    try:
        m, s, st = roots[0]
        w = Writer(m, s, st)
        w.create("src", PARTS)
        _writes(w, "src", 1)
        name = "src"
        audited += _check(m, s, name, w.model, "start")
        hop = 1
        for nxt in (1, 2, 0):      # A -> B -> C -> back into A (where "src" still lives)
            hop += 1
            _compact(m, s, name)
            audited += _check(m, s, name, w.model, (hop, "compacted"))
            snapshot.create(m, s, name, f"x{hop}")
            exports.export(m, s, backup, name, f"x{hop}", **quiet)
            m2, s2, st2 = roots[nxt]
            as_ = f"imp{hop}"
            imports.import_bundle(m2, s2, backup, name, f"x{hop}", as_collection=as_, **quiet)
            run_restore(m2, s2, as_, f"x{hop}", f"r{hop}", compare=False)
            m, s, st = m2, s2, st2
            w = Writer(m, s, st, w.model)
            name = f"r{hop}"
            audited += _check(m, s, name, w.model, (hop, "imported+restored"))
            _writes(w, name, hop)
            audited += _check(m, s, name, w.model, (hop, "written"))
            for k in range(3):          # a restore of a restore of a restore, writing between
                new = f"r{hop}_{k}"
                snap_and_restore(m, s, name, new)
                name = new
                w = Writer(m, s, st, w.model)
                _writes(w, name, 10 * hop + k)
                audited += _check(m, s, name, w.model, (hop, "chain", k))
        print("rows compared", audited)
    finally:
        for r in roots[1:]:
            r[0].close()


def test_an_imported_snapshot_exported_again_unrestored_equals_the_model(meta, store, settings, etcd_server,
                                                                         tmp_path):
    """Bundle -> import into B -> export THAT imported snapshot (its collection is in no
    catalog) to a second target -> import into C -> restore: rows equal the model."""
    mb, sb, stb = other_root(etcd_server, tmp_path, "b")
    mc, sc, stc = other_root(etcd_server, tmp_path, "c")
    try:
        w = Writer(meta, store, settings)
        w.create("src", PARTS)
        _writes(w, "src", 1)
        _writes(w, "src", 2)
        snapshot.create(meta, store, "src", "s1")
        t1, t2 = LocalStore(tmp_path / "t1"), LocalStore(tmp_path / "t2")
        exports.export(meta, store, t1, "src", "s1", **quiet)
        imports.import_bundle(mb, sb, t1, "src", "s1", **quiet)
        exports.export(mb, sb, t2, "src", "s1", bundle="again", **quiet)
        imports.import_bundle(mc, sc, t2, "src", "again", as_collection="src2", snapshot="s2", **quiet)
        run_restore(mc, sc, "src2", "s2", "final", compare=False)
        assert _check(mc, sc, "final", w.model, "imported, exported, imported, restored") > 0
    finally:
        mb.close()
        mc.close()
