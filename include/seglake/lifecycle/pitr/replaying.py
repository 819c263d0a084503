"""Replay a source collection's log into its restore target, up to the instant, and make
the target usable. Runs once the copy job of the base snapshot is Completed (the target
is still Importing: the job leaves a point-in-time target to this step).

Per target vchannel i (source vchannel i of the plan), marker {root}/pitr/replays/{target}/{v}:

    absent --claim (CAS, a token)--> replaying --files, then segment records in chunks,
    each guarded by the claim; the last chunk also writes--> done {stats}

- claim: a re-run (after SIGKILL, or a second driver) takes the marker over with a new
  token; the older driver's next chunk fails its compare and it reports the lost race.
  Before replaying, the new owner marks Dropped every segment of the vchannel that is not
  a copy (`source` unset) and not yet Dropped: the leftovers of a killed attempt.
  Nothing is visible meanwhile: the target stays Importing until `finish`.
- the source log is sealed at the instant before it is read (wal.log.seal_up_to): a
  commit whose tick was reserved at or below it but whose txn had not landed yet fails
  its compare and takes a tick above it, so the log read is ALL the log up to the
  instant (an instant past the log's last tick, `--as-of` now, would else miss it).
- what is applied (the flusher's own rules, seglake.lifecycle.flush): messages of the
  source vchannel from the plan's start, in tick order, up to the instant: a message at
  or below the snapshot's checkpoint tick, an insert at or below its partition's row
  high-water mark, a delete at or below the delete high-water mark is already in the
  snapshot (skipped); a transaction's bodies only if its CommitTxn's tick is at or
  before the instant (one open at the instant, rolled back or expired: never); an
  upsert's delete at its call's timestamp. Rows keep their ticks as row timestamps and
  deletes their timestamps, so seglake.visibility judges the target exactly as the source
  at the instant. Partitions are mapped by name; a DropCollection ends the vchannel.
- finish: every vchannel done -> the TSO past the instant -> the target Created (ONE
  guarded txn, expect Importing). Idempotent; a Created target is a no-op.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import numpy as np

from seglake.meta import codec
from seglake import faults
from seglake.errors import Conflict, SeglakeError, StateError
from seglake.meta.catalog import CREATED, IMPORTING, pchannel_of
from seglake.meta.codec import decode, encode_struct
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.meta.kv import Compare, Put, absent, unchanged
from seglake.meta.segments import DROPPED, FLUSHED, Segment
from seglake.wal import message as M
from seglake.wal.buffer import DeleteBuffer, SegmentBuffer
from seglake.wal.message import Message, MessageId
from seglake.wal.txn import TxnBuffer

COMMIT_TT = "_commit_tt"   # a released txn body's CommitTxn tick (only inside the replay)
CHUNK = 100                # segment records per guarded txn (etcd --max-txn-ops 128)
L0 = "L0"


class ReplayRaceLost(Conflict):
    """Another driver took this vchannel's replay over; this one wrote nothing visible."""


class _StampedTxns(TxnBuffer):
    """The scanner's transaction buffer, telling each released body its commit's tick."""

    def _commit(self, m: Message) -> list[Message]:
        return [replace(b, props={**b.props, COMMIT_TT: m.time_tick}) for b in super()._commit(m)]


def replay_plan(coll) -> dict:
    plan = coll.properties.get("restored_from", {}).get("replay")
    if not isinstance(plan, dict):
        raise StateError(f"collection {coll.name!r} is not the target of a restore to a time")
    return plan


