"""Segment files of the row model against real etcd and local files: write, read back,
stats with bloom, and visible_rows across segments, partitions, L0 segments and legacy
delta logs."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seglake.dev import demo
from seglake.errors import ValidationError
from seglake.meta.segments import DROPPED, FLUSHED, GROWING, Segment
from seglake.segfiles import (ROW_ID, ROW_ID_FIELD, TIMESTAMP, TS_FIELD, PkStats, log_ids_needed, read_stats,
                              write_delta_log, write_segment_files)
from seglake.storage import layout
from seglake.visibility import dedupe_by_pk, visible_count, visible_rows, visible_rows_of
from seglake.wal.message import arrow_schema

DIM = 4


def _table(coll, pks) -> pa.Table:
    pks = np.asarray(pks, dtype=np.int64)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(pks, DIM).astype(np.float32)), DIM)
    return pa.table({"pk": pks, "embedding": vec, "price": (pks * 0.5).astype(np.float32)},
                    schema=arrow_schema(coll.schema))


def _segment(meta, store, coll, partition, pks, ts, deletes=None, state=FLUSHED, channel=0) -> Segment:
    """Write a segment through write_segment_files and register it (files, then record)."""
    pks = np.asarray(pks, dtype=np.int64)
    part = coll.partition(partition).partition_id
    sid = meta.ids.allocate()
    dels = None if deletes is None else tuple(np.asarray(x) for x in deletes)
    need = log_ids_needed(coll.schema, dels is not None, len(pks))
    first = meta.ids.allocate(max(1, need))
    row_ids = meta.ids.allocate(len(pks)) + np.arange(len(pks)) if len(pks) else np.zeros(0, np.int64)
    files = write_segment_files(store, first, coll.collection_id, part, sid, coll.schema, _table(coll, pks),
                                row_ids, np.full(len(pks), ts, dtype=np.int64), deletes=dels)
    assert files.log_ids_used == need
    seg = Segment(segment_id=sid, collection_id=coll.collection_id, partition_id=part,
                  channel=coll.vchannels[channel], state=state, num_rows=len(pks),
                  level="L1" if len(pks) else "L0", binlogs=files.binlogs, deltalogs=files.deltalogs,
                  statslogs=files.statslogs, start_ts=files.ts_from or ts, dml_ts=files.ts_to or ts, created_ts=ts)
    meta.segments.save([seg])
    return seg


@pytest.fixture
def coll(meta):
    return meta.catalog.create("rows", demo.demo_schema(DIM), partitions=["_default", "p2"], shards=2)


def test_write_and_read_back_every_file(meta, store, coll):
    seg = _segment(meta, store, coll, "_default", [5, 3, 9, 1], 1000, deletes=([3], [1001], [0]))
    n = len(coll.schema.fields)
    assert sorted(seg.binlogs) == [ROW_ID_FIELD, TS_FIELD, 100, 101, 102]
    logs = sorted(b.log_id for bs in seg.binlogs.values() for b in bs)
    first = logs[0]
    assert seg.binlogs[ROW_ID_FIELD][0].log_id == first and seg.binlogs[TS_FIELD][0].log_id == first + 1
    assert [seg.binlogs[f.field_id][0].log_id for f in coll.schema.fields] == [first + 2 + i for i in range(n)]
    assert seg.statslogs[100][0].log_id == first + 2 + n and seg.deltalogs[0].log_id == first + 3 + n
    for fid, (b,) in seg.binlogs.items():
        assert (b.entries, b.ts_from, b.ts_to) == (4, 1000, 1000)
        key = layout.insert_log(*seg.ref, fid, b.log_id)
        assert store.head(key).size == b.size
        t = pq.read_table(store.open_read(key))
        assert t.num_rows == 4 and len(t.column_names) == 1
        assert pq.ParquetFile(store.open_read(key)).metadata.row_group(0).column(0).compression == "ZSTD"
    ts = pq.read_table(store.open_read(layout.insert_log(*seg.ref, TS_FIELD, first + 1)))
    assert ts.schema.names == [TIMESTAMP] and ts.schema.types == [pa.int64()]
    rid = pq.read_table(store.open_read(layout.insert_log(*seg.ref, ROW_ID_FIELD, first)))
    assert rid.schema.names == [ROW_ID] and len(set(rid.column(0).to_pylist())) == 4
    d = pq.read_table(store.open_read(layout.delta_log(*seg.ref, seg.deltalogs[0].log_id)))
    assert d.schema.names == ["pk", "ts", "partition"] and set(d.schema.types) == {pa.int64()}
    assert d.to_pylist() == [{"pk": 3, "ts": 1001, "partition": 0}]
    assert (seg.deltalogs[0].entries, seg.deltalogs[0].ts_from, seg.deltalogs[0].ts_to) == (1, 1001, 1001)
    doc = json.loads(store.get(layout.stats_log(*seg.ref, 100, seg.statslogs[100][0].log_id)))
    assert {k: doc[k] for k in ("fieldID", "pkType", "minPk", "maxPk", "rows")} == \
        {"fieldID": 100, "pkType": 5, "minPk": 1, "maxPk": 9, "rows": 4}
    assert set(doc["bf"]) == {"m", "k", "b", "hash"}
    stats = read_stats(store, seg)
    assert (stats.min, stats.max, stats.rows) == (1, 9, 4) and stats.bloom is not None
    assert stats.may_contain(np.array([1, 3, 5, 9])).all()
    assert not stats.may_contain(np.array([0, 10, -5])).any()
    assert stats.may_contain(np.arange(2, 9)).sum() <= 4    # 4, 6, 7, 8: the bloom says no (almost surely)


def test_l0_segment_writes_only_its_delta_log(meta, store, coll):
    assert log_ids_needed(coll.schema, True, 0) == 1 and log_ids_needed(coll.schema, False, 0) == 0
    seg = _segment(meta, store, coll, "_default", [], 500, deletes=([1, 2], [600, 601], [0, 0]))
    assert seg.binlogs == {} and seg.statslogs == {} and len(seg.deltalogs) == 1 and seg.level == "L0"
    assert [f.kind for f in layout.segment_files(seg)] == ["delta"]
    assert read_stats(store, seg) is None


def test_bad_inputs_are_refused_before_any_write(meta, store, coll):
    p = coll.partitions[0].partition_id
    t = _table(coll, [1, 2])
    with pytest.raises(ValidationError, match="ts has 1 values"):
        write_segment_files(store, 1, coll.collection_id, p, 1, coll.schema, t, [1, 2], [5])
    with pytest.raises(ValidationError, match="lacks field"):
        write_segment_files(store, 1, coll.collection_id, p, 1, coll.schema, t.drop_columns(["price"]), [1, 2], [5, 5])
    with pytest.raises(ValidationError, match="at least one delete"):
        write_delta_log(store, 1, coll.collection_id, p, 1, [], [], [])
    assert list(store.list("")) == []


def test_legacy_stats_are_read_as_a_range():
    s = PkStats.from_json({"field_id": 100, "min": 10, "max": 20, "rows": 5})
    assert s.bloom is None and s.may_contain(np.array([9, 10, 15, 20, 21])).tolist() == [False, True, True, True, False]


def test_visible_rows_across_segments_partitions_and_l0(meta, store, coll):
    d, p2 = coll.partition("_default").partition_id, coll.partition("p2").partition_id
    # t=100: pks 1..10 in _default; t=100: pks 1..5 in p2 (same pks, another partition)
    a = _segment(meta, store, coll, "_default", range(1, 11), 100)
    _segment(meta, store, coll, "p2", range(1, 6), 100, channel=1)
    # t=200: delete 1 everywhere, 2 in p2 only, 3 in _default only (carried by a later segment's delta log)
    _segment(meta, store, coll, "_default", [20, 21], 300,
             deletes=([1, 2, 3], [200, 200, 200], [0, p2, d]))
    # an L0 segment: delete 4 at t=250 everywhere; 20 at t=300 (equal to its row: stays)
    _segment(meta, store, coll, "p2", [], 250, deletes=([4, 20], [250, 300], [0, 0]))
    # t=400: upsert of 5 in _default (delete at 400 + insert at 400): the delete is
    # collection-wide, so p2's older row of 5 goes too
    _segment(meta, store, coll, "_default", [5], 400, deletes=([5], [400], [0]))
    # pk 30 inserted twice (p2 at 100, _default at 350), never deleted: both visible
    _segment(meta, store, coll, "p2", [30], 100, channel=1)
    _segment(meta, store, coll, "_default", [30], 350)
    # a Growing record and a Dropped segment's delete: never read
    _segment(meta, store, coll, "_default", [99], 500, deletes=([6], [500], [0]), state=DROPPED)
    meta.segments.save([Segment(segment_id=meta.ids.allocate(), collection_id=coll.collection_id, partition_id=d,
                                channel=coll.vchannels[0], state=GROWING)])

    t = visible_rows(meta, store, coll.collection_id, columns=["price", "pk"])
    got = sorted(zip(t.column("pk").to_pylist(), t.column("partition_id").to_pylist(),
                     t.column("Timestamp").to_pylist()))
    want = sorted([(k, d, 100) for k in (2, 6, 7, 8, 9, 10)] + [(3, p2, 100), (30, p2, 100)]
                  + [(20, d, 300), (21, d, 300), (5, d, 400), (30, d, 350)])
    assert got == want
    assert t.column_names == ["pk", "RowID", "Timestamp", "partition_id", "segment_id", "price"]
    assert t.column("price").to_pylist() == [k * 0.5 for k in t.column("pk").to_pylist()]
    assert visible_count(meta, store, coll.collection_id) == len(want)
    assert visible_count(meta, store, coll.collection_id, partition_ids=[p2]) == 2
    # count(*) keeps both rows of 30; dedupe_by_pk keeps the newer one
    one = dedupe_by_pk(t)
    assert one.num_rows == len(want) - 1
    thirty = one.filter(pa.compute.equal(one.column("pk"), 30))
    assert thirty.column("Timestamp").to_pylist() == [350] and thirty.column("partition_id").to_pylist() == [d]
    assert a.segment_id in set(t.column("segment_id").to_pylist())
    with pytest.raises(ValidationError):
        visible_rows(meta, store, coll.collection_id, states=[FLUSHED, DROPPED])
    with pytest.raises(ValidationError, match="no field"):
        visible_rows(meta, store, coll.collection_id, columns=["nope"])


def test_legacy_delta_logs_apply_to_their_own_segment(meta, store, coll):
    """A legacy delta log (pk int64, ts uint64) hides rows of its segment only."""
    a = _segment(meta, store, coll, "_default", [1, 2], 100)
    b = _segment(meta, store, coll, "_default", [1, 2], 100, channel=1)
    log = meta.ids.allocate()
    key = layout.delta_log(*a.ref, log)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"pk": np.array([1], np.int64), "ts": np.array([150], np.uint64)}), sink)
    info = store.put(key, sink.getvalue().to_pybytes())
    from seglake.meta.segments import Binlog
    a = a.replace(deltalogs=(Binlog(log, info.size, 1, 150, 150),))
    meta.segments.save([a])
    t = visible_rows(meta, store, coll.collection_id)
    assert sorted(zip(t.column("segment_id").to_pylist(), t.column("pk").to_pylist())) == \
        sorted([(a.segment_id, 2), (b.segment_id, 1), (b.segment_id, 2)])


def test_legacy_segment_rows_read_at_start_ts(meta, store, coll):
    """A segment without fields 0/1 (written before the row model): Timestamp = start_ts,
    RowID negative positions."""
    seg = _segment(meta, store, coll, "_default", [7, 8, 9], 100)
    legacy = seg.replace(binlogs={k: v for k, v in seg.binlogs.items() if k not in (ROW_ID_FIELD, TS_FIELD)},
                         start_ts=42)
    t = visible_rows_of(store, coll.schema, [legacy], {p.partition_id: p.name for p in coll.partitions})
    assert t.column("Timestamp").to_pylist() == [42, 42, 42]
    assert t.column("RowID").to_pylist() == [-1, -2, -3]


def test_partition_ids_of_a_restored_collection_are_translated(meta, store, coll):
    """A partition-scoped delete copied verbatim into another collection names a source
    partition: read through the segments' `source` records."""
    src_p2 = coll.partition("p2").partition_id
    seg = _segment(meta, store, coll, "p2", [1, 2], 100, deletes=([1], [150], [src_p2]))
    other = meta.catalog.create("restored", demo.demo_schema(DIM), partitions=["_default", "p2"], shards=2)
    tgt_p2 = other.partition("p2").partition_id
    moved = seg.replace(collection_id=other.collection_id, partition_id=tgt_p2, segment_id=meta.ids.allocate(),
                        source={"collection_id": coll.collection_id, "partition_id": src_p2,
                                "segment_id": seg.segment_id})
    for f in layout.segment_files(seg):   # the copy job's work, by hand
        g = layout.segment_files(moved)
        store.copy(f.key, next(x.key for x in g if x.kind == f.kind and x.key.rsplit("/", 1)[1] == f.key.rsplit("/", 1)[1]))
    meta.segments.save([moved])
    t = visible_rows(meta, store, other.collection_id)
    assert t.column("pk").to_pylist() == [2]
