"""Capture: every Flushed segment of the collection at ONE etcd revision at or after the
request, so every segment flushed before the snapshot was requested is in it."""

from __future__ import annotations


import msgspec

from seglake.errors import StateError, ValidationError
from seglake.meta import Meta
from seglake.meta.codec import encode_struct
from seglake.meta.segments import FLUSHED, Binlog, Segment
from seglake.meta.snapshots import SnapshotRecord
from seglake.lifecycle.snapshot.common import SEGMENTS_PER_MANIFEST


# -- capture --------------------------------------------------------------------------------
class _Head(msgspec.Struct):
    """The fields capture filters on; msgspec skips the rest of the record cheaply."""

    state: str
    dml_ts: int = 0
    source: dict | None = None
    delta_partitions: dict | None = None


_HEAD = msgspec.json.Decoder(_Head)


def capture_raw(meta: Meta, rec: SnapshotRecord) -> tuple[list[bytes], int, int]:
    """(encoded segment records, consistent_ts, revision): every Flushed segment read at
    ONE etcd revision no older than the request, so nothing flushed before the snapshot
    was requested is missed, whichever process flushed it and whatever its clock said.
    consistent_ts bounds every tick captured (rows and deletes). Records stay encoded so workers can
    decode them in parallel."""
    revision = meta.kv.revision()
    if revision < rec.requested_revision:
        raise StateError(f"etcd revision {revision} is older than the snapshot request "
                         f"({rec.requested_revision}): wrong etcd cluster?")
    _live_at(meta, rec, revision)
    out, heads, newest = [], [], 0
    for kv in meta.kv.range(meta.keys.segments_prefix(rec.collection_id), revision=revision):
        head = _HEAD.decode(kv.value)
        if head.state == FLUSHED:
            out.append(kv.value)
            heads.append(head)
            newest = max(newest, head.dml_ts)
    if any(h.source and h.delta_partitions is None for h in heads):
        out = _name_legacy_copies(meta, rec.collection_id, out, heads)
    # consistent_ts above every tick the captured records hold, rows' AND deletes' (dml_ts is a
    # segment's last ROW tick; deletes riding in its delta log may be newer, and the tick a delete
    # was appended at is recorded nowhere): a linearizable timestamp is above every timestamp
    # issued before this call, the flushes read above included -- a batched now() may lag
    # another process's by BATCH_MAX_AGE, and then a restore to an instant below those deletes
    # started from this snapshot and applied them early (pitr: rows missing)
    return out, max(meta.tso.reserve(1, linearizable=True), newest), revision


def _live_at(meta: Meta, rec: SnapshotRecord, revision: int) -> None:
    """StateError unless the collection is live (Created) at the capture's revision. A drop
    begun since the snapshot was requested releases each vchannel in several txns past
    RELEASE_BATCH segments (the excess marked Dropped first, the checkpoint removed last):
    a capture between them held the vchannel's checkpoint without the segments already
    Dropped, and a replay from its positions (an undrop) skipped their rows."""
    from seglake.meta.catalog import CREATED, Collection
    from seglake.meta.codec import decode

    key = meta.keys.collection(rec.collection_id)
    found = [kv for kv in meta.kv.range(key, revision=revision) if kv.key == key]
    if not found:
        return   # (an imported snapshot's collection is not in the catalog)
    state = Collection.from_json(decode(found[0].value, key)).state
    if state != CREATED:
        raise StateError(f"collection id {rec.collection_id} is {state} at the capture of snapshot {rec.name!r}: "
                         f"snapshots need a live collection")


