"""The one drive of a restore from a bundle that the integration tests share: set up
(checks, hold, job), plan, copy inline, finalize."""

from __future__ import annotations

from seglake.lifecycle import copyjob
from seglake.lifecycle.backup import bundle_restore
from seglake.meta.copyjobs import JOB_COMPLETED
from seglake.visibility import visible_rows

quiet = dict(say=lambda line: None)


def restore_bundle(meta, store, target, coll: str, bundle: str, to: str, *, tasks: int | None = None,
                   completed: bool = True):
    """Restore `coll`'s bundle `bundle` from the backup `target` into a new collection `to`
    of (meta, store). Returns (set-up answer, finished job); asserts the job Completed
    unless `completed` is False (then the caller judges the job)."""
    out = bundle_restore.restore_from_bundle(meta, store, target, coll, bundle, to, engine="inline", **quiet)
    if tasks is None:
        copyjob.plan(meta, out["job_id"])
    else:
        copyjob.plan(meta, out["job_id"], tasks)
    copyjob.run_inline(meta, store, out["job_id"])
    job = copyjob.finalize(meta, out["job_id"])
    if completed:
        assert job.state == JOB_COMPLETED, job.reason
    return out, job


def collection_rows(meta, store, name: str) -> list[tuple]:
    """A demo-schema collection's visible rows, sorted: (pk, embedding, price, timestamp,
    partition name)."""
    coll = meta.catalog.get_by_name(name)
    t = visible_rows(meta, store, coll.collection_id, columns=["embedding", "price"])
    part = {p.partition_id: p.name for p in coll.partitions}
    return sorted(zip(t.column("pk").to_pylist(), [tuple(v) for v in t.column("embedding").to_pylist()],
                      t.column("price").to_pylist(), t.column("Timestamp").to_pylist(),
                      [part[p] for p in t.column("partition_id").to_pylist()]))



def two_pp_bundles(meta, store, target):
    """Seeds the demo collection `pp` (1 partition, 1 segment, 20 rows) and exports two
    bundles of it, s1 (older) and s2, into `target`, which it returns."""
    import time

    from seglake.dev import demo
    from seglake.lifecycle import snapshot
    from seglake.lifecycle.backup import export as exports

    demo.seed(meta, store, demo.SeedParams(name="pp", partitions=1, segments=1, rows=20, dim=4))
    for name in ("s1", "s2"):
        snapshot.create(meta, store, "pp", name)
        exports.export(meta, store, target, "pp", name, **quiet)
        time.sleep(0.01)   # two distinct commit times
    return target
