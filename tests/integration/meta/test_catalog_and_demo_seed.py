"""Catalog, segments, demo seed and inline verification against real etcd + files."""

import json
import threading

import pytest

from seglake.dev import demo
from seglake.errors import Conflict, NotFound, StateError, ValidationError
from seglake.lifecycle import verify
from seglake.meta.segments import DROPPED, FLUSHED, IMPORTING
from seglake.storage import layout

SCHEMA = demo.demo_schema(8)
SMALL = demo.SeedParams(partitions=2, segments=2, rows=200, dim=8)


def test_create_collection_and_lookups(meta):
    c = meta.catalog.create("books", SCHEMA, partitions=["_default", "p1"], shards=2)
    assert meta.catalog.get_by_name("books").collection_id == c.collection_id
    assert [p.name for p in c.partitions] == ["_default", "p1"]
    assert len(c.vchannels) == 2 and all(f"_{c.collection_id}v" in v for v in c.vchannels)
    assert [x.name for x in meta.catalog.list()] == ["books"]
    with pytest.raises(NotFound, match="'nope' not found"):
        meta.catalog.get_by_name("nope")


@pytest.mark.parametrize("kwargs,match", [
    ({"name": "bad-name"}, "invalid collection name"),
    ({"schema": [{"name": "v", "dtype": "FloatVector", "dim": 4}]}, "Int64 primary"),
    ({"schema": [{"name": "pk", "dtype": "Int64", "is_primary": True}]}, "FloatVector"),
    ({"schema": [{"name": "pk", "dtype": "Int64", "is_primary": True},
                 {"name": "v", "dtype": "FloatVector", "dim": 0}]}, "dim"),
    ({"partitions": ["ok", "not ok"]}, "invalid partition name"),
    ({"shards": 0}, "shards"),
])
def test_bad_collections_are_refused_before_any_write(meta, kwargs, match):
    args = {"name": "c", "schema": SCHEMA, **kwargs}
    with pytest.raises(ValidationError, match=match):
        meta.catalog.create(args.pop("name"), args.pop("schema"), **args)
    assert meta.kv.count(meta.keys.prefix) == 0


