"""L0 folding (issue 28 item 1): collection-wide delete logs older than `l0_age` are
folded into the segments they hit, and dropped, in ONE guarded etcd transaction. A delete
log is collection-wide wherever it is stored: in a 0-row L0 segment (deletes flushed
alone), or riding in the delta log of a row-bearing segment (the flusher stores deletes
with the next segment it syncs; compaction carries them on). Both are CARRIERS.

A delete may be forgotten only once no row it could hide exists anywhere but in the
segments the fold rewrites. So a delete entry may be folded (forgotten) when
- it is older than the policy's `l0_age` (its tick, TSO physical time), and
- its tick is at or below the checkpoint of ITS vchannel. The WAL routes a
  delete, like the rows of its pk, to one vchannel by a hash of the pk (wal/client.py),
  so the rows a WAL delete can hide that are not yet Flushed are on its own vchannel;
  every message at or below that vchannel's checkpoint is durable in Flushed segments,
  so no row with a smaller timestamp is still in the WAL or a growing segment, and every
  row written later has a larger timestamp (the TSO): the delete can never hide it. A
  delete copied in by a restore or an import is older than every WAL row of the copy
  (the copy advances the TSO past what it copied). No checkpoint yet: the floor is
  the collection's creation, or a replay's instant (written_before): every WAL row is newer.
Its HITS are the Flushed segments with at least one row its deletes hide (THE visibility
rule, at the plan's revision), and a row-bearing carrier itself. A FOLD unit: one
(partition, vchannel) group of foldable carriers and the newest delete it forgets
(`fold_ts`) -- its 0-row L0 carriers, every entry at or below fold_ts, are the unit's
inputs (dropped); its row-bearing carriers are hits marked `folded`, rewritten WITHOUT
their own entries at or below fold_ts and carrying the newer ones (folding a carrier's
log only as a whole never folded a small, often compacted collection: every merge carried
the newest young delete into its one output) -- + the union of the hits of the entries
it forgets (a segment claimed by two groups goes to the
first; the other group's carriers wait for the next run; every txn stays under
MAX_FOLD_OPS and MAX_FOLD_BYTES of records). A carrier that hits more segments than one
txn takes (a delete of scattered pks) has its hits REWRITTEN alone instead (the rows its
deletes hide dropped); a later run folds it with the few hits left -- without this its
delete log was never folded.

Run (same record state machine as running.py, record schema v4: a seglake before folding
refuses it instead of misreading it): prepare (one output id + log ids per hit, the
delete sources' revision) -> each hit rewritten into its output: its rows minus every row
hidden by the recorded delete sources (the folded deletes among them), row ids and
timestamps kept, its own delta-log entries carried unless it is a folded carrier
(running.write_output) -> files
checked -> ONE txn comparing the L0 inputs and the hits at their planned revisions, the
record, every output key absent and the collection record: L0 inputs Dropped
(`compacted_to` 0: folded), hits Dropped with `compacted_to` their output, outputs
Flushed (`compacted_from` the hit), record committed. New segments between plan and
commit cannot hold a row the folded deletes hide (they were written above the
checkpoint); a concurrent change to an input or a hit loses the fold (reported, files
removed), never undoing the winner.
"""

from __future__ import annotations

import time

import numpy as np

from seglake import faults, segfiles, visibility
from seglake.errors import Conflict, NotFound
from seglake.meta.alloc import physical_ms
from seglake.meta.catalog import CREATED, Collection
from seglake.meta.codec import decode, decode_struct, encode, encode_struct
from seglake.meta.kv import Compacted, Put, absent, unchanged
from seglake.meta.segments import DROPPED, FLUSHED, Segment
from seglake.storage import layout
from seglake.wal.checkpoints import RELEASED, read_checkpoint
from seglake.lifecycle.flush.state import L0
from seglake.lifecycle.compaction.policy import FOLD, MAX_FOLD_OPS, MAX_INPUTS, REWRITE, Policy, Unit, make_unit

RECORD_VERSION = 4          # a fold's unit record (older seglakes refuse it)
FOLDED = 0                  # compacted_to of a folded L0 segment: its deletes went into the hits' rewrites
# the records a fold's txn writes, in bytes (L0 inputs + 2 x hits, each at its record's size):
# with the unit record and the compares well under etcd's request limit (1.5 MiB; kv.MAX_TXN_BYTES)
MAX_FOLD_BYTES = 1_100_000


