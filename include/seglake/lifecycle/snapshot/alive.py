"""The heartbeat of a PENDING create: every writer (inline, the Spark driver) and the
DAG's wait refresh it; GC reclaims only a record whose heartbeat is older than its timeout."""

from __future__ import annotations

import threading
import time


from seglake.errors import NotFound, SeglakeError, StateError
from seglake.meta import Meta
from seglake.meta.snapshots import COMMITTED, PENDING, SnapshotRecord
from seglake.lifecycle.snapshot.common import HEARTBEAT_INTERVAL, SnapshotLost


# -- heartbeat ----------------------------------------------------------------------------
class KeepAlive:
    """While a writer works: refresh the PENDING record's heartbeat every `interval`
    seconds from a background thread. `check()` raises SnapshotLost once the record is
    no longer this writer's to commit (claimed by GC, dropped, replaced). Transient etcd
    errors are retried at the next beat."""

    def __init__(self, meta: Meta, rec: SnapshotRecord, by: str, interval: float | None = None):
        self.meta, self.rec, self.by = meta, rec, by
        self.interval = HEARTBEAT_INTERVAL if interval is None else interval
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"snapshot-alive-{rec.snapshot_id}", daemon=True)

    def beat(self) -> None:
        try:
            cur = self.meta.snapshots.heartbeat(self.rec, time.time(), self.by)
        except StateError as e:
            self.lost = str(e)
            return
        if cur.state != PENDING:
            self._stop.set()  # committed: nothing left to keep alive

    def _run(self) -> None:
        while not self._stop.wait(self.interval) and self.lost is None:
            try:
                self.beat()
            except SeglakeError:
                continue  # etcd unavailable for a moment: the next beat retries

    def check(self) -> None:
        if self.lost:
            raise SnapshotLost(self.lost)

    def __enter__(self) -> "KeepAlive":
        self.beat()
        self.check()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def keep_alive_status(meta: Meta, collection_id: int, name: str, snapshot_id: int, *, by: str = "",
                      now: float | None = None) -> tuple[str, str]:
    """The DAG's wait: success once COMMITTED, error once it never will be, otherwise
    refresh the heartbeat (the create is alive while its run waits, e.g. for a Spark
    slot) and keep waiting."""
    try:
        rec, _ = meta.snapshots.get(collection_id, name)
    except NotFound:
        return "error", f"snapshot {name!r} no longer exists (reclaimed as abandoned, or dropped)"
    if rec.snapshot_id != snapshot_id:
        return "error", f"snapshot {name!r} was replaced (id {snapshot_id} -> {rec.snapshot_id})"
    if rec.state == COMMITTED:
        return "success", f"snapshot {name!r} is COMMITTED: {rec.segments} segments, {rec.rows} rows"
    if rec.state != PENDING:
        return "error", f"snapshot {name!r} is {rec.state}: {rec.error or 'dropped'}"
    if rec.failed:
        return "error", f"snapshot {name!r} failed while PENDING: {rec.error}"
    try:
        meta.snapshots.heartbeat(rec, time.time() if now is None else now, by)
    except StateError as e:
        return "error", str(e)
    last = f"; last attempt failed: {rec.error}" if rec.error else ""
    return "waiting", f"snapshot {name!r} is PENDING (heartbeat refreshed){last}"
