"""THE reference index: every file a set of snapshots references, read from their
manifests (GC on both engines, restore and drop use it)."""

from __future__ import annotations

from typing import Iterable


from seglake import manifest
from seglake.meta import Meta
from seglake.meta.snapshots import DELETING, PENDING, SnapshotRecord
from seglake.storage import Store, layout
from seglake.lifecycle.snapshot.read import read_manifest, read_metadata


# -- reference index ------------------------------------------------------------------------
class RefIndex:
    """Every file and segment id that snapshots reference, loaded completely or not at all:
    THE reference index (GC's inline and Spark marks, snapshot drop and tests all read
    snapshots through own_refs / manifest_refs below).

    COMMITTED snapshots contribute their verified manifests' files; any missing,
    truncated, altered or unknown-version metadata or manifest raises (GC fails closed).
    DELETING ones contribute what is still readable (they are being released; one
    reclaimed while PENDING never had metadata). PENDING snapshots block their whole
    collection (`blocked_collections`): GC must skip it.
    """

    def __init__(self):
        self.files: set[str] = set()
        self.segments: set[tuple[int, int]] = set()  # (collection_id, segment_id)
        self.blocked_collections: set[int] = set()
        self.own_files: set[str] = set()  # committed manifests + metadata of live snapshot records
        self.snapshots: list[SnapshotRecord] = []

    def __contains__(self, path: str) -> bool:
        return path in self.files

    @classmethod
    def of(cls, store: Store, records: Iterable[SnapshotRecord]) -> "RefIndex":
        """What these snapshot records reference."""
        idx = cls()
        for rec in records:
            idx.snapshots.append(rec)
            if rec.state == PENDING:
                idx.blocked_collections.add(rec.collection_id)
            own, manifests = own_refs(store, rec)
            idx.own_files.update(own)
            for m in manifests:
                files, segs = manifest_refs(store, rec, m)
                idx.files |= files
                idx.segments |= segs
        return idx

    @classmethod
    def load(cls, meta: Meta, store: Store) -> "RefIndex":
        """What every snapshot record in etcd references."""
        return cls.of(store, list(meta.snapshots.list()))


def own_refs(store: Store, rec: SnapshotRecord) -> tuple[list[str], list[dict]]:
    """(the record's own files: metadata + manifests, the manifests to read) of one
    snapshot record. A COMMITTED snapshot's unreadable metadata raises (fail closed); a
    DELETING one's contributes nothing; a PENDING one blocks its collection instead."""
    if rec.state == PENDING or (rec.state == DELETING and not rec.location):
        return [], []
    try:
        doc = read_metadata(store, rec)
    except manifest.ManifestError:
        if rec.state == DELETING:
            return [], []
        raise
    return [rec.location] + [m["key"] for m in doc["manifests"]], list(doc["manifests"])


def manifest_refs(store: Store, rec: SnapshotRecord, m: dict) -> tuple[set[str], set[tuple[int, int]]]:
    """(files, (collection, segment) ids) one verified manifest references; a DELETING
    snapshot's unreadable manifest contributes nothing, a COMMITTED one's raises."""
    try:
        entries = read_manifest(store, rec, m)
    except manifest.ManifestError:
        if rec.state == DELETING:
            return set(), set()
        raise
    files, segs = set(), set()
    for e in entries:
        segs.add((e["collection_id"], e["segment_id"]))
        files.update(layout.normalize_key(p) for p, _ in manifest.entry_files(e))
    return files, segs
