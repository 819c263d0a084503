"""layout.parse_key: the one parser of store keys. A key is seglake's own only if it
parses and the builders make exactly the same key back from the parsed ids."""

import random

import pytest

from seglake.storage import layout

BUILT = [
    (layout.insert_log(1, 2, 3, 100, 9), dict(kind="insert", collection_id=1, partition_id=2, segment_id=3,
                                              field_id=100, log_id=9)),
    (layout.delta_log(1, 2, 3, 9), dict(kind="delta", collection_id=1, partition_id=2, segment_id=3, log_id=9)),
    (layout.stats_log(0, 2, 3, 100, 9), dict(kind="stats", collection_id=0, field_id=100, log_id=9)),
    (layout.index_file(5, 1, 2, 3, "index_meta.json"), dict(kind="index", collection_id=None, build_id=5,
                                                            version=1, partition_id=2, segment_id=3,
                                                            name="index_meta.json")),
    (layout.snapshot_metadata(7, 44), dict(kind="snapshot_metadata", collection_id=7, snapshot_id=44)),
    (layout.snapshot_manifest(7, 44, 12), dict(kind="snapshot_manifest", collection_id=7, snapshot_id=44, n=12)),
    (layout.snapshot_attempt_metadata(7, 44, 3), dict(kind="snapshot_attempt_metadata", collection_id=7,
                                                      snapshot_id=44, attempt=3)),
    (layout.snapshot_attempt_manifest(7, 44, 3, 12), dict(kind="snapshot_attempt_manifest", collection_id=7,
                                                          snapshot_id=44, attempt=3, n=12)),
]


@pytest.mark.parametrize("key,ids", BUILT)
def test_every_builder_parses_back_to_its_ids(key, ids):
    p = layout.parse_key(key)
    assert p is not None and p.key() == key
    assert {k: getattr(p, k) for k in ids} == ids


def test_random_ids_round_trip():
    rng = random.Random(7)
    for _ in range(2000):
        ids = [rng.choice([0, 1, rng.randrange(2**63)]) for _ in range(5)]
        for key in (layout.insert_log(*ids), layout.stats_log(*ids), layout.delta_log(*ids[:4]),
                    layout.index_file(*ids[:4], f"f{ids[4]}"), layout.snapshot_manifest(*ids[:3])):
            assert layout.parse_key(key).key() == key


ODD = [
    "", "/", "README", "notes/readme.txt", "insert_log/README.md", "wal/dml_0/00000001.frag", "_gc/latest.json",
    "insert_log/1/2/3/100/09", "insert_log/01/2/3/100/9", "insert_log/+1/2/3/100/9", "insert_log/-1/2/3/100/9",
    "insert_log/ 1/2/3/100/9", "insert_log/1/2/3/100/9 ", "insert_log/1/2/3/100/9\n", "insert_log/1/2/3/100/9\r",
    "insert_log/1/2/3/100/1_0", "insert_log/1/2/3/100/0x1", "insert_log/1/2/3/100/1e3", "insert_log/1/2/3/100/9.0",
    "insert_log/1/2/3/100/\u0661", "insert_log/1/2/3/100/\uff11", "insert_log/1/2/3/100/\u00b9",
    "insert_log/1/2/3/100/9223372036854775808", "insert_log/1/2/3/100/99999999999999999999",
    "insert_log//1/2/3/100/9", "/insert_log/1/2/3/100/9", "insert_log/1/2/3/100/9/", "insert_log/1/2/3/100//9",
    "insert_log/1/2/3/100/9/extra", "insert_log/1/2/3/100", "insert_log/1", "insert_log\\1\\2\\3\\100\\9",
    "insert_log/1/2/3/100\\9", "insert_log/1/2/3/100/%39", "insert_log%2F1/2/3/100/9", "insert_log/./1/2/3/100",
    "insert_log/1/2/3/100/..", "Insert_log/1/2/3/100/9", "INSERT_LOG/1/2/3/100/9", "insert_log/1/2/3/100/9.parquet",
    "insert_log/1/2/3/100/.seglake-tmp-9.123-abcd.0", "delta_log/1/2/3/100/9", "delta_log/1/2/3", "stats_log/1/2/3/9",
    "index_files/1/1/2/3/.hidden", "index_files/1/1/2/3/a b", "index_files/1/1/2/3/", "index_files/1/1/2/3",
    "index_files/1/1/2/3/x/y", "index_files/1/1/2/3/..", "index_files/1/1/2/3/n\u00e9", "index_files/1/1/2/3/a\\b",
    "index_files/01/1/2/3/x", "index_files/1/1/2/3/.seglake-tmp-x.1-ab.0",
    "snapshots/1/metadata/01.json", "snapshots/1/metadata/1.JSON", "snapshots/1/metadata/1.json.tmp",
    "snapshots/1/metadata/1", "snapshots/1/manifests/1/00.avro", "snapshots/1/manifests/1/0.avro/x",
    "snapshots/1/manifests/1/a.avro", "snapshots/1/other/1.json", "snapshots/x/metadata/1.json",
    "snapshots/1/metadata/1/01.json", "snapshots/1/metadata/1/2/3.json", "snapshots/1/manifests/1/02/0.avro",
    "snapshots/1/manifests/1/2/3/0.avro", "snapshots/1/manifests/1/2/0.json",
    "insert_log/1/2/3/100/\udcff", "notes/\udcfe\udcff", "insert_log/1/2/\udcff/100/9",
]


@pytest.mark.parametrize("key", ODD)
def test_anything_else_is_not_ours(key):
    assert layout.parse_key(key) is None


@pytest.mark.parametrize("key", [None, b"insert_log/1/2/3/100/9", 7])
def test_non_strings_are_not_ours(key):
    assert layout.parse_key(key) is None


def test_every_parse_round_trips_under_mutation():
    """Whatever is changed in a valid key, the parser either refuses it or returns ids
    that build exactly the mutated key: never a different key."""
    rng = random.Random(11)
    alphabet = "0123456789/\\._- +aZ\n\u0661\udcff%"
    hits = 0
    for _ in range(20000):
        key = list(rng.choice(BUILT)[0])
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(key) + 1)
            op = rng.randrange(3)
            if op == 0:
                key.insert(i, rng.choice(alphabet))
            elif key and op == 1:
                del key[min(i, len(key) - 1)]
            elif key:
                key[min(i, len(key) - 1)] = rng.choice(alphabet)
        k = "".join(key)
        p = layout.parse_key(k)
        if p is not None:
            hits += 1
            assert p.key() == k
    assert hits > 100  # the mutations do produce other valid keys too


@pytest.mark.parametrize("bad", ["a\\b", "100\\1", "/a", "a/", "a//b", "a/./b", "a\0b"])
def test_check_key_refuses_what_normalising_would_change(bad):
    with pytest.raises(ValueError):
        layout.check_key(bad)


def test_display_key_is_utf8_safe_and_never_parses():
    shown = layout.display_key("insert_log/1/2/3/100/\udcff")
    shown.encode("utf-8")
    assert shown == "insert_log/1/2/3/100/\\xff" and layout.parse_key(shown) is None
