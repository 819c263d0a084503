"""Plan a collection's compaction: deterministic units from one etcd revision.

    check (collection Created, no restore importing, no snapshot PENDING or taken within
    `protection`) -> read every segment record at ONE revision -> count each Flushed
    segment's hidden rows with THE visibility rule -> per (partition, vchannel), by
    segment id: a segment of >= min rows and >= min bytes whose hidden fraction exceeds
    delete_ratio is a REWRITE unit alone; segments below min rows OR min bytes (0-row L0
    delete segments included) are MERGE units of about target visible rows or target
    bytes, whichever comes first (estimated: stored bytes x visible fraction; at most MAX_INPUTS each and
    MAX_RECORD_BYTES of input records: one commit rewrites them all; a lone small
    segment without hidden rows gains nothing and is left alone: plans converge).

L0 delete segments older than `l0_age` whose deletes are all below every vchannel's
checkpoint are FOLD units first (lifecycle/compaction/folding: folded into the segments
they hit); those segments and the hit ones are in no other unit of the plan.

Same state, same units (ids included: policy.unit_id). Nothing is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from seglake import limits, visibility
from seglake.errors import NotFound
from seglake.meta.catalog import CREATED, DEFAULT_DB
from seglake.meta.codec import decode_struct, encode_struct
from seglake.meta.segments import FLUSHED, IMPORTING, Segment
from seglake.meta.snapshots import PENDING
from seglake.names import validate_name
from seglake.lifecycle.compaction.policy import FOLD, MAX_INPUTS, MERGE, REWRITE, Policy, Unit, make_unit
from seglake.lifecycle.compaction import folding
from seglake.lifecycle.compaction.folding import plan_folds


# the inputs' records a unit's commit rewrites, in bytes: with the output's record and the
# compares it stays well under etcd's request limit (1.5 MiB)
MAX_RECORD_BYTES = 600_000


@dataclass
class Plan:
    collection_id: int
    collection: str
    revision: int                       # the etcd revision every record was read at
    units: list[Unit] = field(default_factory=list)
    skipped: str | None = None          # why nothing is planned for the collection
    segments: int = 0                   # Flushed segments seen

    def gain(self) -> dict:
        """Expected gain of the whole plan (a fold: its L0 inputs and hits in, one output per hit)."""
        return {"units": len(self.units), "segments_in": sum(len(u.inputs) + len(u.hits) for u in self.units),
                "segments_out": sum(len(u.hits) if u.kind == FOLD else 1 for u in self.units),
                "rows_in": sum(u.rows for u in self.units),
                "rows_dropped": sum(u.deleted for u in self.units),
                "delta_logs_in": sum(u.delta_logs for u in self.units),
                "bytes_in": sum(u.bytes for u in self.units),
                "bytes_reclaimable_est": sum(u.bytes * u.deleted // max(u.rows, 1) for u in self.units)}

    def to_json(self) -> dict:
        return {"collection_id": self.collection_id, "collection": self.collection, "revision": self.revision,
                "skipped": self.skipped, "segments": self.segments, "units": [u.to_json() for u in self.units]}


def protected(meta, collection_id: int, protection: float, now: float) -> str | None:
    """Why snapshots keep the collection out of compaction right now, if they do: one is
    being written (PENDING), or one taken by hand was taken within `protection` seconds.
    A retention schedule's snapshots do not protect (like a Milvus snapshot created without
    compaction_protection_seconds, whose default is 0): they are backups, GC keeps what they
    reference anyway, and a schedule at least as frequent as the protection (hourly, the
    default, against 3600 s) kept its collection out of compaction for good (attack s21)."""
    from seglake.lifecycle import retention

    for rec in meta.snapshots.list(collection_id):
        if rec.state == PENDING:
            return f"snapshot {rec.name!r} is being written (PENDING)"
        if retention.is_schedules(rec):
            continue
        taken = max(rec.created_at, rec.committed_at or 0.0)
        if taken > now - protection:
            return (f"snapshot {rec.name!r} was taken {max(0.0, now - taken):.0f}s ago, within "
                    f"compaction_protection ({protection:.0f}s)")
    return None


def read_segments(meta, collection_id: int) -> tuple[int, list[tuple[Segment, int]]]:
    """(revision, [(record, mod revision)]) of every segment of the collection at one revision."""
    rev = meta.kv.revision()
    out = [(decode_struct(kv.value, Segment, kv.key), kv.mod_revision)
           for kv in meta.kv.range(meta.keys.segments_prefix(collection_id), revision=rev)]
    return rev, out


def hidden_counts(meta, store, coll, flushed: list[Segment]) -> dict[int, int]:
    """{segment id: rows of it hidden by a delete} over the collection's Flushed segments."""
    return _hidden_and_rows(meta, store, coll, flushed)[0]


def _hidden_and_rows(meta, store, coll, flushed: list[Segment]):
    """(hidden_counts, the key columns of every row, or None when no delete exists: then
    nothing is hidden and nothing can be folded)."""
    partitions = {p.partition_id: p.name for p in coll.partitions}
    deletes = visibility.read_deletes(store, flushed, partitions,
                                      legacy_sources=visibility.legacy_source_partitions(meta, flushed))
    if not len(deletes):
        return {}, None
    rows = visibility.read_rows(store, coll.schema, flushed)
    if not rows.num_rows:
        return {}, rows
    hidden = ~visibility.visible_mask(rows, deletes)
    segs = rows.column(visibility.SEGMENT_ID).to_numpy()[hidden]
    ids, counts = np.unique(segs, return_counts=True)
    return {int(s): int(n) for s, n in zip(ids, counts)}, rows


