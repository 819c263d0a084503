"""A segment record is written as the oldest schema version that keeps every field that
matters: v1 plain, v2 with delta_partitions, v3 with compaction lineage. A seglake that
reads only up to v2 (before compaction) refuses a v3 record instead of rewriting it
without its lineage or replaying the rows a compaction dropped; this one reads all three."""

from __future__ import annotations

import pytest

from seglake.errors import SeglakeError
from seglake.meta import codec
from seglake.meta.segments import Segment


def _seg(**kw) -> Segment:
    return Segment(**{"collection_id": 1, "partition_id": 2, "segment_id": 3, "channel": "c_1_v0",
                      "state": "Flushed", **kw})


@pytest.mark.parametrize("kw, version", [
    ({}, 1),
    ({"delta_partitions": {}}, 2),
    ({"delta_partitions": {5: "p1"}, "compacted_from": (7, 8)}, 3),
    ({"state": "Dropped", "compacted_to": 9}, 3),
])
def test_versions_round_trip(kw, version):
    s = _seg(**kw)
    raw = codec.encode_struct(s)
    assert raw.startswith(b'{"v":%d,' % version)
    assert codec.decode_struct(raw, Segment) == s


def test_a_seglake_that_reads_v2_refuses_a_compaction_record(monkeypatch):
    raw = codec.encode_struct(_seg(compacted_from=(7,)))
    monkeypatch.setattr(codec, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(codec, "_KNOWN", tuple(v for k, v in codec._PREFIXES.items() if k <= 2))
    with pytest.raises(SeglakeError, match="schema v3, this seglake reads v2"):
        codec.decode_struct(raw, Segment, "segments/1/2/3")
