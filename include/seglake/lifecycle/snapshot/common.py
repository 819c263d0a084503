"""What every part of the snapshot lifecycle shares: its constants and SnapshotLost."""

from __future__ import annotations



from seglake.errors import StateError


SEGMENTS_PER_MANIFEST = 2000
METADATA_FORMAT = "seglake.snapshot.v2"
HEARTBEAT_INTERVAL = 10.0    # seconds between a writer's heartbeats
MIN_PENDING_TIMEOUT = 60.0   # GC never reclaims a PENDING create on less silence than this


class SnapshotLost(StateError):
    """This writer lost its snapshot: another attempt committed it, or GC reclaimed it as
    abandoned. Nothing of this attempt was committed; its files are orphans for GC.
    (Not a Conflict: re-reading and retrying cannot win it back.)"""