def replay(meta, store, settings, target_id: int) -> dict:
    """Replay every vchannel (resumable), then finish. Returns the summary."""
    coll = meta.catalog.get(target_id)
    plan = replay_plan(coll)
    if coll.state == CREATED:
        return summary(meta, coll)
    if coll.state != IMPORTING:
        raise StateError(f"restore target {coll.name!r} is {coll.state}; nothing to replay")
    job, _ = meta.copyjobs.get(coll.properties["restore_job_id"])
    if job.state != JOB_COMPLETED:
        raise StateError(f"restore target {coll.name!r}: copy job {job.job_id} is {job.state}; the replay "
                         "runs once it is Completed")
    if not plan.get("archive"):   # the log the plan named is still whole (else: which fragments are gone)
        from seglake.lifecycle.pitr.planning import Plan, _check_log
        _check_log(meta, store, Plan(**plan))
    for i, sv in enumerate(plan["vchannels"]):
        replay_vchannel(meta, store, settings, coll, plan, sv, coll.vchannels[i])
    return finish(meta, target_id)


def replay_vchannel(meta, store, settings, coll, plan: dict, sv: str, tv: str) -> dict:
    key = meta.keys.pitr_replay(coll.collection_id, tv)
    kv = meta.kv.get(key)
    marker = None if kv is None else codec.loads(kv.value, kv.key)   # damaged: the replay stops, naming it
    if marker is not None and marker.get("state") == "done":
        return marker
    token = uuid.uuid4().hex
    before = (marker.get("progress") if marker is not None else None) or {}
    claim_rev = meta.kv.txn([absent(key) if kv is None else unchanged(kv)],
                            [Put(key, json.dumps({"state": "replaying", "token": token, "progress": before}))],
                            reason=f"replay of {tv} claimed by another driver")
    left = [s.ref for s in meta.segments.list(coll.collection_id)
            if s.channel == tv and s.source is None and s.state != DROPPED]
    meta.segments.transition(left, DROPPED)   # a killed attempt's records (invisible: Importing)
    if not plan.get("archive"):   # this store's log: whole up to the instant before it is read
        from seglake.wal.log import seal_up_to
        seal_up_to(meta, pchannel_of(sv), int(plan["as_of"]))
    w = _Writer(meta, store, settings, coll, tv)
    prog = _Progress(meta, key, claim_rev, token, before, int((plan.get("vchannel_bytes") or {}).get(sv, 0)), tv)
    stats = _scan(meta, store, settings, coll, plan, sv, w, prog)
    records = w.close()
    faults.point("pitr.after_files")
    done = {"state": "done", "token": token, "segments": [s.segment_id for s in records],
            "rows": sum(s.num_rows for s in records), **stats, "progress": prog.last}
    ops = [Put(meta.keys.segment(s.collection_id, s.partition_id, s.segment_id), encode_struct(s)) for s in records]
    chunks = [ops[i:i + CHUNK] for i in range(0, len(ops), CHUNK)] or [[]]
    guard = Compare(key, "mod", "==", prog.rev)
    for n, chunk in enumerate(chunks):
        last = n == len(chunks) - 1
        try:
            meta.kv.txn([guard, _importing(meta, coll.collection_id)],
                        chunk + ([Put(key, json.dumps(done))] if last else []))
        except Conflict:
            raise ReplayRaceLost(f"replay of {tv} into {coll.name!r}: another driver took it over "
                                 "(or the target changed); this one wrote nothing visible") from None
        if not last:
            faults.point("pitr.between_chunks")
    return done


PROGRESS_EVERY_S = 1.0   # a replay's progress is written to its marker at most this often