def test_concurrent_creates_of_one_name_have_exactly_one_winner(meta):
    results = []

    def create():
        try:
            results.append(meta.catalog.create("race", SCHEMA).collection_id)
        except Conflict as e:
            results.append(e)

    threads = [threading.Thread(target=create) for _ in range(6)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    winners = [r for r in results if isinstance(r, int)]
    assert len(winners) == 1
    assert all("already exists" in str(r) for r in results if not isinstance(r, int))
    assert len(list(meta.catalog.list())) == 1


def test_collection_state_machine(meta):
    c = meta.catalog.create("st", SCHEMA)
    with pytest.raises(StateError):
        meta.catalog.set_state(c.collection_id, "Dropped")
    assert meta.catalog.set_state(c.collection_id, "Dropping").state == "Dropping"
    assert meta.catalog.set_state(c.collection_id, "Dropping").state == "Dropping"  # idempotent


def test_demo_seed_registers_real_files_and_verifies(meta, store):
    coll, created = demo.seed(meta, store, SMALL)
    assert created
    segs = list(meta.segments.list(coll.collection_id))
    assert len(segs) == 4 and all(s.state == FLUSHED and s.num_rows == 200 for s in segs)
    for s in segs:
        for f in layout.segment_files(s):
            assert store.head(f.key).size == f.size
    report = verify.verify_collection(meta, store, coll.name)
    # per segment: fields 0, 1 and 3 user fields, delta log, stats log, 2 index files
    assert report["ok"] and report["rows"] == 800 and report["files_checked"] == 4 * 9
    assert report["visible_rows"] == 800 - 4 * 2      # delete_ratio 0.01 of 200 rows per segment
    again, created = demo.seed(meta, store, SMALL)
    assert not created and again.collection_id == coll.collection_id


def test_verify_finds_a_deleted_and_a_truncated_file(meta, store, settings):
    coll, _ = demo.seed(meta, store, SMALL)
    seg = next(meta.segments.list(coll.collection_id))
    files = list(layout.segment_files(seg))
    store.delete_many([files[0].key])
    store.put(files[1].key, store.get(files[1].key)[:-7])
    report = verify.verify_collection(meta, store, coll.name)
    assert not report["ok"]
    assert report["problem_counts"] == {"missing": 1, "size_mismatch": 1}
    assert report["bad_segments"] == [seg.segment_id]
    text = verify.format_report(report)
    assert files[0].key in text and "does not exist" in text and files[1].key in text


def test_verify_finds_a_row_count_that_differs(meta, store):
    from seglake.meta.segments import Binlog

    coll, _ = demo.seed(meta, store, SMALL)
    seg = next(meta.segments.list(coll.collection_id))
    (b,) = seg.binlogs[demo.PK]
    wrong = seg.replace(num_rows=201, binlogs={**seg.binlogs, demo.PK: (Binlog(b.log_id, b.size, 201),)})
    meta.segments.save([wrong])
    report = verify.verify_collection(meta, store, coll.name)
    assert report["problem_counts"].get("rows_mismatch") == 1
    assert report["problem_counts"].get("metadata") == 4  # the other fields (0, 1, 101, 102) disagree with num_rows


def test_demo_seed_writes_the_row_model_and_keeps_the_shard_mapping(meta, store):
    """Every seeded pk routes (as the WAL routes it) to its segment's vchannel; rows carry
    row ids and a timestamp; the delete of each segment is later than its rows; stats
    have a bloom filter; visible rows = rows - deletes."""
    import numpy as np
    import pyarrow.parquet as pq

    from seglake.segfiles import ROW_ID_FIELD, TS_FIELD, read_stats
    from seglake.visibility import visible_rows
    from seglake.wal.client import route

    params = demo.SeedParams(partitions=2, segments=3, rows=100, dim=4, shards=3, delete_ratio=0.1)
    coll, _ = demo.seed(meta, store, params)
    segs = list(meta.segments.list(coll.collection_id))
    assert len(segs) == 6 and {s.channel for s in segs} == set(coll.vchannels)
    all_pks, row_ids = [], []
    for s in segs:
        (b,) = s.binlogs[demo.PK]
        pks = pq.read_table(store.open_read(layout.insert_log(*s.ref, demo.PK, b.log_id))).column(0).to_numpy()
        assert len(pks) == params.rows
        shard = coll.vchannels.index(s.channel)
        assert (route(pks, coll.shards) == shard).all(), f"segment {s.segment_id}: pks off its vchannel"
        all_pks += pks.tolist()
        (r,) = s.binlogs[ROW_ID_FIELD]
        row_ids += pq.read_table(store.open_read(layout.insert_log(*s.ref, ROW_ID_FIELD, r.log_id))).column(0).to_pylist()
        (t,) = s.binlogs[TS_FIELD]
        assert t.ts_from == t.ts_to == s.start_ts and s.deltalogs[0].ts_from > s.start_ts
        st = read_stats(store, s)
        assert st.bloom is not None and st.may_contain(pks).all()
    assert len(set(all_pks)) == len(all_pks) == 600 and len(set(row_ids)) == 600
    vis = visible_rows(meta, store, coll.collection_id)
    assert vis.num_rows == 600 - 6 * 10
    assert np.isin(vis.column("pk").to_numpy(), np.array(all_pks)).all()


def test_demo_reset_purges_files_and_records(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    store.put(f"insert_log/{coll.collection_id}/999/1/100/1", b"stray")  # an unreferenced leftover
    new, created = demo.seed(meta, store, SMALL, reset=True)
    assert created and new.collection_id != coll.collection_id
    assert list(store.list(f"insert_log/{coll.collection_id}")) == []
    assert list(meta.segments.list(coll.collection_id)) == []


def test_segment_transitions_are_guarded_and_idempotent(meta, store):
    coll, _ = demo.seed(meta, store, SMALL)
    refs = [s.ref for s in meta.segments.list(coll.collection_id)]
    assert meta.segments.transition(refs, DROPPED, now=123.0) == 4
    assert meta.segments.transition(refs, DROPPED, now=456.0) == 0
    assert all(s.dropped_at == 123.0 for s in meta.segments.list(coll.collection_id))
    with pytest.raises(StateError, match="Dropped -> Flushed"):
        meta.segments.transition(refs[:1], FLUSHED)
    with pytest.raises(StateError):
        meta.segments.transition(refs[:1], IMPORTING)


def test_bad_seed_params_are_refused(meta, store):
    with pytest.raises(ValidationError, match="rows"):
        demo.seed(meta, store, demo.SeedParams(rows=0))
    assert meta.kv.count(meta.keys.prefix) == 0


def test_cli_lists_and_describes(meta, store, settings, monkeypatch, capsys):
    from seglake import cli

    demo.seed(meta, store, SMALL)
    for k, v in settings.to_env().items():
        monkeypatch.setenv(k, v)
    assert cli.main(["collections", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["name"] == "demo" and rows[0]["segments"] == 4 and rows[0]["rows"] == 800
    assert cli.main(["collections", "describe", "demo"]) == 0
    out = capsys.readouterr().out
    assert "embedding" in out and "FloatVector" in out
    assert cli.main(["segments", "list", "demo"]) == 0
    assert capsys.readouterr().out.count("Flushed") == 4
    assert cli.main(["verify", "demo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert cli.main(["collections", "describe", "missing"]) == 2
    assert "not found" in capsys.readouterr().err
