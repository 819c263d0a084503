"""Wait conditions the Airflow sensors and triggers poll, one function per kind.

Each takes a Meta and keyword arguments and returns (status, message), status one of
"success" (condition met), "waiting", or "error" (will never be met: fail now).
Read-only; safe to call from a triggerer thread.
"""

from __future__ import annotations

from typing import Callable

from seglake.errors import NotFound
from seglake.meta import Meta
from seglake.meta.snapshots import PENDING


def snapshot_state(meta: Meta, *, collection: str, snapshot: str, db: str = "default",
                   target_state: str = "COMMITTED") -> tuple[str, str]:
    try:
        coll = meta.catalog.get_by_name(collection, db)
        rec, _ = meta.snapshots.get(coll.collection_id, snapshot)
    except NotFound as e:
        return "error", str(e)
    if rec.state == target_state:
        return "success", f"snapshot {snapshot!r} is {rec.state}: {rec.segments} segments, {rec.rows} rows"
    if rec.state == PENDING and rec.error:
        return "error", f"snapshot {snapshot!r} failed while PENDING: {rec.error}"
    return "waiting", f"snapshot {snapshot!r} is {rec.state}"


def copy_job_done(meta: Meta, *, job_id: int | str) -> tuple[str, str]:
    """Every task Completed, any Failed, the job terminal, or its timeout passed: finalize
    can decide. O(1) etcd reads per call, whatever the number of tasks."""
    from seglake.lifecycle.copyjob import wait_status
    return wait_status(meta, int(job_id))


CHECKS: dict[str, Callable[..., tuple[str, str]]] = {"snapshot_state": snapshot_state,
                                                      "copy_job_done": copy_job_done}


def check(meta: Meta, kind: str, **kwargs) -> tuple[str, str]:
    if kind not in CHECKS:
        raise ValueError(f"unknown wait kind {kind!r}; known: {sorted(CHECKS)}")
    return CHECKS[kind](meta, **kwargs)