class _Progress:
    """The replay's progress in its vchannel's marker (state replaying), in the style of a
    copy job's: messages and log bytes read of the bytes planned, rows and deletes applied,
    this attempt's rate. Counts never go lower than an earlier attempt's (a re-run after a
    kill reads the log again from the start: what it shows is the furthest any attempt
    got). Each write is guarded by the claim (a driver that lost the vchannel stops here:
    ReplayRaceLost) and the revision it leaves is the next guard."""

    COUNTS = ("messages", "bytes", "fragments", "applied", "deletes")

    def __init__(self, meta, key: str, rev: int, token: str, before: dict, bytes_total: int, vchannel: str,
                 clock=None):
        import time

        self.meta, self.key, self.rev, self.token, self.vchannel = meta, key, rev, token, vchannel
        self.clock = clock or time.time
        self.started = self.clock()
        self.written = self.started
        self.before = {k: int(before.get(k, 0)) for k in self.COUNTS}
        self.last = {**self.before, "bytes_total": bytes_total, "started_at": self.started,
                     "updated_at": self.started, "rate_bps": 0.0}

    def update(self, stats, out: dict, *, force: bool = False) -> None:
        now = self.clock()
        if not force and now - self.written < PROGRESS_EVERY_S:
            return
        mine = {"messages": out["messages"], "bytes": stats.bytes, "fragments": stats.fragments,
                "applied": out["applied"], "deletes": out["deletes"]}
        took = now - self.started
        self.last = {**{k: max(self.before[k], int(mine[k])) for k in self.COUNTS},
                     "bytes_total": self.last["bytes_total"], "started_at": self.started, "updated_at": now,
                     "rate_bps": round(stats.bytes / took, 1) if took > 0 else 0.0}
        try:
            self.rev = self.meta.kv.txn([Compare(self.key, "mod", "==", self.rev)], [Put(self.key, json.dumps(
                {"state": "replaying", "token": self.token, "progress": self.last}))])
        except Conflict:
            raise ReplayRaceLost(f"replay of {self.vchannel}: another driver took it over; this one wrote nothing "
                                 "visible") from None
        self.written = now
        faults.point("pitr.progress")


STALL_AFTER_S = 30.0   # a replaying vchannel whose progress has not moved this long: "stalled" (as a copy job)


def progress(meta, target_id: int, now: float | None = None) -> dict:
    """A restore-to-a-time (or undrop) target's replay as it runs: per vchannel its state
    (waiting, replaying, done) and counts; in all: log bytes read of the bytes planned
    (a done vchannel counts all of its), messages, the vchannel replaying now and its
    rate. `health`: done, waiting (no vchannel claimed yet), replaying, or stalled -- the
    vchannel replaying now has not written progress for STALL_AFTER_S (its driver died,
    or its run was stopped): `stalled_s` says how long, and no rate is given (its last
    one is not the present's). Read-only."""
    import time

    now = time.time() if now is None else now
    coll = meta.catalog.get(target_id)
    plan = replay_plan(coll)
    planned = plan.get("vchannel_bytes") or {}
    per, current = {}, None
    for i, tv in enumerate(coll.vchannels):
        sv = plan["vchannels"][i] if i < len(plan["vchannels"]) else tv
        kv = meta.kv.get(meta.keys.pitr_replay(target_id, tv))
        d = codec.loads(kv.value, kv.key) if kv is not None else {}
        p = d.get("progress") or {}
        total = int(planned.get(sv, p.get("bytes_total", 0)) or 0)
        state = d.get("state", "waiting")
        read = total if state == "done" else min(int(p.get("bytes", 0)), total) if total else int(p.get("bytes", 0))
        per[tv] = {"state": state, "messages": int(d.get("messages", p.get("messages", 0))), "bytes": read,
                   "bytes_total": total, "rate_bps": float(p.get("rate_bps", 0.0)),
                   "updated_at": p.get("updated_at"), "started_at": p.get("started_at")}
        if state == "replaying":
            current = tv
    done_bytes, total_bytes = sum(v["bytes"] for v in per.values()), sum(v["bytes_total"] for v in per.values())
    stalled = None
    if current is not None and coll.state == IMPORTING:
        since = per[current]["updated_at"] or per[current].get("started_at")
        if isinstance(since, (int, float)) and now - since >= STALL_AFTER_S:
            stalled = round(now - since, 1)
    finished = coll.state != IMPORTING or all(v["state"] == "done" for v in per.values())
    if current is None and not finished:   # no vchannel claimed: waiting for the copy, or no replay is coming
        since = _idle_since(meta, coll, per)
        if since is not None and now - since >= STALL_AFTER_S:
            stalled = round(now - since, 1)
    health = ("done" if finished else "stalled" if stalled is not None else
              "replaying" if current is not None else "waiting")
    return {"target": coll.name, "target_id": target_id, "db": coll.db, "state": coll.state, "source": plan["collection"],
            "as_of": plan["as_of"], "vchannel": current,
            "vchannels_done": sum(v["state"] == "done" for v in per.values()), "vchannels": len(per),
            "messages": sum(v["messages"] for v in per.values()), "bytes": done_bytes, "bytes_total": total_bytes,
            "percent": round(100.0 * done_bytes / total_bytes, 1) if total_bytes else None,
            "rate_bps": per[current]["rate_bps"] if current and stalled is None else None,
            "health": health, "stalled_s": stalled, "per_vchannel": per}