# -- plan -------------------------------------------------------------------------------------
def checkpoint_ticks(meta, coll: Collection, store=None) -> dict[str, int]:
    """{vchannel: the newest delete tick a fold may forget there}: its checkpoint's time
    tick, capped at the oldest call timestamp a WAL producer record of the collection's
    pchannels still remembers (a vchannel without a checkpoint is absent).

    The cap: an upsert's rows carry its CALL's timestamp (wal.message.CALL_TS: its first
    append's tick, recorded by that commit; kept by its retries), not their append tick.
    A call whose
    first try committed on one pchannel only is retried with that timestamp for as long
    as a record remembers it (wal_producer_expiry): its rows then land above the
    checkpoint with a timestamp below it, and a delete newer than that timestamp hides
    them -- folded (forgotten) first, the rows became visible (attack s21). The records
    are read before the segments, like the checkpoints: a call first committed later
    took its timestamp after this read.

    `store` given: each vchannel's floor is also capped at the oldest call timestamp of an
    upsert message still in its WAL above its checkpoint (_unflushed_call_ts): rows stamped
    below the checkpoint's tick that no flush has made durable yet. The producer records
    alone lose them: a retry completes the call (whole: no hold) or a fresh producer's
    client closes (its records go with its lease) before the retried rows are flushed, and
    a fold forgot the delete that hides them (attack s25)."""
    from seglake.meta.catalog import pchannel_of
    from seglake.meta import keys as keymod

    out = {}
    cps: dict[str, object] = {}
    before = written_before(coll)
    # pchannel -> the fragment every checkpoint of ours there is past (a vchannel without one
    # has the floor written_before: below every call of this collection, nothing to hold)
    durable: dict[str, int] = {}
    for vc in coll.vchannels:
        cp, _ = read_checkpoint(meta, vc)
        p = pchannel_of(vc)
        if cp is not None:
            out[vc] = cp.time_tick
            cps[vc] = cp
            durable[p] = min(durable.get(p, cp.message_id.fragment), cp.message_id.fragment)
        elif before:
            out[vc] = before
    horizon = remembered_call_ts(meta, sorted({pchannel_of(v) for v in coll.vchannels}), keymod, durable=durable)
    if horizon is not None:
        out = {vc: min(t, horizon) for vc, t in out.items()}
    if store is not None and cps:
        for vc, ts in _unflushed_call_ts(meta, store, cps).items():
            if vc in out:
                out[vc] = min(out[vc], ts)
    return out


def _unflushed_call_ts(meta, store, cps: dict) -> dict[str, int]:
    """{vchannel: the oldest row timestamp at or below its checkpoint's tick that an upsert
    message ABOVE its checkpoint carries} (its call's timestamp: a retry keeps its first
    try's); 0 for the vchannels of a pchannel whose log cannot be read (no fold there: never
    a guess). Reads each pchannel's log from the lowest checkpoint of ours on it: the
    unflushed tail."""
    from seglake.errors import SeglakeError
    from seglake.meta.catalog import pchannel_of
    from seglake.wal import message as M
    from seglake.wal.log import WalLog

    by_p: dict[str, dict] = {}
    for vc, cp in cps.items():
        by_p.setdefault(pchannel_of(vc), {})[vc] = cp
    out: dict[str, int] = {}
    for p, vcs in sorted(by_p.items()):
        start = min(cp.message_id for cp in vcs.values())
        try:
            for m in WalLog(meta, store, p).messages(start):
                cp = vcs.get(m.vchannel)
                if cp is None or m.type != M.INSERT or m.id < cp.message_id:
                    continue
                ts = M.upsert_ts(m)
                if ts is not None and ts <= cp.time_tick:
                    out[m.vchannel] = min(out.get(m.vchannel, ts), ts)
        except (SeglakeError, OSError):
            out.update({vc: 0 for vc in vcs})
    return out


