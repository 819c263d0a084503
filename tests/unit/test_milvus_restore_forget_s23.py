"""A restore record that became history (its collection dropped in Milvus, or never made) is
replaced by the next run into that name (session 23, G1/G3): the files the earlier run had
staged under the restore id go with it. Milvus 2.3's binlog import reads every segment folder
under a unit's partition dir: a folder the earlier run staged there for a segment the new
bundle does not have (compacted away since) would be imported too. The harness of
test_milvus_restore_runs (in-memory etcd, LocalStores, a fake Milvus that imports what the
parser would)."""

from __future__ import annotations

import pytest
from test_milvus_restore_runs import FakeKV, Killed, make_bundle, world  # noqa: F401  (world: a fixture)


@pytest.fixture(autouse=True)
def _deletes(monkeypatch):
    """The harness's etcd with the deletes forgetting a record takes."""
    def delete(self, key):
        self.rev += 1
        return self.d.pop(key, None) is not None

    def delete_prefix(self, prefix):
        self.rev += 1
        return sum(self.d.pop(k, None) is not None for k in [k for k in self.d if k.startswith(prefix)])
    monkeypatch.setattr(FakeKV, "delete", delete, raising=False)
    monkeypatch.setattr(FakeKV, "delete_prefix", delete_prefix, raising=False)


def test_a_newer_bundle_into_a_name_whose_killed_restore_was_dropped_imports_only_its_own_segments(world):
    w = world
    w.doc = make_bundle(w.backup, {11: (1, 400), 13: (1, 500)})           # b1: one unit [11, 13]
    w.milvus.kill_before_import = 1
    with pytest.raises(Killed):
        w.run()                                                          # staged under rid1/11/, killed
    assert any("/13/" in o.key for o in w.stage.list(""))
    w.milvus.exists = False                                              # the operator drops it
    w.doc = dict(make_bundle(w.backup, {11: (1, 400), 20: (1, 500)}), uid="bundle-uid-2")   # 13 compacted into 20
    w.plan.update(uid="bundle-uid-2", replaces=True)                     # as check() finds it
    w.milvus.kill_before_import = None
    w.milvus.imported.clear()
    rep = w.run()
    assert rep["state"] == "verified"
    assert dict(w.milvus.imported) == {11: 1, 20: 1}, \
        f"segments imported by the newer bundle's restore: {dict(w.milvus.imported)} (13 is the earlier run's)"
