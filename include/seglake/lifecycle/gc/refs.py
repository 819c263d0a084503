"""Everything referenced, read at one etcd revision (fail closed: all or nothing), and
its refresh from what changed in etcd since (the sweep's re-check)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from seglake.lifecycle import snapshot
from seglake.lifecycle.gc.options import GCError
from seglake.lifecycle.gc.pause import paused_scopes
from seglake.lifecycle.gc.verdicts import BLOCKED, PAUSED
from seglake.meta import Meta
from seglake.meta.codec import decode_struct
from seglake.meta.segments import DROPPED, Segment
from seglake.storage import Store, layout


# -- references -------------------------------------------------------------------------------
@dataclass
class References:
    files: set[str] = field(default_factory=set)        # live: never deleted
    dropped: dict[str, tuple[int, int]] = field(default_factory=dict)  # file of a Dropped record -> (coll, seg)
    segment_collection: dict[int, int] = field(default_factory=dict)  # segment id -> collection id
    snapshot_segments: set[tuple[int, int]] = field(default_factory=set)
    snapshot_files: set[str] = field(default_factory=set)
    snapshot_ids: set[tuple[int, int]] = field(default_factory=set)   # (collection, snapshot id) with a record
    blocked: set[int] = field(default_factory=set)      # collections with a PENDING snapshot
    paused: set[int] = field(default_factory=set)
    paused_all: bool = False
    revision: int = 0
    segments: list[Segment] = field(default_factory=list)
    changed_segments: set[tuple[int, int]] = field(default_factory=set)  # records written after `revision` was first read

    def __contains__(self, key: str) -> bool:
        return key in self.files

    def add_segment(self, seg: Segment) -> None:
        self.segment_collection[seg.segment_id] = seg.collection_id
        keys = [f.key for f in layout.segment_files(seg)]
        if seg.state == DROPPED:
            self.dropped.update((k, (seg.collection_id, seg.segment_id)) for k in keys)
        else:
            self.files.update(keys)

    def add_snapshots(self, idx: "snapshot.RefIndex") -> None:
        self.files |= idx.files | idx.own_files
        self.snapshot_files |= idx.files
        self.snapshot_segments |= idx.segments
        self.blocked |= idx.blocked_collections
        self.snapshot_ids |= {(r.collection_id, r.snapshot_id) for r in idx.snapshots}
        for c, s in sorted(idx.segments):  # a segment no record names: its smallest collection id
            self.segment_collection.setdefault(s, c)

    def skipped(self, coll: int | None) -> str | None:
        """Why a collection's files must be left alone right now, if they must."""
        if coll is not None and coll in self.blocked:
            return BLOCKED
        if self.paused_all or (coll is not None and coll in self.paused):
            return PAUSED
        return None


def load_references(meta: Meta, store: Store) -> References:
    """Everything referenced, read at one etcd revision. Any failure raises GCError:
    nothing may be deleted on a partial view."""
    try:
        refs = References(revision=meta.kv.revision())
        for seg in meta.segments.list(revision=refs.revision):
            refs.segments.append(seg)
            refs.add_segment(seg)
        refs.add_snapshots(snapshot.RefIndex.of(store, snapshot_records(meta, refs.revision)))
        refs.paused_all, refs.paused = paused_scopes(meta)
    except Exception as e:
        raise GCError(f"references could not be read completely, nothing deleted: {type(e).__name__}: {e}") from e
    return refs


def snapshot_records(meta: Meta, revision: int) -> list:
    """The snapshot records at `revision`."""
    from seglake.meta.snapshots import SnapshotRecord
    return [decode_struct(kv.value, SnapshotRecord, kv.key)
            for kv in meta.kv.range(meta.keys.snapshots_prefix(), revision=revision)]


def refresh_references(meta: Meta, store: Store, refs: References) -> References:
    """Add what changed in etcd since `refs` was read: new or updated segment records
    (remembered in `changed_segments`), and what the snapshot records written since
    reference (an unchanged record references what it did at the mark). Never removes a
    reference. Reads only the changes (`changed_records`), not every record. Raises GCError."""
    try:
        if meta.kv.revision() == refs.revision:
            return refs  # nothing at all was written to etcd since: the references stand
        segments, snapshots, upto = changed_records(meta, refs.revision)
        for seg in segments:
            refs.add_segment(seg)
            refs.changed_segments.add((seg.collection_id, seg.segment_id))
        if snapshots:
            refs.add_snapshots(snapshot.RefIndex.of(store, snapshots))
        refs.paused_all, refs.paused = paused_scopes(meta)
        refs.revision = upto
    except Exception as e:
        raise GCError(f"references could not be refreshed, stopping before this batch: "
                      f"{type(e).__name__}: {e}") from e
    return refs


def changed_records(meta: Meta, revision: int) -> tuple[list[Segment], list, int]:
    """(segment records, snapshot records) written after `revision` and still present,
    as they are now, in key order, and the revision that view is complete up to. Read
    from etcd's history since `revision` (one watch over gc/..snapshots/, cost: the
    changes); when that history is compacted, from the current state instead: every
    record whose mod_revision is above `revision` (one scan of both prefixes: a record
    changed since keeps a mod_revision above it whatever was compacted, so nothing is
    missed either way; 'no change seen' is never assumed)."""
    from seglake.meta.kv import Compacted
    from seglake.meta.snapshots import SnapshotRecord

    seg_prefix, snap_prefix = meta.keys.segments_prefix(), meta.keys.snapshots_prefix()
    lo, hi = meta.keys.gc() + "/", snap_prefix[:-1] + "0"  # {root}/gc/ .. segments/ .. snapshots/ (end)
    try:
        changed, upto = meta.kv.changes(lo, hi, revision + 1, meta.keys.gc("fence", uuid.uuid4().hex))
        kvs = [kv for _, kv in sorted(changed.items()) if kv is not None]
    except Compacted:
        upto = meta.kv.revision()
        kvs = [kv for p in (seg_prefix, snap_prefix)
               for kv in meta.kv.range(p, revision=upto, min_mod_revision=revision + 1)]
    segments = [decode_struct(kv.value, Segment, kv.key) for kv in kvs if kv.key.startswith(seg_prefix)]
    snapshots = [decode_struct(kv.value, SnapshotRecord, kv.key) for kv in kvs if kv.key.startswith(snap_prefix)]
    return segments, snapshots, upto
