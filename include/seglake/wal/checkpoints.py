"""The WAL's consumer view: where each live vchannel's flusher checkpoint stands, and
which fragments every consumer has passed (what GC may truncate). Written by the
flusher (lifecycle/flush.py), read by GC, drop, status and the page.

A checkpoint `{root}/channels/{v}/checkpoint` = {"message_id": [term, fragment, offset],
"time_tick": tt}: every message of the vchannel with time tick <= tt is durable in
Flushed segments, and a scan from message_id delivers every later one. It never moves
backwards (advances() raises CheckpointError).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from seglake.errors import CorruptRecord, SeglakeError, StateError, ValidationError
from seglake.meta import codec
from seglake.meta.catalog import DROPPED as COLL_DROPPED, pchannel_of
from seglake.meta.kv import Delete, Put, retry_on_conflict, unchanged
from seglake.storage import layout
from seglake.wal.log import WalLog, validate_pchannel
from seglake.wal.message import MessageId

RELEASED = "released_vchannels"   # collection property: vchannels a drop released (issue 11)


class CheckpointError(SeglakeError):
    """An attempt to move a vchannel checkpoint backwards."""


# -- checkpoints -------------------------------------------------------------------------
@dataclass(frozen=True)
class Checkpoint:
    message_id: MessageId
    time_tick: int

    def to_json(self) -> dict:
        return {"message_id": self.message_id.to_json(), "time_tick": self.time_tick}

    @classmethod
    def from_json(cls, d: dict) -> "Checkpoint":
        tt = d.get("time_tick")
        if isinstance(tt, bool) or not isinstance(tt, int) or tt < 0:
            raise ValidationError(f"checkpoint time tick must be a non-negative int, got {tt!r}")
        return cls(MessageId.parse(d["message_id"]), tt)


def read_checkpoint(meta, vchannel: str) -> tuple[Checkpoint | None, int]:
    """(checkpoint, mod revision of its key; 0 when absent). CorruptRecord for a record the
    flusher did not write: its message id three ints (not "7", 7.9 or 1e15 read as one)."""
    kv = meta.kv.get(meta.keys.channel_checkpoint(vchannel))
    return (None, 0) if kv is None else (parse_checkpoint(kv.value, kv.key), kv.mod_revision)


def parse_checkpoint(raw: bytes, key: str) -> Checkpoint:
    """A checkpoint record as the flusher wrote it, else CorruptRecord naming `key`."""
    d = codec.loads(raw, key)
    mid = d.get("message_id") if isinstance(d, dict) else None
    if not (isinstance(mid, list) and len(mid) == 3 and all(type(x) is int for x in mid)):
        raise CorruptRecord(f"corrupt record at {key!r}: message_id {mid!r} is not [term, fragment, offset]")
    try:
        return Checkpoint.from_json(d)
    except ValidationError as e:
        raise CorruptRecord(f"corrupt record at {key!r}: {e}") from None


def advances(old: Checkpoint | None, new: Checkpoint) -> bool:
    """True when `new` moves past `old`; False when equal; CheckpointError when lower."""
    if old is None:
        return True
    if new.message_id < old.message_id or new.time_tick < old.time_tick:
        raise CheckpointError(f"checkpoint would move backwards: {old.message_id}@{old.time_tick} -> "
                              f"{new.message_id}@{new.time_tick}")
    return (new.message_id, new.time_tick) != (old.message_id, old.time_tick)


# -- vchannels and truncation ----------------------------------------------------------
def live_vchannels(meta, pchannel: str) -> dict:
    """vchannel -> Collection for every vchannel of `pchannel` a flusher must serve
    (collection not Dropped, vchannel not released by a drop)."""
    return scan_pchannel(meta, pchannel)[0]


def scan_pchannel(meta, pchannel: str) -> tuple[dict, list[int]]:
    """One read of the catalog for a flusher of `pchannel`: (live_vchannels, the ids of the
    collections with a vchannel on it whose drop only lacks its finish: not Dropped, every
    vchannel released -- a flusher killed between its last release and the finish)."""
    out, finishable = {}, []
    for coll in meta.catalog.list(include_dropped=True):
        if coll.state == COLL_DROPPED:
            continue
        released = set(coll.properties.get(RELEASED, ()))
        mine = [v for v in coll.vchannels if pchannel_of(v) == pchannel]
        for v in mine:
            if v not in released:
                out[v] = coll
        if mine and coll.vchannels and released.issuperset(coll.vchannels):
            finishable.append(coll.collection_id)
    return out, finishable


def truncated_before(meta, pchannel: str) -> int:
    """Fragments below this number may have been truncated (1 = none): the log's `first`."""
    return WalLog(meta, None, pchannel).state().first