def written_before(coll: Collection) -> int:
    """A floor for a vchannel of a Created collection that has no checkpoint yet (0: none):
    every row its WAL holds is newer than the collection's own creation (`created_ts`, a
    TSO timestamp issued before its record existed) and, for a restore to a time or an
    undrop, than the instant its replay wrote the source's log up to (`finish` moved the TSO
    past it before the target was Created). So every delete at or below this floor was
    copied or replayed in, and every row it can hide is Flushed. Without it a copy that is
    only read never folded the deletes its replay wrote, nor copied deletes a merge had
    carried into an output (no `source` there: folding._floor's rule) (attack s23)."""
    if coll.state != CREATED:
        return 0
    plan = (coll.properties.get("restored_from") or {}).get("replay")
    as_of = plan.get("as_of") if isinstance(plan, dict) else None
    as_of = as_of if isinstance(as_of, int) and not isinstance(as_of, bool) and as_of > 0 else 0
    return max(int(coll.created_ts or 0), as_of)


def remembered_call_ts(meta, pchannels, keymod, durable: dict[str, int] | None = None) -> int | None:
    """The oldest upsert call timestamp (t0) a WAL producer record of `pchannels` remembers
    for a call that may still add rows, or None. An upsert's first append carries the
    call's appends per pchannel (`plan`): once every pchannel's record of that producer
    holds them all, the call is whole and holds nothing back; a delete's timestamp holds
    nothing (a delete arriving late hides what it hides wherever the rows are); an entry
    written before either was recorded holds its t0. A record that cannot be read gives 0:
    no fold at all until it can (never a guess).

    `durable` ({pchannel: fragment number}, checkpoint_ticks): a whole call still holds its
    t0 until its appends are durable -- on every pchannel it appended to, its last fragment
    (the record's `n`) below the checkpoints of the collection's vchannels there. A call
    completed by a retry has rows stamped t0 that are still in the WAL above the checkpoint:
    a delete newer than t0 folded before they were flushed left them visible (attack s25)."""
    prefixes = {keymod.wal_producers_prefix(meta.keys, p): p for p in pchannels}
    recs: dict[tuple[str, str], dict] = {}
    for prefix, p in prefixes.items():
        for kv in meta.kv.range(prefix):
            try:
                calls = decode(kv.value, kv.key).get("calls")
            except Exception:  # noqa: BLE001 - unreadable: what it remembers is unknown
                return 0
            recs[(p, kv.key[len(prefix):])] = calls if isinstance(calls, dict) else {}

    def whole(pid: str, call: str, plan) -> bool:
        try:
            if not all(_covers(recs.get((q, pid), {}).get(call), int(n)) for q, n in plan.items()):
                return False
            return durable is None or all(flushed(recs[(q, pid)][call], q) for q, n in plan.items() if int(n) > 0)
        except (AttributeError, KeyError, TypeError, ValueError, IndexError):
            return False

    def flushed(entry, pchannel: str) -> bool:   # its last append below our checkpoints there
        last = entry.get("n", ())[1]
        return type(last) is int and pchannel in durable and last < durable[pchannel]

    plans = {(pid, call): e["plan"] for (_, pid), calls in recs.items() for call, e in calls.items()
             if isinstance(e, dict) and isinstance(e.get("plan"), dict)}   # on its first append's pchannel
    out = None
    for (p, pid), calls in recs.items():
        for call, e in calls.items():
            t0 = e.get("t0") if isinstance(e, dict) else None
            if not isinstance(t0, int) or isinstance(t0, bool) or t0 <= 0:
                continue
            if e.get("u") is False or ((pid, call) in plans and whole(pid, call, plans[(pid, call)])):
                continue
            out = t0 if out is None else min(out, t0)
    return out


def _covers(entry, n: int) -> bool:
    """A record entry holds every append 0..n-1 of its call on that pchannel (its done
    ranges are merged: one range from 0 covers them)."""
    if n < 1:
        return True
    return isinstance(entry, dict) and any(lo <= 0 and hi >= n - 1 for lo, hi in entry.get("done", ()))


def delete_tick(seg: Segment) -> int:
    """The newest delete timestamp of a segment's delta log (an L0 segment's dml_ts). A
    delete call's timestamp is at or below its tick, and a row's timestamp is its tick, so
    at or below the vchannel's checkpoint every row the delete hides is flushed."""
    ticks = [b.ts_to for b in seg.deltalogs if b.ts_to]
    return max(ticks) if ticks else (seg.dml_ts if seg.level == L0 and not seg.num_rows else 0)


