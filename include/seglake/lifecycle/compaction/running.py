"""Run one compaction unit: prepare (ids recorded) -> write the output's files -> check
them -> ONE guarded etcd commit. Idempotent: a re-run converges on the same output.

The unit record `{root}/compaction/units/{collection}/{unit}`:

    (absent) --prepare--> prepared --commit--> committed
                          prepared --an input changed, sources gone--> lost
                          lost --(inputs unchanged) run again--> prepared (attempt + 1)

- prepare (create-if-absent): the output segment id and its log ids, allocated once
  from the id allocator, and the DELETE SOURCES: every Flushed segment of the collection
  with delta logs at the etcd revision recorded (`sources_revision`: the plan's, shared
  by the units of a run and read once; the record stays a few hundred bytes however many
  segments). A re-run reads the record, never allocates again, and reads exactly those
  (immutable) delta logs -- at that revision from etcd's history; once etcd compacted it,
  or GC reclaimed a source's files, the unit is lost (a lost unit whose inputs did not
  move is prepared afresh by its next run): the output's files are a pure function of
  the record, so a
  re-run (or a concurrent run of the same unit) rewrites the same keys with the same
  bytes, and the loser of a prepare race only leaves unused ids (never referenced).
- write: the inputs' rows (read_rows), minus every row hidden under THE visibility rule
  by the delete sources' deletes (collection-wide and partition-scoped, partition ids
  translated by name), row ids and timestamps kept; the inputs' own delete entries are
  CARRIED to the output's delta log (they may hide rows of other segments, flushed or
  still in the WAL), translated into this collection's partition ids, one per (pk,
  partition) with the largest ts (a larger delete hides a superset); legacy (own-segment)
  deletes were applied and are not carried. Files: segfiles.write_segment_files, the
  flusher's writer (binlogs per field with fields 0/1, stats log with bloom, delta log).
- check: every file heads at the size its Binlog records, before the commit.
- commit: ONE txn comparing every input at the revision the plan read it at, the unit
  record unchanged (prepared), the output key absent and the collection record (Created,
  the vchannel not released: a drop); it marks the inputs Dropped with `compacted_to`,
  writes the output Flushed (`compacted_from`) and the record committed. A lost compare
  is reported: the record becomes `lost` and the unit's files are removed; the winner
  (a delete, a drop, another compaction) is never undone.

Deletes arriving after the plan: the flusher stores every delete in the delta log of a
NEW segment (the next one it syncs, or a 0-row L0 segment), never in an existing one;
the output keeps each row's pk, partition, row id and timestamp, so such a delete hides
the output's row exactly as it hid the input's. A change to an input record itself is
caught by the commit's compare (the unit loses and is re-planned).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa

from seglake import faults, segfiles, visibility
from seglake.errors import Conflict, NotFound, SeglakeError
from seglake.meta.catalog import CREATED, Collection
from seglake.meta.codec import decode, decode_struct, encode, encode_struct
from seglake.meta.kv import Compacted, Put, absent, unchanged
from seglake.meta.segments import DROPPED, FLUSHED, Segment
from seglake.storage import layout
from seglake.wal.checkpoints import RELEASED
from seglake.wal.message import arrow_type
from seglake.lifecycle.flush.state import L0
from seglake.lifecycle.compaction.policy import FOLD, Unit

PREPARED, COMMITTED, LOST = "prepared", "committed", "lost"
ALREADY = "already_committed"         # a result: an earlier run of this unit committed it
COMMIT_ATTEMPTS = 5                   # retries when only the collection record moved


class CompactionError(SeglakeError):
    """A unit cannot run (its record is corrupt, a file does not check)."""


@dataclass
class UnitResult:
    unit_id: str
    status: str                        # committed | already_committed | lost
    output: int | None = None
    inputs: int = 0
    rows_in: int = 0
    rows_out: int = 0
    rows_dropped: int = 0
    deletes_carried: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    reason: str | None = None
    outputs: int = 1                   # output segments (a fold: one per hit segment)

    def to_json(self) -> dict:
        return asdict(self)


def run_unit(meta, store, unit: Unit, *, now: float | None = None, hooks: dict | None = None,
             sources_revision: int | None = None, cache: dict | None = None) -> UnitResult:
    """Run `unit` to its end (module doc). Re-runnable at any point. `sources_revision`:
    the revision a first prepare takes its delete sources at (the plan's, shared by the
    units of one run; default: now); `cache`: a dict shared by the units of one run, so
    the delete sources of one revision are read once, not once per unit."""
    unit.check()
    # `now` given (tests, a fixed clock) is used throughout; else the commit takes the time it
    # commits at: the inputs' dropped_at starts GC's drop_tolerance, which a unit running for
    # minutes (hours on Spark) would otherwise shorten by its own run time
    fixed = now is not None
    now = time.time() if now is None else now
    hooks = hooks or {}
    if (settled := _collection_gone(meta, store, unit)) is not None:
        return settled
    if unit.kind == FOLD:
        from seglake.lifecycle.compaction.folding import run_fold
        return run_fold(meta, store, unit, now=now, fixed=fixed, hooks=hooks, sources_revision=sources_revision,
                        cache={} if cache is None else cache)
    coll = meta.catalog.get(unit.collection_id)
    _inputs(meta, unit)      # refuses a unit whose inputs are on another vchannel before any write
    rec, rkv = prepare(meta, coll, unit, now, sources_revision)
    faults.point("compaction.after_prepare")
    if rec["state"] != PREPARED:
        return _settled(unit, rec)
    inputs, why = _inputs(meta, unit)
    if why:
        return _lose(meta, store, unit, rkv, why)
    if (settled := _check_output_free(meta, unit, rec, rkv)) is not None:   # never write into another
        return settled                                                     # segment's files
    try:
        deletes = _deletes_of(meta, store, coll, rec, {} if cache is None else cache)
    except (Compacted, NotFound) as e:
        return _lose(meta, store, unit, rkv, f"its delete sources cannot be read any more ({e}); re-plan")
    out, result = write_output(meta, store, coll, unit, rec, inputs, deletes)
    _hook(hooks, "after_files", unit)
    faults.point("compaction.after_files")
    check_files(store, out)
    return commit(meta, store, unit, rkv, inputs, out, result, now if fixed else commit_time(meta), hooks)


def _collection_gone(meta, store, unit: Unit) -> UnitResult | None:
    """The unit's settled result when its collection can no longer take its commit -- gone
    (dropped and purged since the plan), not Created (a drop under way), or its vchannel
    released -- else None. Judged BEFORE any work: a plan run late (a DAG's later task, a
    Spark job's executors) against a collection dropped meanwhile created unit records,
    allocated ids and wrote every output's files only to lose at the commit, and a purged
    one raised NotFound out of the first unit, failing the whole run (the other units, the
    summary, the Spark job) (attack s25). A unit that committed before the drop reports
    its commit; one prepared before it is lost (its files removed), as its commit would."""
    ckey = meta.keys.collection(unit.collection_id)
    ckv = meta.kv.get(ckey)
    coll = None if ckv is None else Collection.from_json(decode(ckv.value, ckey))
    if coll is not None and coll.state == CREATED and unit.channel not in coll.properties.get(RELEASED, ()):
        return None
    why = (f"collection id {unit.collection_id} was dropped (and purged) since the plan" if coll is None else
           f"collection {coll.name!r} is {coll.state} or its vchannel {unit.channel} was released (dropped since "
           f"the plan)")
    rkey = meta.keys.compaction_unit(unit.collection_id, unit.unit_id)
    rkv = meta.kv.get(rkey)
    if rkv is None:
        return UnitResult(unit.unit_id, LOST, reason=why)        # nothing written for it: nothing to remove
    rec = decode(rkv.value, rkey)
    if not same_unit(rec.get("unit"), unit):
        raise CompactionError(f"unit record {rkey} holds another unit: {rec.get('unit')}")
    from seglake.lifecycle.compaction.records import check_record
    check_record(rec, rkey)
    if rec["state"] != PREPARED:
        return _settled(unit, rec)
    if unit.kind == FOLD:
        from seglake.lifecycle.compaction.folding import _lose as lose_fold
        return lose_fold(meta, store, unit, rkv, why)
    return _lose(meta, store, unit, rkv, why)


def commit_time(meta) -> float:
    """The time a commit stamps (the inputs' dropped_at, which starts GC's drop_tolerance):
    this host's clock, never before the store's clock as its TSO mark records it (read, not
    moved). A host whose clock ran 2 h behind stamped its inputs 2 h early and GC reclaimed
    them that much before the tolerance had passed (attack s23)."""
    own, store_clock = meta.tso.vouch()
    return max(own, store_clock)


def _deletes_of(meta, store, coll: Collection, rec: dict, cache: dict) -> visibility.Deletes:
    """Every delete of the record's delete sources, read once per (collection, revision)."""
    key = (coll.collection_id, int(rec["sources_revision"]), tuple(rec["legacy_sources"]))
    if key not in cache:
        sources = delete_sources(meta, coll.collection_id, key[1])
        cache[key] = visibility.read_deletes(store, sources, {p.partition_id: p.name for p in coll.partitions},
                                             legacy_sources=rec["legacy_sources"])
    return cache[key]


def _hook(hooks: dict, name: str, unit: Unit) -> None:
    fn = hooks.get(name)
    if fn is not None:
        fn(unit)


# -- prepare --------------------------------------------------------------------------------
def prepare(meta, coll: Collection, unit: Unit, now: float, sources_revision: int | None = None
            ) -> tuple[dict, object]:
    """The unit record, created once (create-if-absent) with the output's ids and the
    delete sources (at `sources_revision`, else now); (record, its KeyValue)."""
    key = meta.keys.compaction_unit(unit.collection_id, unit.unit_id)
    kv = meta.kv.get(key)
    if kv is not None and decode(kv.value, key).get("state") == LOST and not _inputs(meta, unit)[1]:
        kv = _fresh_attempt(meta, coll, unit, key, kv, now)
    if kv is None:
        try:
            meta.kv.txn([absent(key)], [Put(key, encode(_new_record(meta, coll, unit, now, 1, sources_revision)))],
                        f"prepare compaction unit {unit.unit_id}")
        except Conflict:
            pass            # a concurrent run prepared it first: its ids win, ours stay unused
        kv = meta.kv.get(key)
        if kv is None:
            raise CompactionError(f"unit record {key} vanished after its prepare")
    rec = decode(kv.value, key)
    # the same unit: its id is a hash of what it compacts (from_json checks it against the
    # content). Its expected-gain numbers (`deleted`: rows hidden when planned) are not part
    # of it: a re-plan after a delete elsewhere counts more, and must still find its record
    if not same_unit(rec.get("unit"), unit):
        raise CompactionError(f"unit record {key} holds another unit: {rec.get('unit')}")
    from seglake.lifecycle.compaction.records import check_record
    check_record(rec, key)
    return rec, kv


def same_unit(recorded, unit: Unit) -> bool:
    """The recorded unit (JSON) is `unit`: same id, which (checked by from_json) is a pure
    function of the collection, partition, vchannel, kind, inputs at their revisions, hits
    and folded carriers -- the expected-gain numbers (rows, deleted, bytes, delta_logs) may
    differ between two plans of the same unit."""
    return Unit.from_json(recorded or {}).unit_id == unit.unit_id


def _fresh_attempt(meta, coll: Collection, unit: Unit, key: str, kv, now: float):
    """A lost unit whose inputs are all still at their planned revisions (it lost for
    another reason: its delete sources were gone, the collection record kept moving) is
    planned again with the same id: its record is replaced by a fresh prepare (new ids,
    new delete sources), guarded by the lost record's revision. A straggler of the lost
    attempt cannot commit (its compare on the record fails); its files are orphans."""
    new = _new_record(meta, coll, unit, now, int(decode(kv.value, key).get("attempt", 1)) + 1)
    try:
        meta.kv.txn([unchanged(kv)], [Put(key, encode(new))], f"re-prepare compaction unit {unit.unit_id}")
    except Conflict:
        pass           # another run moved it first: its record wins
    return meta.kv.get(key)


def _new_record(meta, coll: Collection, unit: Unit, now: float, attempt: int, revision: int | None = None) -> dict:
    """A prepared record: fresh output and log ids, the delete sources' revision (the one
    given, if etcd still holds it: a plan's revision is at least its inputs' revisions)."""
    try:
        rev = meta.kv.revision() if revision is None else revision
        sources = delete_sources(meta, unit.collection_id, rev)
    except Compacted:
        rev = meta.kv.revision()
        sources = delete_sources(meta, unit.collection_id, rev)
    nlogs = segfiles.log_ids_needed(coll.schema, True, 1)
    return {"unit": unit.to_json(), "state": PREPARED, "prepared_at": now, "attempt": attempt,
            "output": meta.ids.allocate(1), "log0": meta.ids.allocate(nlogs), "nlogs": nlogs,
            "sources_revision": rev, "legacy_sources": sorted(visibility.legacy_source_partitions(meta, sources))}


def delete_sources(meta, collection_id: int, revision: int) -> list[Segment]:
    """The collection's Flushed segments with delta logs at `revision` (etcd's history:
    Compacted once etcd compacted it away, and the unit is then lost and re-planned)."""
    return [s for s in meta.segments.list(collection_id, states=[FLUSHED], revision=revision) if s.deltalogs]


def _settled(unit: Unit, rec: dict) -> UnitResult:
    if rec["state"] == COMMITTED:
        return UnitResult(**{**rec["result"], "status": ALREADY})
    return UnitResult(unit.unit_id, LOST, reason=rec.get("reason"))


def _inputs(meta, unit: Unit) -> tuple[list[tuple[Segment, object]], str | None]:
    """The input records with their KeyValues, or why the unit cannot commit any more."""
    keys = [meta.keys.segment(unit.collection_id, unit.partition_id, s) for s in unit.segment_ids]
    read = meta.kv.get_many(keys) if keys else {}
    out = []
    for (sid, rev), key in zip(unit.inputs, keys):
        kv = read[key]
        if kv is None:
            return out, f"input segment {sid} is gone"
        seg = decode_struct(kv.value, Segment, key)
        if seg.channel != unit.channel:     # a forged unit (its id is consistent, its channel is not)
            raise CompactionError(f"unit {unit.unit_id}: input segment {sid} is on vchannel {seg.channel}, "
                                  f"the unit on {unit.channel}")
        if kv.mod_revision != rev or seg.state != FLUSHED:
            return out, f"input segment {sid} changed since the plan (now {seg.state}, revision {kv.mod_revision})"
        out.append((seg, kv))
    return out, None


# -- write ----------------------------------------------------------------------------------
def write_output(meta, store, coll: Collection, unit: Unit, rec: dict, inputs, deletes: visibility.Deletes,
                 carry: bool = True, carry_above: int = 0) -> tuple[Segment, UnitResult]:
    """Write the output's files (module doc): the inputs' rows minus those `deletes` (the
    recorded delete sources') hide; (its Flushed record, the result). carry=False (an L0
    fold of the input's own delete log): its delete entries are not carried; carry_above
    (a fold of its entries up to that timestamp): only newer ones are."""
    segs = [s for s, _ in inputs]
    schema = coll.schema
    partitions = {p.partition_id: p.name for p in coll.partitions}
    legacy = rec["legacy_sources"]
    # the key columns through read_rows, the user fields by field id beside them: a user field
    # may be NAMED like a key column (`pk` beside a primary `id`, `segment_id`, ...), which
    # read_rows(columns=...) refuses -- every compaction of such a collection failed
    rows = visibility.read_rows(store, schema, segs)
    user = _user_fields(store, schema, segs, rows.num_rows)
    if len(deletes) and rows.num_rows:
        mask = pa.array(visibility.visible_mask(rows, deletes))
        kept = rows.filter(mask)
        user = {fid: col.filter(mask) for fid, col in user.items()}
    else:
        kept = rows
    carried = carried_deletes(store, segs if carry else [], partitions, legacy)
    if carry_above:
        newer = carried[1] > carry_above
        carried = tuple(x[newer] for x in carried)
    table = pa.table({f.name: (kept.column(visibility.PK) if f.is_primary else user[f.field_id])
                      .cast(arrow_type(f)) for f in schema.fields})
    out_id, log0 = int(rec["output"]), int(rec["log0"])
    c, p = unit.collection_id, unit.partition_id
    files = segfiles.write_segment_files(
        store, log0, c, p, out_id, schema, table, kept.column(segfiles.ROW_ID).to_numpy(),
        kept.column(segfiles.TIMESTAMP).to_numpy(), deletes=carried if len(carried[0]) else None)
    # inputs holding a partition row high-water mark: rows, or a 0-row L1 output of an earlier
    # compaction (every row deleted: it keeps its inputs' mark in dml_ts). Counting only the
    # row-bearing ones dropped that mark when such an output was merged again (the output
    # took an older dml_ts, or level L0), and a flusher's replay re-inserted the rows
    with_rows = [s for s in segs if s.num_rows or s.level != L0]
    out = Segment(segment_id=out_id, collection_id=c, partition_id=p, channel=unit.channel, state=FLUSHED,
                  num_rows=kept.num_rows, level="L1" if with_rows else L0, binlogs=files.binlogs,
                  deltalogs=files.deltalogs, statslogs=files.statslogs,
                  start_ts=min(s.start_ts for s in segs),
                  # the partition's row high-water mark (the flusher's replay skip): rows only
                  dml_ts=max((s.dml_ts for s in with_rows), default=max(s.dml_ts for s in segs)),
                  created_ts=min(s.created_ts for s in segs),
                  delta_partitions={int(x): partitions[int(x)] for x in np.unique(carried[2]) if int(x)},
                  compacted_from=tuple(unit.segment_ids))
    result = UnitResult(unit.unit_id, COMMITTED, out_id, len(segs), rows.num_rows, kept.num_rows,
                        rows.num_rows - kept.num_rows, len(carried[0]), sum(s.total_size() for s in segs),
                        files.nbytes)
    return out, result


def _user_fields(store, schema, segs: list[Segment], n: int) -> dict[int, pa.ChunkedArray]:
    """{field id: its column over the rows of `segs`} in read_rows' row order (the segments
    with binlogs, in order), every non-primary field, whatever its name; read per segment
    in read_rows' pool."""
    from seglake import runners

    with_logs = [s for s in segs if s.binlogs]
    fields = [f for f in schema.fields if not f.is_primary]

    def one(seg: Segment) -> list[pa.ChunkedArray]:
        cols = []
        for f in fields:
            col = visibility._field_column(store, seg, f.field_id, f.name)
            if col is None:
                raise CompactionError(f"segment {seg.segment_id} has no binlog of field {f.name!r}")
            cols.append(col)
        return cols

    per_seg = list(runners.run_inline(one, with_logs, workers=visibility.READ_THREADS))
    out = {}
    for i, f in enumerate(fields):
        t = arrow_type(f)
        col = pa.chunked_array([c.cast(t) if c.type != t else c for cols in per_seg for c in cols[i].chunks],
                               type=t)
        if len(col) != n:
            raise CompactionError(f"field {f.name!r} holds {len(col)} rows over segments "
                                  f"{[s.segment_id for s in with_logs]}, their primary keys {n}")
        out[f.field_id] = col
    return out


def carried_deletes(store, segs: list[Segment], partitions: dict[int, str], legacy
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pks, ts, partitions) of the inputs' delete entries that go on to the output
    (module doc), sorted by (pk, partition)."""
    d = visibility.read_deletes(store, segs, partitions, legacy_sources=legacy)
    keep = (d.segments == 0) & (d.partitions != visibility.NO_PARTITION)
    pks, ts, parts = d.pks[keep], d.ts[keep], d.partitions[keep]
    if not len(pks):
        return pks, ts, parts
    order = np.lexsort((ts, parts, pks))
    pks, ts, parts = pks[order], ts[order], parts[order]
    last = np.ones(len(pks), dtype=bool)
    last[:-1] = (pks[1:] != pks[:-1]) | (parts[1:] != parts[:-1])
    return pks[last], ts[last], parts[last]


def check_files(store, seg: Segment) -> None:
    """Every file of `seg` is in the store at the size its record says (before the commit)."""
    for f in layout.segment_files(seg):
        try:
            size = store.head(f.key).size
        except Exception as e:
            raise CompactionError(f"output file {f.key} cannot be read back: {type(e).__name__}: {e}") from e
        if f.size is not None and size != f.size:
            raise CompactionError(f"output file {f.key} holds {size} bytes, its record says {f.size}")


# -- commit ---------------------------------------------------------------------------------
def commit(meta, store, unit: Unit, rkv, inputs, out: Segment, result: UnitResult, now: float,
           hooks: dict | None = None) -> UnitResult:
    """ONE guarded txn (module doc); a lost compare -> `lost`, never undoing the winner."""
    rkey = rkv.key
    okey = meta.keys.segment(out.collection_id, out.partition_id, out.segment_id)
    rec = decode(rkv.value, rkey)
    for _ in range(COMMIT_ATTEMPTS):
        ckey = meta.keys.collection(unit.collection_id)
        ckv = meta.kv.get(ckey)
        coll = None if ckv is None else Collection.from_json(decode(ckv.value, ckey))
        if coll is None or coll.state != CREATED or unit.channel in coll.properties.get(RELEASED, ()):
            return _lose(meta, store, unit, rkv, f"collection is {'gone' if coll is None else coll.state}"
                                                 f" or its vchannel {unit.channel} was released")
        compares = [unchanged(kv) for _, kv in inputs] + [unchanged(rkv), absent(okey), unchanged(ckv)]
        ops = [Put(kv.key, encode_struct(s.replace(state=DROPPED, dropped_at=now, compacted_to=out.segment_id)))
               for s, kv in inputs]
        ops += [Put(okey, encode_struct(out)),
                Put(rkey, encode({**rec, "state": COMMITTED, "committed_at": now, "result": result.to_json()}))]
        try:
            meta.kv.txn(compares, ops, f"commit compaction unit {unit.unit_id}")
            faults.point("compaction.after_commit")
            _hook(hooks or {}, "after_commit", unit)
            return result
        except Conflict:
            cur = meta.kv.get(rkey)
            if cur is None:
                raise CompactionError(f"unit record {rkey} vanished during its commit") from None
            if cur.mod_revision != rkv.mod_revision:
                return _settled(unit, decode(cur.value, rkey))
            _, why = _inputs(meta, unit)
            if why:
                return _lose(meta, store, unit, rkv, why)
            # only the collection record moved (another writer's properties): read it again
    return _lose(meta, store, unit, rkv, "the collection record kept changing during the commit")


def _output_taken(meta, unit: Unit, rec: dict) -> bool:
    """A segment record holds the output id the unit record names (a hand-edited or
    corrupt record: the allocator hands each unit its own)."""
    return meta.kv.get(meta.keys.segment(unit.collection_id, unit.partition_id, int(rec["output"]))) is not None


def _settled_elsewhere(unit: Unit, rkv, meta) -> UnitResult | None:
    """The unit's result when its record, read again, is no longer PREPARED (another run
    committed or lost it since `rkv` was read); else None."""
    cur = meta.kv.get(rkv.key)
    if cur is not None and (now := decode(cur.value, rkv.key))["state"] != PREPARED:
        return _settled(unit, now)
    return None


def _check_output_free(meta, unit: Unit, rec: dict, rkv) -> UnitResult | None:
    """None when the unit's output id is free. Taken by another run of this unit that
    committed it since this run read the record (two compactions whose plans share a unit:
    the commit makes the output and settles the record in one transaction), the unit is
    settled: its result. Else the record was edited or is corrupt: CompactionError."""
    if not _output_taken(meta, unit, rec):
        return None
    if (settled := _settled_elsewhere(unit, rkv, meta)) is not None:
        return settled
    raise CompactionError(f"compaction unit {unit.unit_id}: its record names output segment {rec['output']}, "
                          f"which is a segment of the collection already: the record was edited or is corrupt; "
                          f"nothing written")


def _lose(meta, store, unit: Unit, rkv, why: str) -> UnitResult:
    """Record the unit lost (guarded: a concurrent run that committed wins) and remove the
    files any run of it wrote: the output id is the unit's alone and nothing can commit
    it once the record is lost (a run still writing leaves orphans for GC's orphan scan)."""
    rec = decode(rkv.value, rkv.key)
    try:
        meta.kv.txn([unchanged(rkv)], [Put(rkv.key, encode({**rec, "state": LOST, "reason": why,
                                                             "lost_at": time.time()}))],
                    f"lose compaction unit {unit.unit_id}")
    except Conflict:
        cur = meta.kv.get(rkv.key)
        if cur is None:
            raise CompactionError(f"unit record {rkv.key} vanished") from None
        return _settled(unit, decode(cur.value, rkv.key))
    if _output_taken(meta, unit, rec):   # those files are that segment's, never this unit's to remove
        return UnitResult(unit.unit_id, LOST, reason=why)
    keys = [o.key for d in layout.segment_dirs(unit.collection_id, unit.partition_id, int(rec["output"]))
            for o in store.list(d)]
    if keys:
        store.delete_many(keys)
    return UnitResult(unit.unit_id, LOST, reason=why)


def unit_records(meta, collection_id: int | None = None) -> list[dict]:
    """Every unit record (of a collection), for the operator and tests."""
    prefix = meta.keys.compaction_units_prefix(collection_id)
    return [decode(kv.value, kv.key) for kv in meta.kv.range(prefix)]
