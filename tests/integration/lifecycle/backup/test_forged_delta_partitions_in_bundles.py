"""Forged bundle documents (re-committed with a matching SHA-256, i.e. what a
buggy exporter or a hand edit would leave) whose segments' delta_partitions are bad.
Expected: the import refuses each before writing anything (BundleError), and the bundle
verification says not ok; never a collection that imports and then cannot be read."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "restore"))

from seglake.errors import NotFound, ValidationError
from seglake.lifecycle import copyjob, snapshot
from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import export as exports
from seglake.lifecycle.backup import bundle_restore
from seglake.lifecycle.backup import verify
from seglake.storage import layout
from seglake.storage.local import LocalStore

from copy_model_helpers import Writer, other_root, quiet, rows, snap_and_restore, three_partitions_with_a_scoped_delete


def _bundle_of_a_copy(meta, store, settings, tmp_path):
    """A bundle of a restored collection: its segments carry delta_partitions."""
    w = Writer(meta, store, settings)
    three_partitions_with_a_scoped_delete(w)
    w.flush("src")
    snap_and_restore(meta, store, "src", "cp")
    snapshot.create(meta, store, "cp", "b")
    target = LocalStore(tmp_path / "backup")
    exports.export(meta, store, target, "cp", "b", **quiet)
    return w, target


def _forge(target, change):
    key = layout.bundle_doc("default", "cp", "b")
    doc = msgspec.json.decode(target.get(key))
    mapped = [e for e in doc["segments"] if e.get("delta_partitions")]
    assert mapped
    change(doc, mapped)
    bundles.write(target, doc)


def _names(doc):
    return {p["name"]: p["partition_id"] for p in doc["snapshot"]["collection"]["partitions"]}


FORGERIES = {
    "names a partition the bundle does not have":
        lambda doc, m: m[0]["delta_partitions"].append({"id": 424242, "name": "nope"}),
    "repeats an id":
        lambda doc, m: m[0]["delta_partitions"].append(dict(m[0]["delta_partitions"][0])),
    "an id that is not an int (string)":
        lambda doc, m: m[0]["delta_partitions"][0].update(id=str(m[0]["delta_partitions"][0]["id"])),
    "an id that is not an int (bool)":
        lambda doc, m: m[0]["delta_partitions"].__setitem__(0, {"id": True, "name": "p1"}),
    "an id that is not an int (float)":
        lambda doc, m: m[0]["delta_partitions"][0].update(id=float(m[0]["delta_partitions"][0]["id"])),
    "a name that is not a string":
        lambda doc, m: m[0]["delta_partitions"][0].update(name=7),
    "an entry without a name":
        lambda doc, m: m[0]["delta_partitions"][0].pop("name"),
    "not a list":
        lambda doc, m: m[0].update(delta_partitions="p1"),
    "null":
        lambda doc, m: m[0].update(delta_partitions=None),
    # names are the identity across copies: two partitions of one name make name -> id ambiguous
    "two partitions of one name":
        lambda doc, m: [doc["snapshot"]["collection"]["partitions"][2].update(name="p1")]
        + [x.update(name="p1") for e in m for x in e["delta_partitions"] if x["name"] == "p2"],
    # the delta logs hold an id the map does not name (the scoped delete's partition)
    "drops the id the delta logs hold":
        lambda doc, m: [e.update(delta_partitions=[x for x in e["delta_partitions"] if x["name"] != "p1"])
                        for e in m],
}


@pytest.mark.parametrize("how", list(FORGERIES))
def test_a_forged_delta_partitions_is_refused_by_the_restore(meta, store, settings, etcd_server, tmp_path, how):
    w, target = _bundle_of_a_copy(meta, store, settings, tmp_path)
    _forge(target, FORGERIES[how])
    report = verify.verify(target, "cp", "b", **quiet)
    meta2, store2, _ = other_root(etcd_server, tmp_path)
    try:
        try:
            out = bundle_restore.restore_from_bundle(meta2, store2, target, "cp", "b", "back", engine="inline", **quiet)
        except bundles.BundleError:
            with pytest.raises(NotFound):
                meta2.catalog.get_by_name("back")
            assert not report["ok"], "the import refuses the bundle; its verification should say so"
            return
        except ValidationError as e:
            left = [(r.collection_name, r.name, r.state) for r in meta2.snapshots.list()]
            pytest.fail(f"refused only by the restore step ({e}), after the import committed {left}; "
                        f"bundle verify ok={report['ok']}")
        print(f"restore set up; bundle verify ok={report['ok']}")
        copyjob.plan(meta2, out["job_id"])
        copyjob.run_inline(meta2, store2, out["job_id"])
        job = copyjob.finalize(meta2, out["job_id"])
        if job.state == "Failed":   # refused by the copy, which checks each log it copies
            print("copy job failed:", job.reason)
            with pytest.raises(NotFound):
                meta2.catalog.get_by_name("back")        # rolled back: nothing of it is visible
            assert list(meta2.snapshots.list()) == []
            assert not report["ok"], "the restore refuses the bundle; its verification should say so"
            return
        got = rows(meta2, store2, "back")        # readable at least, and right
        assert got == w.model.visible()
        pytest.fail(f"forged bundle imported (verify ok={report['ok']}) and read right: forgery not caught")
    finally:
        meta2.close()