def oldest_delete_tick(seg: Segment) -> int:
    """The oldest delete timestamp of a segment's delta log (0: none recorded)."""
    ticks = [b.ts_from or b.ts_to for b in seg.deltalogs if b.ts_from or b.ts_to]
    return min(ticks) if ticks else delete_tick(seg)


def may_forget(tick: int, floor: int | None, policy: Policy, now: float) -> bool:
    """A delete stamped `tick` may be folded (module doc): old enough, at or below `floor`
    (its vchannel's checkpoint). Monotone in `tick`: true up to some tick, false above."""
    return floor is not None and 0 < tick <= floor and physical_ms(tick) / 1000.0 <= now - policy.l0_age


def _floor(seg: Segment, floor: int | None) -> int | None:
    """A copy's (`source` set: a restore, a bundle import) needs no checkpoint: its deletes
    are older than every WAL row of the collection it was copied into (the copy advanced
    the TSO past what it copied before the collection took a write), so every row they
    hide is among the copied, Flushed ones -- without this a restored collection that is
    only read never folded what it copied (attack s21)."""
    return delete_tick(seg) if seg.source is not None else floor


def foldable(seg: Segment, floor: int | None, policy: Policy, now: float) -> bool:
    """Some of its delta log may be folded: a 0-row L0 segment's as a whole (it is dropped:
    its newest delete decides), a row-bearing carrier's per entry (it is rewritten and
    keeps its entries newer than the fold: its oldest decides). Folding a row-bearing
    carrier's log only as a whole never folded a small collection compacted more often
    than l0_age: each merge carried the newest young delete into the one output (attack s21)."""
    if not seg.deltalogs or seg.state != FLUSHED:
        return False
    tick = oldest_delete_tick(seg) if _rows_or_mark(seg) else delete_tick(seg)
    return may_forget(tick, _floor(seg, floor), policy, now)


def newest_forgettable(ticks: np.ndarray, floor: int | None, policy: Policy, now: float) -> int:
    """The newest of `ticks` (delete timestamps) a fold may forget (0: none); may_forget is
    monotone, so a binary search over the distinct ticks."""
    u = np.unique(ticks)
    lo, hi = 0, len(u)                  # u[:lo] may be forgotten, u[hi:] may not
    while lo < hi:
        mid = (lo + hi) // 2
        if may_forget(int(u[mid]), floor, policy, now):
            lo = mid + 1
        else:
            hi = mid
    return int(u[lo - 1]) if lo else 0