def truncatable_fragments(meta, pchannel: str, consumer_positions=(), floors=()) -> list[str]:
    """Keys of the committed WAL fragments of `pchannel` strictly below every live
    vchannel's checkpoint, every extra consumer position (MessageIds) and every floor
    (fragment numbers to keep from: the WAL archive's cursor + 1). Fails closed: no live
    vchannel, or one without a checkpoint, means nothing is truncatable. Pure read."""
    validate_pchannel(pchannel)
    vch = live_vchannels(meta, pchannel)
    if not vch:
        return []
    bounds = []
    for v in vch:
        cp, _ = read_checkpoint(meta, v)
        if cp is None:
            return []
        bounds.append((cp.message_id.fragment, v))
    log = WalLog(meta, None, pchannel)
    st = log.state()   # read after the checkpoints: a checkpoint names a committed message, so <= last
    for n, v in bounds:
        if n > st.last:
            raise CorruptRecord(f"WAL {pchannel}: the checkpoint of {v} names fragment {n}, past the log's last "
                                f"({st.last}): a damaged checkpoint, nothing truncated")
    bounds = [n for n, _ in bounds] + [MessageId.parse(p).fragment for p in consumer_positions]
    bounds += [int(f) for f in floors]
    below = min(bounds)
    out = [rec.key for rec in log.fragments(state=replace(st, last=min(st.last, below - 1)))]
    # format-1 holes: names a fenced writer of the old log may have left
    out += [layout.wal_fragment(pchannel, n) for n in st.holes if st.first <= n < below]
    return sorted(out)


def referenced_fragments(meta, pchannel: str) -> set[str]:
    """Keys of every committed fragment still in the log (first..last). A fragment file
    under wal/{pchannel}/ that is not among them is no one's: a producer that lost its
    write (never committed; a producer never commits a file older than
    writer.MAX_COMMIT_DELAY) or a truncated one. Raises on any read error."""
    log = WalLog(meta, None, pchannel)
    return {rec.key for rec in log.fragments()}


def record_truncation(meta, pchannel: str, fragment_keys: list[str], guards=()) -> int:
    """Persist, BEFORE deleting any of `fragment_keys`, that the log below the highest
    one's place + 1 may be gone: the log's `first` moves up (one guarded txn; producers
    racing it retry) and the index records below it are removed. `guards`: Compares on
    mod revisions the caller judged on (a changed one: StateError, nothing recorded).
    Monotonic; returns the bound."""
    keys = set(fragment_keys)
    log = WalLog(meta, None, pchannel)

    def attempt() -> int:
        for g in guards:   # what the caller judged on (the WAL archive's cursor) still holds
            kv = meta.kv.get(g.key)
            if (kv.mod_revision if kv is not None else 0) != g.value:
                raise StateError(f"{g.key} changed since the truncation of {pchannel} was judged: not truncated")
        st = log.state()
        places = [rec.n for rec in log.fragments(state=st) if rec.key in keys]
        places += [n for n in st.holes if layout.wal_fragment(pchannel, n) in keys]
        bound = max(places, default=0) + 1
        if bound <= st.first or st.kv is None:
            return st.first
        meta.kv.txn([unchanged(st.kv), *guards], [Put(log.log_key, replace(st, first=bound,
                                                                    holes=[h for h in st.holes if h >= bound]).encoded())])
        return bound
    bound = retry_on_conflict(attempt, f"record truncation of {pchannel}")
    # index records below `first` are no longer read: remove them in pages
    old = [kv.key for kv in meta.kv.range(log.frags_prefix, end=log.frag_key(bound), keys_only=True)]
    for i in range(0, len(old), 100):
        meta.kv.write([Delete(k) for k in old[i:i + 100]])
    return bound
