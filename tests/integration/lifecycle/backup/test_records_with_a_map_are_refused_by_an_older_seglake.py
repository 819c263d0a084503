"""A rolling upgrade. delta_partitions is a new field of the etcd Segment record,
but the record's schema version stays v1, so a process still running the code before
d313d27 (an Airflow worker or Spark executor not yet upgraded) decodes the record
(msgspec skips the unknown field) and, on any write-back, re-encodes it WITHOUT the map.
Here: a restore from a bundle on root B whose copy job's finalize runs on an old worker
(its segment transition Importing -> Flushed: the first thing the old finalize does).
Without the map, the stripped delta logs would be read as the collection's OWN ids
(the old code knew no one-hop `source` translation for a bundle's ids). Root A's ids are lined up so that the id
root A wrote for partition p1 is, in root B, the id of partition _default: the scoped
delete of p1 is applied to _default, silently.

Expected: the rows of the model (or a refusal). Seen on d313d27: wrong rows, no error.
Now a record with a map is written as schema v2, which the old code refuses."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import subprocess

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.errors import SeglakeError
from seglake.lifecycle import copyjob, snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import bundle_restore
from seglake.meta.segments import FLUSHED, IMPORTING
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet, rows, three_partitions_with_a_scoped_delete

REPO = Path(__file__).resolve().parents[4]


def _old_module(path: str, name: str, **replace):
    """`path` as it was before d313d27, its imports of seglake modules in `replace`
    taken from the given (old) modules instead."""
    src = subprocess.run(["git", "-C", str(REPO), "show", f"d313d27^:{path}"],
                         check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType(name)
    sys.modules[name] = mod      # msgspec resolves the Structs' annotations through it
    saved = {k: sys.modules.get(k) for k in replace}
    sys.modules.update(replace)
    try:
        exec(compile(src, f"{name}.py", "exec"), mod.__dict__)
    finally:
        for k, v in saved.items():
            sys.modules[k] = v
    return mod


def _old_segments_module():
    """include/seglake/meta/segments.py and the record codec as they were before d313d27."""
    codec = _old_module("include/seglake/meta/codec.py", "old_codec")
    return _old_module("include/seglake/meta/segments.py", "old_segments", **{"seglake.meta.codec": codec})


def _import(meta2, store2, backup, old_finalize: bool):
    out = bundle_restore.restore_from_bundle(meta2, store2, backup, "src", "b", "back", engine="inline", **quiet)
    copyjob.plan(meta2, out["job_id"])
    copyjob.run_inline(meta2, store2, out["job_id"])
    if old_finalize:        # the not-yet-upgraded worker's finalize: its first write
        old = _old_segments_module()
        coll = meta2.catalog.get_by_name("back")
        refs = [s.ref for s in meta2.segments.list(coll.collection_id) if s.state == IMPORTING]
        # records with a map are v2: the old code refuses them instead of dropping the map
        with pytest.raises(SeglakeError, match="schema v2"):
            old.Segments(meta2).transition(refs, FLUSHED)
    copyjob.finalize(meta2, out["job_id"])
    return meta2.catalog.get_by_name("back")


def test_an_old_worker_refuses_records_with_a_map_instead_of_stripping_it(meta, store, settings, etcd_server,
                                                                             tmp_path):

    def source(pad: int):
        m, s, st = other_root(etcd_server, tmp_path / f"a{pad}", "a")
        m.ids.allocate(pad)
        w = Writer(m, s, st)
        three_partitions_with_a_scoped_delete(w)
        w.flush("src")
        assert rows(m, s, "src") == w.model.visible()
        snapshot.create(m, s, "src", "b")
        exports.export(m, s, LocalStore(tmp_path / f"backup{pad}"), "src", "b", **quiet)
        return m, w, {p.name: p.partition_id for p in m.catalog.get_by_name("src").partitions}

    # 1. learn where a fresh root B puts the import's partitions (deterministic)
    ma, w, a_ids = source(1000)
    mb, sb, _ = other_root(etcd_server, tmp_path / "b1", "b")
    b_ids = {p.name: p.partition_id for p in _import(mb, sb, LocalStore(tmp_path / "backup1000"), False).partitions}
    assert rows(mb, sb, "back") == w.model.visible()       # all new code: right
    mb.close()
    ma.close()
    # 2. root A again with its ids shifted so that A's id of p1 == B's id of _default
    pad = 1000 + b_ids["_default"] - a_ids["p1"]
    ma, w, a_ids = source(pad)
    mb, sb, _ = other_root(etcd_server, tmp_path / "b2", "b")
    try:
        coll = _import(mb, sb, LocalStore(tmp_path / f"backup{pad}"), True)
        own = {p.name: p.partition_id for p in coll.partitions}
        assert a_ids["p1"] == own["_default"], (a_ids, own)
        stripped = [s for s in mb.segments.list(coll.collection_id) if s.deltalogs and not s.delta_partitions]
        print("segments whose map the old worker dropped:", len(stripped))
        from seglake.lifecycle import restore, verify as cverify
        print(restore.compare_table(bundle_restore.compare_with_bundle(mb, sb, LocalStore(tmp_path / f"backup{pad}"),
                                                                "src", "b", "back")))
        rep = cverify.verify_collection(mb, sb, "back") if hasattr(cverify, "verify_collection") else None
        print("verify_collection:", rep and {k: rep.get(k) for k in ("ok", "visible_rows", "problem_count")})
        got = rows(mb, sb, "back")
        want = w.model.visible()
        assert got == want, f"missing {sorted(want - got)}; extra {sorted(got - want)}"
    finally:
        mb.close()
        ma.close()
