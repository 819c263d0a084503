"""Snapshots of a collection: create (two-phase), drop, list, describe, and the
reference index garbage collection must respect.

The package, one concern per module (named so that none shadows a function): common
(constants, SnapshotLost), creation (begin, create), collect (capture the segments at one
revision), alive (the heartbeat), write (an attempt's manifests and metadata, the
commit), read (address, list, describe, read back), removal (drop, reclaim, purge), pins,
refs (THE reference index). This module is the public face:
`from seglake.lifecycle import snapshot; snapshot.create(...)`.

    (absent) --begin--> PENDING --capture, write attempt's manifests + metadata, commit--> COMMITTED
    COMMITTED --drop (no pins)--> DELETING --remove manifests, metadata--> (absent)
    PENDING (no heartbeat for snapshot_pending_timeout) --GC claim--> DELETING --> (absent)

- begin: validates, notes the etcd revision of the request, writes PENDING (create-if-
  absent on the name) with a first heartbeat. While PENDING, GC skips the collection.
  A create retried by the same owner resumes its record.
- alive: every writer (inline, Spark driver) and the DAG's wait refresh the heartbeat
  (KeepAlive); GC reclaims only a PENDING record whose heartbeat is older than its
  timeout, by a guarded PENDING -> DELETING that must win BEFORE any file is removed.
- capture: every Flushed segment at ONE etcd revision at or after the request, so every
  segment flushed before the snapshot was requested, by any process, is in it.
- write: each attempt (a fresh id) writes its own manifests and metadata JSON under its
  own names (layout.snapshot_attempt_*); racing attempts never share a file.
- commit: PENDING -> COMMITTED naming the winning attempt's metadata (and its sha256),
  one compare-guarded txn; a loser (other attempt, GC's claim) gets SnapshotLost and its
  files are orphans for GC.
- read: the metadata is checked against the record (sha256, format, counts) and every
  manifest against the metadata (sha256, record count, version): fail closed, naming it.
- drop: COMMITTED -> DELETING -> manifests, metadata removed -> record removed;
  resumable from DELETING; refused while a restore job pins the snapshot.
- address: by collection name, also after the collection was dropped (the record keeps
  its name; the metadata keeps schema and partitions), or by collection id.
"""

from __future__ import annotations

from seglake.lifecycle.snapshot.common import (SEGMENTS_PER_MANIFEST, METADATA_FORMAT, HEARTBEAT_INTERVAL,
                                               MIN_PENDING_TIMEOUT, SnapshotLost)
from seglake.lifecycle.snapshot.alive import (KeepAlive, keep_alive_status)
from seglake.lifecycle.snapshot.collect import (capture_raw, capture, group, positions)
from seglake.lifecycle.snapshot.write import (ManifestWritten, write_manifest, write_raw_group,
                                              write_manifest_groups, collection_doc, finish, record_failure,
                                              PARALLEL_MIN_SEGMENTS, GroupWriter, write_attempt, write_all)
from seglake.lifecycle.snapshot.creation import (begin, create)
from seglake.lifecycle.snapshot.read import (info, resolve, list_snapshots, read_metadata, read_entries,
                                             read_manifest, describe, read_segments)
from seglake.lifecycle.snapshot.removal import (snapshot_files, remove_files_and_record, reclaim_abandoned,
                                                purge, drop, drop_by_id)
from seglake.lifecycle.snapshot.pins import (pin, unpin, list_pins)
from seglake.lifecycle.snapshot.refs import (RefIndex, own_refs, manifest_refs)

__all__ = ['SEGMENTS_PER_MANIFEST', 'METADATA_FORMAT', 'HEARTBEAT_INTERVAL', 'MIN_PENDING_TIMEOUT', 'SnapshotLost', 'KeepAlive', 'keep_alive_status', 'capture_raw', 'capture', 'group', 'positions', 'ManifestWritten', 'write_manifest', 'write_raw_group', 'write_manifest_groups', 'collection_doc', 'finish', 'record_failure', 'PARALLEL_MIN_SEGMENTS', 'GroupWriter', 'write_attempt', 'write_all', 'begin', 'create', 'info', 'resolve', 'list_snapshots', 'read_metadata', 'read_entries', 'read_manifest', 'describe', 'read_segments', 'snapshot_files', 'remove_files_and_record', 'reclaim_abandoned', 'purge', 'drop', 'drop_by_id', 'pin', 'unpin', 'list_pins', 'RefIndex', 'own_refs', 'manifest_refs']

from seglake.facade import seal  # noqa: E402

seal(__name__)
