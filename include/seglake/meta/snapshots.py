"""Snapshot records in etcd: one small key per snapshot; the segment list lives in
object storage (manifests + metadata JSON, see lifecycle/snapshot/).

    (absent) --begin--> PENDING --commit--> COMMITTED --drop--> DELETING --> (absent)
    PENDING (abandoned: no heartbeat) --GC claim--> DELETING --> (absent)

Every change is one transaction compared on the record's mod revision. `pins` lists the
copy jobs reading a COMMITTED snapshot, `holds` the operators' pins (pin id, expiry; each
also a key `{root}/snapshot_pins/{pin_id}`, written in the same transaction); a snapshot
with a job pin or an unexpired hold cannot start DELETING (nor expire). An expired hold
binds nothing; GC removes it with its key.

A PENDING record has a heartbeat key (keys.snapshot_alive) its writers refresh. GC may
claim a PENDING record only when the heartbeat is older than its timeout, and only by
ONE transaction comparing both the record and the heartbeat unchanged: a writer's
heartbeat or commit in between makes the claim lose, and a claim that won makes the
writer's commit lose. Nothing is deleted before the claim has won.
"""

from __future__ import annotations

import json
import logging
import math
from typing import TYPE_CHECKING, Iterator

import msgspec

from seglake.errors import Conflict, CorruptRecord, NotFound, StateError
from seglake.meta import codec
from seglake.meta.codec import Time, decode_struct, encode_struct
from seglake.meta.kv import Delete, KeyValue, Put, absent, retry_on_conflict, unchanged

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from seglake.meta import Meta

PENDING, COMMITTED, DELETING = "PENDING", "COMMITTED", "DELETING"
# PENDING -> DELETING exists too, but only through claim_abandoned (guarded by the heartbeat)
SNAPSHOT_TRANSITIONS = {PENDING: {COMMITTED}, COMMITTED: {DELETING}, DELETING: set()}


class SnapshotRecord(msgspec.Struct, frozen=True, kw_only=True):
    snapshot_id: int
    collection_id: int
    collection_name: str
    db: str
    name: str
    state: str
    created_at: Time                  # unix seconds, when PENDING was written
    description: str = ""
    owner: str = ""                   # who may resume a PENDING create (a DAG run id)
    expires_at: Time | None = None    # TTL; None lives until dropped
    consistent_ts: int = 0            # hybrid timestamp the captured segment set is consistent at
    revision: int = 0                 # etcd revision the segment records were read at
    location: str | None = None       # metadata JSON key, set at commit
    committed_at: Time | None = None
    segments: int = 0
    rows: int = 0
    bytes: int = 0
    files: int = 0
    partitions: int = 0
    manifests: int = 0
    pins: tuple[int, ...] = ()        # copy jobs reading this snapshot
    holds: tuple[tuple[int, Time], ...] = ()   # operators' pins: (pin id, expires_at unix s)
    error: str | None = None          # last failure of a PENDING create
    failed: bool = False              # the create gave up (its DAG run failed): waiters stop
    requested_revision: int = 0       # etcd revision when the snapshot was requested
    attempt: int = 0                  # the write attempt whose manifests were committed
    metadata_sha256: str | None = None  # of the committed metadata JSON
    # each vchannel's log position at the capture and what of the log the snapshot holds
    # (lifecycle/snapshot/collect.positions); None for a snapshot taken before positions
    # were recorded (or imported): no point-in-time restore starts from it
    positions: dict[str, dict] | None = None

    def pinned_by(self, now: float) -> list[str]:
        """What keeps this snapshot from being dropped at `now`: 'copy job N' for every copy
        job reading it, 'pin N' for every unexpired operator pin."""
        return [f"copy job {j}" for j in self.pins] + [f"pin {p}" for p, exp in self.holds if exp > now]

    def replace(self, **changes) -> "SnapshotRecord":
        return msgspec.structs.replace(self, **changes)

    def to_json(self) -> dict:
        return msgspec.to_builtins(self)