def _idle_since(meta, coll, per: dict) -> float | None:
    """When the replay could have gone on and nothing moved since: the copy job's end (it
    Completed or Failed), or a later vchannel's last write; None while the copy is under way
    (its own progress says how it goes) or its job is not found."""
    from seglake.errors import NotFound

    job_id = coll.properties.get("restore_job_id")
    if job_id is None:
        return None
    try:
        job, _ = meta.copyjobs.get(int(job_id))
    except (NotFound, TypeError, ValueError):
        return None
    if job.state not in ("Completed", "Failed") or not job.finished_at:
        return None
    marks = [v["updated_at"] for v in per.values() if isinstance(v.get("updated_at"), (int, float))]
    return max([float(job.finished_at), *marks])


def replays(meta, now: float | None = None) -> list[dict]:
    """progress() of every restore target still Importing with a replay to run (the page, metrics)."""
    out = []
    for c in meta.catalog.list():
        if c.state == IMPORTING and isinstance(c.properties.get("restored_from", {}).get("replay"), dict):
            out.append(progress(meta, c.collection_id, now))
    return out


def _importing(meta, collection_id: int) -> Compare:
    """A compare on the target record, read now; StateError unless it is still Importing."""
    from seglake.meta.catalog import Collection

    k = meta.keys.collection(collection_id)
    kv = meta.kv.get(k)
    if kv is None or Collection.from_json(decode(kv.value, k)).state != IMPORTING:
        raise StateError(f"restore target id {collection_id} is no longer Importing: nothing replayed into it")
    return Compare(k, "mod", "==", kv.mod_revision)