def _name_legacy_copies(meta: Meta, collection_id: int, raws: list[bytes], heads: list[_Head]) -> list[bytes]:
    """Segments copied before delta_partitions existed hold only a one-hop `source`
    record, which the manifest does not carry: their captured records get the map their
    delta logs need once copied again -- each source partition id the collection's
    source records name -> the name of the partition it was restored into, and every
    other partition of the source collection -> "" (no rows were copied from it: its
    deletes hide nothing; the translation seglake.visibility applies to them in place)."""
    from seglake.visibility import NO_ROWS_NAME, legacy_map, legacy_source_partitions

    names = {p.partition_id: p.name for p in meta.catalog.get(collection_id).partitions}
    dec = msgspec.json.Decoder(Segment)
    copied = {i: dec.decode(r) for i, (r, h) in enumerate(zip(raws, heads)) if h.source}
    legacy = {src: names[own] for src, own in legacy_map(copied.values()).items() if own in names}
    for pid in legacy_source_partitions(meta, copied.values()) - set(legacy):
        legacy[pid] = NO_ROWS_NAME    # a source partition no copied segment came from: no rows
    out = list(raws)
    for i, seg in copied.items():
        if seg.delta_partitions is None and seg.deltalogs:
            out[i] = encode_struct(seg.replace(delta_partitions=dict(legacy)))
    return out


class _Marks(msgspec.Struct):
    """The fields of a segment record the replay floors need (flush.fold_high_water)."""

    channel: str
    partition_id: int
    state: str
    level: str = "L1"
    dml_ts: int = 0
    source: dict | None = None
    compacted_from: tuple[int, ...] = ()
    binlogs: msgspec.Raw = msgspec.Raw(b"{}")
    deltalogs: tuple[Binlog, ...] = ()


_MARKS = msgspec.json.Decoder(_Marks)


def positions(meta: Meta, collection_id: int, revision: int, raws: list[bytes]) -> dict[str, dict]:
    """Where each vchannel of the collection stood in its log at `revision` (the capture's)
    and what of it the captured segments (`raws`) hold: vchannel -> {"checkpoint": its
    flusher checkpoint [term, fragment, offset, time_tick] or None (the log from its
    start), "part_hw": {partition id: highest row tick written}, "del_hw": highest delete
    tick}: exactly what a flusher recovering at that revision would skip
    (flush.fold_high_water), so a replay of the log from there (seglake.lifecycle.pitr)
    rebuilds everything after the snapshot, nothing twice."""
    from types import SimpleNamespace

    from seglake.lifecycle.flush.state import fold_high_water
    from seglake.wal.checkpoints import parse_checkpoint

    out: dict[str, dict] = {}
    for v in meta.catalog.get(collection_id).vchannels:
        key = meta.keys.channel_checkpoint(v)
        found = [kv for kv in meta.kv.range(key, revision=revision) if kv.key == key]
        cp = None
        if found:
            c = parse_checkpoint(found[0].value, key)   # damaged: the snapshot fails, never a wrong start
            cp = [c.message_id.term, c.message_id.fragment, c.message_id.offset, c.time_tick]
        out[v] = {"checkpoint": cp, "part_hw": {}, "del_hw": 0}
    hws: dict[str, dict] = {v: {} for v in out}
    for raw in raws:
        m = _MARKS.decode(raw)
        if m.channel not in out:
            continue
        seg = SimpleNamespace(**{f: getattr(m, f) for f in m.__struct_fields__ if f != "binlogs"},
                              binlogs=bytes(m.binlogs).strip() not in (b"{}", b"", b"null"))
        out[m.channel]["del_hw"] = fold_high_water(seg, hws[m.channel], out[m.channel]["del_hw"])
    for v, hw in hws.items():
        out[v]["part_hw"] = {str(p): t for p, t in sorted(hw.items())}
    return out


def capture(meta: Meta, rec: SnapshotRecord) -> tuple[list[Segment], int, int]:
    """capture_raw, decoded."""
    raws, ts, revision = capture_raw(meta, rec)
    dec = msgspec.json.Decoder(Segment)
    return [dec.decode(r) for r in raws], ts, revision


def group(segments: list, per_file: int = SEGMENTS_PER_MANIFEST) -> list[list]:
    if isinstance(per_file, bool) or not isinstance(per_file, int) or per_file < 1:
        raise ValidationError(f"segments per manifest must be an integer >= 1, got {per_file!r}")
    return [segments[i:i + per_file] for i in range(0, len(segments), per_file)] or [[]]
