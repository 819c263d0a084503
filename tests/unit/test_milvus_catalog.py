"""seglake.milvus.catalog on a Milvus catalog written here as Milvus 2.3 stores it (protobuf
values under <root>/meta/...), in an in-memory KV: what a capture refuses before it reads a
byte of the bucket (a field type it cannot represent, named; no or two primary keys; a
collection being dropped; an unknown collection, listing the known ones), and what it reads."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from seglake.errors import NotFound, ValidationError
from seglake.milvus import catalog
from seglake.milvus.etcdmeta import MilvusMeta
from seglake.milvus.proto import fields as fields_of


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def msg(*fields) -> bytes:
    """(number, value) pairs: int -> varint, bytes/str -> length-delimited."""
    out = b""
    for num, v in fields:
        if isinstance(v, int):
            out += _varint(num << 3) + _varint(v)
        else:
            v = v.encode() if isinstance(v, str) else v
            out += _varint(num << 3 | 2) + _varint(len(v)) + v
    return out


@dataclass
class Item:
    key: str
    value: bytes


class FakeKV:
    def __init__(self, items: dict[str, bytes]):
        self.items = items

    def range(self, prefix: str, *, revision=None, end=None, **_):
        for k in sorted(self.items):
            if (k.startswith(prefix) if end is None else prefix <= k < end):
                yield Item(k, self.items[k])

    def get(self, key: str):
        return Item(key, self.items[key]) if key in self.items else None


def field(fid, name, dtype, pk=False, dim=None):
    params = [(6, msg((1, "dim"), (2, str(dim))))] if dim else []
    return msg((1, fid), (2, name), (3, int(pk)), (5, dtype), *params)


def milvus(fields, state=0, name="c1") -> MilvusMeta:
    m = "r/meta/"
    items = {
        f"{m}root-coord/database/collection-info/1/7": msg((1, 7), (2, msg((1, name))), (7, "dml_0_7v0"),
                                                           (8, "dml_0"), (10, 1), (13, state)),
        f"{m}root-coord/partitions/7/8": msg((1, 8), (2, "_default"), (4, 7)),
        f"{m}datacoord-meta/s/7/8/9": msg((1, 9), (2, 7), (3, 8), (4, "dml_0_7v0"), (5, 3), (6, 4)),
        f"{m}datacoord-meta/binlog/7/8/9/100": msg((1, 100), (2, msg((1, 3), (6, 42)))),
        # the system fields' logs (row ids, timestamps): every Flushed segment of Milvus has them,
        # and a plan refuses a segment without (capture._check_catalog, attack-s25)
        f"{m}datacoord-meta/binlog/7/8/9/0": msg((1, 0), (2, msg((1, 3), (6, 40)))),
        f"{m}datacoord-meta/binlog/7/8/9/1": msg((1, 1), (2, msg((1, 3), (6, 41)))),
    }
    for f in fields:
        fid = fields_of(f)[1][0]
        items[f"{m}root-coord/fields/7/{fid}"] = f
    return MilvusMeta(FakeKV(items), "r", revision=5)


def test_reads_schema_partitions_and_flushed_segments():
    cat = catalog.read(milvus([field(100, "pk", 5, pk=True), field(101, "vec", 101, dim=4)]), "default", "c1")
    c = cat["collection"]
    assert c["shards"] == 1 and c["vchannels"] == ["dml_0_7v0"] and c["partitions"][0]["name"] == "_default"
    assert [(f["name"], f["data_type_name"], f["type_params"]) for f in c["schema"]["fields"]] == [
        ("pk", "Int64", {}), ("vec", "FloatVector", {"dim": "4"})]
    (s,) = cat["segments"]
    assert s["num_rows"] == 3 and [b["field_id"] for b in s["binlogs"]] == [0, 1, 100]
    assert next(b for b in s["binlogs"] if b["field_id"] == 100)["logs"][0]["path"] == "insert_log/7/8/9/100/42"


def test_a_field_type_it_cannot_represent_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="field 'weird' \\(id 101\\) has data type 999"):
        catalog.read(milvus([field(100, "pk", 5, pk=True), field(101, "weird", 999)]), "default", "c1")


@pytest.mark.parametrize("fields", [[field(100, "a", 5)], [field(100, "a", 5, pk=True), field(101, "b", 5, pk=True)],
                                    [field(100, "a", 10, pk=True)]])
def test_not_one_int64_or_varchar_primary_key_is_refused(fields):
    with pytest.raises(ValidationError, match="one Int64 or VarChar primary key"):
        catalog.read(milvus(fields), "default", "c1")


def test_a_collection_being_dropped_or_unknown_is_refused():
    with pytest.raises(NotFound, match="being created or dropped"):
        catalog.read(milvus([field(100, "pk", 5, pk=True)], state=2), "default", "c1")
    with pytest.raises(NotFound, match="no collection 'c2' .*its collections there: c1"):
        catalog.read(milvus([field(100, "pk", 5, pk=True)]), "default", "c2")


TOMBSTONE = b"\xe2\x9b\xbc"     # Milvus 2.3's SuffixSnapshot writes it over a removed key (kept ~a day)


def _with(meta: MilvusMeta, extra: dict[str, bytes]) -> MilvusMeta:
    meta.kv.items.update({f"r/meta/{k}": v for k, v in extra.items()})
    return meta


def test_tombstoned_keys_of_dropped_collections_partitions_fields_and_databases_are_not_read():
    """A dropped collection, partition, field or database leaves Milvus's tombstone on its
    key: the catalog reads around it, as Milvus's own LoadWithPrefix does."""
    m = _with(milvus([field(100, "pk", 5, pk=True), field(101, "vec", 101, dim=4)]), {
        "root-coord/database/collection-info/1/70": TOMBSTONE,
        "root-coord/database/db-info/5": TOMBSTONE,
        "root-coord/partitions/7/80": TOMBSTONE,
        "root-coord/fields/7/102": TOMBSTONE,
    })
    assert [c["id"] for c in catalog.collection_infos(m)] == [7]
    assert catalog.databases(m) == {1: "default"}
    cat = catalog.read(m, "default", "c1")
    assert [p["name"] for p in cat["collection"]["partitions"]] == ["_default"]
    assert [f["name"] for f in cat["collection"]["schema"]["fields"]] == ["pk", "vec"]
    assert [c.id for c in m.collections()] == [7]


