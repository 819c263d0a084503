"""Milvus 2.3's metadata as stored in its etcd, read with seglake's own etcd client (read-only:
only range reads). Keys under `<rootPath>/meta/` (MILVUS.md):

  root-coord/database/collection-info/<db>/<C>   etcdpb.CollectionInfo
  root-coord/partitions/<C>/<P>                  etcdpb.PartitionInfo
  datacoord-meta/s/<C>/<P>/<S>                   datapb.SegmentInfo
  datacoord-meta/binlog/<C>/<P>/<S>/<F>          datapb.FieldBinlog (also deltalog/, statslog/)

Field numbers (milvus-io/milvus v2.3 internal/proto/etcd_meta.proto, data_coord.proto):
CollectionInfo 1 ID, 2 schema (CollectionSchema: 1 name, 4 fields), 7 vchannels, 8 pchannels,
10 shards_num, 13 state; PartitionInfo 1 id, 2 name, 4 collection id, 5 state; SegmentInfo 1 id,
2 collection, 3 partition, 4 insert channel, 5 num_of_rows, 6 state, 17 is_importing; FieldBinlog 1 field id,
2 binlogs (Binlog: 1 entries_num, 2 ts_from, 3 ts_to, 5 log_size, 6 log_id).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from seglake.errors import SeglakeError
from seglake.milvus.proto import fields, one, signed

# Milvus 2.3's root coordinator keeps its keys in a SuffixSnapshot: a removed key (a dropped
# collection, partition, field, alias or database) is overwritten with this tombstone, kept
# until the snapshot's GC (a day by default); Milvus's own reads skip it
TOMBSTONE = b"\xe2\x9b\xbc"

SEGMENT_STATES = {0: "None", 1: "NotExist", 2: "Growing", 3: "Sealed", 4: "Flushed",
                  5: "Flushing", 6: "Dropped", 7: "Importing"}


@dataclass(frozen=True)
class MilvusCollection:
    id: int
    name: str
    db_id: int
    shards: int
    vchannels: tuple[str, ...]
    state: int


@dataclass(frozen=True)
class MilvusPartition:
    id: int
    name: str
    collection_id: int
    state: int


@dataclass(frozen=True)
class Binlog:
    entries: int
    ts_from: int
    ts_to: int
    log_size: int
    log_id: int


@dataclass
class MilvusSegment:
    id: int
    collection_id: int
    partition_id: int
    channel: str
    rows: int
    state: int
    importing: bool = False          # SegmentInfo 17 is_importing: a bulk insert's segment, not served yet
    binlogs: dict[int, list[Binlog]] = field(default_factory=dict)    # field id -> insert logs
    deltalogs: list[Binlog] = field(default_factory=list)
    statslogs: dict[int, list[Binlog]] = field(default_factory=dict)

    @property
    def state_name(self) -> str:
        return SEGMENT_STATES.get(self.state, str(self.state))

    def insert_log_keys(self, root_path: str) -> list[str]:
        """Object keys of its insert logs (2.3.5 stores no path: rebuilt from the ids)."""
        return [f"{root_path}/insert_log/{self.collection_id}/{self.partition_id}/{self.id}/{f}/{b.log_id}"
                for f, logs in sorted(self.binlogs.items()) for b in logs]


def _binlogs(value: bytes) -> tuple[int, list[Binlog]]:
    f = fields(value)
    logs = []
    for raw in f.get(2, []):
        b = fields(raw)
        logs.append(Binlog(entries=signed(one(b, 1, 0)), ts_from=one(b, 2, 0), ts_to=one(b, 3, 0),
                           log_size=signed(one(b, 5, 0)), log_id=signed(one(b, 6, 0))))
    return signed(one(f, 1, 0)), logs


class CatalogError(SeglakeError):
    """A record of Milvus's etcd that is not what Milvus 2.3 writes there (not protobuf, a
    name that is not UTF-8, a key whose id is not a number): named, nothing captured."""


def named_records(fn):
    """A reader of Milvus's etcd (its first argument a MilvusMeta): a record its parsing
    cannot read (the protobuf reader's, a decode's or an int()'s ValueError, a short
    buffer's IndexError, a field of another wire type's TypeError / AttributeError) fails
    as a CatalogError naming that record's key, not as a bare Python exception out of the
    CLI or the DAG (seglake's own errors pass unchanged)."""
    @functools.wraps(fn)
    def read(meta, *args, **kwargs):
        try:
            return fn(meta, *args, **kwargs)
        except SeglakeError:
            raise
        except (ValueError, IndexError, OverflowError, TypeError, AttributeError) as e:   # (a field of
            # another wire type: bytes where a number is read, a number where a name is decoded)
            raise CatalogError(f"Milvus's etcd record {meta.at or meta.meta!r} cannot be read "
                               f"({type(e).__name__}: {e}): not a record Milvus 2.3 writes (damaged, or "
                               f"another program's); nothing captured") from None
    return read


class MilvusMeta:
    """A read-only view of one Milvus's etcd root (`rootPath`, e.g. "by-dev")."""

    def __init__(self, kv, root: str, revision: int | None = None):
        """`revision`: every read at that one etcd revision (a consistent view of the
        whole catalog); None: each range at the store's revision when it starts."""
        self.kv, self.meta, self.revision = kv, root.rstrip("/") + "/meta/", revision
        self.at = ""    # the key of the record being read (named_records names it in an error)

    def _range(self, sub: str):
        """(key parts under `sub`, value) of every live key (a tombstone is a removed key)."""
        for item in self.kv.range(self.meta + sub, revision=self.revision):
            if bytes(item.value) == TOMBSTONE:
                continue
            self.at = item.key
            yield item.key[len(self.meta + sub):].split("/"), item.value

    @named_records
    def collections(self) -> list[MilvusCollection]:
        out = []
        for parts, value in self._range("root-coord/database/collection-info/"):
            f = fields(value)
            schema = fields(one(f, 2, b""))
            out.append(MilvusCollection(
                id=signed(one(f, 1, 0)), name=one(schema, 1, b"").decode(), db_id=int(parts[0]),
                shards=one(f, 10, 0), vchannels=tuple(v.decode() for v in f.get(7, [])),
                state=one(f, 13, 0)))
        return sorted(out, key=lambda c: c.id)

    def collection(self, name: str) -> MilvusCollection | None:
        return next((c for c in self.collections() if c.name == name), None)

    @named_records
    def partitions(self, collection_id: int) -> list[MilvusPartition]:
        out = []
        for _, value in self._range(f"root-coord/partitions/{collection_id}/"):
            f = fields(value)
            out.append(MilvusPartition(id=signed(one(f, 1, 0)), name=one(f, 2, b"").decode(),
                                       collection_id=signed(one(f, 4, 0)), state=one(f, 5, 0)))
        return sorted(out, key=lambda p: p.id)

    @named_records
    def segments(self, collection_id: int) -> list[MilvusSegment]:
        segs: dict[int, MilvusSegment] = {}
        for _, value in self._range(f"datacoord-meta/s/{collection_id}/"):
            f = fields(value)
            s = MilvusSegment(id=signed(one(f, 1, 0)), collection_id=signed(one(f, 2, 0)),
                              partition_id=signed(one(f, 3, 0)), channel=one(f, 4, b"").decode(),
                              rows=signed(one(f, 5, 0)), state=one(f, 6, 0), importing=bool(one(f, 17, 0)))
            segs[s.id] = s
        for kind in ("binlog", "deltalog", "statslog"):
            for parts, value in self._range(f"datacoord-meta/{kind}/{collection_id}/"):
                seg = segs.get(int(parts[1]))
                if seg is None:
                    continue
                fid, logs = _binlogs(value)
                if kind == "binlog":
                    seg.binlogs[fid] = logs
                elif kind == "deltalog":
                    seg.deltalogs.extend(logs)
                else:
                    seg.statslogs[fid] = logs
        return sorted(segs.values(), key=lambda s: s.id)