def plan_folds(meta, store, coll: Collection, flushed: list[tuple[Segment, int]], hidden: dict[int, int],
               policy: Policy, now: float, rows=None, ticks: dict[str, int] | None = None) -> list[Unit]:
    """The FOLD units of the collection now (module doc), and REWRITE units of the hits of a
    carrier too wide for one fold's txn; deterministic for one state.
    `rows`: the key columns of every Flushed segment's rows, if the caller read them.
    `ticks`: the vchannels' checkpoints read BEFORE `flushed` was (checkpoint_ticks): a
    checkpoint read after the segments may cover rows a flush made Flushed since, which
    `flushed` (and so the fold's hits) lacks -- the fold would drop deletes that hide them."""
    if ticks is None:
        ticks = checkpoint_ticks(meta, coll, store=store)
    carriers = [(s, r) for s, r in flushed if foldable(s, ticks.get(s.channel), policy, now)]
    if not carriers:
        return []
    partitions = {p.partition_id: p.name for p in coll.partitions}
    # segments that hold rows or a partition row high-water mark (a 0-row L1 output of a
    # compaction: rows all deleted, its mark in dml_ts): a carrier of those is REWRITTEN
    # (a hit), never dropped as a delete-only input -- that lost the mark (flush.fold_high_water)
    with_rows = [(s, r) for s, r in flushed if _rows_or_mark(s)]
    if rows is None and with_rows:
        rows = visibility.read_rows(store, coll.schema, [s for s, _ in with_rows])
    legacy = visibility.legacy_source_partitions(meta, [s for s, _ in carriers])
    # each carrier's deletes, read once; only the rows whose pk one of them names can be hit
    # (one pass over the collection's rows, then per carrier over those few)
    dels = {s.segment_id: visibility.read_deletes(store, [s], partitions, legacy_sources=legacy)
            for s, _ in carriers}
    seg_col = None
    if rows is not None and rows.num_rows:
        named = np.unique(np.concatenate([d.pks for d in dels.values()] or [np.zeros(0, np.int64)]))
        rows = rows.filter(np.isin(rows.column(visibility.PK).to_numpy(), named))
        seg_col = rows.column(visibility.SEGMENT_ID).to_numpy() if rows.num_rows else None
    by_id = {s.segment_id: (s, r) for s, r in with_rows}
    sizes: dict[int, int] = {}

    def size(seg: Segment) -> int:      # its record's bytes: the fold's txn rewrites it
        if seg.segment_id not in sizes:
            sizes[seg.segment_id] = len(encode_struct(seg)) + 64    # + dropped_at, compacted_to
        return sizes[seg.segment_id]

    def txn_bytes(l0s, hit_ids) -> int:  # L0 inputs Dropped; each hit Dropped + its output (no bigger)
        return sum(size(x) for x in l0s) + 2 * sum(size(by_id[h][0]) for h in hit_ids)

    groups: dict[tuple[int, str], list[tuple[Segment, int]]] = {}
    for s, r in carriers:
        groups.setdefault((s.partition_id, s.channel), []).append((s, r))
    units, used = [], set()
    for (pid, channel), segs in sorted(groups.items()):
        # the group's fold_ts: the newest delete any of its carriers may forget; a carrier
        # with an entry between its own newest forgettable one and that waits (next run)
        own = {s.segment_id: newest_forgettable(dels[s.segment_id].ts, _floor(s, ticks.get(s.channel)), policy, now)
               for s, _ in segs}
        cut = max(own.values(), default=0)
        segs = [(s, r) for s, r in segs if own[s.segment_id] and not np.any(
            (dels[s.segment_id].ts > own[s.segment_id]) & (dels[s.segment_id].ts <= cut))]
        ins, hits, folded = [], set(), set()
        for s, r in segs:
            bearing = _rows_or_mark(s)
            mine = {s.segment_id} if bearing else set()      # a row-bearing carrier is rewritten without it
            if seg_col is not None:
                d = _at_or_below(dels[s.segment_id], cut)   # the entries this fold forgets
                if len(d):
                    mine |= {int(x) for x in np.unique(seg_col[~visibility.visible_mask(rows, d)])}
            if (mine | {s.segment_id}) & used or (not bearing and s.segment_id in hits):
                continue                    # another fold of this plan rewrites one of its segments: next run
            n_in = len(ins) + (0 if bearing else 1)
            l0 = [] if bearing else [s]
            if len(l0) + 2 * len(mine) > MAX_FOLD_OPS or txn_bytes(l0, mine) > MAX_FOLD_BYTES:
                # more hits than one txn takes, even alone: its hits are rewritten alone (the
                # rows its deletes hide dropped, like any rewrite), so a later run folds it
                # with the few left (none: new rows are newer than its deletes)
                group = hits | folded | {x.segment_id for x, _ in ins}
                for h in sorted(mine - used - group - {s.segment_id}):
                    hs, hr = by_id[h]
                    units.append(make_unit(coll.collection_id, hs.partition_id, hs.channel, REWRITE, [(h, hr)],
                                           rows=hs.num_rows, deleted=hidden.get(h, 0), bytes=hs.total_size(),
                                           delta_logs=len(hs.deltalogs)))
                    used.add(h)
                continue
            if n_in > MAX_INPUTS or n_in + 2 * len(hits | mine) > MAX_FOLD_OPS or \
                    txn_bytes([x for x, _ in ins] + l0, hits | mine) > MAX_FOLD_BYTES:
                continue                    # the txn (or the unit: MAX_INPUTS L0 inputs) is full: next run
            if bearing:
                folded.add(s.segment_id)
            else:
                ins.append((s, r))
            hits |= mine
        hits -= {s.segment_id for s, _ in ins}
        if not ins and not folded:
            continue
        used |= hits | {s.segment_id for s, _ in ins}
        hit_recs = [by_id[h] for h in sorted(hits)]
        units.append(make_unit(coll.collection_id, pid, channel, FOLD, [(s.segment_id, r) for s, r in ins],
                               hits=[(h.segment_id, h.partition_id, r) for h, r in hit_recs], folded=folded,
                               fold_ts=cut,
                               rows=sum(h.num_rows for h, _ in hit_recs),
                               deleted=sum(hidden.get(h.segment_id, 0) for h, _ in hit_recs),
                               bytes=sum(x.total_size() for x, _ in [*ins, *hit_recs]),
                               delta_logs=sum(len(s.deltalogs) for s, _ in ins)
                               + sum(len(by_id[f][0].deltalogs) for f in folded)))
    return units


