"""What the flusher keeps per vchannel (VState), what a run reports (FlushStats), and
the flusher term taken by CAS at open (a newer flusher fences this one)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import pyarrow as pa

from seglake.errors import SeglakeError
from seglake.meta import codec, keys as keymod
from seglake.meta.kv import Compare, Put, absent, retry_on_conflict
from seglake.wal.buffer import DeleteBuffer
from seglake.wal.checkpoints import Checkpoint


L0 = "L0"                          # level of a 0-row segment that only carries a delta log


class VchannelReleased(SeglakeError):
    """The vchannel's collection released it (a drop) or is gone: nothing more is
    committed for it; the flusher forgets its state."""


def rev_guard(key: str, rev: int) -> Compare:
    return absent(key) if not rev else Compare(key, "mod", "==", rev)


# -- flusher term ----------------------------------------------------------------------------
def acquire_term(meta, pchannel: str, name: str) -> tuple[int, int]:
    """Take the pchannel's flusher term T+1 by CAS: (term, mod revision). Every commit of
    this flusher compares that revision, so a newer flusher fences it."""
    key = keymod.wal_flusher(meta.keys, pchannel)

    def attempt():
        kv = meta.kv.get(key)
        cur = 0 if kv is None else codec.number(codec.loads(kv.value, kv.key), "term", kv.key, hi=2**62, whole=True)
        rec = json.dumps({"term": cur + 1, "flusher": name, "opened_at": time.time()})
        rev = meta.kv.txn([rev_guard(key, 0 if kv is None else kv.mod_revision)], [Put(key, rec)])
        return cur + 1, rev
    return retry_on_conflict(attempt, f"take the flusher term of {pchannel}")


# -- what a replay skips ----------------------------------------------------------------------
def fold_high_water(seg, part_hw: dict, del_hw: int) -> int:
    """Fold one segment record of a vchannel into the replay floors: `part_hw` (partition
    -> highest row tick written, updated in place) and the highest delete tick (returned).
    Counts only what a flusher of this vchannel wrote: Flushed, or Dropped with files (a
    drop's release cut in several txns); a copy (`source` set) never counts. A compaction
    output carries its inputs' row high-water mark in dml_ts even when every row was
    deleted (level L1, no binlogs). THE rule of the flusher's recovery and of a
    point-in-time replay from a snapshot (seglake.lifecycle.pitr)."""
    from seglake.meta.segments import DROPPED, FLUSHED

    if seg.source is not None or not (seg.state == FLUSHED or (seg.state == DROPPED and (seg.binlogs or seg.deltalogs))):
        return del_hw
    if seg.binlogs or (seg.compacted_from and seg.level != L0 and seg.dml_ts):
        part_hw[seg.partition_id] = max(part_hw.get(seg.partition_id, 0), seg.dml_ts)
    if seg.deltalogs:
        del_hw = max(del_hw, *(b.ts_to for b in seg.deltalogs))
    return del_hw


# -- per-vchannel state ------------------------------------------------------------------------
@dataclass
class VState:
    vchannel: str
    coll: object
    schema: pa.Schema
    floor: Checkpoint | None = None
    cp_rev: int = 0
    growing: dict = field(default_factory=dict)      # partition_id -> SegmentBuffer
    sealed: list = field(default_factory=list)       # SegmentBuffer, in seal order
    dels: DeleteBuffer | None = None                 # deletes waiting for the next sync
    part_hw: dict = field(default_factory=dict)      # partition_id -> highest row tick this flusher wrote
    del_hw: int = 0                                  # highest delete tick this flusher wrote
    safe: Checkpoint | None = None                   # last safe point of this vchannel
    closed: bool = False

    @property
    def pk(self):
        return self.coll.schema.primary


@dataclass
class FlushStats:
    pchannel: str
    term: int = 0
    start: str | None = None
    messages: int = 0
    skipped: int = 0           # already covered by a checkpoint or a Flushed segment
    ignored: int = 0           # for no open vchannel state
    duplicate_creates: int = 0
    segments: int = 0
    rows: int = 0
    bytes: int = 0
    delta_logs: int = 0
    deletes: int = 0
    stale_dropped: int = 0
    seals: dict = field(default_factory=dict)
    checkpoints: dict = field(default_factory=dict)   # vchannel -> {message_id, time_tick, lag_ms}
    stopped: str = "caught_up"
    released: list = field(default_factory=list)   # vchannels released by a DropCollection
    txn_ticks: int = 0         # TimeTicks appended to end transactions expired on a quiet log
    open_txns: list = field(default_factory=list)  # transactions still open at the end of the run

    def to_json(self) -> dict:
        return dict(self.__dict__)
