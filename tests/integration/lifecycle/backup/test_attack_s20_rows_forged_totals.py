"""Adversary s20 (issue 26 deliver 4: "every number in a bundle is range-checked"): a
bundle whose stated totals were forged (rows 2**63 - 1 for a bundle of 200 rows), with a
matching commit marker, was imported, and verify called it ok while reporting
9223372036854775807 rows (the CLI and the listing show the same). Refused now, naming the
value, before anything is written. Real etcd, real files."""

from __future__ import annotations

import copy
import uuid

import pytest

from seglake.config import Settings
from seglake.dev import demo
from seglake.lifecycle import snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import imports, verify
from seglake.meta import Meta
from seglake.storage import open_store
from seglake.storage.local import LocalStore

quiet = dict(say=lambda line: None)


@pytest.mark.parametrize("where", [("totals", "rows"), ("totals", "segments"), ("totals", "bytes"),
                                   ("snapshot", "totals", "rows")])
def test_forged_totals_are_refused_by_import_and_verify(meta, store, etcd_server, tmp_path, where):
    demo.seed(meta, store, demo.SeedParams(name="bk", partitions=2, segments=2, rows=200, dim=4))
    snapshot.create(meta, store, "bk", "s1")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "bk", "s1", **quiet)
    doc = copy.deepcopy(bundles.read(target, "default", "bk", "s1"))
    node = doc
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = 2**63 - 1
    bundles.write(target, doc)
    rep = verify.verify(target, "bk", "s1", **quiet)
    s = Settings.from_dict({"etcd_endpoint": etcd_server.endpoint, "etcd_root": f"ft{uuid.uuid4().hex[:8]}",
                            "store_uri": str(tmp_path / "other"), "etcd_timeout": 5})
    meta2, store2 = Meta.from_settings(s), open_store(s)
    try:
        imported = None
        try:
            imported = imports.import_bundle(meta2, store2, target, "bk", "s1", **quiet)
        except bundles.BundleError as e:
            assert "9223372036854775807" in str(e), e
            assert not list(meta2.kv.range(meta2.keys.prefix, keys_only=True)) and not list(store2.list(""))
        assert imported is None and not rep["ok"], (
            f"{'.'.join(where)} = 2**63-1: import {'accepted' if imported else 'refused'}; verify ok={rep['ok']} "
            f"reporting rows={rep.get('rows')}")
    finally:
        meta2.close()
