"""Every etcd key seglake writes, built here and nowhere else.

Layout under the configurable root (default `seglake`):

    {root}/catalog/collections/{collection_id}
    {root}/catalog/names/{db}/{name}                 -> collection_id
    {root}/segments/{collection_id}/{partition_id}/{segment_id}
    {root}/snapshots/{collection_id}/{name}
    {root}/snapshot_alive/{collection_id}/{snapshot_id}   writer heartbeat of a PENDING snapshot
    {root}/snapshot_pins/{pin_id}                    an operator's pin of a snapshot (TTL)
    {root}/snapshot_pin_leases/{pin_id}              the pin's twin on an etcd lease (etcd's clock)
    {root}/snapshot_ttl_leases/{snapshot_id}         a snapshot TTL's twin on an etcd lease
    {root}/retention/{collection_id}                 a collection's snapshot retention policy
    {root}/backup/{exports|verify}/{db}/{collection}/{bundle}   what was exported / verified
    {root}/backup/imports/{bundle_uid}               an import of a bundle (its ids: resumable)
    {root}/copy/jobs/{job_id}    {root}/copy/tasks/{job_id}/{task_id}
    {root}/copy/task_states/{job_id}/{Completed|Failed}/{task_id}   a task's terminal state (counted by waits)
    {root}/channels/{vchannel}/checkpoint   {root}/wal/{pchannel}/term
    {root}/alloc/id   {root}/alloc/tso      {root}/gc/...
    {root}/txn/{write_id}                            write markers (leased, see meta/kv.py)
    {root}/compaction/units/{collection_id}/{unit_id}   a compaction unit's ids and outcome
    {root}/compaction/runs/{collection_id}           the last compaction run's summary
    {root}/pitr/windows/{collection_id}              a collection's point-in-time window
    {root}/pitr/replays/{target_id}/{vchannel}       a point-in-time replay's done marker
    {root}/site                                      this root's site id (an archive's name for it)
    {root}/archive/{pchannel}                        the WAL archive's cursor: fragments shipped
    {root}/compaction/policies/{collection_id}       a collection's compaction policy (overrides config)
    {root}/compaction/history/{collection_id}/{t}    a finished compaction run (t: ms, zero-padded)
    {root}/milvus/restores/{restore_id}              a restore into a Milvus server (its state)
    {root}/milvus/restore_segments/{restore_id}/{unit_id}   one import unit's task (its first segment id)
    {root}/milvus/restore_runs/{restore_id}          the run that holds a restore (leased: one at a time)
    {root}/milvus/sources/{source}                   a registered Milvus (where, which collections, retention)
    {root}/milvus/captures/{db}/{collection}/{bundle}   what a capture of a Milvus collection committed
    {root}/milvus/pins/{db}/{collection}/{bundle}    an operator's pin of a capture bundle (TTL)

Prefix builders end with '/', so the prefix of collection 1 never matches 10.
Ids are decimal integers; names are validated before they reach a key.
"""

from __future__ import annotations

from dataclasses import dataclass


def _id(value: int) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"id must be a non-negative int, got {value!r}")
    return str(value)


def _seg(value: str) -> str:
    if not value or "/" in value:
        raise ValueError(f"key segment must be non-empty and contain no '/': {value!r}")
    return value