def _scan(meta, store, settings, coll, plan: dict, sv: str, w: "_Writer", prog: "_Progress | None" = None) -> dict:
    from seglake.wal.scanner import Scanner

    as_of = int(plan["as_of"])
    st = plan["starts"][sv]
    floor, part_hw, del_hw = int(st["floor"]), {int(k): v for k, v in st["part_hw"].items()}, int(st["del_hw"])
    parts = {int(k): n for k, n in plan["partitions"].items()}
    target_parts = {p.name: p.partition_id for p in coll.partitions}

    def tpid(src: int) -> int:
        if src == 0:
            return 0
        name = parts.get(src)
        if name is None or name not in target_parts:
            raise SeglakeError(f"replay of {sv}: partition id {src} of the source has no partition in the target")
        return target_parts[name]

    sc = Scanner(meta, store, pchannel_of(sv), settings, start=MessageId(*st["start"]), vchannel=sv,
                 recovery=True, follow=False, log=_archived_log(plan, pchannel_of(sv), settings))
    sc.txn = _StampedTxns()
    out = {"messages": 0, "applied": 0, "deletes": 0, "skipped": 0, "after": 0}

    def apply(m: Message) -> bool:
        """False once the vchannel ends (its collection dropped)."""
        out["messages"] += 1
        if m.vchannel != sv or m.type not in (M.INSERT, M.DELETE, M.DROP_COLLECTION):
            return True
        if (m.props.get(COMMIT_TT, m.time_tick) if m.txn_id else m.time_tick) > as_of:
            out["after"] += 1      # committed after the instant (or simply later)
            return True
        if m.type == M.DROP_COLLECTION:
            return False
        if m.time_tick <= floor:
            out["skipped"] += 1
            return True
        if m.type == M.DELETE:
            if m.time_tick <= del_hw:
                out["skipped"] += 1
                return True
            w.delete(m.body.column("pk").to_numpy(zero_copy_only=False), m.time_tick, tpid(m.partition_id),
                     M.call_ts(m))
            out["deletes"] += m.rows
        else:
            if m.time_tick <= part_hw.get(m.partition_id, 0):
                out["skipped"] += 1
                return True
            batch = M.conform_batch(m.body, coll.schema)
            ts = M.upsert_ts(m)   # an upsert: its rows and its delete at its call's one timestamp
            if ts is not None and m.time_tick > del_hw:
                w.delete(batch.column(coll.schema.primary.name).to_numpy(zero_copy_only=False), m.time_tick,
                         tpid(m.partition_id), ts)
            w.rows(tpid(m.partition_id), batch, m.time_tick, ts)
        out["applied"] += 1
        return True

    try:
        ended = False
        for m in sc:
            if prog is not None:
                prog.update(sc.stats, out)
            if m.type == M.TIME_TICK:
                if m.time_tick > as_of:
                    ended = True
                    break
                continue
            if not apply(m):
                ended = True
                break
        if not ended:   # the log ends: release what it holds up to the instant
            sc.handle(Message(M.TIME_TICK, time_tick=as_of, term=sc.txn.term))
            while len(sc.pending):
                m = sc.pending.pop()
                if m.type != M.TIME_TICK and not apply(m):
                    break
        out["fragments"] = sc.stats.fragments
        if prog is not None:
            prog.update(sc.stats, out, force=True)
    finally:
        sc.close()
    return out


def _archived_log(plan: dict, pchannel: str, settings):
    """The archive a restore from a backup target alone reads (None: this store's log)."""
    a = plan.get("archive")
    if not a:
        return None
    from seglake.lifecycle.backup.archive import ArchivedLog
    from seglake.lifecycle.copyjob.bundled import target_of

    return ArchivedLog(target_of(a["uri"], settings), a["site"], pchannel)