class _Bucket:
    uri = "mem://milvus"

    def list_described(self, prefix):
        from types import SimpleNamespace
        if prefix == "insert_log/7/":
            for k in ("insert_log/7/8/9/0/40", "insert_log/7/8/9/1/41", "insert_log/7/8/9/100/42"):
                yield SimpleNamespace(key=k, size=10, etag="e1", mtime=0.0)


def test_a_whole_database_plan_leaves_out_collections_being_created_or_dropped():
    """`--all`: a collection Milvus is dropping (for hours after a drop, until its data is
    collected) or still creating is not part of the database; the others are planned. Named,
    it is refused."""
    from seglake.milvus import capture

    m = milvus([field(100, "pk", 5, pk=True)])
    info = msg((1, 71), (2, msg((1, "old"))), (7, "dml_0_71v0"), (8, "dml_0"), (10, 1), (13, 2))
    m.kv.items["r/meta/root-coord/database/collection-info/1/71"] = info
    m.kv.items["r/meta/root-coord/database/collection-info/1/72"] = info.replace(b"old", b"new")[:-1] + b"\x01"
    m.kv.items["r/meta/root-coord/fields/71/100"] = field(100, "pk", 5, pk=True)
    m.kv.revision = lambda: 5
    planned = capture.plan(m.kv, _Bucket(), "r", [], db="default")
    assert [c["catalog"]["collection"]["name"] for c in planned["collections"]] == ["c1"]
    with pytest.raises(NotFound, match="being created or dropped"):
        capture.plan(m.kv, _Bucket(), "r", ["old"], db="default")