@dataclass(frozen=True)
class Keys:
    root: str = "seglake"

    def __post_init__(self) -> None:
        r = self.root.strip("/")
        if not r:
            raise ValueError("etcd root prefix must not be empty")
        object.__setattr__(self, "root", r)

    @property
    def prefix(self) -> str:
        return f"{self.root}/"

    def dropped_by_run(self, run_id: str, db: str, collection: str, name: str) -> str:
        """A snapshot_drop run's intent (leased): a clear of that run finds its snapshot already
        dropped by itself, not "not found" (atk s20 F7)."""
        import hashlib

        run = hashlib.sha256(run_id.encode()).hexdigest()[:32]   # a run id has ':' and '+': keep the key plain
        return f"{self.root}/runs/snapshot_drop/{run}/{db}/{collection}/{name}"

    def run_intent(self, dag_id: str, run_id: str, db: str, name: str) -> str:
        """What a DAG run began on (leased): a clear of that run acts on the same object, never on
        a later one that took the name (atk s20 F10)."""
        import hashlib

        run = hashlib.sha256(run_id.encode()).hexdigest()[:32]
        return f"{self.root}/runs/{dag_id}/{run}/{db}/{name}"

    # catalog
    def collection(self, collection_id: int) -> str:
        return f"{self.root}/catalog/collections/{_id(collection_id)}"

    def collections_prefix(self) -> str:
        return f"{self.root}/catalog/collections/"

    def collection_name(self, db: str, name: str) -> str:
        return f"{self.root}/catalog/names/{_seg(db)}/{_seg(name)}"

    def collection_names_prefix(self, db: str | None = None) -> str:
        base = f"{self.root}/catalog/names/"
        return base if db is None else f"{base}{_seg(db)}/"

    # segments
    def segment(self, collection_id: int, partition_id: int, segment_id: int) -> str:
        return (
            f"{self.root}/segments/{_id(collection_id)}/{_id(partition_id)}/{_id(segment_id)}"
        )

    def segments_prefix(self, collection_id: int | None = None, partition_id: int | None = None) -> str:
        base = f"{self.root}/segments/"
        if collection_id is None:
            return base
        base += f"{_id(collection_id)}/"
        return base if partition_id is None else f"{base}{_id(partition_id)}/"

    # snapshots
    def snapshot(self, collection_id: int, name: str) -> str:
        return f"{self.root}/snapshots/{_id(collection_id)}/{_seg(name)}"

    def snapshots_prefix(self, collection_id: int | None = None) -> str:
        base = f"{self.root}/snapshots/"
        return base if collection_id is None else f"{base}{_id(collection_id)}/"

    def snapshot_pin(self, pin_id: int) -> str:
        """An operator's pin (`seglake snapshots pin`): which snapshot, until when. Outside
        snapshots/ (the pin's effect is its id in the snapshot record's `holds`)."""
        return f"{self.root}/snapshot_pins/{_id(pin_id)}"

    def snapshot_pins_prefix(self) -> str:
        return f"{self.root}/snapshot_pins/"

    def snapshot_pin_lease(self, pin_id: int) -> str:
        """A pin's twin on an etcd lease of its TTL: while it exists the pin is live, whatever
        the clock of the host judging it says (etcd's server times the lease)."""
        return f"{self.root}/snapshot_pin_leases/{_id(pin_id)}"

    def snapshot_ttl_lease(self, snapshot_id: int) -> str:
        """A snapshot's TTL twin on an etcd lease of that TTL: while it exists the snapshot
        has not expired, whatever the clock of the host judging it says."""
        return f"{self.root}/snapshot_ttl_leases/{_id(snapshot_id)}"

    def retention(self, collection_id: int) -> str:
        return f"{self.root}/retention/{_id(collection_id)}"

    def retention_prefix(self) -> str:
        return f"{self.root}/retention/"

    def snapshot_alive(self, collection_id: int, snapshot_id: int) -> str:
        """Heartbeat of a PENDING snapshot's writer (outside snapshots/: a heartbeat is
        not a snapshot change and must not make GC reload the snapshot references)."""
        return f"{self.root}/snapshot_alive/{_id(collection_id)}/{_id(snapshot_id)}"

    # backup (lifecycle/backup): what this store exported, imported and verified
    def backup_export(self, db: str, collection: str, bundle: str) -> str:
        return f"{self.root}/backup/exports/{_seg(db)}/{_seg(collection)}/{_seg(bundle)}"

    def backup_exports_prefix(self) -> str:
        return f"{self.root}/backup/exports/"

    def backup_import(self, bundle_uid: str) -> str:
        """One import of a bundle (its ids, so a re-run resumes it), by the bundle's uid."""
        return f"{self.root}/backup/imports/{_seg(bundle_uid)}"

    def backup_imports_prefix(self) -> str:
        return f"{self.root}/backup/imports/"

    def backup_verify(self, db: str, collection: str, bundle: str) -> str:
        return f"{self.root}/backup/verify/{_seg(db)}/{_seg(collection)}/{_seg(bundle)}"

    def backup_verify_prefix(self) -> str:
        return f"{self.root}/backup/verify/"

    def backup_throttle(self, token: str) -> str:
        """The shared rate-limit clock of one export or import run (seglake.throttle)."""
        return f"{self.root}/backup/throttle/{_seg(token)}"

    # copy jobs
    def copy_job(self, job_id: int) -> str:
        return f"{self.root}/copy/jobs/{_id(job_id)}"

    def copy_jobs_prefix(self) -> str:
        return f"{self.root}/copy/jobs/"

    def run_throttle_prefixes(self) -> tuple[str, str]:
        """Where the runs' rate-limit clocks are (copy jobs; exports, imports, captures)."""
        return f"{self.root}/copy/throttle/", f"{self.root}/backup/throttle/"

    def copy_throttle(self, job_id: int) -> str:
        """The job's shared rate-limit clock (seglake.throttle)."""
        return f"{self.root}/copy/throttle/{_id(job_id)}"

    def copy_store_limit(self) -> str:
        """The store-wide copy rate limit, shared by ALL copy work of this store (seglake.throttle)."""
        return f"{self.root}/copy/store_limit"

    def copy_store_throttle(self) -> str:
        """The store-wide limit's shared rate-limit clock (seglake.throttle)."""
        return f"{self.root}/copy/store_throttle"

    def copy_task(self, job_id: int, task_id: int) -> str:
        return f"{self.root}/copy/tasks/{_id(job_id)}/{_id(task_id)}"

    def copy_tasks_prefix(self, job_id: int) -> str:
        return f"{self.root}/copy/tasks/{_id(job_id)}/"

    def copy_task_state(self, job_id: int, state: str, task_id: int) -> str:
        return f"{self.copy_task_states_prefix(job_id, state)}{_id(task_id)}"

    def copy_task_states_prefix(self, job_id: int, state: str | None = None) -> str:
        base = f"{self.root}/copy/task_states/{_id(job_id)}/"
        return base if state is None else f"{base}{_seg(state)}/"

    # channels and WAL
    def channel_checkpoint(self, vchannel: str) -> str:
        return f"{self.root}/channels/{_seg(vchannel)}/checkpoint"

    def wal_term(self, pchannel: str) -> str:
        return f"{self.root}/wal/{_seg(pchannel)}/term"

    # allocation
    def alloc_id(self) -> str:
        return f"{self.root}/alloc/id"

    def alloc_tso(self) -> str:
        return f"{self.root}/alloc/tso"

    # write markers of exactly-once guarded transactions (meta/kv.py), leased
    def txn_marker(self, write_id: str) -> str:
        return f"{self.root}/txn/{_seg(write_id)}"

    # gc
    def compaction_unit(self, collection_id: int, unit_id: str) -> str:
        return f"{self.root}/compaction/units/{_id(collection_id)}/{_seg(unit_id)}"

    def compaction_units_prefix(self, collection_id: int | None = None) -> str:
        base = f"{self.root}/compaction/units/"
        return base if collection_id is None else f"{base}{_id(collection_id)}/"

    def compaction_run(self, collection_id: int) -> str:
        return f"{self.root}/compaction/runs/{_id(collection_id)}"

    # milvus (seglake.milvus.restore): a restore of a bundle into a Milvus server
    def milvus_restore(self, restore_id: str) -> str:
        return f"{self.root}/milvus/restores/{_seg(restore_id)}"

    def milvus_restores_prefix(self) -> str:
        return f"{self.root}/milvus/restores/"

    def milvus_restore_segment(self, restore_id: str, segment_id: int) -> str:
        return f"{self.root}/milvus/restore_segments/{_seg(restore_id)}/{_id(segment_id)}"

    def milvus_restore_segments_prefix(self, restore_id: str) -> str:
        return f"{self.root}/milvus/restore_segments/{_seg(restore_id)}/"

    def milvus_restore_run(self, restore_id: str) -> str:
        return f"{self.root}/milvus/restore_runs/{_seg(restore_id)}"

    # milvus (seglake.milvus.sources): registered sources, their captures, pins of capture bundles
    def milvus_source(self, name: str) -> str:
        return f"{self.root}/milvus/sources/{_seg(name)}"

    def milvus_sources_prefix(self) -> str:
        return f"{self.root}/milvus/sources/"

    def milvus_capture(self, db: str, collection: str, bundle: str) -> str:
        return f"{self.root}/milvus/captures/{_seg(db)}/{_seg(collection)}/{_seg(bundle)}"

    def milvus_captures_prefix(self) -> str:
        return f"{self.root}/milvus/captures/"

    def milvus_pin(self, db: str, collection: str, bundle: str) -> str:
        return f"{self.root}/milvus/pins/{_seg(db)}/{_seg(collection)}/{_seg(bundle)}"

    def milvus_pins_prefix(self) -> str:
        return f"{self.root}/milvus/pins/"

    def compaction_runs_prefix(self) -> str:
        return f"{self.root}/compaction/runs/"

    def compaction_policy(self, collection_id: int) -> str:
        return f"{self.root}/compaction/policies/{_id(collection_id)}"

    def compaction_policies_prefix(self) -> str:
        return f"{self.root}/compaction/policies/"

    def compaction_history(self, collection_id: int, millis: int) -> str:
        return f"{self.root}/compaction/history/{_id(collection_id)}/{_id(millis):0>15}"

    def compaction_history_prefix(self, collection_id: int | None = None) -> str:
        base = f"{self.root}/compaction/history/"
        return base if collection_id is None else f"{base}{_id(collection_id)}/"

    # point-in-time restore (lifecycle/pitr)
    def pitr_window(self, collection_id: int) -> str:
        return f"{self.root}/pitr/windows/{_id(collection_id)}"

    def pitr_windows_prefix(self) -> str:
        return f"{self.root}/pitr/windows/"

    def pitr_gone(self, collection_id: int) -> str:
        """What GC kept of a Dropped collection it purged: its name, db and lifetime (a whole
        database at an instant it lived in is refused, never given without it)."""
        return f"{self.root}/pitr/gone/{_id(collection_id)}"

    def pitr_gone_prefix(self) -> str:
        return f"{self.root}/pitr/gone/"

    def pitr_replay(self, target_id: int, vchannel: str) -> str:
        return f"{self.pitr_replays_prefix(target_id)}{_seg(vchannel)}"

    def pitr_replays_prefix(self, target_id: int) -> str:
        return f"{self.root}/pitr/replays/{_id(target_id)}/"

    def gc(self, *parts: str) -> str:
        return "/".join([f"{self.root}/gc", *(_seg(p) for p in parts)])


