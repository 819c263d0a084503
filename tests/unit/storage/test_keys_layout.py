import pytest

from seglake.meta.keys import Keys, parse_segment_key
from seglake.meta.segments import Binlog, IndexFile, Segment
from seglake.storage import layout


def test_keys_are_rooted_and_prefixes_end_with_slash():
    k = Keys("/seglake/")
    assert k.root == "seglake"
    assert k.collection(7) == "seglake/catalog/collections/7"
    assert k.collection_name("default", "demo") == "seglake/catalog/names/default/demo"
    assert k.segment(1, 2, 3) == "seglake/segments/1/2/3"
    assert k.segments_prefix(1) == "seglake/segments/1/"
    assert k.segments_prefix(1, 2) == "seglake/segments/1/2/"
    assert k.snapshot(1, "s") == "seglake/snapshots/1/s"
    assert k.copy_task(5, 6) == "seglake/copy/tasks/5/6"
    assert k.alloc_id() == "seglake/alloc/id" and k.alloc_tso() == "seglake/alloc/tso"
    assert k.gc("pause", "all") == "seglake/gc/pause/all"
    assert k.channel_checkpoint("ch_1v0") == "seglake/channels/ch_1v0/checkpoint"
    assert k.wal_term("dml_1") == "seglake/wal/dml_1/term"


def test_collection_prefix_never_matches_a_longer_id():
    k = Keys("r")
    assert not k.segment(10, 1, 1).startswith(k.segments_prefix(1))
    assert k.segment(1, 20, 1).startswith(k.segments_prefix(1))
    assert not k.segment(1, 20, 1).startswith(k.segments_prefix(1, 2))


@pytest.mark.parametrize("bad", [-1, "1", 1.0, True, None])
def test_ids_must_be_non_negative_ints(bad):
    with pytest.raises(ValueError):
        Keys().collection(bad)


def test_key_segments_cannot_contain_slash_and_root_cannot_be_empty():
    with pytest.raises(ValueError):
        Keys().snapshot(1, "a/b")
    with pytest.raises(ValueError):
        Keys("/")


def test_parse_segment_key_roundtrip():
    k = Keys("x")
    assert parse_segment_key(k, k.segment(11, 22, 33)) == (11, 22, 33)


def test_layout_paths_follow_the_design():
    assert layout.insert_log(1, 2, 3, 100, 9) == "insert_log/1/2/3/100/9"
    assert layout.delta_log(1, 2, 3, 9) == "delta_log/1/2/3/9"
    assert layout.stats_log(1, 2, 3, 100, 9) == "stats_log/1/2/3/100/9"
    assert layout.index_file(5, 1, 2, 3, "centroids") == "index_files/5/1/2/3/centroids"
    assert layout.snapshot_metadata(1, 44) == "snapshots/1/metadata/44.json"
    assert layout.snapshot_manifest(1, 44, 0) == "snapshots/1/manifests/44/0.avro"
    assert layout.report("verify", "1/run") == "_reports/verify/1/run.json"


@pytest.mark.parametrize("key,norm", [("a/b", "a/b"), ("/a/b/", "a/b")])
def test_normalize_key(key, norm):
    assert layout.normalize_key(key) == norm


@pytest.mark.parametrize("bad", ["", "/", "a//b", "../x", "a/../b", "a/./b", ".", "a\\b", "100\\1", "a\0b"])
def test_normalize_key_rejects_escapes(bad):
    with pytest.raises(ValueError):
        layout.normalize_key(bad)


def test_normalize_prefix():
    assert layout.normalize_prefix("") == ""
    assert layout.normalize_prefix("c1") == "c1/"
    assert layout.normalize_prefix("/c1/") == "c1/"


def test_segment_files_enumerates_every_reference_and_retargets():
    seg = Segment(segment_id=3, collection_id=1, partition_id=2, channel="ch", state="Flushed", num_rows=10,
                  binlogs={100: (Binlog(7, 50, 10),), 101: (Binlog(8, 60, 10),)},
                  deltalogs=(Binlog(9, 20, 1),), statslogs={100: (Binlog(10, 5, 10),)},
                  index_files=(IndexFile(11, 1, "centroids", 64),))
    files = list(layout.segment_files(seg))
    assert [f.key for f in files] == [
        "insert_log/1/2/3/100/7", "insert_log/1/2/3/101/8", "delta_log/1/2/3/9",
        "stats_log/1/2/3/100/10", "index_files/11/1/2/3/centroids"]
    assert sum(f.size for f in files) == seg.total_size() == 199
    moved = [f.key for f in layout.segment_files(seg, collection_id=4, partition_id=5, segment_id=6)]
    assert moved[0] == "insert_log/4/5/6/100/7" and moved[-1] == "index_files/11/1/5/6/centroids"


def test_segment_record_json_roundtrip():
    seg = Segment(segment_id=3, collection_id=1, partition_id=2, channel="ch", state="Dropped", num_rows=10,
                  binlogs={100: (Binlog(7, 50, 10, 1, 2),)}, dropped_at=12.5,
                  source={"collection_id": 9, "partition_id": 8, "segment_id": 7})
    assert Segment.from_json(seg.to_json()) == seg