def _at_or_below(d: visibility.Deletes, ts: int) -> visibility.Deletes:
    keep = d.ts <= ts
    return visibility.Deletes(d.pks[keep], d.ts[keep], d.partitions[keep], d.segments[keep])


def _rows_or_mark(seg: Segment) -> bool:
    """It holds rows, or a partition row high-water mark (a 0-row L1 compaction output)."""
    return bool(seg.num_rows) or seg.level != L0


# -- run --------------------------------------------------------------------------------------
def run_fold(meta, store, unit: Unit, *, now: float, hooks: dict, sources_revision: int | None, cache: dict,
             fixed: bool = True):
    """Run a FOLD unit to its end (module doc). Re-runnable at any point."""
    from seglake.lifecycle.compaction import running as r

    coll = meta.catalog.get(unit.collection_id)
    r._inputs(meta, unit)           # a forged unit (inputs on another vchannel) refused before any write
    rec, rkv = _prepare(meta, coll, unit, now, sources_revision)
    faults.point("compaction.after_prepare")
    if rec["state"] != r.PREPARED:
        return r._settled(unit, rec)
    inputs, why = r._inputs(meta, unit)
    hits, why2 = _hits(meta, unit)
    if why or why2:
        return _lose(meta, store, unit, rkv, why or why2)
    if (too_new := _beyond_floor(meta, coll, unit, inputs, hits, store=store)) is not None:
        return _lose(meta, store, unit, rkv, too_new)
    if (settled := _check_outputs_free(meta, unit, rec, rkv)) is not None:
        return settled
    try:
        deletes = r._deletes_of(meta, store, coll, rec, cache)
    except (Compacted, NotFound) as e:
        return _lose(meta, store, unit, rkv, f"its delete sources cannot be read any more ({e}); re-plan")
    outs, results = [], []
    for (seg, kv), out_id, log0 in zip(hits, rec["outputs"], rec["log0s"]):
        sub = make_unit(unit.collection_id, seg.partition_id, seg.channel, REWRITE, [(seg.segment_id,
                                                                                     kv.mod_revision)])
        out, res = r.write_output(meta, store, coll, sub, {"output": out_id, "log0": log0,
                                                         "legacy_sources": rec["legacy_sources"]}, [(seg, kv)], deletes,
                                  carry=seg.segment_id not in unit.folded or bool(unit.fold_ts),
                                  carry_above=unit.fold_ts if seg.segment_id in unit.folded else 0)
        outs.append(out)
        results.append(res)
    r._hook(hooks, "after_files", unit)
    faults.point("compaction.after_files")
    for out in outs:
        r.check_files(store, out)
    result = r.UnitResult(unit.unit_id, r.COMMITTED, outs[0].segment_id if outs else None,
                          len(inputs) + len(hits), sum(x.rows_in for x in results), sum(x.rows_out for x in results),
                          sum(x.rows_dropped for x in results), sum(x.deletes_carried for x in results),
                          sum(s.total_size() for s, _ in [*inputs, *hits]), sum(x.bytes_out for x in results),
                          outputs=len(outs))
    return _commit(meta, store, unit, rkv, inputs, hits, outs, result, now if fixed else r.commit_time(meta), hooks)


def _beyond_floor(meta, coll: Collection, unit: Unit, inputs, hits, store=None) -> str | None:
    """Why the unit would forget a delete no fold may forget now, if it would: its fold_ts
    above its vchannel's checkpoint (capped by the producer records, checkpoint_ticks) and
    above every copied carrier's own deletes (foldable). A plan never makes such a unit; a
    unit handed in from elsewhere (XCom, an argv file) is judged again against etcd here --
    the checkpoint only moves up, so a planned unit always passes."""
    if not unit.fold_ts:
        return None
    bound = checkpoint_ticks(meta, coll, store=store).get(unit.channel, 0)
    folded = [s for s, _ in hits if s.segment_id in unit.folded] + [s for s, _ in inputs]
    bound = max([bound] + [delete_tick(s) for s in folded if s.source is not None])
    if unit.fold_ts > bound:
        return f"its fold_ts {unit.fold_ts} is above what may be forgotten on {unit.channel} now ({bound})"
    return None