def parse_segment_key(keys: Keys, key: str) -> tuple[int, int, int]:
    """(collection_id, partition_id, segment_id) of a segment key."""
    rest = key[len(keys.segments_prefix()):]
    c, p, s = rest.split("/")
    return int(c), int(p), int(s)


# -- write-ahead log (wal helper; append-only section) ---------------------------------
#   {root}/wal/{pchannel}/term    current writer term: {term, writer, opened_at}
#   {root}/wal/{pchannel}/log     log metadata: fragments, holes, last tick, bytes
#   {root}/wal/{pchannel}/pause   consumption paused for this pchannel
#   {root}/wal/_pause             consumption paused for every pchannel
def wal_log(keys: Keys, pchannel: str) -> str:
    return f"{keys.root}/wal/{_seg(pchannel)}/log"


def wal_pause(keys: Keys, pchannel: str | None = None) -> str:
    """The pause flag of one pchannel, or the global one (pchannel None)."""
    if pchannel is None:
        return f"{keys.root}/wal/_pause"
    return f"{keys.root}/wal/{_seg(pchannel)}/pause"


def wal_prefix(keys: Keys) -> str:
    return f"{keys.root}/wal/"


#   {root}/wal_index/{pchannel}/frags/{n:020d}      fragment n of the log: object key, size, crc32c,
#                                                   first tick, tick span, records, term, producer
#   {root}/wal_index/{pchannel}/producers/{id}      an idempotent producer's remembered calls (leased)
#   {root}/wal_producer_owners/{id}                 the newest holder of a named producer id (leased)
#   {root}/wal_producer_numbers/{id}                the call numbers its holder may hand out (leased)
def wal_frags_prefix(keys: Keys, pchannel: str) -> str:
    return f"{keys.root}/wal_index/{_seg(pchannel)}/frags/"


