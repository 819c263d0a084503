"""The restore target a copy job fills: its files (source -> target), its rollback on
failure and the drop of its segments. Used by the restore that creates the job and by
the job's own finish."""

from __future__ import annotations

import time

from seglake.errors import Conflict, StateError
from seglake.meta import Meta
from seglake.meta.catalog import DROPPED, IMPORTING, Collection
from seglake.meta.codec import decode, encode
from seglake.meta.kv import CAS_ATTEMPTS, Compare, Delete, Put, unchanged
from seglake.meta.segments import DROPPED as SEG_DROPPED
from seglake.storage import layout



def rollback_target(meta: Meta, collection_id: int, reason: str, *, guard: list[Compare] | None = None,
                    now: float | None = None) -> None:
    """All-or-nothing, safe to observe half done: ONE txn makes the Importing target
    Dropped and frees its name (guarded by `guard` when given: Conflict if it fails),
    then its segments go Dropped in batches (records and files stay for GC). Re-runnable
    (a record GC already removed is fine); a Created collection is never rolled back."""
    key = meta.keys.collection(collection_id)
    for _ in range(CAS_ATTEMPTS):
        kv = meta.kv.get(key)
        if kv is None:
            return  # rolled back and already reclaimed by GC
        coll = Collection.from_json(decode(kv.value, key))
        if coll.state == DROPPED:
            break
        if coll.state != IMPORTING:
            raise StateError(f"collection {coll.name!r} is {coll.state}; only an Importing restore target "
                             "is rolled back")
        compares, ops = [unchanged(kv), *(guard or [])], []
        name_kv = meta.kv.get(meta.keys.collection_name(coll.db, coll.name))
        if name_kv is not None and name_kv.value == str(collection_id).encode():
            compares.append(unchanged(name_kv))
            ops.append(Delete(name_kv.key))
        props = {**coll.properties, "dropped_reason": reason[:2000]}
        new = Collection(**{**coll.__dict__, "state": DROPPED, "properties": props})
        try:
            meta.kv.txn(compares, [Put(key, encode(new.to_json())), *ops])
            break
        except Conflict:
            if guard:
                raise
    else:
        raise Conflict(f"could not roll back collection id {collection_id}: persistent contention")
    drop_segments(meta, collection_id, now)


def drop_segments(meta: Meta, collection_id: int, now: float | None = None) -> int:
    """The live segments of a Dropped restore target -> Dropped (idempotent)."""
    now = time.time() if now is None else now
    refs = [s.ref for s in meta.segments.list(collection_id) if s.state != SEG_DROPPED]
    return meta.segments.transition(refs, SEG_DROPPED, now=now)


def source_and_target_files(target_seg) -> list[tuple[str, str, int]]:
    """(source key, target key, size) for every file of an Importing target segment
    (`source` names the source segment's ids, and its index build ids where the copy
    mapped them: "builds", [[target build, source build], ...])."""
    src = target_seg.source
    seg = target_seg
    if src.get("builds"):
        from seglake.meta.segments import IndexFile

        old = {int(new): int(was) for new, was in src["builds"]}
        seg = seg.replace(index_files=tuple(IndexFile(old[x.build_id], x.version, x.name, x.size)
                                            for x in seg.index_files))
    sources = layout.segment_files(seg, collection_id=src["collection_id"],
                                   partition_id=src["partition_id"], segment_id=src["segment_id"])
    return [(s.key, t.key, t.size) for s, t in zip(sources, layout.segment_files(target_seg), strict=True)]
