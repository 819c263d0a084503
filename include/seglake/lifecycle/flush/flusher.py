"""The Flusher: replay a pchannel's log from the minimum checkpoint, buffer rows and
deletes per vchannel, seal and sync segments, commit each with its checkpoint under the
flusher term (exactly once; see the package docstring).

One class in one file on purpose (~490 lines): recovery, dispatch, sealing and the
guarded commits share the per-vchannel state and the term's guard; splitting the class
would scatter one invariant (a checkpoint moves only with the segments it covers)."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

import numpy as np

from seglake.errors import Conflict, NotFound
from seglake.meta import keys as keymod
from seglake.meta.alloc import physical_ms
from seglake.meta.catalog import DROPPED as COLL_DROPPED, pchannel_of
from seglake.meta.codec import decode_struct, encode_struct
from seglake.meta.kv import Compare, Delete, Put, absent, retry_on_conflict
from seglake.meta.segments import DROPPED, FLUSHED, GROWING, SEALED, Segment
from seglake.wal import message as M
from seglake.wal.buffer import FLUSH, DeleteBuffer, SealPolicy, SegmentBuffer
from seglake.wal.checkpoints import (RELEASED, Checkpoint, advances, read_checkpoint, scan_pchannel,
                                     truncated_before)
from seglake.wal.log import Fenced, WalLog, validate_pchannel
from seglake.wal.message import Message, MessageId
from seglake.lifecycle.flush.state import (L0, FlushStats, VchannelReleased, VState, acquire_term,
                                          fold_high_water, rev_guard)


RELEASE_BATCH = 100               # segment records per release txn (etcd --max-txn-ops 128)


class Flusher:
    """One pchannel's flusher. `open()` takes the term and recovers; `run()` consumes
    the log up to its end (or a deadline) and syncs. `hooks` (name -> callable) are
    called at `after_files` and `after_commit` (crash tests)."""

    def __init__(self, meta, store, pchannel: str, settings, *, clock=time.time, name: str | None = None,
                 hooks: dict | None = None):
        self.policy = SealPolicy.from_settings(settings)   # validated before any side effect
        self.meta, self.store, self.settings = meta, store, settings
        self.pchannel = validate_pchannel(pchannel)
        self.clock = clock
        self.name = name or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.hooks = hooks or {}
        self.term_key = keymod.wal_flusher(meta.keys, pchannel)
        self.term = self.term_rev = 0
        self.states: dict[str, VState] = {}
        self.scanner = None
        self.stats = FlushStats(pchannel)
        self.finish_candidates: set[int] = set()   # collection ids (see open, _release, _forget)

    # -- recovery ---------------------------------------------------------------------------
    def open(self) -> "Flusher":
        self.term, self.term_rev = acquire_term(self.meta, self.pchannel, self.name)
        self.stats.term = self.term
        starts, complete = [], True
        live, finishable = scan_pchannel(self.meta, self.pchannel)
        # the collections whose drop may lack only its finish after this run (drop.finish_released):
        # those found so now (a flusher killed after its last release) and those this run releases
        self.finish_candidates.update(finishable)
        for v, coll in sorted(live.items()):
            st = self._open_state(v, coll)
            if st.floor is None:
                complete = False
            else:
                starts.append(st.floor.message_id)
        first = truncated_before(self.meta, self.pchannel)
        if complete and starts:
            start = min(starts)
        else:
            start = MessageId(0, first, 0) if first > 1 else None
        self.start = start
        self.stats.start = None if start is None else str(start)
        return self

    def _open_state(self, v: str, coll) -> VState:
        cp, rev = read_checkpoint(self.meta, v)
        st = VState(v, coll, M.arrow_schema(coll.schema), cp, rev)
        stale = []
        for kv in self.meta.kv.range(self.meta.keys.segments_prefix(coll.collection_id)):
            seg = decode_struct(kv.value, Segment, kv.key)
            if seg.channel != v:
                continue
            if seg.state in (GROWING, SEALED):
                stale.append((kv, seg))
            else:   # its rows and deletes stay skipped on replay (state.fold_high_water)
                st.del_hw = fold_high_water(seg, st.part_hw, st.del_hw)
        for kv, seg in stale:   # a killed run's buffers: no files, rows are replayed from the log
            self._commit([Compare(kv.key, "mod", "==", kv.mod_revision)],
                         [Put(kv.key, encode_struct(seg.replace(state=DROPPED, dropped_at=self.clock())))],
                         f"drop stale {seg.state} segment {seg.segment_id}")
            self.stats.stale_dropped += 1
        self.states[v] = st
        return st

    # -- guarded commits ------------------------------------------------------------------------
    def _live_guard(self, st: VState) -> Compare:
        """A compare on the record of `st`'s collection, read now; VchannelReleased when
        it released the vchannel, is Dropped or is gone (a direct drop, say, while this
        flusher ran): no segment or checkpoint is ever written for a released vchannel."""
        from seglake.meta.catalog import Collection
        from seglake.meta.codec import decode

        key = self.meta.keys.collection(st.coll.collection_id)
        kv = self.meta.kv.get(key)
        coll = None if kv is None else Collection.from_json(decode(kv.value, key))
        if coll is None or coll.state == COLL_DROPPED or st.vchannel in coll.properties.get(RELEASED, ()):
            raise VchannelReleased(f"vchannel {st.vchannel} was released (collection "
                                   f"{st.coll.collection_id} {'gone' if coll is None else coll.state})")
        return Compare(key, "mod", "==", kv.mod_revision)

    def _commit(self, compares: list, ops: list, what: str, st: VState | None = None) -> int:
        """ONE etcd txn guarded by the flusher term (and, with `st`, by its collection
        still holding the vchannel; a concurrent change of that record is retried)."""
        guard = Compare(self.term_key, "mod", "==", self.term_rev)
        for _ in range(8):
            live = [] if st is None else [self._live_guard(st)]
            try:
                return self.meta.kv.txn([guard, *live, *compares], ops)
            except Conflict:
                kv = self.meta.kv.get(self.term_key)
                if kv is None or kv.mod_revision != self.term_rev:
                    cur = None if kv is None else kv.value.decode(errors="replace")[:200]   # (shown, not read)
                    raise Fenced(f"flusher of {self.pchannel} at term {self.term} is fenced "
                                 f"(current flusher: {cur}); not committed: {what}") from None
                now = None if not live else self.meta.kv.get(live[0].key)
                if live and (now is None or now.mod_revision != live[0].value):
                    continue   # the collection record changed: re-check it
                raise Conflict(f"flusher of {self.pchannel}: {what}: a record changed underneath") from None
        raise Conflict(f"flusher of {self.pchannel}: {what}: the collection record keeps changing")

    def _forget(self, st: VState) -> None:
        """Stop serving a released vchannel (its buffers are dropped: the drop that
        released it owns its segments)."""
        st.closed = True
        self.states.pop(st.vchannel, None)
        self.stats.ignored += 1
        self.finish_candidates.add(st.coll.collection_id)

    def _hook(self, name: str, **kw) -> None:
        from seglake import faults

        faults.point(f"flush.{name}")   # crash tests across processes (Spark executors)
        fn = self.hooks.get(name)
        if fn is not None:
            fn(self, **kw)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, *, max_seconds: float | None = None, flush_all: bool = False) -> FlushStats:
        """Consume the committed log to its end (or until `max_seconds`), dispatching
        every message; then sync what is sealed (everything when flush_all) and the
        pending delete buffers, and move every vchannel's checkpoint."""
        from seglake.wal.scanner import Scanner

        if self.term == 0:
            self.open()
        deadline = None if max_seconds is None else time.monotonic() + float(max_seconds)
        self.scanner = Scanner(self.meta, self.store, self.pchannel, self.settings, start=self.start,
                               follow=False)
        try:
            if self.scanner.paused() is not None:
                self.stats.stopped = "paused"    # consumption held back: nothing is read
                self.stats.checkpoints = self.checkpoint_report()
                return self.stats
            ticked = False
            while True:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                m = self.scanner.next(timeout=left)
                if m is None:
                    if self.scanner.paused() is not None:
                        self.stats.stopped = "paused"
                    elif deadline is not None and time.monotonic() >= deadline:
                        self.stats.stopped = "deadline"
                    elif not ticked and self._expire_quiet_txns():
                        ticked = True
                        self.scanner.drain_more()
                        continue
                    break
                self.dispatch(m)
                if deadline is not None and m.type == M.TIME_TICK and time.monotonic() >= deadline:
                    self.stats.stopped = "deadline"
                    break
            self.stats.open_txns = self.scanner.txn.open_txns()
            self.meta.kv.put(keymod.wal_open_txns(self.meta.keys, self.pchannel),
                             json.dumps({"at_tick": self.scanner.reorder.last_pop_tt, "txns": self.stats.open_txns}))
            self.finish(flush_all=flush_all)
            # (producer records expire by themselves, on their leases: nothing to read here)
        finally:
            self.scanner.close()
        return self.stats

    def _expire_quiet_txns(self) -> bool:
        """An open transaction whose keepalive passed on a quiet pchannel: append a
        TimeTick (as any producer may) so the log itself says it expired -- every later
        commit gets a larger tick and is refused -- and consuming it ends the txn and
        frees its vchannel's checkpoint. True when a tick was appended."""
        expiry = self.scanner.txn.next_expiry()
        if expiry is None or expiry > self.meta.tso.now():
            return False
        from seglake.wal.writer import WalWriter

        with WalWriter.open(self.meta, self.store, self.pchannel, self.settings,
                            name=f"flusher {self.name}") as w:
            w.append(Message.time_tick_msg())
        self.stats.txn_ticks += 1
        return True

    def dispatch(self, m: Message) -> None:
        self.stats.messages += 1
        if m.type == M.TIME_TICK:
            return self.on_tick(m)
        if m.type == M.CREATE_COLLECTION:
            return self.on_create(m)
        targets = [self.states[m.vchannel]] if m.vchannel in self.states else (
            list(self.states.values()) if m.vchannel == "" and m.type == M.FLUSH else [])
        targets = [st for st in targets if not st.closed]
        if not targets:
            self.stats.ignored += 1
            return
        for st in targets:
            if st.floor is not None and m.time_tick <= st.floor.time_tick:
                self.stats.skipped += 1
                continue
            try:
                self._apply(st, m)
            except VchannelReleased:
                self._forget(st)

    def _apply(self, st: VState, m: Message) -> None:
        if m.type == M.INSERT:
            self.on_insert(st, m)
        elif m.type == M.DELETE:
            self.on_delete(st, m)
        elif m.type == M.FLUSH:
            self.seal_all(st, FLUSH)
        elif m.type == M.DROP_COLLECTION:
            self.on_drop(st, m)
            st.closed = True          # messages after the drop are ignored

    def on_create(self, m: Message) -> None:
        """Open the vchannel's data-sync state; a duplicate is ignored."""
        v = m.vchannel
        if v in self.states or pchannel_of(v) != self.pchannel:
            self.stats.duplicate_creates += 1
            return
        try:
            coll = self.meta.catalog.get(m.collection_id)
        except NotFound:
            self.stats.ignored += 1
            return
        if coll.state == COLL_DROPPED or v in coll.properties.get(RELEASED, ()):
            self.stats.ignored += 1
            return
        self._open_state(v, coll)

    def on_drop(self, st: VState, m: Message) -> None:
        """DropCollection reached the vchannel: seal and sync everything buffered before
        it (inserts and deletes: nothing acknowledged is lost), then release it: ONE
        term-guarded txn marks every segment of the vchannel Dropped (records kept,
        dropped_at set), removes its checkpoint and adds it to the collection's
        released vchannels. A crash before that txn replays the drop on recovery."""
        self.seal_all(st, "drop")
        self.sync(st, deletes=True)
        self._hook("drop_synced", vchannel=st.vchannel)
        self._release(st)
        self.states.pop(st.vchannel, None)   # later messages for it are ignored
        self.stats.released.append(st.vchannel)

    def _release(self, st: VState) -> None:
        from seglake.meta.catalog import Collection
        from seglake.meta.codec import decode, encode

        ckey = self.meta.keys.collection(st.coll.collection_id)
        cp_key = self.meta.keys.channel_checkpoint(st.vchannel)
        now = self.clock()

        def attempt() -> None:
            ckv = self.meta.kv.get(ckey)
            if ckv is None:
                raise NotFound(f"collection id {st.coll.collection_id} not found")
            coll = Collection.from_json(decode(ckv.value, ckey))
            released = list(coll.properties.get(RELEASED, ()))
            if st.vchannel in released:
                return
            compares, ops = [Compare(ckey, "mod", "==", ckv.mod_revision)], []
            for kv in self.meta.kv.range(self.meta.keys.segments_prefix(coll.collection_id)):
                seg = decode_struct(kv.value, Segment, kv.key)
                if seg.channel == st.vchannel and seg.state != DROPPED:
                    compares.append(Compare(kv.key, "mod", "==", kv.mod_revision))
                    ops.append(Put(kv.key, encode_struct(seg.replace(state=DROPPED, dropped_at=now))))
            while len(ops) > RELEASE_BATCH:   # more than one txn holds: drop the excess first
                self._commit(compares[1:RELEASE_BATCH + 1], ops[:RELEASE_BATCH], f"drop segments of {st.vchannel}")
                del compares[1:RELEASE_BATCH + 1], ops[:RELEASE_BATCH]
                self._hook("release_batch", vchannel=st.vchannel)
            cp = self.meta.kv.get(cp_key)
            if cp is not None:
                compares.append(Compare(cp_key, "mod", "==", cp.mod_revision))
                ops.append(Delete(cp_key))
            new = Collection(**{**coll.__dict__, "properties": {**coll.properties,
                                                                 RELEASED: [*released, st.vchannel]}})
            ops.append(Put(ckey, encode(new.to_json())))
            self._commit(compares, ops, f"release {st.vchannel} (drop)")
        retry_on_conflict(attempt, f"release {st.vchannel}")
        self.finish_candidates.add(st.coll.collection_id)
        self._hook("after_release", vchannel=st.vchannel)

    def on_insert(self, st: VState, m: Message) -> None:
        """Rows into the partition's growing segment, stamped with the message's tick. An
        upsert is a delete and an insert at ONE timestamp, as in Milvus: its call's
        `upsert_ts` (its first append's tick; that message carries none, its tick is it;
        kept by its retries) stamps both its rows and its delete of every older row of its
        pks in its partition. So of two upserts of a pk the later call hides the other, and
        an upsert carried by several appends never hides its own rows. Replay: rows at or below what this flusher already wrote
        for the partition are skipped (segments of a partition cover consecutive ticks)."""
        pid = m.partition_id
        if m.time_tick <= st.part_hw.get(pid, 0):
            self.stats.skipped += 1
            return
        batch = m.body if m.body.schema == st.schema else M.conform_batch(m.body, st.coll.schema)
        ts = M.upsert_ts(m)
        if ts is not None and m.time_tick > st.del_hw:   # its own partition only, as in Milvus
            self._add_deletes(st, batch.column(st.pk.name).to_numpy(zero_copy_only=False), m.time_tick, pid, ts)
        buf = st.growing.get(pid) or self._open_segment(st, pid, m.time_tick)
        buf.add_rows(batch, m.time_tick, ts)

    def on_delete(self, st: VState, m: Message) -> None:
        """Buffered with its tick and partition scope; stored in the delta log of the next
        segment synced on the vchannel. Replay: deletes at or below what this flusher
        already wrote are skipped (duplicates would be harmless, only larger)."""
        if m.time_tick <= st.del_hw:
            self.stats.skipped += 1
            return
        # stamped with its call's one timestamp (M.CALL_TS, at or below its tick) when it has one
        self._add_deletes(st, m.body.column("pk").to_numpy(zero_copy_only=False), m.time_tick, m.partition_id,
                          M.call_ts(m))

    def _add_deletes(self, st: VState, pks: np.ndarray, tt: int, partition_id: int, ts: int | None = None) -> None:
        if st.dels is None:
            st.dels = DeleteBuffer(self._position(st))
        st.dels.add(pks, tt, partition_id, ts)
        self.stats.deletes += len(pks)

    def on_tick(self, m: Message) -> None:
        """A safe point for every vchannel without an open transaction; seal by policy
        (ages in ticks), sync sealed."""
        txn = None if self.scanner is None else self.scanner.txn
        for st in self.states.values():
            if txn is None or not txn.open_on(st.vchannel):
                st.safe = Checkpoint(m.id, m.time_tick)
        self._seal_due(m.time_tick)

    def _seal_due(self, now_tt: int, *, deletes: bool = False) -> None:
        """Seal every growing segment a policy calls for at tick `now_tt` and sync what is
        sealed; with deletes=True also store delete buffers that are old enough."""
        for st in list(self.states.values()):
            if st.closed:
                continue
            for pid, buf in list(st.growing.items()):
                reason = buf.seal_reason(self.policy, now_tt)
                if reason:
                    self._seal(st, pid, reason)
            try:
                if st.sealed:
                    self.sync(st)
                if deletes and st.dels is not None and st.dels.due(self.policy, now_tt):
                    self.sync(st, deletes=True)
            except VchannelReleased:
                self._forget(st)

    # -- segments ---------------------------------------------------------------------------------
    def _position(self, st: VState) -> Checkpoint | None:
        """Where a replay must start to rebuild a buffer opened now."""
        pos = st.safe
        if st.floor is not None and (pos is None or pos.message_id < st.floor.message_id):
            pos = st.floor
        return pos

    def _open_segment(self, st: VState, pid: int, tt: int, level: str = "L1") -> SegmentBuffer:
        sid = self.meta.ids.allocate()
        seg = Segment(segment_id=sid, collection_id=st.coll.collection_id, partition_id=pid,
                      channel=st.vchannel, state=GROWING, start_ts=tt, created_ts=tt, level=level)
        key = self.meta.keys.segment(seg.collection_id, pid, sid)
        rev = self._commit([absent(key)], [Put(key, encode_struct(seg))], f"open growing segment {sid}", st)
        buf = SegmentBuffer(sid, seg.collection_id, pid, st.vchannel, self._position(st), record_rev=rev)
        if level == "L1":
            st.growing[pid] = buf
        return buf

    def _seal(self, st: VState, pid: int, reason: str) -> None:
        buf = st.growing.pop(pid)
        buf.sealed = reason
        st.sealed.append(buf)
        self.stats.seals[reason] = self.stats.seals.get(reason, 0) + 1

    def seal_all(self, st: VState, reason: str) -> None:
        for pid in list(st.growing):
            if st.growing[pid].rows:
                self._seal(st, pid, reason)

    def _checkpoint_after(self, st: VState, done: tuple) -> Checkpoint | None:
        """min(start of every buffer still held but those `done`) else the safe point."""
        held = [*st.growing.values(), *st.sealed, *([st.dels] if st.dels is not None else [])]
        starts = [b.start for b in held if not any(b is d for d in done)]
        if starts:
            if any(s is None for s in starts):
                return None
            return min(starts, key=lambda c: (c.message_id, c.time_tick))
        return self._position(st)

    def _cp_ops(self, st: VState, done: tuple) -> tuple[list, list, Checkpoint | None]:
        cp = self._checkpoint_after(st, done)
        key = self.meta.keys.channel_checkpoint(st.vchannel)
        if cp is None or not advances(st.floor, cp):
            return [], [], None
        return [rev_guard(key, st.cp_rev)], [Put(key, json.dumps(cp.to_json()))], cp

    def _applied_cp(self, st: VState, cp: Checkpoint | None, rev: int) -> None:
        if cp is not None:
            st.floor, st.cp_rev = cp, rev

    def sync(self, st: VState, *, deletes: bool = False) -> None:
        """Sync every sealed segment of `st` (in seal order; the vchannel's buffered
        deletes ride with the first), then, with deletes=True, deletes still buffered
        in a 0-row L0 segment."""
        while st.sealed:
            self._sync_segment(st, st.sealed[0])
        if deletes and st.dels is not None and st.dels.count:
            pid = st.coll.partitions[0].partition_id
            buf = self._open_segment(st, pid, st.dels.first_tt, level=L0)
            buf.sealed = "deletes"
            self._sync_segment(st, buf)

    def _sync_segment(self, st: VState, buf: SegmentBuffer) -> None:
        """Files first (durable), then ONE guarded txn: the segment Flushed and the
        vchannel's checkpoint advanced."""
        from seglake import segfiles

        c, p, s = buf.collection_id, buf.partition_id, buf.segment_id
        dels = st.dels if st.dels is not None and st.dels.count else None
        deletes = None if dels is None else dels.arrays()     # (pks, ts, partitions)
        fields = st.coll.schema
        log0 = self.meta.ids.allocate(segfiles.log_ids_needed(fields, dels is not None, buf.rows))
        row_ids = np.zeros(0, dtype=np.int64)
        if buf.rows:   # row ids (field 0): one fresh block from the id allocator
            first = self.meta.ids.allocate(buf.rows)
            row_ids = np.arange(first, first + buf.rows, dtype=np.int64)
        files = segfiles.write_segment_files(
            self.store, log0, c, p, s, fields, buf.table(st.schema), row_ids,
            buf.row_ts() if buf.rows else np.zeros(0, dtype=np.int64),
            deletes=deletes)
        self._hook("after_files", segment_id=s)
        level = L0 if not buf.rows else "L1"
        dml_ts = buf.last_tt if buf.rows else (dels.last_tt if dels else 0)
        seg = Segment(segment_id=s, collection_id=c, partition_id=p, channel=st.vchannel, state=FLUSHED,
                      num_rows=buf.rows, level=level, binlogs=files.binlogs, deltalogs=files.deltalogs,
                      statslogs=files.statslogs, start_ts=buf.first_tt or dml_ts, dml_ts=dml_ts,
                      created_ts=buf.first_tt or dml_ts,
                      delta_partitions=None if deletes is None else _named(st.coll, deletes[2]))
        key = self.meta.keys.segment(c, p, s)
        cmp, ops, cp = self._cp_ops(st, (buf, dels))
        rev = self._commit([Compare(key, "mod", "==", buf.record_rev), *cmp],
                           [Put(key, encode_struct(seg)), *ops], f"flush segment {s}", st)
        self._applied_cp(st, cp, rev)
        if buf in st.sealed:
            st.sealed.remove(buf)
        if buf.rows:
            st.part_hw[p] = max(st.part_hw.get(p, 0), buf.last_tt)
        if dels is not None:
            st.del_hw = max(st.del_hw, dels.last_tt)
            st.dels = None
            self.stats.delta_logs += 1
        if buf.rows:
            self.stats.segments += 1
        self.stats.rows += buf.rows
        self.stats.bytes += files.nbytes
        self._hook("after_commit", segment_id=s)

    def finish(self, *, flush_all: bool = False) -> None:
        """End of a run: seal everything when flush_all, else what the age and idle
        policies call for at the TSO's now (data ages in ticks, across runs); sync
        sealed segments and due delete buffers, advance idle checkpoints, remove the
        Growing records of buffers left in memory (their rows stay in the log above the
        checkpoint and are read again by the next run)."""
        now_tt = self.meta.tso.now()
        for st in list(self.states.values()):
            try:
                self._finish_state(st, flush_all, now_tt)
            except VchannelReleased:
                self._forget(st)
        self.stats.checkpoints = self.checkpoint_report()

    def _finish_state(self, st: VState, flush_all: bool, now_tt: int) -> None:
        if flush_all and not st.closed:
            self.seal_all(st, FLUSH)
        else:
            for pid, buf in list(st.growing.items()):
                reason = buf.seal_reason(self.policy, now_tt)
                if reason:
                    self._seal(st, pid, reason)
        due = st.dels is not None and (flush_all or st.dels.due(self.policy, now_tt))
        self.sync(st, deletes=due)
        cmp, ops, cp = self._cp_ops(st, ())
        if ops:
            self._applied_cp(st, cp, self._commit(cmp, ops, f"checkpoint of {st.vchannel}", st))
        for buf in list(st.growing.values()):
            key = self.meta.keys.segment(buf.collection_id, buf.partition_id, buf.segment_id)
            self._commit([Compare(key, "mod", "==", buf.record_rev)], [Delete(key)],
                         f"remove unflushed growing segment {buf.segment_id}", st)
        st.growing.clear()

    def checkpoint_report(self) -> dict:
        last = WalLog(self.meta, None, self.pchannel).state().last_tt
        out = {}
        for v, st in sorted(self.states.items()):
            cp = st.floor
            out[v] = {"message_id": None if cp is None else str(cp.message_id),
                      "time_tick": None if cp is None else cp.time_tick,
                      "lag_ms": None if cp is None else max(0, physical_ms(last) - physical_ms(cp.time_tick))}
        return out


def _named(coll, partitions) -> dict[int, str]:
    """The partition ids a delta log holds (0, every partition, needs no name) -> their
    names: Segment.delta_partitions, which every copy of the segment keeps."""
    names = {p.partition_id: p.name for p in coll.partitions}
    return {int(x): names[int(x)] for x in np.unique(np.asarray(partitions)) if int(x) in names}
