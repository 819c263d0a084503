"""The WAL flusher: turn a pchannel's log into Flushed segments, exactly once.

The package: state (per-vchannel state, run stats, the flusher term), flusher (the
Flusher), run (entry points and what the DAG asks); the checkpoint view it writes is
seglake.wal.checkpoints. This module is the public face.

Recovery (flusherimpl.go): the live vchannels of the pchannel (collections not Dropped,
vchannels not released by a drop) and each one's checkpoint
`{root}/channels/{v}/checkpoint` = {"message_id": [term, fragment, offset], "time_tick": tt}.
The scan starts at the MINIMUM checkpoint (inclusive), or at the log's start (above any
truncation) when a live vchannel has none. Growing/Sealed records a killed run left
behind are marked Dropped (they have no files; their rows are re-read from the log).

Checkpoint meaning: every message of the vchannel with time tick <= cp.time_tick is
durable in Flushed segments (or was ignored), and a scan from cp.message_id delivers
every message with a larger time tick. Positions are only taken at "safe points":
TimeTicks delivered while no transaction is open ON THAT VCHANNEL (a transaction spans
one vchannel; a committed txn's bodies get ticks just below the commit's but keep their
earlier ids). A vchannel's checkpoint = the minimum start of its buffered segments and
its delete buffer, else its last safe point; it never moves backwards (lowering raises
CheckpointError, equal is a no-op).

The row model: every row is stamped with its message's tick (field 1, the one TSO) and
a fresh row id (field 0); a Delete (and an upsert's implied delete, scoped to its
partition) is stored as (pk, ts, partition) in the delta log of the next segment synced
on its vchannel, or of a 0-row L0 segment. Visibility (seglake.visibility) reads every
delta log of the collection: where a delete is stored does not matter, and no pk column
is read to place it.

Replay never duplicates: a message at or below the vchannel's checkpoint is skipped; an
Insert at or below the last segment THIS FLUSHER wrote for its partition (Flushed, or
Dropped with files: a drop's release takes several txns past RELEASE_BATCH segments and
may be cut by a crash; restored segments carry `source` and do not count) is skipped --
segments of one partition cover consecutive tick ranges, cut only at time-tick
boundaries; a Delete at or below the highest delete tick this flusher wrote is skipped
(a duplicate would only be harmless extra bytes).

Seal policies (rows, bytes, age, idle) measure age in ticks: at every TimeTick, and at
the end of a run against the TSO's now, so data older than the policy is flushed by the
next scheduled run however small it is, and the checkpoint moves past it.

Sync of a sealed segment: insert binlogs (Parquet, one per field, with fields 0 and 1),
delta log (pk, ts, partition) and stats log (pk min/max and a bloom filter, seglake.
segfiles) are written first under fresh log ids (durable:
store.put is atomic and fsyncs); then ONE etcd transaction sets the segment Flushed and
advances the checkpoint, guarded by the flusher term (`{root}/wal/{p}/flusher`, taken
by CAS at open: a newer flusher fences this one; the loser's files are orphans for GC).
Every commit for a vchannel also
compares its collection record, re-read just before: once a drop released the vchannel
(or the collection is Dropped) nothing more is written for it and its state is dropped.
"""

from __future__ import annotations

from seglake.lifecycle.flush.state import (L0, VchannelReleased, rev_guard, acquire_term, VState, FlushStats,
                                          fold_high_water)
from seglake.lifecycle.flush.flusher import (RELEASE_BATCH, Flusher)
from seglake.lifecycle.flush.run import (flush_pchannel, pchannels_with_log, flush_partition, backlog,
                                         flush_ready, format_summary)

__all__ = ['L0', 'VchannelReleased', 'rev_guard', 'acquire_term', 'VState', 'FlushStats', 'fold_high_water', 'RELEASE_BATCH', 'Flusher', 'flush_pchannel', 'pchannels_with_log', 'flush_partition', 'backlog', 'flush_ready', 'format_summary']

from seglake.facade import seal  # noqa: E402

seal(__name__)
