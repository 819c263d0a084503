"""`seglake jobs list` names where each job copies from: the snapshot, the bundle of a
restore from the backup target, or the collection's creation for a restore to a time that
had no snapshot to start from (it showed "demo_wal/" and, for bundles, the snapshot)."""

from seglake.cli.jobs import _source


def test_source_of_each_kind_of_job():
    assert _source({"source_collection": "demo", "snapshot": "s1", "bundle": None}) == "demo/s1"
    assert _source({"source_collection": "demo", "snapshot": "s1",
                    "bundle": {"collection": "demo", "bundle": "nightly_1"}}) == "bundle demo/nightly_1"
    assert _source({"source_collection": "demo_wal", "snapshot": ""}) == "demo_wal (from its creation)"