def test_a_partition_being_dropped_and_its_segments_are_not_captured():
    m = milvus([field(100, "pk", 5, pk=True)])
    m.kv.items["r/meta/root-coord/partitions/7/81"] = msg((1, 81), (2, "p2"), (4, 7), (5, 2))
    m.kv.items["r/meta/datacoord-meta/s/7/81/91"] = msg((1, 91), (2, 7), (3, 81), (4, "dml_0_7v0"), (5, 2), (6, 4))
    m.kv.items["r/meta/datacoord-meta/binlog/7/81/91/100"] = msg((1, 100), (2, msg((1, 2), (6, 43))))
    cat = catalog.read(m, "default", "c1")
    assert [p["name"] for p in cat["collection"]["partitions"]] == ["_default"]
    assert [s["segment_id"] for s in cat["segments"]] == [9]


@pytest.mark.parametrize("version, ok", [("2.3.5", True), ("v2.3.5", True), ("v2.3.9-dev", True), ("", True),
                                         ("2.4.1", False), ("v2.2.16", False), ("3.0.0", False), ("v2.3", False),
                                         ("2.3.5\n", False), ("2.30.1", False)])
def test_a_capture_of_a_milvus_other_than_2_3_is_refused_naming_its_version(version, ok):
    """Milvus 2.4 changed what a capture reads (L0 delete segments) and a restore writes (its
    import API): a version seglake was never run against is refused by name before the
    bucket is listed ('' -- no component registered one: a stopped Milvus -- is read as 2.3)."""
    import json

    from seglake.milvus import capture

    m = milvus([field(100, "pk", 5, pk=True)])
    m.kv.items["r/meta/session/datacoord"] = json.dumps({"ServerID": 1, "Version": version}).encode()
    m.kv.revision = lambda: 5
    if ok:
        assert capture.plan(m.kv, _Bucket(), "r", ["c1"])["version"] == version
    else:
        with pytest.raises(ValidationError, match=r"is version .*; seglake supports Milvus 2\.3\.x .*nothing captured"):
            capture.plan(m.kv, _Bucket(), "r", ["c1"])


def test_a_restore_into_a_milvus_other_than_2_3_is_refused_before_anything_is_written():
    """restore.check asks the server's version first (after reading the bundle): the same rule."""
    from seglake.milvus import check_version

    assert check_version("v2.3.5", "127.0.0.1:19530", "written") == "v2.3.5"
    with pytest.raises(ValidationError, match=r"Milvus at 127\.0\.0\.1:19530 is version 'v2\.4\.13'.*nothing written"):
        check_version("v2.4.13", "127.0.0.1:19530", "written")


def test_an_empty_root_is_said_to_be_one():
    """`seglake milvus backup --milvus-root by-dev` against a Milvus whose root is another
    said only "no collection 'mv1' ... (its collections there: none)"."""
    with pytest.raises(NotFound, match=r"no Milvus collection at all under etcd root 'by-dev': is --milvus-root"):
        catalog.read(MilvusMeta(FakeKV({}), "by-dev", revision=5), "default", "mv1")
    with pytest.raises(NotFound) as e:   # a root with collections: no such hint
        catalog.read(milvus([field(100, "pk", 5, pk=True)]), "default", "c2")
    assert "--milvus-root" not in str(e.value)


@pytest.mark.parametrize("error, hinted", [("S3 list 'x' failed: Unable to locate credentials", True),
                                           ("SignatureDoesNotMatch The request signature ...", True),
                                           ("S3 list 'x' failed: connection refused", False)])
def test_a_bucket_key_error_names_the_settings(error, hinted):
    """'Unable to locate credentials' named no setting a user could set."""
    from seglake.milvus.capture import _keys_hint

    hint = _keys_hint(error)
    assert bool(hint) is hinted
    if hinted:
        assert "milvus_s3_access_key" in hint and "SEGLAKE_MILVUS_S3_ENDPOINT" in hint and "seglake_milvus" in hint