def plan(meta, store, collection: str, policy: Policy, *, db: str = DEFAULT_DB, now: float | None = None,
         collection_id: int | None = None) -> Plan:
    """The units that compact `collection` now (module doc). Deterministic for one state.
    `collection_id`: the collection a target was chosen for (a DAG's plan task, a Spark
    job's --targets): when the name is gone or now names ANOTHER collection (dropped and
    made again since), nothing is planned, said why -- never a namesake compacted with the
    dropped one's policy."""
    validate_name("collection", collection)
    validate_name("db", db)
    if collection_id is not None:
        limits.check("id", "collection_id", collection_id)
    now = time.time() if now is None else now
    try:
        coll = meta.catalog.get_by_name(collection, db)
    except NotFound:
        if collection_id is None:
            raise
        return Plan(collection_id, collection, meta.kv.revision(),
                    skipped=f"{db}.{collection} (id {collection_id}) was dropped since it was chosen")
    if collection_id is not None and coll.collection_id != collection_id:
        return Plan(collection_id, collection, meta.kv.revision(),
                    skipped=f"{db}.{collection} (id {collection_id}) was dropped since it was chosen; the name "
                            f"is collection id {coll.collection_id} now, which this target is not")
    cid = coll.collection_id
    # the checkpoints BEFORE the segments: every row at or below one is then in `records`
    # (a checkpoint read later may cover a segment flushed after `rev`: folding's rule)
    ticks = folding.checkpoint_ticks(meta, coll, store=store)
    rev, records = read_segments(meta, cid)
    out = Plan(cid, coll.name, rev)
    if coll.state != CREATED:
        out.skipped = f"collection is {coll.state}"
        return out
    importing = [s.segment_id for s, _ in records if s.state == IMPORTING]
    if importing:
        out.skipped = f"a restore is importing into it (segments {importing[:3]})"
        return out
    why = protected(meta, cid, policy.protection, now)
    if why:
        out.skipped = why
        return out
    flushed = sorted(((s, r) for s, r in records if s.state == FLUSHED), key=lambda x: x[0].segment_id)
    out.segments = len(flushed)
    hidden, rows = _hidden_and_rows(meta, store, coll, [s for s, _ in flushed])
    if rows is not None:            # no delete anywhere: nothing to fold
        out.units += plan_folds(meta, store, coll, flushed, hidden, policy, now, rows=rows, ticks=ticks)
    folded = {sid for u in out.units for sid in [*u.segment_ids, *(h[0] for h in u.hits)]}
    groups: dict[tuple[int, str], list[tuple[Segment, int]]] = {}
    for s, r in flushed:
        if s.segment_id not in folded:
            groups.setdefault((s.partition_id, s.channel), []).append((s, r))
    for (pid, channel), segs in sorted(groups.items()):
        out.units += _plan_group(cid, pid, channel, segs, hidden, policy)
    return out


def _sizes(segs: list[tuple[Segment, int]], hidden: dict[int, int]) -> dict:
    return {"rows": sum(s.num_rows for s, _ in segs), "deleted": sum(hidden.get(s.segment_id, 0) for s, _ in segs),
            "bytes": sum(s.total_size() for s, _ in segs), "delta_logs": sum(len(s.deltalogs) for s, _ in segs)}


def _plan_group(cid: int, pid: int, channel: str, segs: list[tuple[Segment, int]], hidden: dict[int, int],
                policy: Policy) -> list[Unit]:
    units, small = [], []
    for s, r in segs:
        h = hidden.get(s.segment_id, 0)
        if s.num_rows >= policy.min_segment_rows and s.total_size() >= policy.min_segment_bytes:
            if h / s.num_rows > policy.delete_ratio:
                units.append(make_unit(cid, pid, channel, REWRITE, [(s.segment_id, r)], **_sizes([(s, r)], hidden)))
        else:
            small.append((s, r))
    bin_: list[tuple[Segment, int]] = []
    live = size = live_bytes = 0

    def close():
        if len(bin_) > 1 or (bin_ and hidden.get(bin_[0][0].segment_id)):
            kind = MERGE if len(bin_) > 1 else REWRITE
            units.append(make_unit(cid, pid, channel, kind, [(s.segment_id, r) for s, r in bin_],
                                   **_sizes(bin_, hidden)))

    for s, r in small:
        rec = len(encode_struct(s))
        if bin_ and size + rec > MAX_RECORD_BYTES:     # the commit rewrites every input record in one txn
            close()
            bin_, live, size, live_bytes = [], 0, 0, 0
        bin_.append((s, r))
        visible = s.num_rows - hidden.get(s.segment_id, 0)
        live += visible
        live_bytes += s.total_size() * visible // s.num_rows if s.num_rows else 0   # the output's size, estimated
        size += rec
        if live >= policy.target_rows or live_bytes >= policy.target_bytes or len(bin_) >= MAX_INPUTS:
            close()
            bin_, live, size, live_bytes = [], 0, 0, 0
    close()
    return sorted(units, key=lambda u: u.inputs[0][0])