class _Writer:
    """Rows per target partition (segments cut at flush_seal_rows, written as they fill) and
    the vchannel's deletes (one 0-row L0 segment at the end). Files first; records returned."""

    def __init__(self, meta, store, settings, coll, tv: str):
        self.meta, self.store, self.coll, self.tv = meta, store, coll, tv
        self.schema = M.arrow_schema(coll.schema)
        self.max_rows = settings.flush_seal_rows
        self.bufs: dict[int, SegmentBuffer] = {}
        self.dels = DeleteBuffer(None)
        self.records: list[Segment] = []

    def rows(self, pid: int, batch, tt: int, ts: int | None = None) -> None:
        while batch.num_rows:
            buf = self.bufs.get(pid)
            if buf is None:
                buf = self.bufs[pid] = SegmentBuffer(self.meta.ids.allocate(), self.coll.collection_id, pid,
                                                     self.tv, None)
            take = min(batch.num_rows, self.max_rows - buf.rows)
            buf.add_rows(batch.slice(0, take), tt, ts)
            batch = batch.slice(take)
            if buf.rows >= self.max_rows:
                self._write(self.bufs.pop(pid))

    def delete(self, pks: np.ndarray, tt: int, pid: int, ts: int | None = None) -> None:
        self.dels.add(pks, tt, pid, ts)

    def close(self) -> list[Segment]:
        for pid in sorted(self.bufs):
            self._write(self.bufs.pop(pid))
        if self.dels.count:
            buf = SegmentBuffer(self.meta.ids.allocate(), self.coll.collection_id,
                                self.coll.partitions[0].partition_id, self.tv, None)
            self._write(buf, self.dels)
        return self.records

    def _write(self, buf: SegmentBuffer, dels: DeleteBuffer | None = None) -> None:
        from seglake import segfiles
        from seglake.lifecycle.flush.flusher import _named

        deletes = None if dels is None else dels.arrays()
        fields = self.coll.schema
        log0 = self.meta.ids.allocate(segfiles.log_ids_needed(fields, deletes is not None, buf.rows))
        row_ids = np.zeros(0, dtype=np.int64)
        if buf.rows:
            first = self.meta.ids.allocate(buf.rows)
            row_ids = np.arange(first, first + buf.rows, dtype=np.int64)
        c, p, s = buf.collection_id, buf.partition_id, buf.segment_id
        files = segfiles.write_segment_files(
            self.store, log0, c, p, s, fields, buf.table(self.schema), row_ids,
            buf.row_ts() if buf.rows else np.zeros(0, dtype=np.int64), deletes=deletes)
        dml_ts = buf.last_tt if buf.rows else dels.last_tt
        self.records.append(Segment(
            segment_id=s, collection_id=c, partition_id=p, channel=self.tv, state=FLUSHED, num_rows=buf.rows,
            level=L0 if not buf.rows else "L1", binlogs=files.binlogs, deltalogs=files.deltalogs,
            statslogs=files.statslogs, start_ts=buf.first_tt or dels.first_tt, dml_ts=dml_ts,
            created_ts=buf.first_tt or dels.first_tt,
            delta_partitions=None if deletes is None else _named(self.coll, deletes[2])))


def finish(meta, target_id: int) -> dict:
    """Every vchannel replayed -> the TSO past the instant -> the target Created."""
    coll = meta.catalog.get(target_id)
    plan = replay_plan(coll)
    if coll.state != CREATED:
        missing = [v for v in coll.vchannels if not _done(meta, target_id, v)]
        if missing:
            raise StateError(f"restore target {coll.name!r}: vchannel(s) {', '.join(missing)} not replayed yet")
        meta.tso.advance_past(int(plan["as_of"]))
        faults.point("pitr.before_created")
        meta.catalog.set_state(target_id, CREATED, expect=IMPORTING)
    return summary(meta, meta.catalog.get(target_id))


def _done(meta, target_id: int, v: str) -> dict | None:
    kv = meta.kv.get(meta.keys.pitr_replay(target_id, v))
    d = None if kv is None else codec.loads(kv.value, kv.key)
    return d if d and d.get("state") == "done" else None


def summary(meta, coll) -> dict:
    """What the restore used and did: the base snapshot, the log read, per vchannel."""
    plan = replay_plan(coll)
    per = {v: _done(meta, coll.collection_id, v) for v in coll.vchannels}
    from seglake.lifecycle.pitr.instants import describe

    src = coll.properties.get("restored_from", {})
    return {"target": coll.name, "target_id": coll.collection_id, "state": coll.state,
            "source": plan["collection"], "as_of": plan["as_of"], "as_of_utc": describe(int(plan["as_of"])),
            "undrop": bool(src.get("undrop")), "archive": (plan.get("archive") or {}).get("uri"),
            "snapshot": plan["snapshot"], "log_fragments": plan["fragments"], "log_bytes": plan["log_bytes"],
            "messages": sum((d or {}).get("messages", 0) for d in per.values()),
            "rows_replayed": sum((d or {}).get("rows", 0) for d in per.values()),
            "deletes_replayed": sum((d or {}).get("deletes", 0) for d in per.values()),
            "vchannels": {v: None if d is None else {k: d[k] for k in ("rows", "deletes", "messages", "fragments")
                                                     if k in d} for v, d in per.items()}}