def _hits(meta, unit: Unit):
    keys = [meta.keys.segment(unit.collection_id, pid, sid) for sid, pid, _ in unit.hits]
    read = meta.kv.get_many(keys) if keys else {}
    out = []
    for (sid, _, rev), key in zip(unit.hits, keys):
        kv = read[key]
        if kv is None:
            return out, f"hit segment {sid} is gone"
        seg = decode_struct(kv.value, Segment, key)
        if kv.mod_revision != rev or seg.state != FLUSHED:
            return out, f"hit segment {sid} changed since the plan (now {seg.state}, revision {kv.mod_revision})"
        out.append((seg, kv))
    return out, None


def _prepare(meta, coll: Collection, unit: Unit, now: float, sources_revision: int | None):
    from seglake.lifecycle.compaction import running as r

    key = meta.keys.compaction_unit(unit.collection_id, unit.unit_id)
    kv = meta.kv.get(key)
    if kv is not None:
        old = decode(kv.value, key)
        if old.get("state") == r.LOST and not r._inputs(meta, unit)[1] and not _hits(meta, unit)[1]:
            try:     # lost for another reason (sources gone): a fresh attempt, guarded by the lost record
                meta.kv.txn([unchanged(kv)], [Put(key, _record(meta, coll, unit, now, int(old.get("attempt", 1)) + 1,
                                                               None))], f"re-prepare fold {unit.unit_id}")
            except Conflict:
                pass
            kv = meta.kv.get(key)
    if kv is None:
        try:
            meta.kv.txn([absent(key)], [Put(key, _record(meta, coll, unit, now, 1, sources_revision))],
                        f"prepare fold {unit.unit_id}")
        except Conflict:
            pass
        kv = meta.kv.get(key)
        if kv is None:
            raise r.CompactionError(f"unit record {key} vanished after its prepare")
    rec = decode(kv.value, key)
    if not r.same_unit(rec.get("unit"), unit) or len(rec.get("outputs", ())) != len(unit.hits) \
            or len(rec.get("log0s", ())) != len(unit.hits):
        raise r.CompactionError(f"unit record {key} holds another unit or is corrupt")
    from seglake.lifecycle.compaction.records import check_record
    check_record(rec, key)
    return rec, kv


def _record(meta, coll: Collection, unit: Unit, now: float, attempt: int, revision: int | None) -> bytes:
    from seglake.lifecycle.compaction import running as r

    try:
        rev = meta.kv.revision() if revision is None else revision
        sources = r.delete_sources(meta, unit.collection_id, rev)
    except Compacted:
        rev = meta.kv.revision()
        sources = r.delete_sources(meta, unit.collection_id, rev)
    nlogs = segfiles.log_ids_needed(coll.schema, True, 1)
    n = len(unit.hits)
    first = meta.ids.allocate(n) if n else 0
    logs = meta.ids.allocate(nlogs * n) if n else 0
    return encode({"unit": unit.to_json(), "state": r.PREPARED, "prepared_at": now, "attempt": attempt,
                   "outputs": [first + i for i in range(n)], "log0s": [logs + i * nlogs for i in range(n)],
                   "nlogs": nlogs, "sources_revision": rev,
                   "legacy_sources": sorted(visibility.legacy_source_partitions(meta, sources))},
                  version=RECORD_VERSION)


def _out_keys(meta, unit: Unit, rec: dict) -> list[tuple[int, int, str]]:
    """(partition, output id, its segment key) per hit."""
    return [(pid, int(o), meta.keys.segment(unit.collection_id, pid, int(o)))
            for (_, pid, _), o in zip(unit.hits, rec["outputs"])]