def wal_frag(keys: Keys, pchannel: str, n: int) -> str:
    return f"{wal_frags_prefix(keys, pchannel)}{n:020d}"


def wal_open_txns(keys: Keys, pchannel: str) -> str:
    """What the last flusher run saw open (informational: status, page)."""
    return f"{keys.root}/wal_index/{_seg(pchannel)}/open_txns"


def wal_producers_prefix(keys: Keys, pchannel: str) -> str:
    return f"{keys.root}/wal_index/{_seg(pchannel)}/producers/"


def wal_producer(keys: Keys, pchannel: str, producer_id: str) -> str:
    return f"{wal_producers_prefix(keys, pchannel)}{_seg(producer_id)}"


def wal_producer_owner(keys: Keys, producer_id: str) -> str:
    return f"{keys.root}/wal_producer_owners/{_seg(producer_id)}"


def wal_producer_numbers(keys: Keys, producer_id: str) -> str:
    return f"{keys.root}/wal_producer_numbers/{_seg(producer_id)}"


def channels_prefix(keys: Keys) -> str:
    return f"{keys.root}/channels/"


# -- WAL flusher (flush helper; append-only) --------------------------------------------
#   {root}/wal/{pchannel}/flusher    flusher term: {term, flusher, opened_at}
#   {root}/wal/{pchannel}/truncated  {"before_fragment": n}: fragments below n may be gone
def wal_flusher(keys: Keys, pchannel: str) -> str:
    return f"{keys.root}/wal/{_seg(pchannel)}/flusher"


def wal_truncated(keys: Keys, pchannel: str) -> str:
    return f"{keys.root}/wal/{_seg(pchannel)}/truncated"


# -- WAL archive (lifecycle/backup/archive.py; append-only section) ------------------------
#   {root}/site                 {"site": 32 hex digits, "created_at"}: created once, never changed
#   {root}/archive/{pchannel}   {"shipped": n, "target": uri, "at"}: fragments 1..n of the log
#                               (from where the archive began) are in the target
def site(keys: Keys) -> str:
    return f"{keys.root}/site"


def archive_cursor(keys: Keys, pchannel: str) -> str:
    return f"{keys.root}/archive/{_seg(pchannel)}"


def archive_prefix(keys: Keys) -> str:
    return f"{keys.root}/archive/"
