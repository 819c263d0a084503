"""Adversary s24 (issue 26 item 4): two imports of ONE bundle under two names at once. Import
A has written its import record and not yet its PENDING snapshot when import B (another
name) reads it: B sees no snapshot and takes the record over while A is alive; B's
takeover then discards "the failed import's" snapshot and files -- A's, mid-copy.
Expected: the running import completes and the later one is refused, naming it; every
COMMITTED imported snapshot restores exactly the bundle's rows. On main A failed
(SnapshotLost) -- or, between B's file delete and its purge, could have reported success
for a snapshot the purge then removed."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lifecycle" / "restore"))

from seglake import faults
from seglake.errors import Conflict
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports
from seglake.meta.snapshots import COMMITTED
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet, rows, run_restore


def test_two_imports_of_one_bundle_at_once_never_commit_a_snapshot_without_its_files(meta, store, settings,
                                                                                     etcd_server, tmp_path,
                                                                                     monkeypatch):
    meta2, store2, settings2 = other_root(etcd_server, tmp_path, "race")
    backup = LocalStore(tmp_path / "backup")
    try:
        w = Writer(meta, store, settings)
        w.create("src", ["_default", "p1"])
        for i in range(4):                                  # a few segments: several files to copy
            w.insert("src", range(10 * i, 10 * i + 10), "p1", float(i))
            w.flush("src")
        w.delete("src", [3, 4], partition="p1")
        w.flush("src")
        want = w.model.visible()
        snapshot.create(meta, store, "src", "s1")
        exports.export(meta, store, backup, "src", "s1", **quiet)

        recorded, go, a_copied, b_done = (threading.Event() for _ in range(4))
        real_record, real_take_over, real_point = imports._import_record, imports._take_over, faults.point
        out = {}

        def record(*a, **kw):
            plan = real_record(*a, **kw)
            if threading.current_thread().name == "A":
                recorded.set()
                assert go.wait(30)
            return plan

        def take_over(*a, **kw):
            go.set()                                       # A goes on: PENDING snapshot, first file
            assert a_copied.wait(30)
            try:
                return real_take_over(*a, **kw)
            finally:
                b_done.set()

        def point(name):
            if name == "import.after_file" and threading.current_thread().name == "A" and not a_copied.is_set():
                a_copied.set()
                b_done.wait(30)                            # A mid-copy while B takes over
            return real_point(name)

        monkeypatch.setattr(imports, "_import_record", record)
        monkeypatch.setattr(imports, "_take_over", take_over)
        monkeypatch.setattr(faults, "point", point)

        def run_a():
            try:
                out["A"] = imports.import_bundle(meta2, store2, backup, "src", "s1", as_collection="a", threads=1,
                                                 **quiet)
            except Exception as e:  # noqa: BLE001 - judged below
                out["A"] = e

        ta = threading.Thread(target=run_a, name="A")
        ta.start()
        assert recorded.wait(30)
        try:
            out["B"] = imports.import_bundle(meta2, store2, backup, "src", "s1", as_collection="b", threads=1,
                                             **quiet)
        except Exception as e:  # noqa: BLE001
            out["B"] = e
        go.set()
        a_copied.set()
        b_done.set()
        ta.join(60)
        monkeypatch.undo()
        print({k: (type(v).__name__, str(v)[:160]) if isinstance(v, Exception) else v.get("snapshot_id")
               for k, v in out.items()})
        ok = [k for k, v in out.items() if not isinstance(v, Exception)]
        # the import already running completes; the later one is refused, naming it (on main
        # 3b511f4 B took A's record over and purged A's snapshot mid-copy: A SnapshotLost)
        assert ok == ["A"], {k: repr(v)[:200] for k, v in out.items()}
        assert isinstance(out["B"], Conflict) and "right now" in str(out["B"]), out["B"]
        for k in ok:
            name = "a" if k == "A" else "b"
            rec = meta2.snapshots.find(out[k]["collection_id"], "s1")
            assert rec is not None and rec.state == COMMITTED, (k, rec)
            run_restore(meta2, store2, name, "s1", f"r{name}", compare=False)
            got = rows(meta2, store2, f"r{name}")
            assert got == want, (k, sorted((got - want).items())[:5], sorted((want - got).items())[:5])
    finally:
        meta2.close()