def _check_outputs_free(meta, unit: Unit, rec: dict, rkv):
    """None when every output id is free; the unit's result when another run of it committed
    them since this run read the record (running._check_output_free); else CompactionError."""
    from seglake.lifecycle.compaction import running as r

    for _, o, key in _out_keys(meta, unit, rec):
        if meta.kv.get(key) is not None:
            if (settled := r._settled_elsewhere(unit, rkv, meta)) is not None:
                return settled
            raise r.CompactionError(f"fold {unit.unit_id}: its record names output segment {o}, which is a segment "
                                    f"of the collection already: the record was edited or is corrupt; nothing written")
    return None


def _commit(meta, store, unit: Unit, rkv, inputs, hits, outs: list[Segment], result, now: float, hooks: dict):
    from seglake.lifecycle.compaction import running as r

    rec = decode(rkv.value, rkv.key)
    channels = {unit.channel, *(s.channel for s, _ in hits)}
    for _ in range(r.COMMIT_ATTEMPTS):
        ckey = meta.keys.collection(unit.collection_id)
        ckv = meta.kv.get(ckey)
        coll = None if ckv is None else Collection.from_json(decode(ckv.value, ckey))
        if coll is None or coll.state != CREATED or channels & set(coll.properties.get(RELEASED, ())):
            return _lose(meta, store, unit, rkv, f"collection is {'gone' if coll is None else coll.state} or a "
                                                 f"vchannel was released")
        okeys = [meta.keys.segment(o.collection_id, o.partition_id, o.segment_id) for o in outs]
        compares = [unchanged(kv) for _, kv in [*inputs, *hits]] + [absent(k) for k in okeys] + \
            [unchanged(rkv), unchanged(ckv)]
        ops = [Put(kv.key, encode_struct(s.replace(state=DROPPED, dropped_at=now, compacted_to=FOLDED)))
               for s, kv in inputs]
        ops += [Put(kv.key, encode_struct(s.replace(state=DROPPED, dropped_at=now, compacted_to=o.segment_id)))
                for (s, kv), o in zip(hits, outs)]
        ops += [Put(k, encode_struct(o)) for k, o in zip(okeys, outs)]
        ops.append(Put(rkv.key, encode({**rec, "state": r.COMMITTED, "committed_at": now,
                                        "result": result.to_json()}, version=RECORD_VERSION)))
        try:
            meta.kv.txn(compares, ops, f"commit fold {unit.unit_id}")
            faults.point("compaction.after_commit")
            r._hook(hooks, "after_commit", unit)
            return result
        except Conflict:
            cur = meta.kv.get(rkv.key)
            if cur is None:
                raise r.CompactionError(f"unit record {rkv.key} vanished during its commit") from None
            if cur.mod_revision != rkv.mod_revision:
                return r._settled(unit, decode(cur.value, rkv.key))
            why = r._inputs(meta, unit)[1] or _hits(meta, unit)[1]
            if why:
                return _lose(meta, store, unit, rkv, why)
    return _lose(meta, store, unit, rkv, "the collection record kept changing during the commit")


def _lose(meta, store, unit: Unit, rkv, why: str):
    """Record the fold lost (guarded) and remove its outputs' files (never a live segment's)."""
    from seglake.lifecycle.compaction import running as r

    rec = decode(rkv.value, rkv.key)
    try:
        meta.kv.txn([unchanged(rkv)], [Put(rkv.key, encode({**rec, "state": r.LOST, "reason": why,
                                                             "lost_at": time.time()}, version=RECORD_VERSION))],
                    f"lose fold {unit.unit_id}")
    except Conflict:
        cur = meta.kv.get(rkv.key)
        if cur is None:
            raise r.CompactionError(f"unit record {rkv.key} vanished") from None
        return r._settled(unit, decode(cur.value, rkv.key))
    remove_outputs(meta, store, unit.collection_id, rec)
    return r.UnitResult(unit.unit_id, r.LOST, reason=why)


def remove_outputs(meta, store, collection_id: int, rec: dict) -> None:
    """Remove the files of a lost / abandoned fold's outputs; an output id that names an
    existing segment (an edited record) is skipped: its files are that segment's."""
    u = rec["unit"]
    for (_, pid, _), o in zip(u.get("hits", ()), rec.get("outputs", ())):
        if meta.kv.get(meta.keys.segment(collection_id, int(pid), int(o))) is not None:
            continue
        keys = [x.key for d in layout.segment_dirs(collection_id, int(pid), int(o)) for x in store.list(d)]
        if keys:
            store.delete_many(keys)