class Snapshots:
    def __init__(self, meta: "Meta"):
        self.kv = meta.kv
        self.keys = meta.keys

    def key(self, collection_id: int, name: str) -> str:
        return self.keys.snapshot(collection_id, name)

    def get(self, collection_id: int, name: str) -> tuple[SnapshotRecord, KeyValue]:
        kv = self.kv.get(self.key(collection_id, name))
        if kv is None:
            raise NotFound(f"snapshot {name!r} not found in collection id {collection_id}")
        return decode_struct(kv.value, SnapshotRecord, kv.key), kv

    def find(self, collection_id: int, name: str) -> SnapshotRecord | None:
        try:
            return self.get(collection_id, name)[0]
        except NotFound:
            return None

    def create_pending(self, rec: SnapshotRecord) -> SnapshotRecord:
        """Create-if-absent on (collection, name), with its first heartbeat: of two
        concurrent creates one wins."""
        key = self.key(rec.collection_id, rec.name)
        ttl = [] if rec.expires_at is None else [Put(self.keys.snapshot_ttl_lease(rec.snapshot_id), b"",
                                                     self._lease(rec.expires_at - rec.created_at))]
        self.kv.txn([absent(key)], [Put(key, encode_struct(rec)),
                                    Put(self.alive_key(rec), _beat(rec.created_at, "begin"))] + ttl,
                    reason=f"snapshot {rec.name!r} already exists for collection {rec.collection_name!r}")
        return rec

    # -- heartbeat of a PENDING record ------------------------------------------------------
    def alive_key(self, rec: SnapshotRecord) -> str:
        return self.keys.snapshot_alive(rec.collection_id, rec.snapshot_id)

    def last_beat(self, rec: SnapshotRecord) -> tuple[float, KeyValue | None]:
        """(when a writer last proved alive, the heartbeat key as read). A record without
        a heartbeat key counts from its creation; one whose key cannot be read (NaN, no
        time, not JSON) counts as beating (inf): its writer may be alive, so neither GC nor
        an import's takeover claims it (fail closed; named in the log, dropped by hand)."""
        kv = self.kv.get(self.alive_key(rec))
        if kv is None:
            return rec.created_at, None
        try:
            return codec.moment(codec.loads(kv.value, kv.key), "at", kv.key), kv
        except ValueError as e:
            log.warning("%s: the writer's heartbeat cannot be read, it counts as alive", e)
            return math.inf, kv

    def heartbeat(self, rec: SnapshotRecord, now: float, by: str = "") -> SnapshotRecord:
        """Refresh the heartbeat of OUR PENDING record, guarded by the record being
        unchanged. Raises StateError once it is no longer ours and PENDING (committed,
        claimed by GC, dropped, replaced), so a writer learns at once that it lost."""
        def attempt() -> SnapshotRecord:
            cur, kv = self._ours(rec)
            if cur.state == PENDING:
                self.kv.txn([unchanged(kv)], [Put(self.alive_key(cur), _beat(now, by))])
            return cur
        return retry_on_conflict(attempt, f"heartbeat of snapshot {rec.name!r}")

    def _ours(self, rec: SnapshotRecord) -> tuple[SnapshotRecord, KeyValue]:
        try:
            cur, kv = self.get(rec.collection_id, rec.name)
        except NotFound:
            raise StateError(f"snapshot {rec.name!r} (id {rec.snapshot_id}) no longer exists: it was "
                             "reclaimed as abandoned or dropped while being written") from None
        if cur.snapshot_id != rec.snapshot_id:
            raise StateError(f"snapshot {rec.name!r} was replaced (id {rec.snapshot_id} -> {cur.snapshot_id}) "
                             "while being written")
        if cur.state == DELETING:
            raise StateError(f"snapshot {rec.name!r} (id {rec.snapshot_id}) is DELETING: it was reclaimed "
                             "as abandoned (no heartbeat within the pending timeout) or dropped")
        return cur, kv

    def commit(self, read: KeyValue, new: SnapshotRecord) -> SnapshotRecord:
        """PENDING -> COMMITTED in one transaction compared on the record as read; the
        heartbeat goes with it. Conflict if anyone (GC's claim, another attempt) moved first."""
        self.kv.txn([unchanged(read)], [Put(read.key, encode_struct(new)), Delete(self.alive_key(new))],
                    reason=f"snapshot {new.name!r} changed while it was being committed")
        return new

    def claim_abandoned(self, rec: SnapshotRecord, timeout: float, now: float) -> SnapshotRecord | None:
        """PENDING -> DELETING when no writer has beaten for `timeout` seconds: ONE txn
        comparing the record and the heartbeat unchanged. None when the record is not an
        abandoned PENDING one, or when a writer moved in between (it is alive)."""
        try:
            cur, kv = self.get(rec.collection_id, rec.name)
        except NotFound:
            return None
        if cur.snapshot_id != rec.snapshot_id or cur.state != PENDING:
            return None
        at, beat = self.last_beat(cur)
        if not now - at > timeout:
            return None
        guard = [unchanged(kv), unchanged(beat) if beat is not None else absent(self.alive_key(cur))]
        new = cur.replace(state=DELETING, error=f"reclaimed by GC: no writer heartbeat for {now - at:.0f}s "
                                                f"(timeout {timeout:g}s)")
        try:
            self.kv.txn(guard, [Put(kv.key, encode_struct(new)), Delete(self.alive_key(cur))])
        except Conflict:
            return None
        return new

    def update(self, read: KeyValue, new: SnapshotRecord, reason: str | None = None) -> SnapshotRecord:
        """Replace the record read as `read`; Conflict if anyone changed it since."""
        self.kv.txn([unchanged(read)], [Put(read.key, encode_struct(new))], reason=reason)
        return new

    def transition(self, collection_id: int, name: str, to_state: str, **changes) -> SnapshotRecord:
        rec, kv = self.get(collection_id, name)
        if rec.state == to_state:
            return rec
        if to_state not in SNAPSHOT_TRANSITIONS[rec.state]:
            raise StateError(f"snapshot {name!r} is {rec.state}; {rec.state} -> {to_state} is not allowed")
        return self.update(kv, rec.replace(state=to_state, **changes))

    def remove(self, read: KeyValue, rec: SnapshotRecord | None = None) -> None:
        """Delete the record read as `read` (and its heartbeat and TTL lease keys, if `rec` is given)."""
        self.kv.txn([unchanged(read)], [Delete(read.key)] + ([Delete(self.alive_key(rec)),
                                                              Delete(self.keys.snapshot_ttl_lease(rec.snapshot_id))]
                                                             if rec else []))

    def expired(self, rec: SnapshotRecord, now: float) -> bool:
        """Has `rec`'s TTL run out at `now`? Only when `now` is past its expiry AND its TTL
        lease is gone: etcd's server times the lease, so a judging host whose clock jumped
        ahead never ends a snapshot early. A snapshot made before TTL leases (no key) is
        judged by the clock alone."""
        return (rec.expires_at is not None and rec.expires_at < now
                and self.kv.get(self.keys.snapshot_ttl_lease(rec.snapshot_id)) is None)

    def list(self, collection_id: int | None = None) -> Iterator[SnapshotRecord]:
        for kv in self.kv.range(self.keys.snapshots_prefix(collection_id)):
            yield decode_struct(kv.value, SnapshotRecord, kv.key)

    def pin(self, collection_id: int, name: str, job_id: int) -> SnapshotRecord:
        """Mark a COMMITTED snapshot as read by a copy job (idempotent)."""
        def attempt() -> SnapshotRecord:
            rec, kv = self.get(collection_id, name)
            if rec.state != COMMITTED:
                raise StateError(f"snapshot {name!r} is {rec.state}; only a COMMITTED snapshot can be restored")
            if job_id in rec.pins:
                return rec
            return self.update(kv, rec.replace(pins=(*rec.pins, job_id)))
        return retry_on_conflict(attempt, f"pin snapshot {name!r}")

    def unpin(self, collection_id: int, name: str, job_id: int) -> None:
        """Idempotent: a missing snapshot or a job that holds no pin is fine."""
        def attempt() -> None:
            try:
                rec, kv = self.get(collection_id, name)
            except NotFound:
                return
            if job_id in rec.pins:
                self.update(kv, rec.replace(pins=tuple(p for p in rec.pins if p != job_id)))
        retry_on_conflict(attempt, f"unpin snapshot {name!r}")


    # -- operators' pins (holds) -----------------------------------------------------------
    def hold(self, collection_id: int, name: str, pin_id: int, expires_at: float, now: float,
             by: str = "") -> SnapshotRecord:
        """Pin a COMMITTED snapshot until `expires_at`: ONE txn comparing the record, writing
        it with the hold and the pin's own key (absent before: a pin id is used once)."""
        pin_key = self.keys.snapshot_pin(pin_id)

        def attempt() -> SnapshotRecord:
            rec, kv = self.get(collection_id, name)
            if any(h[0] == pin_id for h in rec.holds):   # an earlier attempt applied (its answer lost)
                return rec
            if rec.state != COMMITTED:
                raise StateError(f"snapshot {name!r} is {rec.state}; only a COMMITTED snapshot can be pinned")
            holds = tuple(h for h in rec.holds if self._live(h, now)) + ((pin_id, expires_at),)
            new = rec.replace(holds=holds)
            doc = {"pin_id": pin_id, "collection_id": collection_id, "collection": rec.collection_name,
                   "db": rec.db, "snapshot": name, "snapshot_id": rec.snapshot_id, "created_at": now,
                   "expires_at": expires_at, "by": by}
            self.kv.txn([unchanged(kv), absent(pin_key)], [Put(kv.key, encode_struct(new)),
                                                            Put(pin_key, json.dumps(doc)),
                                                            self._lease_put(pin_id, expires_at - now)])
            return new
        return retry_on_conflict(attempt, f"pin snapshot {name!r}")

    def pin_record(self, pin_id: int) -> dict | None:
        kv = self.kv.get(self.keys.snapshot_pin(pin_id))
        return None if kv is None else _pin_doc(kv)

    def pin_records(self) -> list[dict]:
        """Every pin record; a damaged one is {"pin_id", "key", "unreadable": why}: listed as
        such, never released as expired (the snapshot record's own hold ends by its time)."""
        return [_pin_doc(kv) for kv in self.kv.range(self.keys.snapshot_pins_prefix())]

    def release(self, pin_id: int) -> dict:
        """Remove pin `pin_id` (its key and its hold on the snapshot, one txn). NotFound
        for an id that is not (or no longer) a pin. A damaged pin record (GC keeps it and
        the hold it names, never judging it expired) is released too: the operator names
        the id, and the hold carrying it is found on the snapshot records."""
        pin_key = self.keys.snapshot_pin(pin_id)

        def attempt() -> dict:
            pkv = self.kv.get(pin_key)
            if pkv is None:
                raise NotFound(f"pin {pin_id} not found (never made, already unpinned, or expired and removed "
                               f"by GC); `seglake snapshots pins` lists the pins")
            try:
                doc = _pin_doc(pkv, strict=True)
            except ValueError:
                return self._release_damaged(pin_id, pkv)
            skv = self.kv.get(self.key(doc["collection_id"], doc["snapshot"]))
            rec = None if skv is None else decode_struct(skv.value, SnapshotRecord, skv.key)
            gone = [Delete(pin_key), Delete(self.keys.snapshot_pin_lease(pin_id))]
            if rec is None or rec.snapshot_id != doc["snapshot_id"]:   # the snapshot is gone (or another)
                self.kv.txn([unchanged(pkv)], gone)
            else:
                new = rec.replace(holds=tuple(h for h in rec.holds if h[0] != pin_id))
                self.kv.txn([unchanged(pkv), unchanged(skv)], [*gone, Put(skv.key, encode_struct(new))])
            return doc
        return retry_on_conflict(attempt, f"unpin {pin_id}")

    def _release_damaged(self, pin_id: int, pkv: KeyValue) -> dict:
        """release() of a pin whose record cannot be read: its keys and every hold carrying
        `pin_id` (a pin id is allocated once: one snapshot at most) go in one txn, guarded
        by each record read. A damaged snapshot record is left whole, its holds with it."""
        compares, ops = [unchanged(pkv)], [Delete(pkv.key), Delete(self.keys.snapshot_pin_lease(pin_id))]
        doc = {"pin_id": pin_id, "collection": "", "snapshot": "", "expires_at": 0.0,
               "unreadable": _pin_doc(pkv)["unreadable"]}
        for skv in self.kv.range(self.keys.snapshots_prefix(None)):
            try:
                rec = decode_struct(skv.value, SnapshotRecord, skv.key)
            except ValueError:
                continue
            held = [h for h in rec.holds if h[0] == pin_id]
            if held:
                compares.append(unchanged(skv))
                ops.append(Put(skv.key, encode_struct(rec.replace(holds=tuple(h for h in rec.holds
                                                                               if h[0] != pin_id)))))
                doc.update(collection=rec.collection_name, db=rec.db, collection_id=rec.collection_id,
                           snapshot=rec.name, snapshot_id=rec.snapshot_id, expires_at=held[0][1])
        self.kv.txn(compares, ops)
        log.warning("pin %d: its record %s was unreadable (%s); released, with its hold on snapshot %r",
                    pin_id, pkv.key, doc["unreadable"], doc["snapshot"] or "(none found)")
        return doc

    def extend_hold(self, pin_id: int, expires_at: float) -> dict:
        """Move pin `pin_id`'s expiry to `expires_at` (a lease renewed), its key and its
        hold on the snapshot in one txn. NotFound when it is no longer a pin (released,
        or expired and removed): a renewal never brings a pin back."""
        pin_key = self.keys.snapshot_pin(pin_id)

        def attempt() -> dict:
            pkv = self.kv.get(pin_key)
            if pkv is None:
                raise NotFound(f"pin {pin_id} not found (released, or expired and removed)")
            doc = {**_pin_doc(pkv, strict=True), "expires_at": expires_at}
            skv = self.kv.get(self.key(doc["collection_id"], doc["snapshot"]))
            rec = None if skv is None else decode_struct(skv.value, SnapshotRecord, skv.key)
            if rec is None or rec.snapshot_id != doc["snapshot_id"] or all(h[0] != pin_id for h in rec.holds):
                raise NotFound(f"pin {pin_id}: its snapshot no longer carries it")
            new = rec.replace(holds=tuple((h[0], expires_at) if h[0] == pin_id else h for h in rec.holds))
            import time as _time
            self.kv.txn([unchanged(pkv), unchanged(skv)], [Put(pin_key, json.dumps(doc)),
                                                            Put(skv.key, encode_struct(new)),
                                                            self._lease_put(pin_id, expires_at - _time.time())])
            return doc
        return retry_on_conflict(attempt, f"renew pin {pin_id}")

    # a pin's lease: etcd's server times it, so a pin stays live while its lease key exists
    # whatever the judging host's clock says (one jumped +2 h dropped a snapshot pinned for
    # another hour: fault adversary s22); a pin made before leases is judged by the clock alone
    def _lease_put(self, pin_id: int, ttl: float) -> Put:
        return Put(self.keys.snapshot_pin_lease(pin_id), b"", self._lease(ttl))

    def _lease(self, ttl: float) -> int:
        """A fresh etcd lease of `ttl` seconds (whole seconds, rounded up; at least 1)."""
        return self.kv.grant_lease(max(1, min(int(math.ceil(ttl)), 9_000_000_000)))

    def _live(self, hold: tuple[int, float], now: float) -> bool:
        return hold[1] > now or self.kv.get(self.keys.snapshot_pin_lease(hold[0])) is not None

    def pinned_by(self, rec: SnapshotRecord, now: float) -> list[str]:
        """rec.pinned_by(now), a pin also counted while its lease lives (etcd's clock)."""
        return [f"copy job {j}" for j in rec.pins] + [f"pin {h[0]}" for h in rec.holds if self._live(h, now)]

    def remove_expired_holds(self, now: float) -> int:
        """Expired pins vanish: every pin key past its expiry is released (and any hold a
        record still carries past its expiry is dropped with it). Returns how many.
        Expiry is judged by the wall clock and the pin's etcd lease: a `now` ahead of
        either never ends a live pin."""
        import time as _time
        now = min(now, _time.time())
        n = 0
        for doc in self.pin_records():
            if "unreadable" not in doc and doc["expires_at"] <= now and not self._live((doc["pin_id"], doc["expires_at"]), now):
                try:
                    self.release(doc["pin_id"])
                    n += 1
                except NotFound:
                    pass
        for rec in list(self.list()):
            if any(exp <= now for _, exp in rec.holds):
                def attempt(rec=rec):
                    cur, kv = self.get(rec.collection_id, rec.name)
                    keep = tuple(h for h in cur.holds if self._live(h, now))
                    if keep != cur.holds:
                        self.update(kv, cur.replace(holds=keep))
                try:
                    retry_on_conflict(attempt, f"expire pins of snapshot {rec.name!r}")
                except NotFound:
                    pass
        return n


def _pin_doc(kv: KeyValue, strict: bool = False) -> dict:
    """A pin record as written by hold(): ids, names and finite times, else unreadable
    (CorruptRecord when `strict`: an unpin or renewal of it is refused, naming the key)."""
    try:
        doc = codec.loads(kv.value, kv.key)
        for f in ("pin_id", "collection_id", "snapshot_id"):
            codec.number(doc, f, kv.key, whole=True)
        codec.moment(doc, "created_at", kv.key), codec.moment(doc, "expires_at", kv.key)
        if not all(isinstance(doc.get(f), str) for f in ("collection", "db", "snapshot")):
            raise CorruptRecord(f"corrupt record at {kv.key!r}: collection, db or snapshot is not a name")
        return doc
    except ValueError as e:
        if strict:
            raise
        tail = kv.key.rsplit("/", 1)[-1]
        return {"pin_id": int(tail) if tail.isdigit() else tail, "key": kv.key, "unreadable": str(e)}


def _beat(at: float, by: str) -> str:
    return json.dumps({"at": at, "by": by})
