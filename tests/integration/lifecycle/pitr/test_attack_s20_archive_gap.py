"""attack-s20: an archived fragment's DATA object missing from the backup target (its entry
JSON still there: a lifecycle rule, a partial copy of the bucket, an operator's rm of
*.frag) is a gap of the log a restore from the target needs. Issue 30 deliver 6: refused
before anything is created, saying which fragments are missing -- as a missing fragment of
this store's log is (planning._check_log lists the store). from_target._check_archive
checks the entries only: the restore sets up its target and copy job, and only the
replay finds the fragment gone (target left Importing, a copy job Completed)."""

from __future__ import annotations

from seglake.errors import SeglakeError
from seglake.lifecycle import pitr, retention
from seglake.lifecycle.backup import archive
from seglake.lifecycle.pitr import from_target
from seglake.lifecycle.pitr.planning import LogGap
from seglake.storage import layout
from seglake.storage.local import LocalStore
from seglake.wal.client import WalClient

from pitr_model import SCHEMA, Model, export_and_archive, rows, source_with_s1


def test_a_missing_archived_fragment_is_refused_before_anything_is_created(meta, store, settings, tmp_path):
    target = LocalStore(tmp_path / "backup")
    with WalClient(meta, store, settings) as c:
        coll, model = source_with_s1(c, meta, store, settings)
        export_and_archive(meta, store, settings, target, coll, "s2")
        for i in range(6):   # several fragments after the bundle's positions
            model.record(c.insert("src", rows(range(100 + 10 * i, 110 + 10 * i), 2.0)), 2.0)
            c.flush("src")
        t = meta.tso.now()
    site = archive.run(meta, store, target)["site"]
    p, _ = from_target.plan_from_target(meta, target, "src", t)
    (pch, (first, last)), = [(k, v) for k, v in p.fragments.items() if v[1] > v[0]][:1]
    victim = (first + last) // 2
    assert archive.read_entry(target, site, pch, victim) is not None
    target.delete_many([layout.archive_fragment(site, pch, victim)])
    jobs_before = meta.kv.count(meta.keys.copy_jobs_prefix())
    try:
        from_target.restore_as_of_from_target(meta, store, target, "src", "r", t)
        refused = None
    except SeglakeError as e:   # (LogGap, CorruptFragment)
        refused = e
    made = [c.name for c in meta.catalog.list(include_dropped=True) if c.name == "r"]
    assert refused is not None and not made and meta.kv.count(meta.keys.copy_jobs_prefix()) == jobs_before, (
        f"archived fragment #{victim} of {pch} missing: refused={refused!r}; created: {made}, copy jobs "
        f"{jobs_before} -> {meta.kv.count(meta.keys.copy_jobs_prefix())}")
    assert f"{victim}" in str(refused)
