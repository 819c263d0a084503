"""Adversary s20 (issue 26 #6 / deliver 5: "Exports never commit what verify would fail:
a reused target file is checked by content"). On a local target, a data file's tag is
its size and mtime: a data file damaged in place whose mtime is put back (what `cp -p`,
`rsync -a` or `touch -r` do when a file is restored from a damaged copy) is trusted by the
next incremental export, which commits a bundle verify fails. (docs/BUNDLE.md says this
case is verify's to find; the issue asked that the export not commit it.)"""

from __future__ import annotations

import os

from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import verify
from seglake.storage import layout
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


def test_a_data_file_damaged_with_its_mtime_kept_is_not_reused(meta, store, tmp_path):
    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=2, segments=2, rows=200, dim=4))
    snapshot.create(meta, store, "bk", "s1")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    doc = bundles.read(target, "default", "bk", "s1")
    sha = sorted({doc["files"][k]["sha256"] for k in doc["files"] if k.startswith("insert_log/")})[0]
    path = tmp_path / "backup" / layout.bundle_blob(sha)
    st = os.stat(path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))      # the mtime put back
    snapshot.create(meta, store, "bk", "s2")
    rep = exports.export(meta, store, target, "bk", "s2", **quiet)
    ok = verify.verify(target, "bk", "s2", **quiet)["ok"]
    assert ok, f"export of s2 reported success (repaired {rep.get('repaired_files')}), verify of s2 fails"
