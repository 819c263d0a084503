"""Adversary rows4: a bundle's `source.positions` (where each vchannel's log continues the
bundle: a restore to a time from the backup target alone starts its replay there) holds
per-partition row high-water marks (part_hw) and a delete high-water mark (del_hw); a
replay skips every archived insert at or below its partition's mark and every delete at
or below del_hw. They were only checked to be integers in 0..2**63-1: a bundle whose
part_hw was forged to a tick above its own rows made that replay skip every archived
insert of the partition up to it (rows acknowledged after the snapshot, missing without
an error). A mark can only be what the bundle's own segments give (the flusher's rule,
flush.state.fold_high_water, takes it from the segment records): part_hw[p] at most the
newest dml_ts of the bundle's segments of that vchannel and partition, del_hw at most the
newest delete tick of its delta logs on that vchannel; the checkpoint's tick (a replay
skips the log at or below it) at most the bundle's consistent_ts (drawn after the
checkpoint was read). Anything above is refused, naming it, before anything is written. Real etcd, real files on local disk."""

from __future__ import annotations

import pytest

from seglake.lifecycle.backup import bundle as bundles
from seglake.lifecycle.backup import imports

from test_import_checks import _forge, _untouched, exported, other, quiet  # noqa: F401 (fixtures)


def _positions(doc):
    pos = doc["source"].get("positions")
    if not pos:
        pytest.skip("the bundle records no positions")
    return pos


def _bound(doc, vchannel: str, partition: int) -> int:
    return max([e["dml_ts"] for e in doc["segments"] if e["channel"] == vchannel and e["partition_id"] == partition]
               + [0])


def test_the_honest_marks_are_within_their_bounds(exported):
    _, doc = exported
    pos = _positions(doc)
    assert any(p["part_hw"] for p in pos.values())
    for v, p in pos.items():
        for part, hw in p["part_hw"].items():
            assert hw <= _bound(doc, v, int(part))
        assert p["checkpoint"] is None or p["checkpoint"][3] <= doc["source"]["consistent_ts"]


@pytest.mark.parametrize("what", ["part_hw", "part_hw_of_a_partition_without_rows", "del_hw", "checkpoint"])
def test_a_high_water_mark_above_what_the_bundles_segments_give_is_refused(exported, other, what):
    target, doc = exported
    meta2, store2 = other
    pos = _positions(doc)
    v = sorted(pos)[0]

    def edit(d):
        p = d["source"]["positions"][v]
        if what == "part_hw":
            part = sorted(p["part_hw"])[0]
            p["part_hw"][part] = _bound(d, v, int(part)) + 1
        elif what == "del_hw":
            p["del_hw"] = max([x["ts_to"] for e in d["segments"] if e["channel"] == v for x in e["deltalogs"]]
                              + [0]) + 1
        elif what == "checkpoint":
            p["checkpoint"] = [1, 1, 0, d["source"]["consistent_ts"] + 1]
        else:
            p["part_hw"]["999999"] = 1
    _forge(target, doc, edit)
    with pytest.raises(bundles.BundleError, match=f"source.positions.*{v}.*(part_hw|del_hw|checkpoint)"):
        imports.import_bundle(meta2, store2, target, "bk", "s1", threads=1, **quiet)
    _untouched(meta2, store2)
